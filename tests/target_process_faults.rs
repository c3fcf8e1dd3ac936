//! Paused, killed and skewed processes of a target, from the outside: the real `mcpsim` binary plays
//! scenarios against a fleet of its own server (`targets/mcpsim-stdio.toml`, its command wrapped to record
//! every pid), and the tests read `/proc` and the cgroup files to see what became of each process.
//!
//! Bounded: a paused instance is always continued or killed — when the play ends, when mcpsim is interrupted
//! (SIGINT) while one is paused, and when mcpsim is killed outright (SIGKILL: the watchdog kills frozen and
//! stopped processes alike), in both containments (cgroup freeze, and SIGSTOP under the marker). The
//! lessons: a retry while the first instance is paused commits once; a crash after the request was written
//! is recorded lost and the instance restarted before the probe; an instance whose clock runs past the state's
//! lifetime refuses it.

mod common;

use common::child::{finish, repo, Ran};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

/// Longest one `mcpsim run --target` may take here.
const RUN_SECONDS_MAX: u64 = 180;

fn spawn(args: &[&str], marker: bool) -> Child {
    let mut command = common::child::mcpsim(args);
    if marker {
        command.env("MCPSIM_TARGET_CONTAINMENT", "marker");
    }
    command.spawn().expect("mcpsim starts")
}

fn run(args: &[&str]) -> Ran {
    finish(spawn(args, false), RUN_SECONDS_MAX)
}

fn scratch(name: &str) -> PathBuf {
    common::child::scratch("process-faults", name)
}

/// `targets/mcpsim-stdio.toml` with its command wrapped so that each process writes its pid to `DIR/pids`
/// first (then execs the server: the pid is the server's), and `request_timeout_ms` as given.
fn recording_target(dir: &Path, request_timeout_ms: u64) -> PathBuf {
    let original = std::fs::read_to_string(repo().join("targets/mcpsim-stdio.toml")).unwrap();
    let wrapped = original.replace(
        "command = [\"{mcpsim}\", \"serve\"",
        &format!(
            "request_timeout_ms = {request_timeout_ms}\ncommand = [\"sh\", \"-c\", \"echo $$ >> {}; exec \\\"$0\\\" \\\"$@\\\"\", \"{{mcpsim}}\", \"serve\"",
            dir.join("pids").display()
        ),
    );
    assert_ne!(wrapped, original, "the command line of targets/mcpsim-stdio.toml changed: update this test");
    let file = dir.join("target.toml");
    std::fs::write(&file, wrapped).unwrap();
    file
}

fn scenario(dir: &Path, name: &str, steps: &str) -> PathBuf {
    let text = format!(
        "# {name}\n\nprincipal {{{{principal}}}} workspaces \"file:///target\"\ninstance i1\ninstance i2\nclient user principal {{{{principal}}}}\n\n{steps}\n"
    );
    let file = dir.join(format!("{name}.sim"));
    std::fs::write(&file, text).unwrap();
    file
}

/// The processes the target started: the pids they recorded, and those not recorded yet, found by their
/// command line (`sh -c "echo $$ >> DIR/pids; exec …"`): a pause can stop a process before its `echo` ran.
fn pids(dir: &Path) -> Vec<u32> {
    let file = dir.join("pids");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let mut pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let needle = file.display().to_string();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !pids.contains(&pid) && String::from_utf8_lossy(&cmdline).contains(&needle) && state(pid).is_some() {
            pids.push(pid);
        }
    }
    pids
}

/// The process's state letter (`T` stopped), or `None` once it is gone or a zombie.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let state = stat.rsplit_once(')')?.1.split_whitespace().next()?.chars().next()?;
    (state != 'Z' && state != 'X').then_some(state)
}

/// Where cgroup v2 is mounted.
fn cgroup2_mount() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (fields, after) = line.split_once(" - ")?;
        if after.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        fields.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// Whether the process is paused: stopped (SIGSTOP), or in a cgroup v2 that is frozen.
fn paused(pid: u32) -> bool {
    if state(pid) == Some('T') {
        return true;
    }
    let Some(mount) = cgroup2_mount() else { return false };
    let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return false };
    let Some(path) = cgroup.lines().find_map(|l| l.strip_prefix("0::")) else { return false };
    let dir = mount.join(path.trim().trim_start_matches('/'));
    std::fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|events| events.lines().any(|l| l == "frozen 1"))
}

/// Waits until `count` pids were recorded and `paused_at_least` of them are paused.
fn wait_for_pause(dir: &Path, count: usize, paused_at_least: usize) -> Vec<u32> {
    // Up to 60 s: a loaded machine (the whole suite beside it) can take long to start three processes.
    for _ in 0..3000 {
        let pids = pids(dir);
        if pids.len() >= count && pids.iter().filter(|&&p| paused(p)).count() >= paused_at_least {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the fleet did not start and pause: pids {:?}", pids(dir));
}

/// Every pid gone (within 10 s); the survivors are killed and named.
fn assert_all_gone(pids: &[u32]) {
    for _ in 0..500 {
        if pids.iter().all(|&p| state(p).is_none()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<(u32, Option<char>)> = pids.iter().map(|&p| (p, state(p))).filter(|(_, s)| s.is_some()).collect();
    for (pid, _) in &alive {
        // SAFETY: cleaning up after a failed assertion; kill(2) touches no memory.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    panic!("processes outlived mcpsim (pid, state): {alive:?}");
}

/// A play that pauses i1 and then waits on it (a request to the paused instance, bounded by a long
/// request_timeout_ms), interrupted by `signal` while the instance is paused.
fn paused_then(signal: i32, marker: bool) -> Ran {
    let dir = scratch(&format!("signal-{signal}-{marker}"));
    let target = recording_target(&dir, 100_000);
    let sim = scenario(&dir, "pause-and-wait", "pause i1\nsend user -> i1 tools/list {} as stuck");
    let child = spawn(&["run", "--target", target.to_str().unwrap(), sim.to_str().unwrap()], marker);
    // The preflight's fleet starts and ends first (6 processes), then the play's (6 more): two of those paused.
    let pids = wait_for_pause(&dir, 12, 2);
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, signal) };
    let ran = finish(child, 30);
    assert_all_gone(&pids);
    let _ = std::fs::remove_dir_all(&dir);
    ran
}

#[test]
fn a_paused_instance_is_continued_when_the_play_ends_and_nothing_outlives_the_run() {
    let dir = scratch("end");
    let target = recording_target(&dir, 10_000);
    let sim = scenario(&dir, "pause-and-end", "pause i1\nsend user -> i2 tools/list {} as listed\nexpect listed complete");
    let ran = run(&["run", "--target", target.to_str().unwrap(), sim.to_str().unwrap()]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("paused t") && ran.stdout.contains("at the end of the play"), "{}", ran.stdout);
    // The preflight's 6 processes and the play's 6 (its probe ran after the resume: it needs every instance).
    let pids = pids(&dir);
    assert_eq!(pids.len(), 12, "{pids:?}");
    assert!(ran.stdout.contains("effects: the probe read 4 before and 4 after"), "{}", ran.stdout);
    assert_all_gone(&pids);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_while_an_instance_is_paused_kills_every_process() {
    let ran = paused_then(libc::SIGINT, false);
    assert_eq!(ran.status, 130, "{}", ran.stderr);
    assert!(ran.stderr.contains("interrupted; every process of the target was killed (0 left"), "{}", ran.stderr);
}

#[test]
fn ctrl_c_while_an_instance_is_stopped_by_sigstop_kills_every_process() {
    let ran = paused_then(libc::SIGINT, true);
    assert_eq!(ran.status, 130, "{}", ran.stderr);
    assert!(ran.stderr.contains("interrupted; every process of the target was killed (0 left"), "{}", ran.stderr);
}

#[cfg(target_os = "linux")]
#[test]
fn sigkill_of_mcpsim_while_an_instance_is_frozen_leaves_no_process() {
    let ran = paused_then(libc::SIGKILL, false);
    assert_eq!(ran.status, 128 + libc::SIGKILL);
    assert!(ran.stderr.contains("mcpsim target-watchdog: mcpsim ended without cleaning up; 0 process(es)"), "{}", ran.stderr);
}

#[cfg(target_os = "linux")]
#[test]
fn sigkill_of_mcpsim_while_an_instance_is_stopped_leaves_no_process() {
    let ran = paused_then(libc::SIGKILL, true);
    assert_eq!(ran.status, 128 + libc::SIGKILL);
    assert!(ran.stderr.contains("mcpsim target-watchdog: mcpsim ended without cleaning up; 0 process(es)"), "{}", ran.stderr);
}

#[test]
fn a_retry_while_the_first_instance_is_paused_deletes_once_and_the_late_answer_is_recorded() {
    for file in ["targets/mcpsim-stdio.toml", "targets/mcpsim-http.toml"] {
        let ran = run(&["run", "--target", file, "09-retry-while-the-first-is-paused", "--transcript"]);
        assert_eq!(ran.status, 0, "{file}: {}\n{}", ran.stdout, ran.stderr);
        // One deletion: the probe counts 4 notes before and 3 after.
        assert!(ran.stdout.contains("effects: the probe read 4 before and 3 after"), "{file}: {}", ran.stdout);
        // The paused instance answered once continued: the confirmation was already used.
        let late = ran
            .stdout
            .lines()
            .skip_while(|l| !l.contains("answers late, after the pause"))
            .nth(1)
            .unwrap_or_else(|| panic!("{file}: {}", ran.stdout));
        assert!(late.contains("state_consumed"), "{file}: {late}");
        assert!(ran.stdout.contains("ok    property at-most-once"), "{file}: {}", ran.stdout);
    }
}

#[test]
fn a_crash_after_the_request_is_written_is_recorded_lost_and_the_instance_restarted_before_the_probe() {
    let dir = scratch("crash");
    let sim = scenario(
        &dir,
        "crash-after-receives",
        "send user -> i1 tools/call {\"name\": \"{{tool}}\", \"arguments\": {{arguments}}} as round1\n\
         expect round1 input_required\n\
         crash i1 after i1 receives tools/call\n\
         answer user -> i1 accept {{accept}} as round2\n\
         expect round2 no response\n\
         answer user -> i2 accept {{accept}} as retry",
    );
    let ran = run(&["run", "--target", "targets/mcpsim-stdio.toml", sim.to_str().unwrap(), "--transcript"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("ok    line 12: expect round2 no response"), "{}", ran.stdout);
    assert!(ran.stdout.contains("was killed (SIGKILL) after the request was written"), "{}", ran.stdout);
    // Killed once, then started again (before the probe: the scenario never restarts it).
    let processes: Vec<&str> =
        ran.stdout.lines().skip_while(|l| !l.starts_with("processes:")).take_while(|l| !l.starts_with("transcript")).collect();
    let killed = processes.iter().position(|l| l.contains("killed t")).unwrap_or_else(|| panic!("{}", ran.stdout));
    let name = processes[killed].split_whitespace().nth(1).unwrap();
    assert!(processes[killed..].iter().any(|l| l.contains(&format!("started {name} for alice"))), "{processes:?}");
    // At most one deletion, whatever the killed instance did with the request.
    let effects = ran.stdout.lines().find(|l| l.starts_with("effects:")).unwrap();
    assert!(effects.ends_with("4 before and 3 after") || effects.ends_with("4 before and 4 after"), "{effects}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs Debian's faketime (libfaketime): .ci/faketime.sh installs it"]
fn an_instance_whose_clock_runs_past_the_ttl_refuses_the_state_as_expired() {
    for file in ["targets/mcpsim-stdio.toml", "targets/mcpsim-http.toml"] {
        let ran = run(&["run", "--target", file, "11-expiry-on-a-skewed-clock", "--transcript"]);
        assert_eq!(ran.status, 0, "{file}: {}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains("under libfaketime, FAKETIME=+360.000"), "{file}: {}", ran.stdout);
        let refused = ran
            .stdout
            .lines()
            .skip_while(|l| !l.contains("as expired"))
            .find(|l| l.trim_start().starts_with('←'))
            .unwrap_or_else(|| panic!("{file}: {}", ran.stdout));
        assert!(refused.contains("\"reason\":\"state_expired\""), "{file}: {refused}");
        assert!(ran.stdout.contains("effects: the probe read 4 before and 3 after"), "{file}: {}", ran.stdout);
    }
}

#[test]
#[ignore = "needs Debian's faketime (libfaketime): .ci/faketime.sh installs it"]
fn an_instance_whose_clock_runs_behind_does_not_make_an_expired_state_usable_twice() {
    let dir = scratch("behind");
    // i2 runs 6 minutes behind: the state it mints has expired by true time before it is even answered.
    let sim = scenario(
        &dir,
        "behind",
        "send user -> i2 tools/call {\"name\": \"{{tool}}\", \"arguments\": {{arguments}}} as round1\n\
         expect round1 input_required\n\
         answer user -> i2 accept {{accept}} as first\n\
         answer user -> i2 accept {{accept}} as again\n\
         answer user -> i1 accept {{accept}} as elsewhere",
    );
    let text = std::fs::read_to_string(&sim).unwrap().replace("instance i2\n", "instance i2 clock -{{past_ttl}}\n");
    std::fs::write(&sim, text).unwrap();
    for file in ["targets/mcpsim-stdio.toml", "targets/mcpsim-http.toml"] {
        let ran = run(&["run", "--target", file, sim.to_str().unwrap(), "--transcript"]);
        assert_eq!(ran.status, 0, "{file}: {}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains("FAKETIME=-360.000"), "{file}: {}", ran.stdout);
        let answers: Vec<&str> = ran.stdout.lines().filter(|l| l.trim_start().starts_with('←')).collect();
        assert_eq!(answers.len(), 4, "{file}: {}", ran.stdout);
        // By its own clock the state is fresh: used once; the replay on the same instance is refused as used,
        // and an instance on true time refuses it as expired. One deletion.
        assert!(answers[1].contains("\"resultType\":\"complete\""), "{file}: {}", answers[1]);
        assert!(answers[2].contains("\"reason\":\"state_consumed\""), "{file}: {}", answers[2]);
        assert!(answers[3].contains("\"reason\":\"state_expired\""), "{file}: {}", answers[3]);
        assert!(ran.stdout.contains("effects: the probe read 4 before and 3 after"), "{file}: {}", ran.stdout);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
