//! `mcpsim course check N --target FILE`: the course's graded challenges. A learner's server (any language,
//! docs/wire.md) is graded level by level with the target harness: each level is a list of target scenarios
//! (`targets/scenarios/`, and the course's own in `course/levels/`) and attacks of the battery, played and
//! judged by `crate::target` exactly as `run --target` and `attack` do. Nothing here judges: a level passes
//! when every scenario and attack it names was played and held, and never when one of them was skipped.

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_UNJUDGED, EXIT_USAGE};
use super::target::{after_preflight, TargetRun};
use crate::oracle::history::{Attempt, History, Operation, Outcome};
use crate::oracle::outcome::Observed;
use crate::target::attack::{self, Verdict};
use crate::target::faults::FaultPlan;
use crate::target::file::Target;
use crate::target::{self, shown, ScenarioSource};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How the command is typed after `mcpsim` (every command it prints to repeat a level uses it).
pub const INVOKED_AS: &str = "course check";

/// The widest line a report prints.
const WIDTH: usize = 100;

/// How many times a level's race attack is tried (the battery's default is 5; a learner's loop wants speed).
const RACE_TRIES: usize = 3;

/// Where a level's scenario comes from.
enum Source {
    /// A target scenario built into mcpsim (one of `targets/scenarios/`), by name.
    Embedded(&'static str),
    /// One of the course's own (`course/levels/`): its path in a checkout, and its text.
    Course(&'static str, &'static str),
}

/// One graded level.
pub struct Level {
    pub number: u8,
    pub title: &'static str,
    /// What must hold, in a sentence.
    pub property: &'static str,
    scenarios: &'static [Source],
    pub attacks: &'static [&'static str],
    /// The design mistake that usually fails this level.
    pub hint: &'static str,
}

/// The levels, in order.
pub static LEVELS: &[Level] = &[
    Level {
        number: 1,
        title: "two rounds on one instance",
        property: "round 1 asks with a form and a requestState; the answer sent back with it completes; \
                   _meta's protocol version and capabilities are checked; a notification is never answered",
        scenarios: &[Source::Course(
            "course/levels/01-two-rounds-on-one-instance.sim",
            include_str!("../../course/levels/01-two-rounds-on-one-instance.sim"),
        )],
        attacks: &["missing-capability", "unsupported-version", "missing-protocol-version", "accept-as-notification"],
        hint: "round 1 answers resultType input_required with inputRequests and a requestState; the answer \
               comes back as a new tools/call (a fresh id, the same arguments) carrying requestState and \
               inputResponses: verify, execute, answer resultType complete. Read _meta on every request: a protocolVersion you do not speak is -32022 with data.supported and \
               data.requested, a missing one -32602; round 1 from a client without the elicitation capability \
               is -32021; a message without an id is a notification and gets no answer (docs/wire.md)",
    },
    Level {
        number: 2,
        title: "the retry on another instance",
        property: "any instance finishes a confirmation another instance started, also after that one was killed",
        scenarios: &[
            Source::Course(
                "course/levels/02-the-retry-on-another-instance.sim",
                include_str!("../../course/levels/02-the-retry-on-another-instance.sim"),
            ),
            Source::Embedded("05-retry-after-the-first-instance-crashed"),
        ],
        attacks: &["retry-after-kill"],
        hint: "everything round 2 needs must travel in requestState, sealed with a key every instance holds; \
               a pending confirmation kept in one process's memory, or a key each process draws for itself, \
               works only when the retry comes back to the same process",
    },
    Level {
        number: 3,
        title: "at most once across the fleet",
        property: "an accepted answer replayed on any instance never executes again, and the replay is told \
                   the truth: the confirmation was used (not that the item is gone)",
        scenarios: &[Source::Embedded("01-retry-lands-elsewhere")],
        attacks: &["replay-sequential"],
        hint: "record that the state was used (its nonce) in the store every instance shares, in the same \
               transaction as the effect, and answer a replay from that record (state_consumed): relying on \
               the item being gone makes the replay say \"not found\" about a delete it made",
    },
    Level {
        number: 4,
        title: "the race",
        property: "two accepts of one confirmation written at once to two instances (or one delivered twice) \
                   execute once",
        scenarios: &[Source::Embedded("02-accepts-race"), Source::Embedded("10-accept-delivered-twice")],
        attacks: &["replay-concurrent"],
        hint: "the check that the nonce is unused and the claim of it must be one atomic step (one transaction \
               that takes the write lock first, or an insert that fails on a duplicate key), not a read, the \
               effect, then a write",
    },
    Level {
        number: 5,
        title: "decline and cancel",
        property: "a decline spends the confirmation (an accept afterwards fails); a cancel spends nothing (the \
                   accept afterwards succeeds, once)",
        scenarios: &[Source::Embedded("03-decline-then-accept"), Source::Embedded("04-cancel-then-accept")],
        attacks: &["decline-then-accept", "cancel-then-accept"],
        hint: "only a decision consumes: claim the nonce on decline (and on accept), never on cancel, which \
               only dismisses the form",
    },
    Level {
        number: 6,
        title: "tampering and another principal",
        property: "a state altered, used by another principal, or with other arguments is refused; an invalid \
                   answer is refused without consuming anything",
        scenarios: &[
            Source::Embedded("06-another-principal-replays-the-state"),
            Source::Embedded("07-invalid-answers-then-accept"),
        ],
        attacks: &[
            "another-principal",
            "changed-arguments",
            "tampered-state",
            "unpaired",
            "schema-mismatch",
            "missing-field-then-accept",
            "not-shown-then-accept",
            "unasked-key-only-then-accept",
            "extra-response-keys",
        ],
        hint: "bind the state to the credential the request came with (never to _meta clientInfo, which any \
               client can copy) and to a digest of round 1's arguments; verify the MAC before reading it; \
               validate the answer against the form's schema and candidates before claiming anything",
    },
    Level {
        number: 7,
        title: "lost answers and pauses",
        property: "when an answer is lost, a process paused or killed mid-request, the retry executes nothing \
                   twice and is told the truth",
        scenarios: &[
            Source::Embedded("08-answer-lost-then-retry-elsewhere"),
            Source::Embedded("09-retry-while-the-first-is-paused"),
            Source::Course(
                "course/levels/07-crash-after-the-effect.sim",
                include_str!("../../course/levels/07-crash-after-the-effect.sim"),
            ),
        ],
        attacks: &[],
        hint: "the effect and the record that the state was used must commit together: a process can die \
               between two transactions, and the retry then finds the effect done and no record of it",
    },
    Level {
        number: 8,
        title: "key rotation",
        property: "a confirmation started under one key finishes while the fleet rolls to the next, and a \
                   retired or unknown key is refused cleanly",
        scenarios: &[
            Source::Embedded("14-rotation-mid-confirmation"),
            Source::Embedded("15-two-adjacent-stages-at-once"),
            Source::Embedded("16-old-key-retired-mid-confirmation"),
            Source::Embedded("17-restarted-with-an-ephemeral-key"),
        ],
        attacks: &[],
        hint: "name the key in the state (a key id) and hold a ring: the new key is added as a verifier \
               everywhere first, then made the signer, then the old one is retired; a process holding one \
               key refuses every state sealed before a rotation",
    },
];

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each level plays target scenarios and attacks of the battery against fresh fleets of your server, started as
the target file says (docs/targets.md), and judges them as `run --target` and `attack` do. A level passes only
if everything it names was played and held: a scenario SKIPPED (the file lacks what it needs) is not a pass.
A failing level prints the property that broke, the messages of the failing play, a hint and the one command
that repeats it. docs/wire.md shows every message your server receives and must send.

Exit status: 0 when every level asked passed; 1 when one failed; 2 for a target file that cannot be read, or
an unknown level; 3 when a level could not be judged (a scenario skipped, an attack not applicable or
inconclusive, the fleet not started), or processes of the target were left at the end.

Examples:
  mcpsim course check 1 --target course/solutions/python/target.toml   # one level
  mcpsim course check all --target course/solutions/python/target.toml # in order, stopping at a failure
  mcpsim course check all --keep-going --target course/solutions/broken/level5.toml   # every level")]
pub struct CheckArgs {
    /// The level: 1 to 8, a range (`3-5`), or `all` (the default): in order, stopping at the first that fails.
    #[arg(value_name = "N", default_value = "all")]
    pub level: String,
    /// The target file (TOML) describing your server: how to start it, its principals, its tool, its effects.
    #[arg(long, value_name = "FILE")]
    pub target: PathBuf,
    /// The seed routing scenario instances to your processes and ordering races (logged in every report).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// With several levels: go on after a level fails, and grade every one.
    #[arg(long)]
    pub keep_going: bool,
}

/// How one level went.
enum Graded {
    /// Every scenario and attack it names was judged and held: how many of each.
    Passed { scenarios: usize, attacks: usize },
    /// Something broke: the whole report to print.
    Failed(String),
    /// Something could not be judged: why, and the command that shows it.
    Unjudged(String),
}

pub fn run(args: CheckArgs) -> ExitCode {
    let levels: Vec<&Level> = match chosen(&args.level) {
        Some(levels) => levels,
        None => {
            eprintln!(
                "mcpsim {INVOKED_AS}: there is no level {:?}: the levels are 1 to {} (or a range such as 3-5, or all)",
                args.level,
                LEVELS.len()
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let target = match Target::load(&args.target) {
        Ok(target) => target,
        Err(error) => {
            eprintln!(
                "mcpsim {INVOKED_AS}: {error}\n  (docs/wire.md ends with a minimal target file; \
                 course/solutions/python/target.toml is a complete one)"
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mcpsim = match std::env::current_exe() {
        Ok(path) => path.display().to_string(),
        Err(error) => {
            eprintln!("mcpsim {INVOKED_AS}: cannot find the mcpsim binary for {{mcpsim}}: {error}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    let run = match TargetRun::begin("course check") {
        Ok(run) => run,
        Err(status) => return status,
    };
    match target::preflight(&target, &mcpsim, run.work_dir()) {
        Ok(line) => println!("{}", wrap(&shown(&line), "")),
        found => {
            if let Some(stopped) = after_preflight(INVOKED_AS, &args.target, found, false) {
                return stopped;
            }
        }
    }
    let file = shown(&args.target.display().to_string());
    let mut status = EXIT_HELD;
    for level in &levels {
        let graded = grade(level, &target, &file, args.seed, &mcpsim, run.work_dir());
        let head = format!("level {} {}", level.number, level.title);
        let (verdict, detail, stop) = match graded {
            Graded::Passed { scenarios, attacks } => {
                let judged = match (scenarios, attacks) {
                    (s, 0) => format!("{s} scenario play(s) judged"),
                    (s, a) => format!("{s} scenario play(s), {a} attack(s) judged"),
                };
                (format!("PASS ({judged})"), String::new(), false)
            }
            Graded::Failed(report) => {
                status = status.max(EXIT_FAILED);
                ("FAIL".to_string(), report, true)
            }
            Graded::Unjudged(why) => {
                status = status.max(EXIT_UNJUDGED);
                ("NOT JUDGED".to_string(), why, true)
            }
        };
        println!("{head:<52} {verdict}");
        if !detail.is_empty() {
            println!("{detail}");
        }
        if stop && !args.keep_going && levels.len() > 1 {
            println!("stopped at level {}: fix it, then run `mcpsim {INVOKED_AS} {} --target {file}` again", level.number, args.level);
            break;
        }
    }
    if run.end() {
        status = status.max(EXIT_UNJUDGED);
    }
    if status == EXIT_HELD {
        let which = if levels.len() == 1 { format!("level {}", levels[0].number) } else { "every level".to_string() };
        println!("{which} passed (the servers' own timing is not mcpsim's: a clean run is evidence, not proof)");
    }
    ExitCode::from(status)
}

/// The levels `spec` names: `all`, `N`, or a range `N-M`; `None` when it names none.
fn chosen(spec: &str) -> Option<Vec<&'static Level>> {
    let (first, last) = match spec {
        "all" => (1, LEVELS.len() as u8),
        _ => match spec.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => (spec.parse().ok()?, spec.parse().ok()?),
        },
    };
    let levels: Vec<&Level> = LEVELS.iter().filter(|l| (first..=last).contains(&l.number)).collect();
    (first <= last && levels.len() == usize::from(last - first + 1)).then_some(levels)
}

/// The scenarios a level plays against this target: each rotation lesson once per step of the file's recipe.
fn sources(level: &Level, target: &Target) -> Vec<ScenarioSource> {
    let named = level
        .scenarios
        .iter()
        .filter_map(|source| match source {
            Source::Embedded(name) => target::embedded(name),
            Source::Course(path, text) => Some(ScenarioSource {
                shown: path.to_string(),
                argument: path.to_string(),
                name: Path::new(path).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
                text: text.to_string(),
                step: None,
            }),
        })
        .collect();
    target::per_rotation_step(target, named)
}

fn grade(level: &Level, target: &Target, file: &str, seed: u64, mcpsim: &str, work_dir: &Path) -> Graded {
    let mut plays = 0;
    for source in sources(level, target) {
        let repeat = format!("mcpsim run --target {file} {} --seed {seed}", shown(&source.argument));
        let scenario = match target::load_source(target, &source) {
            Ok(scenario) => scenario,
            Err(why) => {
                return Graded::Unjudged(wrap(
                    &format!(
                        "{} was SKIPPED, so level {} judged nothing there: {}",
                        shown(&source.name),
                        level.number,
                        shown(&why.to_string())
                    ),
                    "  ",
                ))
            }
        };
        let report = match target::run_scenario(target, &scenario, seed, &FaultPlan::default(), 0, mcpsim, work_dir) {
            Ok(report) => report,
            Err(why) => {
                return Graded::Unjudged(format!(
                    "{}\n  repeat: {repeat}",
                    wrap(&format!("{} could not be played: {}", shown(&source.name), shown(&why.to_string())), "  ")
                ))
            }
        };
        plays += 1;
        if report.passed() {
            if let Err(why) = &report.spread.effects {
                return Graded::Unjudged(format!(
                    "{}\n  repeat: {repeat}",
                    wrap(&format!("{}: the effect probe failed: {}", shown(&source.name), shown(&why.to_string())), "  ")
                ));
            }
            continue;
        }
        let mut out = wrap(&format!("what must hold: {}", level.property), "  ");
        out.push('\n');
        for finding in &report.findings {
            out.push_str(&wrap(&format!("property {}: {}", finding.property.as_str(), shown(&briefly(&finding.message))), "  "));
            out.push('\n');
        }
        for failure in &report.failures {
            out.push_str(&wrap(&format!("expectation: {}", shown(&briefly(failure))), "  "));
            out.push('\n');
        }
        let route = report.spread.decisions.first().map(|d| format!("; {}", shown(d))).unwrap_or_default();
        out.push_str(&wrap(&format!("the failing play ({}, seed {seed}{route}):", shown(&source.name)), "  "));
        out.push('\n');
        out.push_str(&history_lines(&report.spread.history));
        if let Ok((before, after)) = report.spread.effects {
            out.push_str(&format!("    effects: the probe read {before} before and {after} after\n"));
        }
        out.push_str(&wrap(&format!("hint: {}", level.hint), "  "));
        out.push_str(&format!("\n  repeat: {repeat}"));
        return Graded::Failed(out);
    }
    let attacks = if level.attacks.is_empty() {
        Vec::new()
    } else {
        let only: Vec<String> = level.attacks.iter().map(|a| a.to_string()).collect();
        let options = attack::BatteryOptions { seed, race_tries: RACE_TRIES };
        match attack::run_battery(target, &only, options, mcpsim, work_dir) {
            Ok(reports) => reports,
            Err(why) => {
                return Graded::Unjudged(wrap(&format!("the attacks could not be run: {}", shown(&why.to_string())), "  "));
            }
        }
    };
    for report in &attacks {
        let repeat = format!("mcpsim attack --target {file} --only {} --seed {seed}", report.name);
        let (broken, what) = match &report.verdict {
            Verdict::Held(_) => continue,
            Verdict::Broken(what) => (true, what),
            Verdict::Inconclusive(why) | Verdict::NotApplicable(why) => (false, why),
        };
        let mut out = wrap(&format!("what must hold: {}", level.property), "  ");
        out.push('\n');
        if broken {
            out.push_str(&wrap(&format!("attack {} ({}): {}", report.name, report.clause, shown(&briefly(what))), "  "));
        } else {
            out.push_str(&wrap(
                &format!("attack {} could not be judged, so level {} is not a pass: {}", report.name, level.number, shown(&briefly(what))),
                "  ",
            ));
        }
        out.push_str(&format!("\n  the messages ({}, instances {}):\n", report.what, report.order));
        for message in &report.messages {
            out.push_str(&message_line(message));
        }
        if broken {
            out.push_str(&wrap(&format!("hint: {}", level.hint), "  "));
            out.push('\n');
        }
        out.push_str(&format!("  repeat: {repeat}"));
        return if broken { Graded::Failed(out) } else { Graded::Unjudged(out) };
    }
    if plays == 0 && attacks.is_empty() {
        return Graded::Unjudged(format!("  level {} names nothing this target can play", level.number));
    }
    Graded::Passed { scenarios: plays, attacks: attacks.len() }
}

/// The failing play's operations, one or two lines each: who sent what where, and what came back.
fn history_lines(history: &History) -> String {
    let mut out = String::new();
    for op in history.operations() {
        let ops = history.operations();
        let named = |id: usize| ops[id].name.clone().unwrap_or_else(|| format!("#{}", id + 1));
        let name = match (history.attempts().get(&op.id), &op.name) {
            (_, Some(name)) => name.clone(),
            (Some(Attempt::Retry { of, number }), None) => format!("retry {number} of {}", named(of.0)),
            (Some(Attempt::Duplicate { of }), None) => format!("a copy of {}", named(of.0)),
            (None, None) => named(op.id.0),
        };
        let sent = match &op.request_value {
            Some(value) => request_brief(value),
            None => "(not JSON)".to_string(),
        };
        let got = match &op.outcome {
            Outcome::NoResponse(_) | Outcome::Pending => {
                let why = history.lost_why(op.id).map(|w| format!(" ({})", shown(w))).unwrap_or_default();
                format!("{}{why}", answer_brief(op))
            }
            Outcome::Answered { .. } => answer_brief(op),
        };
        out.push_str(&wrap(&format!("{name}: {} → {}: {sent}", op.client, op.instance), "    "));
        out.push('\n');
        out.push_str(&wrap(&format!("⇐ {got}"), "      "));
        out.push('\n');
    }
    out
}

fn answer_brief(op: &Operation) -> String {
    shown(&op.observed().to_string())
}

/// A request as a learner reads it: the method, and for a retry the answer it carries, not the sealed state.
fn request_brief(value: &Value) -> String {
    let method = value.get("method").and_then(Value::as_str).unwrap_or("?");
    let id = match value.get("id") {
        Some(id) => format!("id {id}"),
        None => "no id (a notification)".to_string(),
    };
    let params = value.get("params");
    let tool = params.and_then(|p| p.get("name")).and_then(Value::as_str);
    let state = params.and_then(|p| p.get("requestState")).is_some();
    let responses = params.and_then(|p| p.get("inputResponses"));
    let what = match (tool, state, responses) {
        (Some(tool), false, None) => {
            let arguments = params.and_then(|p| p.get("arguments")).map(Value::to_string).unwrap_or_default();
            format!("{method} {tool} {arguments} (round 1)")
        }
        (Some(tool), _, Some(responses)) => {
            let state = if state { "requestState + " } else { "no requestState, " };
            format!("{method} {tool} with {state}inputResponses {responses}")
        }
        (Some(tool), true, None) => format!("{method} {tool} with requestState, no inputResponses"),
        (None, _, _) => method.to_string(),
    };
    shown(&format!("{what}, {id}"))
}

/// One line of an attack's messages (`→ t1 as alice: {json}`, `← t1: {json}`), with the JSON made brief.
fn message_line(message: &str) -> String {
    let text = match message.split_once(": {") {
        Some((head, rest)) => match serde_json::from_str::<Value>(&format!("{{{rest}")) {
            Ok(value) if head.trim_start().starts_with('→') => format!("{head}: {}", request_brief(&value)),
            Ok(value) => format!("{head}: {}", shown(&Observed::read(&value).to_string())),
            Err(_) => shown(message),
        },
        None => shown(message),
    };
    format!("{}\n", wrap(&text, "    "))
}

/// `text` with every JSON-RPC message in it (a whole answer quoted by a verdict) replaced by what it says:
/// a request by [`request_brief`], an answer by its outcome.
fn briefly(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let mut values = serde_json::Deserializer::from_str(&rest[at..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) if value.get("jsonrpc").is_some() => {
                let brief = if value.get("method").is_some() { request_brief(&value) } else { Observed::read(&value).to_string() };
                out.push_str(&format!("[{brief}]"));
                rest = &rest[at + values.byte_offset()..];
            }
            _ => {
                out.push('{');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` wrapped at spaces to [`WIDTH`] columns, every line starting with `indent` (a word longer than a line
/// is split, so nothing is ever cut off).
fn wrap(text: &str, indent: &str) -> String {
    let room = WIDTH.saturating_sub(indent.chars().count() + 2).max(20);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let used = line.chars().count();
            let fits = used == 0 && word.len() <= room || used + 1 + word.len() <= room;
            if fits {
                if used > 0 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if used > 0 {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            let rest = word.split_off(room);
            lines.push(word.iter().collect());
            word = rest;
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    let continuation = format!("{indent}  ");
    lines.iter().enumerate().map(|(i, l)| format!("{}{l}", if i == 0 { indent } else { &continuation })).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_names_attacks_of_the_battery_and_scenarios_that_exist() {
        let battery: Vec<&str> = attack::ATTACKS.iter().map(|a| a.name).collect();
        for level in LEVELS {
            for name in level.attacks {
                assert!(battery.contains(name), "level {}: no attack {name}", level.number);
            }
            for source in level.scenarios {
                if let Source::Embedded(name) = source {
                    assert!(target::embedded(name).is_some(), "level {}: no scenario {name}", level.number);
                }
            }
            assert!(!level.scenarios.is_empty() || !level.attacks.is_empty(), "level {} judges nothing", level.number);
        }
        assert_eq!(LEVELS.iter().map(|l| l.number).collect::<Vec<_>>(), (1..=8).collect::<Vec<_>>());
    }

    #[test]
    fn levels_are_chosen_one_by_range_or_all() {
        let numbers = |spec: &str| chosen(spec).map(|levels| levels.iter().map(|l| l.number).collect::<Vec<_>>());
        assert_eq!(numbers("all"), Some((1..=8).collect()));
        assert_eq!(numbers("5"), Some(vec![5]));
        assert_eq!(numbers("4-8"), Some(vec![4, 5, 6, 7, 8]));
        for wrong in ["0", "9", "5-4", "7-9", "x", "-", "1-"] {
            assert_eq!(numbers(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn wrapping_keeps_every_character_within_the_width() {
        let long = format!("property at-most-once: {} and then {}", "x".repeat(250), "a b c ".repeat(40));
        let wrapped = wrap(&long, "  ");
        assert!(wrapped.lines().all(|l| l.chars().count() <= WIDTH), "{wrapped}");
        let kept: String = wrapped.split_whitespace().collect();
        assert_eq!(kept, long.split_whitespace().collect::<String>());
    }

    #[test]
    fn a_quoted_answer_is_shown_by_its_outcome() {
        let verdict = "expected -32022: {\"id\":1,\"jsonrpc\":\"2.0\",\"result\":{\"resultType\":\"input_required\"}} (and {not json)";
        assert_eq!(briefly(verdict), "expected -32022: [input_required] (and {not json)");
    }

    #[test]
    fn a_retry_is_shown_by_its_answer_not_by_its_sealed_state() {
        let retry = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "notes_delete", "arguments": {"title": "TPS"}, "requestState": "very.long.state",
            "inputResponses": {"delete_choice": {"action": "accept", "content": {"note_id": "note-7"}}}}});
        let brief = request_brief(&retry);
        assert!(!brief.contains("very.long.state"), "{brief}");
        assert!(brief.contains("requestState + inputResponses") && brief.contains("note-7") && brief.ends_with("id 2"), "{brief}");
        let line =
            message_line("← t1: {\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32602,\"data\":{\"reason\":\"state_consumed\"}}}");
        assert!(line.contains("error -32602 state_consumed"), "{line}");
    }
}
