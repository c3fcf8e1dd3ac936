//! The harness that starts other people's servers, attacked from outside (issue 35): every test starts the
//! built `mcpsim` binary against tiny `sh`/`python3` servers written here, then counts what it left.
//!
//! * Containment: a daemonizing server, a daemonizing setup command and a wrapper shell (`sh -c "… & wait"`),
//!   each ended normally, by Ctrl-C (SIGINT), SIGTERM and SIGKILL of mcpsim; the processes are counted by a
//!   marker in their environment (`HARDEN_MARK`, inherited by everything they spawn), the work directories by
//!   listing the `TMPDIR` each mcpsim is given.
//! * A stdio server that exits at start does not kill `run`/`explore` by SIGPIPE.
//! * A URL with userinfo never gets a request; a server's text cannot forge report lines; a scenario's file
//!   name cannot inject a command through `{data_dir}`; secrets in a setup command's argv are not printed; a
//!   flooding stdio server does not grow mcpsim's memory.

mod common;

use common::child::{finish, Ran};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A directory of the test's own: the target file, the scenario, and `tmp/` (mcpsim's TMPDIR).
struct Scratch {
    dir: PathBuf,
    mark: String,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let mark = format!("harden-{name}-{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("mcpsim-{mark}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::write(dir.join("one-request.sim"), ONE_REQUEST).unwrap();
        Scratch { dir, mark }
    }

    fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    fn scenario(&self) -> String {
        self.dir.join("one-request.sim").display().to_string()
    }

    /// What mcpsim left in its TMPDIR.
    fn work_dirs(&self) -> Vec<String> {
        std::fs::read_dir(self.tmp()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    }

    /// Live processes whose environment holds `HARDEN_MARK=<mark>`.
    fn processes(&self) -> Vec<u32> {
        marked(&format!("HARDEN_MARK={}", self.mark))
    }

    fn write_target(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text.replace("@MARK@", &self.mark)).unwrap();
        path.display().to_string()
    }

    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcpsim"));
        command.args(args).current_dir(repo()).env("TMPDIR", self.tmp()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        command.spawn().expect("mcpsim starts")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for pid in self.processes() {
            // SAFETY: cleaning up after a failed test; kill(2) touches no memory.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One request to one instance: round 1 of the tool.
const ONE_REQUEST: &str = r#"principal {{principal}} workspaces "file:///target"
instance i1
client user principal {{principal}}

send user -> i1 tools/call {"name": "{{tool}}", "arguments": {{arguments}}} as round1
expect round1 input_required
"#;

fn live(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().next().unwrap_or("").to_string()))
        .is_some_and(|state| state != "Z" && state != "X")
}

fn marked(needle: &str) -> Vec<u32> {
    let own = std::process::id();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == own {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|var| var == needle.as_bytes()) && live(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Polls `count` until it is 0 (within `seconds`); returns the last count.
fn settles(seconds: u64, mut count: impl FnMut() -> usize) -> usize {
    for _ in 0..seconds * 50 {
        if count() == 0 {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    count()
}

fn wait_for(seconds: u64, what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..seconds * 50 {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not happen within {seconds} s");
}

/// A stdio target of one instance and one principal whose processes carry the test's marker. The start
/// timeout (also the setup commands' bound, and added to the first answer's wait) leaves room for a loaded
/// machine.
fn stdio_target(setup: &str, command: &str, request_timeout_ms: u64) -> String {
    format!(
        r#"name = "hardening"
transport = "stdio"
instances = 1
setup = [{setup}]
command = {command}
start_timeout_ms = 1500
request_timeout_ms = {request_timeout_ms}
[env]
HARDEN_MARK = "@MARK@"
[principals.alice]
[tool]
name = "t"
arguments = {{}}
accept = {{}}
principal = "alice"
[effects]
command = ["echo", "0"]
"#
    )
}

/// A server that double-forks a daemon into a session of its own, then never answers.
const DAEMON_SERVER: &str = r#"["sh", "-c", "(setsid sleep 300 </dev/null >/dev/null 2>&1 &); exec sleep 300"]"#;
/// A setup command that leaves a daemon behind and exits 0.
const DAEMON_SETUP: &str = r#"["sh", "-c", "(setsid sleep 300 </dev/null >/dev/null 2>&1 &)"]"#;
/// A wrapper shell, as `npx`, `uv run` and start scripts are: the server is its child.
const WRAPPER_SERVER: &str = r#"["sh", "-c", "sleep 300 & wait"]"#;
const PLAIN_SERVER: &str = r#"["sh", "-c", "exec sleep 300"]"#;

#[derive(Clone, Copy, Debug)]
enum Kind {
    DaemonServer,
    DaemonSetup,
    Wrapper,
}

impl Kind {
    fn target(self, request_timeout_ms: u64) -> String {
        match self {
            Kind::DaemonServer => stdio_target("", DAEMON_SERVER, request_timeout_ms),
            Kind::DaemonSetup => stdio_target(DAEMON_SETUP, PLAIN_SERVER, request_timeout_ms),
            Kind::Wrapper => stdio_target("", WRAPPER_SERVER, request_timeout_ms),
        }
    }

    /// How many marked processes run once the fleet is up (a setup command's daemon lives as long as the
    /// fleet: it may be the database the instances use).
    fn running(self) -> usize {
        2
    }
}

/// A normal run to its end: nothing of the target and no work directory left, and stderr does not claim
/// anything was left.
fn normal_exit(kind: Kind, env: &[(&str, &str)]) {
    let scratch = Scratch::new(&format!("{kind:?}-normal-{}", env.len()).to_lowercase());
    let file = scratch.write_target("t.toml", &kind.target(300));
    let ran = finish(scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], env), 60);
    assert_eq!(ran.status, 1, "the expectation fails (no answer), the run ends normally:\n{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("sent nothing within"), "{}", ran.stdout);
    assert_eq!(scratch.processes(), Vec::<u32>::new(), "processes of the target outlived mcpsim");
    assert_eq!(scratch.work_dirs(), Vec::<String>::new(), "the work directory was left");
    assert!(!ran.stderr.contains("still running"), "{}", ran.stderr);
}

/// mcpsim mid-run (waiting for an answer that never comes) is sent `signal`; afterwards nothing is left.
/// Also checks the work directory while it runs: an unpredictable name, mode 0700, stderr files 0600.
fn ended_by(kind: Kind, signal: i32, env: &[(&str, &str)]) -> Ran {
    let scratch = Scratch::new(&format!("{kind:?}-{signal}-{}", env.len()).to_lowercase());
    let file = scratch.write_target("t.toml", &kind.target(100_000));
    let mut child = Running(Some(scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], env)));
    // Once the instance's stderr file exists, the setup command is over: what runs then is its daemon, the
    // instance and what that spawned.
    let mut before = 0;
    wait_for(20, "the target's processes starting", || {
        let started = files_under(&scratch.tmp()).iter().any(|p| p.ends_with("t1-alice.stderr"));
        before = scratch.processes().len();
        started && before >= kind.running()
    });
    let dirs = scratch.work_dirs();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let name = dirs[0].strip_prefix("mcpsim-target-").expect("mcpsim-target-<random>");
    assert!(name.len() >= 16 && name.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    assert!(!name.contains(&child.id().to_string()), "the name holds mcpsim's pid: {name}");
    let work = scratch.tmp().join(&dirs[0]);
    assert_eq!(std::fs::metadata(&work).unwrap().permissions().mode() & 0o777, 0o700);
    let stderr_files = files_under(&work).into_iter().filter(|p| p.extension().is_some_and(|e| e == "stderr")).collect::<Vec<_>>();
    assert!(!stderr_files.is_empty(), "{:?}", files_under(&work));
    for file in stderr_files {
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600, "{}", file.display());
    }
    if !env.iter().any(|(key, _)| *key == "MCPSIM_TARGET_CONTAINMENT") {
        // Contained by a cgroup: every process of the target is in a leaf of the run's cgroup, which sits
        // beside mcpsim's own and is named by the same random token as the work directory.
        let run_cgroup = format!("{}/mcpsim-{name}/", cgroup_of(child.id()).expect("mcpsim's cgroup").trim_end_matches('/'));
        for pid in scratch.processes() {
            let Some(cgroup) = cgroup_of(pid) else { continue }; // gone meanwhile
            let leaf = cgroup.strip_prefix(&run_cgroup).unwrap_or_else(|| panic!("process {pid} is in {cgroup}, not under {run_cgroup}"));
            assert!(leaf.starts_with('p') && leaf[1..].bytes().all(|b| b.is_ascii_digit()), "process {pid} is in {cgroup}: not a leaf");
        }
    }
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, signal) };
    let ran = finish(child.0.take().unwrap(), 30);
    assert_eq!(ran.status, 128 + signal, "{}", ran.stderr);
    let left = settles(10, || scratch.processes().len());
    assert_eq!(left, 0, "{before} processes ran; {left} outlived mcpsim ({kind:?}, signal {signal})");
    let dirs_left = settles(10, || scratch.work_dirs().len());
    assert_eq!(dirs_left, 0, "the work directory was left: {:?}", scratch.work_dirs());
    ran
}

/// An mcpsim the test started, killed if an assertion fails before the test ends it (so a failing test does
/// not leave it running out its timeouts).
struct Running(Option<Child>);

impl Running {
    fn id(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The cgroup v2 path of `pid` (`/proc/PID/cgroup`'s `0::` line), while it runs.
fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|line| line.strip_prefix("0::")).map(|path| path.trim().to_string())
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return files };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            files.extend(files_under(&entry.path()));
        } else {
            files.push(entry.path());
        }
    }
    files
}

fn interrupted(kind: Kind, signal: i32) {
    let ran = ended_by(kind, signal, &[]);
    assert!(ran.stderr.contains("interrupted; every process of the target was killed (0 left, counted by cgroup"), "{}", ran.stderr);
}

#[test]
fn a_daemonizing_server_is_gone_after_a_normal_exit() {
    normal_exit(Kind::DaemonServer, &[]);
}

#[test]
fn a_daemonizing_server_is_gone_after_ctrl_c() {
    interrupted(Kind::DaemonServer, libc::SIGINT);
}

#[test]
fn a_daemonizing_server_is_gone_after_sigterm() {
    interrupted(Kind::DaemonServer, libc::SIGTERM);
}

#[test]
fn a_daemonizing_server_is_gone_after_sigkill_of_mcpsim() {
    let ran = ended_by(Kind::DaemonServer, libc::SIGKILL, &[]);
    assert!(ran.stderr.contains("target-watchdog: mcpsim ended without cleaning up; 0 process(es) of the target left"), "{}", ran.stderr);
}

#[test]
fn a_daemonizing_setup_command_is_gone_after_a_normal_exit() {
    normal_exit(Kind::DaemonSetup, &[]);
}

#[test]
fn a_daemonizing_setup_command_is_gone_after_ctrl_c() {
    interrupted(Kind::DaemonSetup, libc::SIGINT);
}

#[test]
fn a_daemonizing_setup_command_is_gone_after_sigterm() {
    interrupted(Kind::DaemonSetup, libc::SIGTERM);
}

#[test]
fn a_daemonizing_setup_command_is_gone_after_sigkill_of_mcpsim() {
    ended_by(Kind::DaemonSetup, libc::SIGKILL, &[]);
}

#[test]
fn a_wrapper_shells_server_is_gone_after_a_normal_exit() {
    normal_exit(Kind::Wrapper, &[]);
}

#[test]
fn a_wrapper_shells_server_is_gone_after_ctrl_c() {
    interrupted(Kind::Wrapper, libc::SIGINT);
}

#[test]
fn a_wrapper_shells_server_is_gone_after_sigterm() {
    interrupted(Kind::Wrapper, libc::SIGTERM);
}

#[test]
fn a_wrapper_shells_server_is_gone_after_sigkill_of_mcpsim() {
    ended_by(Kind::Wrapper, libc::SIGKILL, &[]);
}

/// Without a cgroup, the environment marker finds and kills the same trees, and the report says how it
/// counted.
#[test]
fn without_a_cgroup_the_marker_contains_daemons_and_wrappers_too() {
    let marker = [("MCPSIM_TARGET_CONTAINMENT", "marker")];
    normal_exit(Kind::DaemonServer, &marker);
    normal_exit(Kind::Wrapper, &marker);
    let ran = ended_by(Kind::DaemonServer, libc::SIGINT, &marker);
    assert!(
        ran.stderr.contains("every process of the target was killed (0 left, counted by the MCPSIM_TARGET_RUN marker"),
        "{}",
        ran.stderr
    );
    ended_by(Kind::DaemonSetup, libc::SIGKILL, &marker);
    ended_by(Kind::Wrapper, libc::SIGKILL, &marker);
}

/// Live processes whose command line holds `needle`.
fn with_argv(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if cmdline.split(|&b| b == 0).any(|arg| arg == needle.as_bytes()) && live(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Without a cgroup, a daemon that also clears its environment escapes the marker scan; mcpsim, a child
/// subreaper in that mode, adopts it and kills it at the run's end (normal exit and Ctrl-C).
#[test]
fn without_a_cgroup_a_daemon_that_clears_its_environment_is_adopted_and_killed() {
    for signal in [None, Some(libc::SIGINT)] {
        let scratch = Scratch::new(&format!("scrubbed-{}", signal.unwrap_or(0)));
        let tag = format!("{}-argv", scratch.mark);
        let command = format!(
            r#"["sh", "-c", "(setsid env -i python3 -c 'import time; time.sleep(300)' {tag} </dev/null >/dev/null 2>&1 &); exec sleep 300"]"#
        );
        let file = scratch.write_target("t.toml", &stdio_target("", &command, if signal.is_some() { 100_000 } else { 300 }));
        let child =
            scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], &[("MCPSIM_TARGET_CONTAINMENT", "marker")]);
        wait_for(20, "the scrubbed daemon starting", || !with_argv(&tag).is_empty());
        if let Some(signal) = signal {
            // SAFETY: signalling the child this test started.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
        let ran = finish(child, 60);
        assert_eq!(ran.status, signal.map_or(1, |s| 128 + s), "{}\n{}", ran.stdout, ran.stderr);
        let left = settles(10, || with_argv(&tag).len());
        for pid in with_argv(&tag) {
            // SAFETY: cleaning up what a failing run left; kill(2) touches no memory.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        assert_eq!(left, 0, "the daemon that cleared its environment outlived mcpsim ({signal:?}): {}", ran.stderr);
        assert!(!ran.stderr.contains("still running"), "{}", ran.stderr);
    }
}

/// A server that exits at once: writing to it is an error of the exchange, not a SIGPIPE that kills mcpsim.
#[test]
fn a_stdio_server_that_exits_at_start_does_not_kill_run_or_explore_by_sigpipe() {
    let scratch = Scratch::new("exits-at-start");
    let file = scratch.write_target("t.toml", &stdio_target("", r#"["sh", "-c", "exit 0"]"#, 300));
    let ran = finish(scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], &[]), 60);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("FAIL") && ran.stdout.contains("1 instance(s) over stdio"), "{}", ran.stdout);
    assert!(ran.stdout.contains("closed its stdin") || ran.stdout.contains("closed its stdout"), "{}", ran.stdout);
    let ran = finish(scratch.spawn(&["explore", "--target", &file, &scratch.scenario(), "--seeds", "2"], &[]), 60);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("2 of 2 seed(s) failed"), "{}", ran.stdout);
    assert_eq!(scratch.work_dirs(), Vec::<String>::new());
    // Whether a server that exits at once is gone before the first write is the machine's timing; one that
    // closes its stdin and stays makes every write after that meet EPIPE. Its shell may not have closed it
    // yet when the first request is written (a loaded machine starts it slowly), so the scenario sends a
    // second request once the first went unanswered: that write meets EPIPE every time.
    let twice = scratch.dir.join("two-requests.sim");
    std::fs::write(
        &twice,
        format!("{ONE_REQUEST}send user -> i1 tools/call {{\"name\": \"{{{{tool}}}}\", \"arguments\": {{{{arguments}}}}}} as again\n"),
    )
    .unwrap();
    let file = scratch.write_target("closed.toml", &stdio_target("", r#"["sh", "-c", "exec 0<&-; exec sleep 300"]"#, 300));
    let ran = finish(scratch.spawn(&["run", "--target", &file, twice.to_str().unwrap(), "--reruns", "0"], &[]), 60);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("closed its stdin"), "the write met EPIPE: {}", ran.stdout);
    assert_eq!(scratch.work_dirs(), Vec::<String>::new());
}

/// A TMPDIR where someone else could replace the work directory (writable by others without the sticky bit,
/// or owned by another user) is refused before anything starts: exit 2, nothing created, nothing started.
#[test]
fn an_unsafe_tmpdir_is_refused_with_exit_2_before_anything_starts() {
    let scratch = Scratch::new("unsafe-tmpdir");
    let file = scratch.write_target("t.toml", &Kind::DaemonServer.target(300));
    let tmp = scratch.tmp();
    let refused = |what: &str, expected: &str| {
        for args in [
            vec!["run", "--target", file.as_str(), &scratch.scenario(), "--reruns", "0"],
            vec!["explore", "--target", file.as_str(), &scratch.scenario(), "--seeds", "1"],
            vec!["attack", "--target", file.as_str()],
        ] {
            let ran = finish(scratch.spawn(&args, &[]), 60);
            assert_eq!(ran.status, 2, "{what}, {}: {}\n{}", args[0], ran.stdout, ran.stderr);
            assert!(ran.stderr.contains(expected) && ran.stderr.contains("set TMPDIR to"), "{what}, {}: {}", args[0], ran.stderr);
            assert_eq!(scratch.work_dirs(), Vec::<String>::new(), "{what}: a work directory was made");
            assert_eq!(scratch.processes(), Vec::<u32>::new(), "{what}: the target was started");
        }
    };
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused("mode 0777", "writable by others without the sticky bit (mode 777)");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700)).unwrap();
    // SAFETY: chown(2) of the test's own directory, with a NUL-terminated path.
    let path = std::ffi::CString::new(tmp.display().to_string()).unwrap();
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(unsafe { libc::chown(path.as_ptr(), 65534, 65534) }, 0, "chown as root");
        refused("owned by 65534", "belongs to user 65534");
        assert_eq!(unsafe { libc::chown(path.as_ptr(), 0, 0) }, 0);
    }
    // The same directory, safe again (sticky and world-writable, as /tmp is): the run goes ahead.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let ran = finish(scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], &[]), 60);
    assert_eq!(ran.status, 1, "a sticky world-writable TMPDIR is safe: {}\n{}", ran.stdout, ran.stderr);
    assert_eq!(scratch.work_dirs(), Vec::<String>::new());
}

/// What the run's end cannot clean up makes the run unjudged (exit 3) and is said on stderr: here a setup
/// command mounts a file system inside the work directory, so the directory cannot be removed.
#[test]
#[ignore = "needs root with CAP_SYS_ADMIN (mount); CI runs it"]
fn a_work_directory_that_cannot_be_removed_makes_the_run_exit_3() {
    let scratch = Scratch::new("pinned-dir");
    let setup = r#"["sh", "-c", "mkdir -p {data_dir}/pinned && mount -t tmpfs mcpsim-pinned {data_dir}/pinned"]"#;
    let file = scratch.write_target("t.toml", &stdio_target(setup, PLAIN_SERVER, 300));
    let ran = finish(scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], &[]), 60);
    // Unmount whatever the run left mounted before asserting, so a failure leaves nothing behind either.
    let mounted: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .filter(|line| line.starts_with("mcpsim-pinned ") && line.contains(&scratch.mark))
        .map(|line| line.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    for point in &mounted {
        assert!(Command::new("umount").arg(point).status().unwrap().success(), "umount {point}");
    }
    // Twice: the preflight's fleet runs the setup commands too, before the scenario's play.
    assert_eq!(mounted.len(), 2, "the preflight's setup and the play's each mounted once: {}\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.status, 3, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("could not be removed"), "{}", ran.stderr);
    assert_eq!(scratch.processes(), Vec::<u32>::new());
}

/// mcpsim's own stdout closed (`| head`): it still ends by SIGPIPE, quietly, and the watchdog removes what it
/// left.
#[test]
fn when_mcpsims_own_stdout_is_closed_the_watchdog_removes_the_work_directory() {
    let scratch = Scratch::new("own-sigpipe");
    let file = scratch.write_target("t.toml", &Kind::DaemonServer.target(300));
    let mut child = scratch.spawn(&["run", "--target", &file, &scratch.scenario(), &scratch.scenario(), "--reruns", "0"], &[]);
    drop(child.stdout.take());
    let ran = finish(child, 60);
    assert_eq!(ran.status, 128 + libc::SIGPIPE, "{}", ran.stderr);
    assert_eq!(settles(10, || scratch.processes().len()), 0);
    assert_eq!(settles(10, || scratch.work_dirs().len()), 0, "{:?}", scratch.work_dirs());
}

/// `http://127.0.0.1:{port}@127.0.0.2:PORT/mcp` names 127.0.0.2 as its host: refused before any request.
#[test]
fn a_url_with_userinfo_is_refused_and_its_host_gets_no_request() {
    let scratch = Scratch::new("userinfo");
    let listener = std::net::TcpListener::bind("127.0.0.2:0").expect("127.0.0.2 is loopback on Linux");
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for url in [format!("http://127.0.0.1:{{port}}@127.0.0.2:{port}/mcp"), format!("http://127.0.0.2:{port}/mcp?p={{port}}")] {
        let text = std::fs::read_to_string(repo().join("targets/mcpsim-http.toml")).unwrap();
        let text = text.replace("url = \"http://127.0.0.1:{port}/mcp\"", &format!("url = \"{url}\""));
        assert!(text.contains(&url));
        let file = scratch.write_target("t.toml", &text);
        for command in [&["run", "--target", &file][..], &["attack", "--target", &file]] {
            let ran = finish(scratch.spawn(command, &[]), 60);
            assert_eq!(ran.status, 2, "{}\n{}", ran.stdout, ran.stderr);
            assert!(ran.stderr.contains("has userinfo") || ran.stderr.contains("the port must be the one mcpsim chose"), "{}", ran.stderr);
        }
    }
    assert!(matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "127.0.0.2 got a connection");
}

/// A stdio server (python3) whose every answer and stray line carries ESC sequences and newlines that
/// would forge report lines.
const HOSTILE_SERVER: &str = r#"
import json, sys
FORGED = "boom\n   ok    property at-most-once\nPASS: every property held\n\x1b[2K\x1b[1A\u202e"
asked = 0
for line in sys.stdin:
    try:
        request = json.loads(line)
    except Exception:
        continue
    if "id" not in request:
        continue
    asked += 1
    if asked == 1:
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"resultType": "input_required\n" + FORGED, "inputRequests": {}, "requestState": FORGED}}
    else:
        answer = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32602, "message": FORGED, "data": {"reason": FORGED}}}
    if asked == 1 and "stray" in sys.argv:
        print("not json\x1b[31m\u202e PASS: every property held", flush=True)
    print(json.dumps(answer, ensure_ascii=False), flush=True)
"#;

fn assert_no_forged_lines(output: &str) {
    assert!(!output.contains('\u{1b}'), "a raw ESC reached the report:\n{output}");
    assert!(!output.contains('\u{202e}'), "a raw bidi override reached the report:\n{output}");
    for line in output.lines() {
        assert!(!line.starts_with("PASS: every property held"), "a forged line:\n{output}");
    }
}

#[test]
fn a_servers_text_is_escaped_in_run_and_attack_reports() {
    let scratch = Scratch::new("hostile");
    let server = scratch.dir.join("hostile.py");
    std::fs::write(&server, HOSTILE_SERVER).unwrap();
    let target = |name: &str, extra: &str| {
        let command = format!(r#"["python3", "{}"{extra}]"#, server.display());
        scratch.write_target(name, &stdio_target("", &command, 2000).replace("start_timeout_ms = 1500", "start_timeout_ms = 5000"))
    };
    let file = target("forges.toml", "");
    let scenario = repo().join("targets/scenarios/01-retry-lands-elsewhere.sim").display().to_string();
    let ran = finish(scratch.spawn(&["run", "--target", &file, &scenario, "--reruns", "0", "--transcript"], &[]), 60);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert_no_forged_lines(&ran.stdout);
    assert_no_forged_lines(&ran.stderr);
    // A line break of the server's own splits its text, but every piece after the first sits behind the
    // message's gutter, escaped: nothing it sent starts a line as the report's own would.
    assert!(
        ran.stdout.contains(
            "got input_required\n         | boom\n         |    ok    property at-most-once\n         | PASS: every property held\n         | \\u{1b}[2K"
        ),
        "{}",
        ran.stdout
    );
    let stray = target("stray.toml", r#", "stray""#);
    let ran = finish(scratch.spawn(&["run", "--target", &stray, &scenario, "--reruns", "0"], &[]), 60);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert_no_forged_lines(&ran.stdout);
    assert!(ran.stdout.contains("not json\\u{1b}[31m\\u{202e} PASS: every property held"), "{}", ran.stdout);
    let ran = finish(scratch.spawn(&["attack", "--target", &file, "--only", "replay-sequential,tampered-state,schema-mismatch"], &[]), 60);
    assert_no_forged_lines(&ran.stdout);
    assert_no_forged_lines(&ran.stderr);
    assert!(ran.stdout.contains("\\u{1b}"), "{}\n{}", ran.stdout, ran.stderr);
}

/// A scenario file named `x$(touch${IFS}$MARK).sim` against `sh -c "… {data_dir} …"`: nothing is executed.
#[test]
fn a_scenario_file_name_cannot_inject_a_command_through_data_dir() {
    let scratch = Scratch::new("placeholder");
    let touched = scratch.dir.join("touched");
    let scenario = scratch.dir.join("x$(touch${IFS}$MARK).sim");
    std::fs::write(&scenario, ONE_REQUEST).unwrap();
    let file =
        scratch.write_target("t.toml", &stdio_target("", r#"["sh", "-c", "echo {data_dir} {instance_dir} >&2; exec sleep 300"]"#, 300));
    let ran = finish(
        scratch.spawn(
            &["run", "--target", &file, scenario.to_str().unwrap(), "--reruns", "0"],
            &[("MARK", touched.to_str().unwrap()), ("IFS", " ")],
        ),
        60,
    );
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("x$(touch${IFS}$MARK)"), "the report names the scenario: {}", ran.stdout);
    assert!(!touched.exists(), "the scenario's file name ran a command");
}

/// Secrets in a setup command's argv are redacted wherever the command is shown.
#[test]
fn secret_looking_setup_arguments_are_redacted_in_reports() {
    let scratch = Scratch::new("redact");
    let secrets = r#""--password=hunter2", "--token", "tok3n-value", "MY_API_KEY=k3y-value", "postgres://bob:pw5-value@127.0.0.1/db""#;
    let file = scratch.write_target("ok.toml", &stdio_target(&format!(r#"["true", {secrets}]"#), PLAIN_SERVER, 300));
    let ran = finish(scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0", "--transcript"], &[]), 60);
    assert!(
        ran.stdout
            .contains("setup 1: true --password=[redacted] --token [redacted] MY_API_KEY=[redacted] postgres://[redacted]@127.0.0.1/db"),
        "{}",
        ran.stdout
    );
    let file = scratch.write_target("fails.toml", &stdio_target(&format!(r#"["sh", "-c", "exit 3", "sh", {secrets}]"#), PLAIN_SERVER, 300));
    let failed = finish(scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], &[]), 60);
    assert_eq!(failed.status, 3, "{}\n{}", failed.stdout, failed.stderr);
    assert!(failed.stdout.contains("setup command") && failed.stdout.contains("--password=[redacted]"), "{}", failed.stdout);
    for output in [&ran.stdout, &ran.stderr, &failed.stdout, &failed.stderr] {
        for secret in ["hunter2", "tok3n-value", "k3y-value", "pw5-value"] {
            assert!(!output.contains(secret), "{secret} was printed:\n{output}");
        }
    }
}

/// mcpsim's peak resident memory, from /proc.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Three stdio processes flood notifications nobody asked for while mcpsim waits for another process's
/// answer: what mcpsim buffers is bounded, so its memory stays small.
#[test]
fn a_flooding_stdio_server_is_held_back_not_buffered() {
    let scratch = Scratch::new("flood");
    let line = format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"pad":"{}"}}}}"#, "x".repeat(4000));
    let flood = scratch.dir.join("flood.json");
    std::fs::write(&flood, line).unwrap();
    // (A command's `{…}` is a placeholder, so the line comes from a file.)
    let command = format!(r#"["sh", "-c", "if [ \"$P\" = bob ]; then exec yes \"$(cat {})\"; else exec sleep 300; fi"]"#, flood.display());
    let text = stdio_target("", &command, 3000)
        .replace("instances = 1", "instances = 3")
        .replace("[principals.alice]", "[principals.alice]\nenv = { P = \"alice\" }\n[principals.bob]\nenv = { P = \"bob\" }");
    let file = scratch.write_target("t.toml", &text);
    let child = scratch.spawn(&["run", "--target", &file, &scratch.scenario(), "--reruns", "0"], &[]);
    let pid = child.id();
    let mut peak = 0;
    let mut child = Some(child);
    let mut status = None;
    for _ in 0..3000 {
        if let Some(kib) = peak_rss_kib(pid) {
            peak = peak.max(kib);
        }
        if let Some(done) = child.as_mut().unwrap().try_wait().unwrap() {
            status = Some(done);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let ran = finish(child.take().unwrap(), 30);
    assert!(status.is_some(), "mcpsim did not end");
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(peak > 0, "no memory reading");
    // Three readers hold at most 1 MiB of lines each plus one 4 MiB line being read.
    assert!(peak < 80 * 1024, "mcpsim's peak resident memory was {peak} KiB while three servers flooded it");
    eprintln!("peak resident memory while three servers flooded: {} KiB", peak);
}
