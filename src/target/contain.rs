//! Containment of everything a target starts, and its work directory.
//!
//! A group kill misses a process that left the group (`setsid`, a daemon's double fork) and
//! `PR_SET_PDEATHSIG` reaches the direct child only, so a command that starts targets first calls [`begin`]:
//!
//! * **cgroup v2** (where `cgroup2` is mounted and mcpsim may create a group under its own, as root usually
//!   may): one cgroup for the run, one leaf per started process. A process moves itself into its leaf between
//!   fork and exec, so everything it ever spawns, daemons included, stays in it; killing is `cgroup.kill`,
//!   and what is left is counted from `cgroup.procs`.
//! * **marker** (no usable cgroup, or `MCPSIM_TARGET_CONTAINMENT=marker`): every started process carries
//!   `MCPSIM_TARGET_RUN=<run token>.<n>` in its environment, which its children inherit; killing scans `/proc`
//!   for the marker and SIGKILLs every match until none is found. A process that clears its environment is
//!   not seen by the scan; while mcpsim lives it is a child subreaper, so such orphans become its children
//!   and the run's end kills every child but the watchdog. What is left is *counted* by the same scans, so it
//!   is never claimed to be gone.
//!
//! The work directory (servers' stderr, key files, databases) is `$TMPDIR/mcpsim-target-<random>`, created
//! exclusively with mode 0700, in a `TMPDIR` that [`check_temp_dir`] found safe (owned by root or the user,
//! writable by others only with the sticky bit). [`finish`] kills, counts, and removes it on every exit
//! mcpsim sees (normal, error, Ctrl-C/SIGTERM, a panic unwinding past the command's run, which finishes when
//! dropped); for the exits it does not see (SIGKILL, SIGPIPE
//! on its own stdout), a **watchdog** does the same: a `mcpsim target-watchdog` process in its own process
//! group, ignoring SIGINT/SIGTERM/SIGHUP, reading a pipe from mcpsim whose end-of-file means mcpsim is gone
//! (the pipe is close-on-exec, so no target process holds it open).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The environment variable every started process carries (`<run token>.<process number>`).
pub const MARKER: &str = "MCPSIM_TARGET_RUN";
/// Set to `marker` to use the marker scan even where a cgroup could be made (tests of the fallback).
pub const MODE_ENV: &str = "MCPSIM_TARGET_CONTAINMENT";
/// How long a kill waits for the killed processes to be gone before counting what is left.
const KILL_WAIT: Duration = Duration::from_secs(3);

/// How the run contains its processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The run's own cgroup v2 directory.
    Cgroup(PathBuf),
    Marker,
}

impl Mode {
    pub fn describe(&self) -> String {
        match self {
            Mode::Cgroup(path) => format!("cgroup {}", path.display()),
            Mode::Marker => format!("the {MARKER} marker in their environment"),
        }
    }
}

/// One command's run: what [`finish`] cleans up.
pub struct Run {
    pub token: String,
    pub mode: Mode,
    pub work_dir: PathBuf,
    next: AtomicU64,
    watchdog: Mutex<Option<Child>>,
    watchdog_pid: Option<i32>,
    finished: AtomicBool,
}

static RUN: OnceLock<Run> = OnceLock::new();

/// The run begun by this mcpsim process, if any.
pub fn current() -> Option<&'static Run> {
    RUN.get()
}

/// Characters a path mcpsim derives may hold, so no placeholder value it makes needs quoting in `sh -c`.
pub fn safe_in_commands(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
}

fn random_hex() -> String {
    use rand_core::{OsRng, RngCore};
    let mut bytes = [0u8; 12];
    OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What to do about an unsafe temporary directory.
const TEMP_DIR_FIX: &str = "set TMPDIR to a directory of your own (mode 0700) or to one like /tmp (owned by root, mode 1777)";

/// Whether `dir` is a safe parent for the work directory: a directory (not a symbolic link) owned by root or
/// by mcpsim's user, and writable by others only with the sticky bit (as `/tmp` is), so nobody else can
/// rename, replace or remove what mcpsim creates in it. `Err` says what to do.
pub fn check_temp_dir(dir: &Path) -> Result<(), ContainError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|source| ContainError::TempDirUnreadable { path: dir.to_path_buf(), source })?;
    if !meta.is_dir() {
        return Err(ContainError::TempDirNotADirectory(dir.to_path_buf()));
    }
    // SAFETY: geteuid(2) has no failure mode and touches no memory.
    let user = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != user {
        return Err(ContainError::TempDirForeignOwner { path: dir.to_path_buf(), owner: meta.uid(), user });
    }
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(ContainError::TempDirWritableByOthers { path: dir.to_path_buf(), mode: mode & 0o7777 });
    }
    Ok(())
}

/// Why the run's containment could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ContainError {
    /// The temporary directory would need quoting in a command.
    #[error(
        "the temporary directory {:?} (TMPDIR) has characters a command would have to quote; the data directories \
         mcpsim hands to {{data_dir}} are made of [A-Za-z0-9._/-]: set TMPDIR to such a path",
        .0.display()
    )]
    UnsafeTempDir(PathBuf),
    /// The temporary directory cannot be read.
    #[error("the temporary directory {} (TMPDIR) cannot be read: {source}; {TEMP_DIR_FIX}", .path.display())]
    TempDirUnreadable { path: PathBuf, source: std::io::Error },
    #[error("the temporary directory {} (TMPDIR) is not a directory; {TEMP_DIR_FIX}", .0.display())]
    TempDirNotADirectory(PathBuf),
    /// Its owner could replace the run's work directory.
    #[error(
        "the temporary directory {} (TMPDIR) belongs to user {owner}, not to root or to you ({user}): its owner \
         could replace the run's work directory; {TEMP_DIR_FIX}",
        .path.display()
    )]
    TempDirForeignOwner { path: PathBuf, owner: u32, user: u32 },
    /// Anyone could replace the run's work directory.
    #[error(
        "the temporary directory {} (TMPDIR) is writable by others without the sticky bit (mode {mode:o}): anyone \
         could replace the run's work directory; {TEMP_DIR_FIX}",
        .path.display()
    )]
    TempDirWritableByOthers { path: PathBuf, mode: u32 },
    /// The run's work directory, or a process's cgroup.
    #[error("cannot create {}: {source}", .path.display())]
    Create { path: PathBuf, source: std::io::Error },
    #[error("cannot create the cgroup {}: {source}", .path.display())]
    CreateCgroup { path: PathBuf, source: std::io::Error },
    /// The `cgroup.procs` of a process's cgroup (`path`, the cgroup).
    #[error("cannot open {}/cgroup.procs: {source}", .path.display())]
    OpenProcs { path: PathBuf, source: std::io::Error },
    #[error("the run could not be recorded")]
    NotRecorded,
}

/// Begins the run: the work directory, the containment, the watchdog. Once per mcpsim process.
pub fn begin() -> Result<&'static Run, ContainError> {
    if let Some(run) = RUN.get() {
        return Ok(run);
    }
    let temp = std::env::temp_dir();
    if !safe_in_commands(&temp.display().to_string()) {
        return Err(ContainError::UnsafeTempDir(temp));
    }
    let token = random_hex();
    let work_dir = temp.join(format!("mcpsim-target-{token}"));
    // Exclusive (fails if it exists) and 0700 from the start.
    std::fs::DirBuilder::new().mode(0o700).create(&work_dir).map_err(|source| ContainError::Create { path: work_dir.clone(), source })?;
    let mode = if std::env::var(MODE_ENV).is_ok_and(|m| m == "marker") {
        Mode::Marker
    } else {
        cgroup_for(&token).map(Mode::Cgroup).unwrap_or(Mode::Marker)
    };
    if mode == Mode::Marker {
        // While mcpsim lives, a target's orphans (a daemon's double fork, even one that clears its environment)
        // become its children instead of init's: the run's end kills them too (`kill_adopted`).
        // SAFETY: prctl only sets this process's subreaper attribute.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
    }
    let watchdog = spawn_watchdog(&token, &mode, &work_dir);
    let watchdog_pid = watchdog.as_ref().map(|child| child.id() as i32);
    let run = Run {
        token,
        mode,
        work_dir,
        next: AtomicU64::new(0),
        watchdog: Mutex::new(watchdog),
        watchdog_pid,
        finished: AtomicBool::new(false),
    };
    let _ = RUN.set(run);
    RUN.get().ok_or(ContainError::NotRecorded)
}

/// The cgroup v2 directory mcpsim's own process is in, from `/proc/self/mountinfo` and `/proc/self/cgroup`.
fn own_cgroup() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (root, mount) = mountinfo.lines().find_map(|line| {
        let (fields, after) = line.split_once(" - ")?;
        if after.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        let fields: Vec<&str> = fields.split_whitespace().collect();
        Some((fields.get(3)?.to_string(), fields.get(4)?.to_string()))
    })?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let relative = own.strip_prefix(root.trim_end_matches('/')).unwrap_or(own);
    Some(Path::new(&mount).join(relative.trim_start_matches('/')))
}

/// A fresh cgroup for the run beside mcpsim's own, if one can be made, entered and killed: a trial process
/// (this binary's `--version`) must be able to move itself into a leaf of it, as every target process will.
fn cgroup_for(token: &str) -> Option<PathBuf> {
    let dir = own_cgroup()?.join(format!("mcpsim-{token}"));
    std::fs::create_dir(&dir).ok()?;
    let trial = dir.join("trial");
    let usable = dir.join("cgroup.kill").exists()
        && std::fs::create_dir(&trial).is_ok()
        && std::fs::OpenOptions::new().write(true).open(trial.join("cgroup.procs")).is_ok_and(|procs| {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&procs);
            let mut command = Command::new(std::env::current_exe().unwrap_or_else(|_| "/bin/true".into()));
            command.arg("--version").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            // SAFETY: only write(2) of a constant to a descriptor opened before the fork.
            unsafe {
                command.pre_exec(move || {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            command.status().is_ok_and(|status| status.success())
        });
    let _ = std::fs::remove_dir(&trial);
    if usable {
        Some(dir)
    } else {
        let _ = std::fs::remove_dir(&dir);
        None
    }
}

fn spawn_watchdog(token: &str, mode: &Mode, work_dir: &Path) -> Option<Child> {
    let exe = std::env::current_exe().ok()?;
    let mut command = Command::new(exe);
    command.args(["target-watchdog", "--token", token, "--work-dir"]).arg(work_dir);
    if let Mode::Cgroup(path) = mode {
        command.arg("--cgroup").arg(path);
    }
    command.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::inherit()).process_group(0);
    match command.spawn() {
        Ok(child) => Some(child),
        Err(error) => {
            eprintln!(
                "mcpsim: cannot start the target watchdog ({error}): if mcpsim is killed outright (SIGKILL), the \
                 target's processes and {} may be left",
                work_dir.display()
            );
            None
        }
    }
}

/// Where one started process is kept.
pub struct Leaf {
    /// `<run token>.<n>`: the marker value.
    pub marker: String,
    cgroup: Option<PathBuf>,
    /// Its `cgroup.procs`, open for the child to write "0" to between fork and exec.
    pub procs: Option<File>,
}

impl Run {
    /// A new leaf for one process: a cgroup of its own (cgroup mode) and its marker.
    pub fn leaf(&self) -> Result<Leaf, ContainError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let marker = format!("{}.{n}", self.token);
        let (cgroup, procs) = match &self.mode {
            Mode::Cgroup(run) => {
                let dir = run.join(format!("p{n}"));
                std::fs::create_dir(&dir).map_err(|source| ContainError::CreateCgroup { path: dir.clone(), source })?;
                let procs = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
                    .map_err(|source| ContainError::OpenProcs { path: dir.clone(), source })?;
                (Some(dir), Some(procs))
            }
            Mode::Marker => (None, None),
        };
        Ok(Leaf { marker, cgroup, procs })
    }
}

impl Leaf {
    /// Its cgroup (cgroup mode).
    pub fn cgroup(&self) -> Option<&Path> {
        self.cgroup.as_deref()
    }

    /// Kills every process of this leaf; returns how many are still running.
    pub fn kill(&mut self) -> usize {
        self.procs = None;
        match &self.cgroup {
            Some(dir) => {
                let left = kill_cgroup(dir);
                if left == 0 {
                    let _ = std::fs::remove_dir(dir);
                }
                left
            }
            None => kill_marked(&self.marker),
        }
    }
}

/// Every pid in `dir`'s cgroup and its descendants.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> =
        std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pids.extend(cgroup_pids(&entry.path()));
            }
        }
    }
    pids
}

/// `cgroup.kill` (the cgroup and every one below it), then waits until none is left; returns what is left.
fn kill_cgroup(dir: &Path) -> usize {
    if !dir.exists() {
        return 0;
    }
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    wait_until(|| cgroup_pids(dir).into_iter().filter(|&p| alive(p)).count())
}

fn wait_until(mut left: impl FnMut() -> usize) -> usize {
    let rounds = KILL_WAIT.as_millis() / 5;
    for _ in 0..rounds {
        if left() == 0 {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    left()
}

/// Whether `pid` runs (not a zombie).
fn alive(pid: i32) -> bool {
    super::process::alive(pid as u32)
}

/// Processes whose environment holds `MCPSIM_TARGET_RUN=<prefix>…`, live ones only.
pub fn marked(prefix: &str, exact: bool) -> Vec<i32> {
    let wanted = format!("{MARKER}={prefix}");
    let own = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if pid == own {
            continue;
        }
        let mut environ = Vec::new();
        if File::open(entry.path().join("environ")).and_then(|mut f| f.read_to_end(&mut environ)).is_err() {
            continue;
        }
        let found = environ
            .split(|&b| b == 0)
            .any(|var| var.starts_with(wanted.as_bytes()) && (!exact || var.len() == wanted.len()) && (exact || var.len() > wanted.len()));
        if found && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// SIGKILLs every process carrying the marker (`<token>.<n>` exactly, or every one of a run with `<token>.`)
/// until none is found; returns how many are left.
fn kill_marked(marker: &str) -> usize {
    let exact = !marker.ends_with('.');
    wait_until(|| {
        let pids = marked(marker, exact);
        for &pid in &pids {
            // SAFETY: kill(2) touches no memory of ours.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        pids.len()
    })
}

/// mcpsim's child processes (pid, whether a zombie), from `/proc/*/stat`.
pub fn children() -> Vec<(i32, bool)> {
    let own = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut children = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let mut fields = rest.split_whitespace();
        let (state, parent) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
        if parent == own {
            children.push((pid, state == "Z" || state == "X"));
        }
    }
    children
}

/// Marker mode, at the run's end: every child of mcpsim but the watchdog (processes not yet killed, orphans
/// it adopted as subreaper) SIGKILLed and reaped; returns how many still run.
fn kill_adopted(watchdog: Option<i32>) -> usize {
    wait_until(|| {
        let mut alive = 0;
        for (pid, zombie) in children().into_iter().filter(|&(pid, _)| Some(pid) != watchdog) {
            // SAFETY: kill(2) and waitpid(2) on a child of ours touch no memory but the status we pass null for.
            unsafe {
                if !zombie {
                    libc::kill(pid, libc::SIGKILL);
                    alive += 1;
                }
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
        alive
    })
}

/// Whether the run contains by marker (and so mcpsim is a subreaper).
pub fn by_marker() -> bool {
    RUN.get().is_some_and(|run| run.mode == Mode::Marker)
}

/// What a sweep found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Processes still running after the kill, as counted.
    pub left: usize,
    /// Whether the work directory is still there.
    pub dir_left: bool,
}

/// Kills everything of the run, counts what is left, removes its cgroups and the work directory. What both
/// [`finish`] and the watchdog do.
pub fn sweep(token: &str, cgroup: Option<&Path>, work_dir: &Path) -> Swept {
    let mut left = match cgroup {
        Some(dir) => {
            let left = kill_cgroup(dir);
            if let Ok(entries) = std::fs::read_dir(dir) {
                for entry in entries.flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        let _ = std::fs::remove_dir(entry.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(dir);
            left
        }
        None => 0,
    };
    // The marker too, in either mode: the count of what escaped a cgroup (nothing can) or the kill itself.
    left = left.max(kill_marked(&format!("{token}.")));
    let _ = std::fs::remove_dir_all(work_dir);
    Swept { left, dir_left: work_dir.exists() }
}

/// Ends the run: kills and counts every process it started, removes the work directory, and lets the
/// watchdog go. Idempotent: the second call returns what is left then.
pub fn finish() -> Swept {
    let Some(run) = RUN.get() else { return Swept::default() };
    let first = !run.finished.swap(true, Ordering::SeqCst);
    let cgroup = match &run.mode {
        Mode::Cgroup(path) => Some(path.as_path()),
        Mode::Marker => None,
    };
    let mut swept = sweep(&run.token, cgroup, &run.work_dir);
    if run.mode == Mode::Marker {
        swept.left = swept.left.max(kill_adopted(run.watchdog_pid));
    }
    if first {
        if let Ok(mut watchdog) = run.watchdog.lock() {
            if let Some(mut child) = watchdog.take() {
                drop(child.stdin.take());
                let _ = child.wait();
            }
        }
    }
    swept
}

/// Whether the run is over (no process may be started any more).
pub fn finished() -> bool {
    RUN.get().is_some_and(|run| run.finished.load(Ordering::SeqCst))
}

/// The honest sentence about what a finish left.
pub fn describe(swept: &Swept) -> String {
    let how = RUN.get().map(|run| run.mode.describe()).unwrap_or_default();
    let mut out = if swept.left == 0 {
        format!("every process of the target was killed (0 left, counted by {how})")
    } else {
        format!("{} process(es) of the target are still running (counted by {how})", swept.left)
    };
    if swept.dir_left {
        if let Some(run) = RUN.get() {
            out.push_str(&format!("; {} could not be removed", run.work_dir.display()));
        }
    }
    out
}

/// `mcpsim target-watchdog`: waits for end-of-file on stdin (mcpsim gone, however it ended), then sweeps.
pub fn watchdog(token: &str, cgroup: Option<&Path>, work_dir: &Path) -> std::process::ExitCode {
    // SAFETY: setting signal dispositions before any other thread exists touches no memory.
    unsafe {
        // SIGTTOU too: in its own (background) process group, a write to a `tostop` terminal would stop it.
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE, libc::SIGTTOU] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut buffer = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut buffer) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let had_work = work_dir.exists() || cgroup.is_some_and(Path::exists);
    let swept = sweep(token, cgroup, work_dir);
    if had_work {
        let mut stderr = std::io::stderr();
        let _ = writeln!(
            stderr,
            "mcpsim target-watchdog: mcpsim ended without cleaning up; {} process(es) of the target left, {} {}",
            swept.left,
            work_dir.display(),
            if swept.dir_left { "could not be removed" } else { "removed" }
        );
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_paths_hold_no_shell_metacharacters() {
        assert!(safe_in_commands("/tmp/mcpsim-target-0a1b/x_y-1-spread"));
        for bad in ["/tmp/a b", "/tmp/$(x)", "/tmp/a;b", "/tmp/`x`", "/tmp/a'b", "/tmp/a\nb"] {
            assert!(!safe_in_commands(bad), "{bad:?}");
        }
    }
}
