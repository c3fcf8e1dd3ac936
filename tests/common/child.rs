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

/// Waits for `child` at most `seconds` (killing it and failing the test if it overstays), then reads what it
/// printed (stdout only if it is still piped: a test may have closed it).
pub fn finish(mut child: Child, seconds: u64) -> Ran {
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
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout).unwrap();
    }
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = status.code().or(status.signal().map(|signal| 128 + signal)).expect("an exit code or a signal");
    Ran { status, stdout, stderr }
}
