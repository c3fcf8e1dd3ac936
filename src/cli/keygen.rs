//! `mcpsim keygen`: a fresh signing key as a key file (`[[keys]]` TOML), for `serve --key-file`.
//!
//! The secret comes from the operating system's CSPRNG (the same source the servers draw nonces from), and the
//! id is random too, so two keys made for a rotation never share one. With `--out FILE` the file is created
//! readable by its owner only and never overwritten: every process of a fleet must keep sharing the same one.
//! Printed instead, the key goes to a terminal or a pipe; a shell redirect into a file others can read (the
//! shell creates it with the umask's mode before `chmod` can run) is refused before a byte is written.

use crate::stores::system::random_key;
use base64::Engine;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// The file cannot be written (or already exists): `common::EXIT_FAILED`.
use super::common::EXIT_FAILED;

const AFTER_HELP: &str = "\
Examples:
  mcpsim keygen --out keys.toml          # a new key file, readable by you only (refuses to overwrite one)
  mcpsim serve --http 127.0.0.1:8080 --instances 3 --store sqlite:./fleet.db --key-file keys.toml

Rotation, in four stages (the first [[keys]] table of a key file signs, the others only verify), each one
rolled out to every process (a restart each) before the next begins:
  1. k1      the old key alone: where the fleet stands.
  2. k1-k2   k1 still signs; the new key after it, verifying only (`mcpsim keygen --id k2 --out k2.toml`,
             then its [[keys]] table appended: `(umask 077; cat k1.toml k2.toml > k1-k2.toml)`).
  3. k2-k1   k2 signs; k1 after it still verifies the states it sealed until they expire.
  4. k2      k1 retired, once --state-ttl has passed since the last process reached stage 3.
While a stage rolls out, processes of two adjacent stages answer together, and each verifies what the other
signs. Skipping stage 2 (the new key first at once) drops confirmations: a state sealed by a restarted process
and answered on one not yet restarted is refused there (unknown key). targets/mcpsim-http.toml plays this
recipe (docs/targets.md, \"Rolling changes\").

Without --out the key is printed to a terminal or a pipe (a secret manager, say); a shell redirect into a file
(`> keys.toml`) is refused, since the shell creates it readable by others before any chmod: use --out.
Exit status: 0 when the key was written; 1 if the file could not be written (or exists, or stdout is a file
others can read).";

/// Make a new signing key for a fleet's shared key file (`serve --key-file`).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct KeygenArgs {
    /// Write the key file here (created with mode 600; an existing file or a symlink is never overwritten)
    /// instead of printing it. Use this rather than a shell redirect.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The key's id (1–32 of A-Z a-z 0-9 _ -), sealed into every requestState it signs [default: random].
    #[arg(long, value_parser = parse_id)]
    pub id: Option<String>,
}

fn parse_id(text: &str) -> Result<String, String> {
    let valid = (1..=32).contains(&text.len()) && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
        Ok(text.to_string())
    } else {
        Err("a key id is 1 to 32 of A-Z a-z 0-9 _ -".into())
    }
}

/// The key file text for a fresh key named `id` (random when `None`).
pub(crate) fn key_file(id: Option<&str>) -> String {
    let id = id.map(str::to_string).unwrap_or_else(|| {
        let bytes = random_key();
        format!("k-{}", bytes[..4].iter().map(|b| format!("{b:02x}")).collect::<String>())
    });
    let secret = base64::engine::general_purpose::STANDARD.encode(random_key());
    format!(
        "# A signing key for `mcpsim serve --key-file` (made by `mcpsim keygen`). Keep this file private.\n\
         # The first [[keys]] table signs; tables after it only verify (keep an old key there while rotating).\n\
         [[keys]]\n\
         id = \"{id}\"\n\
         secret_base64 = \"{secret}\"\n"
    )
}

pub fn run(args: KeygenArgs) -> ExitCode {
    let text = key_file(args.id.as_deref());
    let Some(path) = args.out else {
        if let Some(mode) = stdout_file_readable_by_others() {
            eprintln!(
                "mcpsim keygen: stdout is a file others can read (mode {mode:o}), so the key would be readable by them; nothing was written. Write it with `mcpsim keygen --out FILE` (created with mode 600)"
            );
            return ExitCode::from(EXIT_FAILED);
        }
        let mut stdout = std::io::stdout().lock();
        return match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("mcpsim keygen: cannot write the key: {error}");
                ExitCode::from(EXIT_FAILED)
            }
        };
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options.open(&path).and_then(|mut file| file.write_all(text.as_bytes()).and_then(|()| file.sync_all()));
    match written {
        Ok(()) => {
            eprintln!(
                "wrote a new signing key to {} (readable by you only); give it to every process: --key-file {}",
                path.display(),
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            eprintln!(
                "mcpsim keygen: {} exists already; it is not overwritten (every process of a fleet must keep sharing one key file). Remove it first to start over, or name another --out",
                path.display()
            );
            ExitCode::from(EXIT_FAILED)
        }
        Err(error) => {
            eprintln!("mcpsim keygen: cannot write {}: {error}", path.display());
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The permission bits of stdout when it is a regular file that its group or others may read or write (a shell
/// redirect under the usual umask); `None` for a terminal, a pipe, or a private file.
#[cfg(unix)]
fn stdout_file_readable_by_others() -> Option<u32> {
    let stat = rustix::fs::fstat(std::io::stdout()).ok()?;
    #[allow(clippy::useless_conversion)] // st_mode is a u16 on some Unixes
    let mode = u32::from(stat.st_mode) & 0o7777;
    (rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile && mode & 0o077 != 0).then_some(mode)
}

#[cfg(not(unix))]
fn stdout_file_readable_by_others() -> Option<u32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_key_file_loads_as_a_key_ring_and_no_two_are_alike() {
        let directory = std::env::temp_dir().join(format!("mcpsim-keygen-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join("keys.toml");
        std::fs::write(&path, key_file(Some("2026-07"))).unwrap();
        let ring = crate::config::load_key_file(&path).expect("keygen's output is a key file");
        assert_eq!(ring.signing_key_id(), "2026-07");
        let _ = std::fs::remove_dir_all(&directory);
        assert_ne!(key_file(None), key_file(None), "a random id and secret each time");
        assert!(key_file(None).contains("id = \"k-"), "{}", key_file(None));
        assert!(parse_id("bad id!").is_err() && parse_id("k1").is_ok());
    }
}
