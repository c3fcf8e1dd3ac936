//! The processes of a target: started in their own process group, always killed (SIGKILL to the group) and
//! reaped — when dropped (also while a panic unwinds), on Ctrl-C or SIGTERM ([`install_interrupt_handler`]),
//! and, on Linux, when mcpsim itself dies (`PR_SET_PDEATHSIG`).
//!
//! A stdio process's stdout is read line by line on a thread of its own into a channel; its stderr goes to a
//! file beside the scenario's data directory, so a server's logs never mix with its JSON-RPC.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, Once};
use std::time::Duration;

/// Longest line read from a stdio process (a longer one is a failure of the exchange, not a read of it).
pub const LINE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Process groups started and not yet killed: what Ctrl-C kills.
static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; it touches no memory of ours.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Kills every process group still running (what the interrupt handler does before mcpsim exits).
pub fn kill_all() {
    let groups: Vec<i32> = RUNNING.lock().map(|set| set.iter().copied().collect()).unwrap_or_default();
    for pgid in groups {
        kill_group(pgid);
    }
}

/// On SIGINT or SIGTERM: kill every started process group, then exit 130 (SIGINT) or 143 (SIGTERM). Installed
/// once, by the command that starts targets.
pub fn install_interrupt_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let spawned = std::thread::Builder::new().name("mcpsim-interrupt".into()).spawn(|| {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            let status = runtime.block_on(async {
                let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else { return 143 };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => 130,
                    _ = terminate.recv() => 143,
                }
            });
            kill_all();
            eprintln!("mcpsim: interrupted; every process of the target was killed");
            std::process::exit(status);
        });
        if let Err(error) = spawned {
            eprintln!("mcpsim: cannot watch for Ctrl-C ({error}); processes are still killed when mcpsim exits");
        }
    });
}

/// One started process.
pub struct Process {
    child: Child,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    lines: Option<Receiver<Result<String, String>>>,
    pub stderr_path: PathBuf,
    /// Nothing has been read from its stdout yet: its first answer may also wait for it to start.
    pub fresh: bool,
}

impl Process {
    /// Starts `argv` with `env` in mcpsim's own working directory (so a command's relative paths mean what they
    /// mean where mcpsim was started), its stderr appended to `stderr_path`; with `piped`, stdin and stdout are
    /// the JSON-RPC channel (stdio), else both are closed/null.
    pub fn start(argv: &[String], env: &[(String, String)], stderr_path: PathBuf, piped: bool) -> Result<Process, String> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]).stderr(stderr);
        for (key, value) in env {
            command.env(key, value);
        }
        if piped {
            command.stdin(Stdio::piped()).stdout(Stdio::piped());
        } else {
            command.stdin(Stdio::null()).stdout(Stdio::null());
        }
        command.process_group(0);
        // SAFETY: prctl is async-signal-safe and only sets this child's parent-death signal.
        #[cfg(target_os = "linux")]
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        // Registered while the lock is held, so Ctrl-C between the spawn and the insert cannot miss it.
        let mut running = RUNNING.lock().map_err(|_| "the process registry is poisoned".to_string())?;
        let mut child = command.spawn().map_err(|e| format!("cannot start {:?}: {e}", argv.join(" ")))?;
        let pid = child.id();
        running.insert(pid as i32);
        drop(running);
        let stdin = child.stdin.take();
        let lines = child.stdout.take().map(|stdout| {
            let (sender, receiver) = mpsc::channel();
            let _ = std::thread::Builder::new().name(format!("stdout-{pid}")).spawn(move || {
                let mut reader = BufReader::new(stdout);
                loop {
                    let mut line = Vec::new();
                    match std::io::Read::take(&mut reader, LINE_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line) {
                        Ok(0) => break,
                        Ok(_) if line.len() > LINE_BYTES_MAX => {
                            let _ = sender.send(Err(format!("a line longer than {LINE_BYTES_MAX} bytes")));
                            break;
                        }
                        Ok(_) => {
                            if sender.send(Ok(String::from_utf8_lossy(&line).trim_end().to_string())).is_err() {
                                break;
                            }
                        }
                        Err(e) => {
                            let _ = sender.send(Err(format!("reading stdout failed: {e}")));
                            break;
                        }
                    }
                }
            });
            receiver
        });
        Ok(Process { child, pid, stdin, lines, stderr_path, fresh: true })
    }

    /// Writes one line (the message and a newline) to its stdin.
    pub fn write_line(&mut self, bytes: &[u8]) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("the process has no stdin")?;
        let mut line = bytes.to_vec();
        line.push(b'\n');
        stdin.write_all(&line).and_then(|()| stdin.flush()).map_err(|e| format!("writing to process {} failed: {e}", self.pid))
    }

    /// The next line of its stdout within `timeout`: `Ok(None)` when it ended (the process closed stdout).
    pub fn read_line(&mut self, timeout: Duration) -> Result<Option<String>, String> {
        let lines = self.lines.as_ref().ok_or("the process has no stdout")?;
        let answer = lines.recv_timeout(timeout);
        self.fresh = false;
        match answer {
            Ok(Ok(line)) => Ok(Some(line)),
            Ok(Err(why)) => Err(format!("process {}: {why}", self.pid)),
            Err(RecvTimeoutError::Timeout) => Err(format!("process {} sent nothing within {} ms", self.pid, timeout.as_millis())),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
        }
    }

    /// Whether it has exited (and how).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// SIGKILL to its group, then reap it.
    pub fn kill(&mut self) {
        kill_group(self.pid as i32);
        let _ = self.child.wait();
        if let Ok(mut running) = RUNNING.lock() {
            running.remove(&(self.pid as i32));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `pid` names a live process (not a zombie), for tests and the interrupt test.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the parenthesised command name.
        Ok(stat) => {
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z" && state != "X")
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_killed_when_a_panic_unwinds_past_it() {
        let dir = std::env::temp_dir().join(format!("mcpsim-process-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A shell that starts a grandchild: the group kill must reach it too.
        let argv: Vec<String> = ["sh", "-c", "sleep 300 & echo $!; wait"].iter().map(|s| s.to_string()).collect();
        let (pid, grandchild) = {
            let mut process = Process::start(&argv, &[], dir.join("p.stderr"), true).unwrap();
            let grandchild: u32 = process.read_line(Duration::from_secs(10)).unwrap().unwrap().parse().unwrap();
            assert!(alive(process.pid) && alive(grandchild));
            let pid = process.pid;
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _owned = process;
                panic!("a bug in the harness");
            }));
            assert!(unwound.is_err());
            (pid, grandchild)
        };
        assert!(!alive(pid), "the process outlived the panic");
        // The grandchild is reparented and reaped by init (or left a zombie): either way not running.
        for _ in 0..100 {
            if !alive(grandchild) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(grandchild), "the grandchild outlived the group kill");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
