//! No secret is ever printed: every error path that reads a token, a key or a store password is driven through
//! the real binary, and its whole output (stdout and stderr) is searched for the secret.
//!
//! What it shows:
//! - a `--config`, `--key-file` or `--gateway-config` that does not parse is reported by file, line, column,
//!   table and key, never by the offending line or value;
//! - a `--store`/`MCPSIM_STORE`/`--reseed` that does not parse, names an unknown kind, needs TLS or cannot be
//!   reached is repeated with its password as `***` (by `serve`, `seed` and `run --live`);
//! - `serve` warns about a group/other-readable `--config` holding tokens or keys, and not about a private one.

mod e2e_support;

use e2e_support::{run_with_env, HttpServer, TempConfig, DEMO_TOML};

/// The secrets planted in the inputs below; none may appear in any output.
const TOKEN: &str = "tok-SECRET-7d1e";
const PASSWORD: &str = "pw-SECRET-93af";
const KEY_BASE64: &str = "c2VjcmV0LWtleS1TRUNSRVQtYmFzZTY0LWJ5dGVzIQ==";

fn assert_no_secret(what: &str, code: Option<i32>, stdout: &str, stderr: &str) {
    assert_ne!(code, Some(0), "{what}: the input is refused");
    assert!(!stderr.trim().is_empty(), "{what}: the refusal says something");
    for secret in [TOKEN, PASSWORD, KEY_BASE64, "SECRET"] {
        assert!(!stdout.contains(secret) && !stderr.contains(secret), "{what}: the output repeats {secret:?}:\n{stdout}\n{stderr}");
    }
}

#[test]
fn configuration_errors_name_the_place_never_the_value() {
    let configs = [
        ("unterminated token", format!("[principals.alice]\ntoken = \"{TOKEN}\nworkspaces = []\n"), "line 2", "key token"),
        ("token of the wrong type", format!("[principals.alice]\ntoken = [\"{TOKEN}\"]\nworkspaces = []\n"), "line 2", "key token"),
        ("a token where a table belongs", format!("principals = \"{TOKEN}\"\n"), "line 1", "key principals"),
        (
            "a key of the wrong type",
            format!("[[keys]]\nid = \"k\"\nsecret_base64 = {{ value = \"{KEY_BASE64}\" }}\n"),
            "line 3",
            "key secret_base64",
        ),
        ("a key that is not base64", "[[keys]]\nid = \"k\"\nsecret_base64 = \"SECRET!!-not-base64\"\n".to_string(), "key k", "base64"),
        (
            "a stray line after a token",
            format!("[principals.alice]\ntoken = \"{TOKEN}\" trailing\nworkspaces = []\n"),
            "line 2",
            "principals.alice",
        ),
    ];
    for (what, contents, place, key) in configs {
        let config = TempConfig::new(&contents);
        for args in [
            vec!["serve", "--http", "127.0.0.1:0", "--config", config.arg()],
            vec!["serve", "--stdio", "--config", config.arg()],
            vec!["serve", "--http", "127.0.0.1:0", "--gateway", "--config", config.arg()],
            vec!["seed", "--store", "sqlite:/nonexistent/dir/x.db", "--config", config.arg()],
        ] {
            let (code, stdout, stderr) = run_with_env(&args, &[]);
            assert_no_secret(&format!("{what} ({})", args.join(" ")), code, &stdout, &stderr);
            assert!(stderr.contains(config.arg()) && stderr.contains(place) && stderr.contains(key), "{what}: {stderr}");
        }
    }

    // A key file and a gateway file that do not parse.
    let key_file = TempConfig::new(&format!("[[keys]]\nid = \"k\"\nsecret_base64 = \"{KEY_BASE64}\nx\n"));
    let (code, stdout, stderr) = run_with_env(&["serve", "--http", "127.0.0.1:0", "--key-file", key_file.arg()], &[]);
    assert_no_secret("a key file", code, &stdout, &stderr);
    assert!(stderr.contains("line 3") && stderr.contains("secret_base64"), "{stderr}");
    let gateway = TempConfig::new(&format!("[backends.notes]\nkind = \"{TOKEN}\n"));
    let (code, stdout, stderr) = run_with_env(&["serve", "--http", "127.0.0.1:0", "--gateway", "--gateway-config", gateway.arg()], &[]);
    assert_no_secret("a gateway file", code, &stdout, &stderr);
    assert!(stderr.contains("line 2") && stderr.contains("key kind"), "{stderr}");
}

/// A command line and the environment it runs with.
type Run<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);

#[test]
fn store_urls_are_shown_with_the_password_redacted() {
    let stores = [
        format!("postgres://mcpsim:{PASSWORD}@127.0.0.1:5432/fleet?bogus=1"),
        format!("postgres://mcpsim:{PASSWORD}@127.0.0.1:5432/fleet?sslmode=require"),
        format!("postgres://mcpsim@127.0.0.1/fleet?password={PASSWORD}&sslmode=require"),
        format!("postgres:host=127.0.0.1 user=mcpsim password={PASSWORD} sslmode=require"),
        format!("mysql://root:{PASSWORD}@db.internal/fleet"),
        // Parses, but nothing listens there: the connection failure is reported.
        format!("postgres://mcpsim:{PASSWORD}@127.0.0.1:1/fleet?connect_timeout=2"),
    ];
    for store in &stores {
        let runs: [Run<'_>; 5] = [
            (&["serve", "--http", "127.0.0.1:0", "--store", store], &[]),
            (&["serve", "--http", "127.0.0.1:0"], &[("MCPSIM_STORE", store)]),
            (&["serve", "--http", "127.0.0.1:0", "--gateway", "--store", store], &[]),
            (&["seed"], &[("MCPSIM_STORE", store)]),
            (&["run", "01-happy-path", "--live", "http://127.0.0.1:1/mcp", "--reseed", store], &[]),
        ];
        for (args, environment) in runs {
            let (code, stdout, stderr) = run_with_env(args, environment);
            let what = format!("{store} via {}{}", args.join(" "), if environment.is_empty() { "" } else { " (MCPSIM_STORE)" });
            assert_no_secret(&what, code, &stdout, &stderr);
            // Nothing else is hidden: the user sees what was wrong.
            assert!(stderr.contains("127.0.0.1") || stderr.contains("db.internal") || stderr.contains("mysql"), "{what}: {stderr}");
        }
    }
}

#[cfg(unix)]
#[test]
fn a_readable_configuration_holding_secrets_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let config = TempConfig::new(DEMO_TOML);
    std::fs::set_permissions(&config.path, std::fs::Permissions::from_mode(0o644)).unwrap();
    for gateway in [false, true] {
        let mut args = vec!["--config", config.arg()];
        if gateway {
            args.push("--gateway");
        }
        let (_, logs) = HttpServer::start(&args).terminate_with_stderr();
        let logs = logs.join("\n");
        assert!(logs.contains("holds signing keys or bearer tokens and is readable by other users (mode 644)"), "{logs}");
        assert!(!logs.contains("demo-alice"), "the warning names the file, not what is in it: {logs}");
    }
    std::fs::set_permissions(&config.path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (_, logs) = HttpServer::start(&["--config", config.arg()]).terminate_with_stderr();
    assert!(!logs.join("\n").contains("readable by other users"), "a private file is not warned about: {logs:?}");
}

/// Issue 35 item 17: `keygen --out` creates the key file itself, mode 600, exclusively: an existing file or a
/// symlink planted at the name is never written through; a shell redirect into a file others can read is
/// refused before the key is written.
#[cfg(unix)]
#[test]
fn keygen_writes_a_private_key_file_itself_and_never_through_a_redirect() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let directory = std::env::temp_dir().join(format!("mcpsim-keygen-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    let keys = directory.join("keys.toml");
    let keys_arg = keys.to_str().unwrap();
    let (code, _, stderr) = run_with_env(&["keygen", "--out", keys_arg], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let mode = std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key file is readable by its owner only");
    let written = std::fs::read_to_string(&keys).unwrap();
    assert!(written.contains("secret_base64 = \"") && !stderr.contains("secret_base64"), "{stderr}");

    // Again: refused, the file unchanged (a fleet keeps one key file).
    let (code, _, stderr) = run_with_env(&["keygen", "--out", keys_arg], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("exists already"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&keys).unwrap(), written, "never overwritten");

    // A symlink planted at the name (to a file an attacker reads, or one not yet there): never followed.
    let target = directory.join("attacker-reads-this");
    let planted = directory.join("planted.toml");
    symlink(&target, &planted).unwrap();
    let (code, _, stderr) = run_with_env(&["keygen", "--out", planted.to_str().unwrap()], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!target.exists(), "nothing was written through the symlink");

    // A shell redirect: the shell creates the file with the umask's mode (here 644) before keygen runs.
    let redirected = directory.join("redirected.toml");
    let file = std::fs::File::create(&redirected).unwrap();
    file.set_permissions(std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = std::process::Command::new(e2e_support::BIN).arg("keygen").stdout(file).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--out"), "the refusal says what to do instead: {stderr}");
    assert_eq!(std::fs::read_to_string(&redirected).unwrap(), "", "no key reached the readable file");
    // Into a private file, or a pipe, the key is printed.
    let private = directory.join("private.toml");
    let file = std::fs::File::create(&private).unwrap();
    file.set_permissions(std::fs::Permissions::from_mode(0o600)).unwrap();
    let status = std::process::Command::new(e2e_support::BIN).arg("keygen").stdout(file).status().unwrap();
    assert!(status.success());
    assert!(std::fs::read_to_string(&private).unwrap().contains("[[keys]]"));
    let piped = std::process::Command::new(e2e_support::BIN).arg("keygen").output().unwrap();
    assert!(piped.status.success() && String::from_utf8_lossy(&piped.stdout).contains("[[keys]]"));
    let _ = std::fs::remove_dir_all(&directory);
}
