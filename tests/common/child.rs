//! A child `mcpsim` run to its end within a bound: what the tests that start the binary and judge its exit
//! (`tests/target.rs`, `tests/target_hardening.rs`) share.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The repository's root: where the tests start mcpsim (target files and scenarios are named from there).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `mcpsim ARGS` as this test run built it, in the repository's root, its output piped (not started yet: a
/// test may add to its environment).
pub fn mcpsim(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcpsim"));
    command.args(args).current_dir(repo()).stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

/// `mcpsim ARGS` run to its end within `seconds` ([`finish`]).
pub fn run_mcpsim(args: &[&str], seconds: u64) -> Ran {
    finish(mcpsim(args).spawn().expect("mcpsim starts"), seconds)
}

/// A fresh, empty scratch directory `mcpsim-TEST-PID-NAME` under the temporary directory.
pub fn scratch(test: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpsim-{test}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// How a child ended and what it printed.
pub struct Ran {
    /// Its exit code, or 128 + the signal that ended it (as a shell says it).
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Reads all of `pipe` on a thread of its own, so a child that prints more than a pipe holds (64 KiB) is not
/// held back while it is waited for.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            pipe.read_to_string(&mut text).unwrap();
        }
        text
    })
}

/// Waits for `child` at most `seconds` (killing it and failing the test if it overstays), reading what it
/// prints meanwhile (stdout only if it is still piped: a test may have closed it).
pub fn finish(mut child: Child, seconds: u64) -> Ran {
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let mut status = None;
    for _ in 0..seconds * 50 {
        if let Some(done) = child.try_wait().unwrap() {
            status = Some(done);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("mcpsim ran longer than {seconds} s and was killed");
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let status = status.code().or(status.signal().map(|signal| 128 + signal)).expect("an exit code or a signal");
    Ran { status, stdout, stderr }
}
