//! The processes of a target: started in their own process group and, once a run has begun, in a leaf of
//! its containment ([`super::contain`]: a cgroup of its own, or the environment marker), so whatever they
//! spawn (daemons, a wrapper shell's children) is killed with them; always killed and reaped — when dropped
//! (also while a panic unwinds), on Ctrl-C or SIGTERM ([`install_interrupt_handler`]), and when mcpsim itself
//! dies (`PR_SET_PDEATHSIG` for the direct child, the run's watchdog for the rest).
//!
//! A stdio process's stdout is read line by line on a thread of its own into a bounded channel
//! ([`LINES_BUFFERED_MAX`] lines, [`BYTES_BUFFERED_MAX`] bytes: a flooding server is held back by its own pipe,
//! not buffered); its stderr goes to a file (mode 0600) in the run's work directory, so a server's logs never
//! mix with its JSON-RPC. Writing to a process that has exited is an error of that exchange (EPIPE), never
//! a SIGPIPE that would end mcpsim.

use super::contain::{self, Leaf};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::Duration;

/// Longest line read from a stdio process (a longer one is a failure of the exchange, not a read of it).
pub const LINE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Most lines read from a process's stdout and not yet taken by mcpsim.
pub const LINES_BUFFERED_MAX: usize = 16;
/// Most bytes of such lines (one longer line is still let through alone, so the bound is this plus
/// [`LINE_BYTES_MAX`]).
pub const BYTES_BUFFERED_MAX: usize = 1024 * 1024;

/// Process groups started and not yet killed: what Ctrl-C kills.
static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn kill_group(pgid: i32) {
    signal_group(pgid, libc::SIGKILL);
}

fn signal_group(pgid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals a process group; it touches no memory of ours.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

fn kill_all_locked(running: Option<&BTreeSet<i32>>) {
    for &pgid in running.into_iter().flatten() {
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
            // Holding the registry, so no process can be started between the sweep and the exit.
            let _held = RUNNING.lock();
            kill_all_locked(_held.as_deref().ok());
            let swept = contain::finish();
            eprintln!("mcpsim: interrupted; {}", contain::describe(&swept));
            std::process::exit(status);
        });
        if let Err(error) = spawned {
            eprintln!("mcpsim: cannot watch for Ctrl-C ({error}); processes are still killed when mcpsim exits");
        }
    });
}

/// Most answers a process keeps read ahead of their own read ([`Process::read_ahead`]): a scenario's
/// `parallel` block is far smaller.
pub const READ_AHEAD_MAX: usize = 64;

/// One started process.
pub struct Process {
    child: Child,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    lines: Option<Lines>,
    /// Nothing has been read from its stdout yet: its first answer may also wait for it to start.
    pub fresh: bool,
    /// Answers read while waiting for another request's (a server may answer requests in flight on one
    /// process as they finish, not as they were written), kept for their own read: at most
    /// [`READ_AHEAD_MAX`].
    pub read_ahead: Vec<serde_json::Value>,
    /// Its place in the run's containment (none outside a run, e.g. in unit tests).
    leaf: Option<Leaf>,
    /// It was reaped: its pid (and so its group id, once the group is empty) may name another process now.
    reaped: bool,
    /// Paused ([`Process::pause`]) and not yet continued: a kill continues it too.
    pub paused: bool,
}

/// How a process is paused: its containment leaf frozen (cgroup v2 `cgroup.freeze`, which reaches whatever it
/// spawned, wherever it went), or SIGSTOP to its process group (no cgroup: the marker containment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseHow {
    Freeze,
    Stop,
}

impl PauseHow {
    /// For the decision log.
    pub fn describe(self) -> &'static str {
        match self {
            PauseHow::Freeze => "cgroup.freeze of its containment leaf",
            PauseHow::Stop => "SIGSTOP to its process group",
        }
    }
}

/// How long a pause waits for its cgroup to report itself frozen (`cgroup.events`).
const FREEZE_WAIT: Duration = Duration::from_secs(2);

/// Why a process could not be started, written to or read from. `pid` names the process.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Its stderr file (`path`).
    #[error("cannot create {}: {source}", .path.display())]
    Stderr { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Contain(#[from] contain::ContainError),
    #[error("the process registry is poisoned")]
    Poisoned,
    #[error("mcpsim is ending: no process is started any more")]
    Ending,
    /// `argv`: the command line, redacted by [`super::redact_argv`].
    #[error("cannot start `{argv}`: {source}")]
    Spawn { argv: String, source: std::io::Error },
    #[error("the process has no stdin")]
    NoStdin,
    #[error("process {pid} closed its stdin (it exited?): {source}")]
    StdinClosed { pid: u32, source: std::io::Error },
    #[error("writing to process {pid} failed: {source}")]
    Write { pid: u32, source: std::io::Error },
    #[error("the process has no stdout")]
    NoStdout,
    #[error("process {pid}: {source}")]
    Read { pid: u32, source: LineError },
    #[error("process {pid} sent nothing within {ms} ms")]
    Silent { pid: u32, ms: u128 },
}

/// Why a line of a process's stdout could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("a line longer than {LINE_BYTES_MAX} bytes")]
    TooLong,
    #[error("reading stdout failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The bytes of lines read and not yet taken, and whether the reading side was dropped.
type Budget = Arc<(Mutex<(usize, bool)>, Condvar)>;

/// The receiving end of a process's stdout lines.
struct Lines {
    receiver: Receiver<Result<String, LineError>>,
    budget: Budget,
}

impl Drop for Lines {
    fn drop(&mut self) {
        let (lock, wake) = &*self.budget;
        if let Ok(mut state) = lock.lock() {
            state.1 = true;
        }
        wake.notify_all();
    }
}

/// Waits until `bytes` more fit in the budget (or nothing is buffered); false when the reader is gone.
fn reserve(budget: &Budget, bytes: usize) -> bool {
    let (lock, wake) = &**budget;
    let Ok(mut state) = lock.lock() else { return false };
    while !state.1 && state.0 > 0 && state.0 + bytes > BYTES_BUFFERED_MAX {
        state = match wake.wait(state) {
            Ok(state) => state,
            Err(_) => return false,
        };
    }
    if state.1 {
        return false;
    }
    state.0 += bytes;
    true
}

fn release(budget: &Budget, bytes: usize) {
    let (lock, wake) = &**budget;
    if let Ok(mut state) = lock.lock() {
        state.0 = state.0.saturating_sub(bytes);
    }
    wake.notify_all();
}

/// Writes `bytes` with SIGPIPE blocked on this thread, so a reader that has gone is the write's EPIPE, and
/// takes back the SIGPIPE that write left pending (mcpsim's own stdout keeps the default disposition, so
/// `mcpsim run … | head` still ends quietly).
fn write_without_sigpipe(stdin: &mut ChildStdin, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: the signal mask calls take pointers to local sigset_t values that live across the calls.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old);
        let result = stdin.write_all(bytes).and_then(|()| stdin.flush());
        if libc::sigismember(&old, libc::SIGPIPE) == 0 {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            if libc::sigismember(&pending, libc::SIGPIPE) == 1 {
                let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                libc::sigtimedwait(&pipe, std::ptr::null_mut(), &now);
            }
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        result
    }
}

impl Process {
    /// Starts `argv` with `env` in mcpsim's own working directory (so a command's relative paths mean what they
    /// mean where mcpsim was started), its stderr appended to `stderr_path`; with `piped`, stdin and stdout are
    /// the JSON-RPC channel (stdio), else both are closed/null.
    pub fn start(argv: &[String], env: &[(String, String)], stderr_path: PathBuf, piped: bool) -> Result<Process, ProcessError> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&stderr_path)
            .map_err(|source| ProcessError::Stderr { path: stderr_path.clone(), source })?;
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
        let leaf = match contain::current() {
            Some(run) => Some(run.leaf()?),
            None => None,
        };
        if let Some(leaf) = &leaf {
            command.env(contain::MARKER, &leaf.marker);
        }
        let procs = leaf.as_ref().and_then(|l| l.procs.as_ref()).map(AsRawFd::as_raw_fd);
        // SAFETY: between fork and exec only async-signal-safe calls: prctl, and write(2) of a constant to a
        // descriptor opened before the fork (writing "0" to cgroup.procs moves the writing process).
        unsafe {
            command.pre_exec(move || {
                #[cfg(target_os = "linux")]
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(fd) = procs {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        // Registered while the lock is held, so Ctrl-C between the spawn and the insert cannot miss it.
        let mut running = RUNNING.lock().map_err(|_| ProcessError::Poisoned)?;
        if contain::finished() {
            return Err(ProcessError::Ending);
        }
        let mut child = command.spawn().map_err(|source| ProcessError::Spawn { argv: super::redact_argv(argv), source })?;
        let pid = child.id();
        running.insert(pid as i32);
        drop(running);
        let stdin = child.stdin.take();
        let lines = child.stdout.take().map(|stdout| {
            let (sender, receiver) = mpsc::sync_channel(LINES_BUFFERED_MAX);
            let budget: Budget = Arc::new((Mutex::new((0, false)), Condvar::new()));
            let reader_budget = budget.clone();
            let _ = std::thread::Builder::new().name(format!("stdout-{pid}")).spawn(move || {
                let mut reader = BufReader::new(stdout);
                loop {
                    let mut line = Vec::new();
                    let read = std::io::Read::take(&mut reader, LINE_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line);
                    let message = match read {
                        Ok(0) => break,
                        Ok(_) if line.len() > LINE_BYTES_MAX => Err(LineError::TooLong),
                        Ok(_) => Ok(String::from_utf8_lossy(&line).trim_end().to_string()),
                        Err(e) => Err(LineError::Io(e)),
                    };
                    let (size, last) = (message.as_ref().map_or(0, String::len), message.is_err());
                    drop(line);
                    if !reserve(&reader_budget, size) || sender.send(message).is_err() || last {
                        break;
                    }
                }
            });
            Lines { receiver, budget }
        });
        Ok(Process { child, pid, stdin, lines, fresh: true, read_ahead: Vec::new(), leaf, reaped: false, paused: false })
    }

    /// Writes one line (the message and a newline) to its stdin.
    pub fn write_line(&mut self, bytes: &[u8]) -> Result<(), ProcessError> {
        let stdin = self.stdin.as_mut().ok_or(ProcessError::NoStdin)?;
        let mut line = bytes.to_vec();
        line.push(b'\n');
        let pid = self.pid;
        write_without_sigpipe(stdin, &line).map_err(|source| match source.kind() {
            std::io::ErrorKind::BrokenPipe => ProcessError::StdinClosed { pid, source },
            _ => ProcessError::Write { pid, source },
        })
    }

    /// The next line of its stdout within `timeout`: `Ok(None)` when it ended (the process closed stdout).
    pub fn read_line(&mut self, timeout: Duration) -> Result<Option<String>, ProcessError> {
        let lines = self.lines.as_ref().ok_or(ProcessError::NoStdout)?;
        let answer = lines.receiver.recv_timeout(timeout);
        self.fresh = false;
        if let Ok(Ok(line)) = &answer {
            release(&lines.budget, line.len());
        }
        match answer {
            Ok(Ok(line)) => Ok(Some(line)),
            Ok(Err(source)) => Err(ProcessError::Read { pid: self.pid, source }),
            Err(RecvTimeoutError::Timeout) => Err(ProcessError::Silent { pid: self.pid, ms: timeout.as_millis() }),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
        }
    }

    /// Whether it has exited (and how).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.reaped = true;
                Some(status.to_string())
            }
            _ => None,
        }
    }

    /// Stops it and everything it spawned: its leaf frozen where the run has a cgroup, SIGSTOP to its group
    /// otherwise. Bounded: a later [`Process::resume`] or [`Process::kill`] (also on drop, Ctrl-C, and by the
    /// watchdog, which SIGKILLs stopped and frozen processes alike) always ends the pause.
    pub fn pause(&mut self) -> PauseHow {
        self.paused = true;
        if let Some(cgroup) = self.leaf.as_ref().and_then(Leaf::cgroup) {
            if std::fs::write(cgroup.join("cgroup.freeze"), "1").is_ok() {
                let frozen = || std::fs::read_to_string(cgroup.join("cgroup.events")).is_ok_and(|e| e.lines().any(|l| l == "frozen 1"));
                for _ in 0..FREEZE_WAIT.as_millis() / 2 {
                    if frozen() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                return PauseHow::Freeze;
            }
        }
        signal_group(self.pid as i32, libc::SIGSTOP);
        PauseHow::Stop
    }

    /// Continues it after [`Process::pause`] (both ways, so whichever paused it is undone).
    pub fn resume(&mut self) {
        if let Some(cgroup) = self.leaf.as_ref().and_then(Leaf::cgroup) {
            let _ = std::fs::write(cgroup.join("cgroup.freeze"), "0");
        }
        if !self.reaped {
            signal_group(self.pid as i32, libc::SIGCONT);
        }
        self.paused = false;
    }

    /// SIGKILL to its group and to everything in its leaf (what it spawned, wherever it went), then reap it.
    /// A paused process dies too: SIGKILL ends stopped and frozen processes.
    pub fn kill(&mut self) {
        // Without a leaf, the group is all there is to kill (its id stays its own while any member lives).
        if !self.reaped || self.leaf.is_none() {
            kill_group(self.pid as i32);
        }
        if let Some(leaf) = &mut self.leaf {
            leaf.kill();
        }
        if self.paused {
            self.resume();
        }
        let _ = self.child.wait();
        self.reaped = true;
        // The reader thread may be waiting for room: let it go.
        self.lines = None;
        if let Ok(mut running) = RUNNING.lock() {
            running.remove(&(self.pid as i32));
            if contain::by_marker() {
                reap_adopted(&running);
            }
        }
    }
}

/// Marker mode (mcpsim a subreaper): reaps the dead orphans it adopted, so a long run does not collect zombies;
/// a child that is a [`Process`] still registered is left to its own `wait`.
fn reap_adopted(running: &BTreeSet<i32>) {
    for (pid, _) in contain::children().into_iter().filter(|&(pid, zombie)| zombie && !running.contains(&pid)) {
        // SAFETY: waitpid(2) on a dead child of ours, without a status.
        unsafe {
            libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
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
    fn a_command_that_cannot_start_is_shown_escaped_once() {
        let log = std::env::temp_dir().join(format!("mcpsim-process-escape-{}.stderr", std::process::id()));
        let argv: Vec<String> = ["/nonexistent/mcpsim \"x\"\ny", "--token", "s3cret"].iter().map(|s| s.to_string()).collect();
        let error = Process::start(&argv, &[], log.clone(), false).err().expect("no such program").to_string();
        let _ = std::fs::remove_file(&log);
        // `shown` makes the newline `\n`; a second escape (Debug's) would make it `\\n` and the quotes `\"`.
        assert!(error.starts_with("cannot start `/nonexistent/mcpsim \"x\"\\ny --token [redacted]`: "), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }

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
