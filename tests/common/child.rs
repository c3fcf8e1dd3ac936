//! A child `mcpsim` run to its end within a bound: what the tests that start the binary and judge its exit
//! (`tests/target.rs`, `tests/target_hardening.rs`) share.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::Child;
use std::time::Duration;

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
