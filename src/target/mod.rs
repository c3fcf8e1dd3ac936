//! Bring your own server: the scenarios played against N processes of any MCP server a target file describes
//! (`mcpsim run --target FILE`), with the properties judged from what was observed.
//!
//! * [`file`](mod@file): the target file (TOML) and its placeholders.
//! * [`contain`]: everything a target starts kept in a cgroup of the run (or found by an environment marker),
//!   killed and counted at the end; the work directory; the watchdog for when mcpsim is killed outright.
//! * [`process`]: processes that are always killed (drop, panic, Ctrl-C, mcpsim's own death).
//! * [`fleet`]: a target's instances started, reached over stdio or HTTP, killed and restarted.
//! * [`world`]: the fleet as the interpreter's third [`crate::play::world::World`].
//! * [`judge`](mod@judge): the judge of a play from observation, requests that may have happened included.
//!
//! Each scenario is played twice, each time on a fresh fleet (a new data directory, the setup commands, every
//! instance started): once with its instances spread over the fleet as the seed maps them, once with every
//! request on one instance. The judge ([`judge()`]) reads the two histories and the effect probe:
//! at most one success per confirmation and no more effects than accepted confirmations (at-most-once), no
//! effect without an accept (consent), no new form in answer to a decline or cancel (refusal), answers
//! consistent with one execution of each confirmation, whatever a lost request did (honest-outcome; liveness
//! when clients retried), and the same
//! outcomes whichever instance took each round (statelessness: the oracle's comparison of two histories, read as
//! [`Observed`] outcomes). Findings are named by the oracle's [`Property`]. A failure is played again from its decision
//! log and reported with how often it reproduced: the servers' own timing is not mcpsim's to decide.

pub mod attack;
pub mod contain;
pub mod explore;
pub mod faults;
pub mod file;
pub mod fleet;
pub mod gateway;
pub mod judge;
pub mod process;
pub mod store_proxy;
pub mod world;

use self::faults::{FaultEvent, FaultPlan};
use self::file::{PlaceholderError, Scope, Target};
use self::fleet::{Fleet, FleetError};
pub use self::judge::{judge, Finding};
pub(crate) use self::judge::{label, succeeded};
use self::process::ProcessError;
use self::world::{Routing, TargetWorld};
use crate::oracle::check::Property;
use crate::oracle::history::History;
use crate::oracle::outcome::Observed;
use crate::play::client::{BuildError, Client};
use crate::play::expect::ExpectationResult;
use crate::play::{self, Play};
use crate::scenario::model::{Action, Scenario};
use crate::scenario::parser::ParseError;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Text a server sent (or that holds some), made safe to print on one report line: control characters (C0
/// incl. ESC, CR, LF, TAB; DEL; C1), Unicode format and bidi controls and line/paragraph separators become
/// visible escapes (`\n`, `\r`, `\t`, `\u{1b}`), so a server can neither start a line of its own in a
/// report nor move the cursor. Every human-readable report line with target text goes through this.
pub fn shown(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_format_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A message of several lines as reports show it (a diff of two answers, whose line breaks are mcpsim's, though
/// a line break inside the target's own text splits it too): each line escaped by [`shown`], every line after
/// the first behind a gutter (`         | `) that no report line starts with, so no text from a target can start
/// a line that reads as the report's own.
pub fn shown_lines(text: &str) -> String {
    let mut lines = text.split('\n');
    let mut out = shown(lines.next().unwrap_or(""));
    for line in lines {
        out.push_str("\n         | ");
        out.push_str(&shown(line));
    }
    out
}

/// Unicode's invisible format characters that reorder or hide text (category Cf, and the line and paragraph
/// separators).
fn is_format_control(c: char) -> bool {
    matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2064
        | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F)
}

/// A command line as reports show it: secret-looking elements redacted (`--password=…`, `--token VALUE`,
/// `*_KEY=…`/`*_TOKEN=…`/`*_SECRET=…`/`*_PASSWORD=…`, a URL's userinfo), then [`shown`].
pub fn redact_argv(argv: &[String]) -> String {
    const SECRET: [&str; 8] = ["password", "passwd", "token", "secret", "apikey", "api-key", "api_key", "credential"];
    let secret_name = |name: &str| {
        let name = name.to_ascii_lowercase();
        SECRET.iter().any(|s| name.contains(s)) || name.ends_with("key") || name.ends_with("-auth") || name == "auth"
    };
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for arg in argv {
        if std::mem::take(&mut hide_next) {
            out.push("[redacted]".to_string());
            continue;
        }
        let redacted = if let Some(flag) = arg.strip_prefix('-').filter(|_| arg.len() > 1) {
            let flag = flag.trim_start_matches('-');
            match flag.split_once('=') {
                Some((name, _)) if secret_name(name) => format!("{}={}", &arg[..arg.len() - flag.len() + name.len()], "[redacted]"),
                Some(_) => redact_userinfo(arg),
                None => {
                    hide_next = secret_name(flag);
                    arg.clone()
                }
            }
        } else if let Some((name, _)) =
            arg.split_once('=').filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            if secret_name(name) {
                format!("{name}=[redacted]")
            } else {
                redact_userinfo(arg)
            }
        } else {
            redact_userinfo(arg)
        };
        out.push(redacted);
    }
    shown(&out.join(" "))
}

/// `scheme://user:pass@host…` → `scheme://[redacted]@host…`, wherever it appears in `text`.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail.find(['/', '?', '#', ' ']).unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(userinfo) => {
                out.push_str("[redacted]");
                rest = &tail[userinfo..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// A name mcpsim derives a path from (a scenario's file name), as `[A-Za-z0-9._-]` only: any other character
/// becomes `_` and the original's digest is appended, so two names never meet and no `{data_dir}` value needs
/// quoting in a command.
pub fn safe_name(name: &str) -> String {
    let kept: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).take(64).collect();
    let kept = kept.trim_start_matches(['.', '-']).to_string();
    if kept == name && !kept.is_empty() {
        return kept;
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{kept}-{hex}")
}

/// What a target scenario's `{{…}}` placeholders are, from the target file.
pub fn scenario_placeholders(target: &Target) -> BTreeMap<&'static str, Option<String>> {
    let tool = &target.file.tool;
    let mut values = BTreeMap::new();
    values.insert("tool", Some(tool.name.clone()));
    values.insert("arguments", Some(tool.arguments.to_string()));
    values.insert("accept", Some(tool.accept.to_string()));
    values.insert("principal", Some(tool.principal.clone()));
    values.insert("other", tool.other_principal.clone());
    values.insert("ttl", tool.state_ttl_ms.map(|ttl| format!("{ttl}ms")));
    values.insert("past_ttl", tool.state_ttl_ms.map(|ttl| format!("{}ms", ttl.saturating_add(PAST_TTL_MARGIN_MS))));
    // Invalid answers a scenario sends before the valid accept: every field of the wrong type, one left out.
    values.insert("accept_mistyped", Some(attack::mistyped(&tool.accept).to_string()));
    values.insert("accept_missing_field", attack::missing_field(&tool.accept, None).map(|(_, v)| v.to_string()));
    // The item the accept picks, which an admin lesson deletes (`[admin] item`).
    values.insert("item", target.file.admin.as_ref().and_then(|admin| admin.item.clone()));
    // The rolling-change lessons' stages: the rotation recipe's ends, its per-process-key stage, the two versions.
    let rotation = target.file.rotation.as_ref();
    values.insert("stage_first", rotation.and_then(|r| r.stages.first().cloned()));
    values.insert("stage_last", rotation.and_then(|r| r.stages.last().cloned()));
    values.insert("stage_ephemeral", rotation.and_then(|r| r.ephemeral.clone()));
    // One step of the recipe: the lesson is played once per step ([`rotation_steps`]); this is the first.
    values.insert("stage_before", rotation.and_then(|r| r.stages.first().cloned()));
    values.insert("stage_after", rotation.and_then(|r| r.stages.get(1).cloned()));
    values.insert("version_old", target.file.deploy.as_ref().map(|d| d.old.clone()));
    values.insert("version_new", target.file.deploy.as_ref().map(|d| d.new.clone()));
    values
}

/// The placeholders that make a lesson one step of the rotation recipe, played once per step.
const STEP_PLACEHOLDERS: [&str; 2] = ["{{stage_before}}", "{{stage_after}}"];

/// The steps of the target's rotation recipe (each adjacent pair of `[rotation] stages`) a lesson is played
/// for: every one when it names `{{stage_before}}` or `{{stage_after}}` and the file has a recipe, else none.
pub fn rotation_steps(target: &Target, text: &str) -> Vec<(String, String)> {
    let Some(rotation) = &target.file.rotation else { return Vec::new() };
    if !STEP_PLACEHOLDERS.iter().any(|p| text.contains(p)) {
        return Vec::new();
    }
    rotation.stages.windows(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect()
}

/// `sources`, each lesson played per rotation step replaced by one source per step (`NAME [A → B]`).
pub fn per_rotation_step(target: &Target, sources: Vec<ScenarioSource>) -> Vec<ScenarioSource> {
    sources
        .into_iter()
        .flat_map(|source| {
            let steps = rotation_steps(target, &source.text);
            if steps.is_empty() {
                return vec![source];
            }
            steps
                .into_iter()
                .map(|(before, after)| ScenarioSource {
                    name: format!("{} [{before} → {after}]", source.name),
                    step: Some((before, after)),
                    ..source.clone()
                })
                .collect()
        })
        .collect()
}

/// The target file's key that gives scenario placeholder `name`, when the file leaves it empty.
fn placeholder_key(name: &str) -> &'static str {
    match name {
        "item" => "[admin] item",
        "ttl" | "past_ttl" => "tool.state_ttl_ms",
        "stage_first" | "stage_last" | "stage_before" | "stage_after" => "[rotation] stages",
        "stage_ephemeral" => "[rotation] ephemeral",
        "version_old" | "version_new" => "[deploy]",
        _ => "tool.other_principal",
    }
}

/// Why a scenario could not be played against a target, or its effects not probed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Placeholder(#[from] PlaceholderError),
    /// A play's data directory.
    #[error("cannot create {}: {source}", .path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    /// The effect probe's request (`[effects] method` and `params`) is not one a client can send.
    #[error(transparent)]
    ProbeRequest(#[from] BuildError),
    #[error("the effect probe {method} got no answer: {why}")]
    ProbeLost { method: String, why: String },
    // The four below are the target file's to fix (see [`RunError::is_the_target_files`]); `answer` is the
    // probe's answer, its first 200 characters.
    #[error("[effects] method = {method:?} (params {params}): the probe's answer is an error: {answer}")]
    ProbeAnswerIsAnError { method: String, params: String, answer: String },
    #[error("[effects] params = {params}: the probe's answer is a tool error: {answer}")]
    ProbeAnswerIsAToolError { params: String, answer: String },
    #[error("[effects] count = {path:?}: the probe's answer has no list there: {answer}")]
    ProbeNoList { path: String, answer: String },
    /// The probe command (`argv`, redacted by [`redact_argv`]) printed something other than a number.
    #[error("[effects] command = `{argv}`: it printed {line:?}, not a number")]
    ProbeNotANumber { argv: String, line: String },
    #[error("{scenario}: a re-run made other decisions than the logged ones (a bug in mcpsim)")]
    RerunDiverged { scenario: String },
    #[error("{}: cannot read: {source}", .path.display())]
    ReadScenario { path: PathBuf, source: std::io::Error },
    /// A scenario (`shown`, its path or `<embedded>/NAME.sim`) whose placeholders this target cannot fill.
    #[error("{shown}: {source}")]
    FillScenario { shown: String, source: PlaceholderError },
    /// A scenario argument that is neither a file nor an embedded scenario's name (`names`, those there are).
    #[error("{}: no such file, and no target scenario has that name (they are: {names})", .argument.display())]
    NoSuchScenario { argument: PathBuf, names: String },
    /// A scenario (`shown`) with a step this target cannot play: `what` it needs, the target file's `key`.
    #[error("{shown}: it needs {what}, which the target file does not give ({key})")]
    NeedsKey { shown: String, what: String, key: &'static str },
    #[error(transparent)]
    ParseScenario(#[from] ParseError),
    /// A scenario (`shown`) that gives an instance its own clock, and no libfaketime (`looked`, where).
    #[error(
        "{shown}: it runs an instance under a skewed clock, which needs libfaketime (Debian/Ubuntu: apt-get install faketime; \
         or set {} to libfaketime.so.1); looked in {looked}",
        fleet::FAKETIME_LIBRARY_ENV
    )]
    NoFaketime { shown: String, looked: String },
    /// A scenario (`shown`) needing a stage whose program comes from an environment variable that is unset.
    #[error("{shown}: it needs [stages.{stage}], whose program is ${variable}, which is not set (for mcpsim's own release: export {variable}=\"$(bash .ci/mcpsim-release.sh)\")")]
    NoStageProgram { shown: String, stage: String, variable: String },
    /// A folder of scenarios that could not be listed.
    #[error("{}: {source}", .path.display())]
    ListScenarios { path: PathBuf, source: std::io::Error },
}

impl RunError {
    /// Whether the target file says something the server does not do (the preflight stops the run, exit 2),
    /// rather than the fleet failing.
    pub fn is_the_target_files(&self) -> bool {
        matches!(
            self,
            RunError::ProbeAnswerIsAnError { .. }
                | RunError::ProbeAnswerIsAToolError { .. }
                | RunError::ProbeNoList { .. }
                | RunError::ProbeNotANumber { .. }
        )
    }
}

/// How far past the target's state TTL `{{past_ttl}}` moves a clock: a minute, far more than the few seconds a
/// play takes between minting a state and answering it, than the whole seconds many servers write expiries
/// in, and than the grace a server may allow for skew between its instances (mcpsim's own refuses
/// by the state's expiry alone), and far less than the TTL's own minutes, so an instance moved by `{{ttl}}`
/// minus the margin would still accept.
pub const PAST_TTL_MARGIN_MS: u64 = 60_000;

/// A target scenario's text with its `{{name}}` placeholders filled. `Err`: why it cannot be played against
/// this target (a placeholder the file leaves empty, or one that does not exist).
/// `step`: the rotation step (`{{stage_before}}`, `{{stage_after}}`) it is played for [default: the first].
pub fn fill_scenario(target: &Target, text: &str, step: Option<&(String, String)>) -> Result<String, PlaceholderError> {
    let mut values = scenario_placeholders(target);
    if let Some((before, after)) = step {
        values.insert("stage_before", Some(before.clone()));
        values.insert("stage_after", Some(after.clone()));
    }
    file::fill_delimited(text, ("{{", "}}"), Some(PlaceholderError::Unclosed), |name| {
        let name = name.trim();
        match values.get(name) {
            Some(Some(value)) => Ok(value.clone()),
            Some(None) => Err(PlaceholderError::NotGiven { name: name.to_string(), key: placeholder_key(name) }),
            None => Err(PlaceholderError::NotAScenarioPlaceholder {
                name: name.to_string(),
                known: values.keys().map(|k| k.to_string()).collect(),
            }),
        }
    })
}

/// One play on one fresh fleet.
pub struct PlayedOnce {
    pub play: Play,
    pub history: History,
    pub decisions: Vec<String>,
    pub transcript: Vec<String>,
    /// Processes started, killed, setup commands run.
    pub events: Vec<String>,
    /// Every fault that fired: the event, the number of the request it fired on, and where (`NAME → tK`).
    // Read by `explore --target --faults`'s coverage (`target::explore`); the decisions say the same in words.
    pub fired: Vec<(FaultEvent, usize, String)>,
    /// Faults planned or armed that never fired (also in `decisions`): a failure of a play that wanted them.
    pub unfired: Vec<FaultEvent>,
    /// The effect probe before and after (`Err`: why it could not be read).
    pub effects: Result<(i64, i64), RunError>,
}

/// Plays `scenario` once on a fleet started in a fresh directory under `work_dir`.
pub fn play_once(
    target: &Target,
    scenario: &Scenario,
    seed: u64,
    routing: Routing,
    plan: FaultPlan,
    mcpsim: &str,
    work_dir: &Path,
) -> Result<PlayedOnce, RunError> {
    let data_dir =
        work_dir.join(format!("{}-{}-{}", safe_name(&scenario.name), seed, if routing == Routing::One { "one" } else { "spread" }));
    let _ = std::fs::remove_dir_all(&data_dir);
    create_private_dir(&data_dir)?;
    let stages = match routing {
        Routing::Spread => world::starting_stages(scenario, seed, target.file.instances),
        Routing::One => BTreeMap::new(),
    };
    let mut fleet = Fleet::start_in_stages(target, &data_dir, mcpsim, stages)?;
    let before = probe(target, &mut fleet, &data_dir, mcpsim);
    let mut world = TargetWorld::new(scenario, &mut fleet, seed, routing, plan);
    world.start_skewed()?;
    let mut played = play::play(scenario, &mut world);
    world.finish();
    if let Some(never) = world.end_store_faults() {
        played.failures.push(play::Failure { kind: play::FailureKind::Step, line: 0, statement: "store cut".into(), message: never });
    }
    let admin_deleted = world.admin_deleted as i64;
    let unfired = world.unfired();
    for event in &unfired {
        world.decisions.push(format!("fault never fired: {event}"));
    }
    let fired = std::mem::take(&mut world.fired);
    let (decisions, transcript) = (std::mem::take(&mut world.decisions), std::mem::take(&mut world.transcript));
    let history = world.into_history();
    // A probe needs every instance up: a scenario that ends with one killed has it restarted first.
    for index in 0..fleet.len() {
        if fleet.is_down(index) {
            fleet.restart(index)?;
        }
    }
    let after = probe(target, &mut fleet, &data_dir, mcpsim);
    let effects = match (before, after) {
        // What `admin delete` removed is not the server's effect: the count it starts from is lowered by it.
        (Ok(b), Ok(a)) => Ok((b - admin_deleted, a)),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let events = std::mem::take(&mut fleet.events);
    drop(fleet);
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(PlayedOnce { play: played, history, decisions, transcript, events, fired, unfired, effects })
}

/// A fresh data directory, mode 0700 (its parent, the run's work directory, is 0700 too).
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), RunError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| RunError::CreateDir { path: dir.to_path_buf(), source })
}

/// The effect probe: the count it reads (added up over instances with `scope = "per-instance"`).
pub(crate) fn probe(target: &Target, fleet: &mut Fleet<'_>, data_dir: &Path, mcpsim: &str) -> Result<i64, RunError> {
    let effects = &target.file.effects;
    let instances: Vec<usize> = match effects.scope {
        Scope::Shared => vec![0],
        Scope::PerInstance => (0..fleet.len()).collect(),
    };
    let mut total = 0;
    for index in instances {
        total += match (&effects.method, &effects.command) {
            (Some(method), _) => {
                let principal = effects.principal.clone().unwrap_or_else(|| target.file.tool.principal.clone());
                let mut client = Client::new("mcpsim-probe", json!({}));
                let value = client.request(method, effects.params.clone().unwrap_or_else(|| json!({})), false)?;
                let answer = exchange_one(fleet, index, &principal, value)
                    .map_err(|why| RunError::ProbeLost { method: method.clone(), why })?
                    .unwrap_or(Value::Null);
                let path = effects.count.as_deref().unwrap_or("");
                let segments: Vec<&str> = path.split('.').collect();
                let list = crate::oracle::reading::at(&answer, &segments).and_then(Value::as_array).ok_or_else(|| {
                    let answer_text = answer.to_string().chars().take(200).collect::<String>();
                    if answer.get("error").is_some() {
                        RunError::ProbeAnswerIsAnError { method: method.clone(), params: params_shown(effects), answer: answer_text }
                    } else if answer.pointer("/result/isError") == Some(&Value::Bool(true)) {
                        RunError::ProbeAnswerIsAToolError { params: params_shown(effects), answer: answer_text }
                    } else {
                        RunError::ProbeNoList { path: path.to_string(), answer: answer_text }
                    }
                })?;
                list.len() as i64
            }
            (None, Some(command)) => probe_command(target, fleet, command, index, data_dir, mcpsim)?,
            (None, None) => unreachable!("checked when the file was read"),
        };
    }
    Ok(total)
}

/// One request, as a conforming client sends it (its routing headers derived), to fleet instance `index` as
/// `principal`: its answer (`None` for none), or why none came.
fn exchange_one(fleet: &mut Fleet<'_>, index: usize, principal: &str, value: Value) -> Result<Option<Value>, String> {
    let outgoing = play::world::Outgoing {
        client: 0,
        instance: 0,
        headers: crate::wire::headers::RoutingHeaders::for_message(&value),
        raw: None,
        value: Some(value),
        notification: false,
        headers_written: false,
        step: 0,
        name: None,
    };
    fleet.exchange_all(&[(index, principal.to_string(), outgoing)]).pop().expect("one answer").map_err(|lost| lost.message)
}

fn probe_command(
    target: &Target,
    _fleet: &Fleet<'_>,
    command: &[String],
    index: usize,
    data_dir: &Path,
    mcpsim: &str,
) -> Result<i64, RunError> {
    let mut p = file::Placeholders::default();
    p.values.insert("mcpsim", mcpsim.to_string());
    p.values.insert("data_dir", data_dir.display().to_string());
    p.values.insert("instance", Fleet::instance_name(index));
    p.values.insert("instance_dir", data_dir.join(Fleet::instance_name(index)).display().to_string());
    let argv: Vec<String> = command.iter().map(|a| p.fill(a)).collect::<Result<_, _>>()?;
    let mut process = process::Process::start(&argv, &[], data_dir.join("probe.stderr"), true)?;
    let line = process.read_line(Duration::from_millis(target.request_timeout_ms() + target.start_timeout_ms()))?.unwrap_or_default();
    line.trim().parse::<i64>().map_err(|_| RunError::ProbeNotANumber { argv: redact_argv(&argv), line: line.clone() })
}

fn params_shown(effects: &file::EffectsFile) -> String {
    effects.params.as_ref().map(Value::to_string).unwrap_or_else(|| "missing".into())
}

/// What a preflight found wrong: the target file says something the server does not do (the run stops, exit
/// 2), or the fleet could not be started, reached or understood (said, and the run goes on to report it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preflight {
    TargetFile(String),
    Unjudged(String),
}

/// Before any scenario or attack, on a fresh fleet: one `tools/list` (does the tool exist? else the closest
/// names it lists), one round 1 (does it answer `input_required`, asking the key `tool.input_key` names?), one
/// probe read (a number?). `Ok`: one line saying what was found.
pub fn preflight(target: &Target, mcpsim: &str, work_dir: &Path) -> Result<String, Preflight> {
    let data_dir = work_dir.join("preflight");
    let _ = std::fs::remove_dir_all(&data_dir);
    create_private_dir(&data_dir).map_err(|e| Preflight::Unjudged(e.to_string()))?;
    let mut fleet = Fleet::start(target, &data_dir, mcpsim).map_err(|e| Preflight::Unjudged(e.to_string()))?;
    let result = preflight_on(target, &mut fleet, &data_dir, mcpsim);
    drop(fleet);
    let _ = std::fs::remove_dir_all(&data_dir);
    result
}

fn preflight_on(target: &Target, fleet: &mut Fleet<'_>, data_dir: &Path, mcpsim: &str) -> Result<String, Preflight> {
    let tool = &target.file.tool;
    let mut client = Client::new("mcpsim-client", json!({"elicitation": {"form": {}}}));
    let mut exchange = |fleet: &mut Fleet<'_>, method: &str, params: Value| -> Result<Value, Preflight> {
        let value = client.request(method, params, false).map_err(|e| Preflight::Unjudged(e.to_string()))?;
        exchange_one(fleet, 0, &tool.principal, value)
            .map_err(|lost| Preflight::Unjudged(format!("{method} got no answer from t1: {lost}")))?
            .ok_or_else(|| Preflight::Unjudged(format!("{method} got no answer from t1")))
    };
    let listed = exchange(fleet, "tools/list", json!({}))?;
    let Some(tools) = listed.pointer("/result/tools").and_then(Value::as_array) else {
        return Err(Preflight::Unjudged(format!("tools/list did not answer a list of tools: {}", Observed::read(&listed))));
    };
    let names: Vec<&str> = tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).collect();
    if !names.contains(&tool.name.as_str()) {
        let mut close: Vec<(usize, &str)> = names.iter().map(|n| (strsim::levenshtein(&tool.name, n), *n)).collect();
        close.sort();
        let meant = close.first().filter(|(d, _)| *d <= tool.name.len().max(3) / 2 + 1).map(|(_, n)| format!(": did you mean {n:?}?"));
        return Err(Preflight::TargetFile(format!(
            "tool.name = {:?}: the server lists no such tool{} (tools/list on t1: {})",
            shown(&tool.name),
            meant.map(|m| shown(&m)).unwrap_or_default(),
            shown(&names.join(", "))
        )));
    }
    let round1 = exchange(fleet, "tools/call", json!({"name": tool.name, "arguments": tool.arguments}))?;
    if crate::oracle::reading::text(&round1, &["result", "resultType"]) != Some("input_required") {
        return Err(Preflight::TargetFile(format!(
            "tool.name = {:?} with tool.arguments = {}: round 1 did not answer input_required: {} (scenarios need a tool that asks first)",
            shown(&tool.name),
            shown(&tool.arguments.to_string()),
            shown(&Observed::read(&round1).to_string())
        )));
    }
    let asked: Vec<String> =
        round1.pointer("/result/inputRequests").and_then(Value::as_object).map(|r| r.keys().cloned().collect()).unwrap_or_default();
    if let Some(key) = &tool.input_key {
        if !asked.contains(key) {
            return Err(Preflight::TargetFile(format!(
                "tool.input_key = {:?}: round 1 asked under {} instead",
                shown(key),
                if asked.is_empty() { "no key".to_string() } else { shown(&asked.join(", ")) }
            )));
        }
    }
    if target.file.effects.method.as_deref() == Some("tools/call") && target.file.effects.params.is_none() {
        return Err(Preflight::TargetFile(
            "[effects] params is missing: method \"tools/call\" needs params = { name = \"…\", arguments = {…} }".into(),
        ));
    }
    let read = probe(target, fleet, data_dir, mcpsim).map_err(|why| {
        if why.is_the_target_files() {
            Preflight::TargetFile(shown(&why.to_string()))
        } else {
            Preflight::Unjudged(format!("the effect probe: {}", shown(&why.to_string())))
        }
    })?;
    Ok(format!(
        "preflight on t1: tools/list lists {}; round 1 answers input_required asking {}; the effect probe reads {read}",
        shown(&tool.name),
        shown(&asked.join(", "))
    ))
}

/// An answer whole (for findings about its exact error data), or "no answer".
pub(crate) fn full(answer: &Option<Value>) -> String {
    answer.as_ref().map(Value::to_string).unwrap_or_else(|| "no answer".into())
}

/// One scenario's result against a target.
pub struct ScenarioReport {
    pub name: String,
    pub seed: u64,
    pub spread: PlayedOnce,
    pub findings: Vec<Finding>,
    /// Expectations that did not hold, and steps that could not run.
    pub failures: Vec<String>,
    /// `(failed again, runs)` when a failure was re-run from its decision log.
    pub reproduced: Option<(usize, usize)>,
    /// Played under a fault plan (`--faults`, `--fault-plan`): statelessness was not compared.
    pub faulty: bool,
}

impl ScenarioReport {
    pub fn passed(&self) -> bool {
        self.findings.is_empty() && self.failures.is_empty()
    }

    /// The properties that broke, each once, in order.
    pub fn properties(&self) -> Vec<Property> {
        let mut seen = Vec::new();
        for finding in &self.findings {
            if !seen.contains(&finding.property) {
                seen.push(finding.property);
            }
        }
        seen
    }
}

/// Forms that did not ask under the key the target file names (`tool.input_key`): the file is wrong, or the
/// server changed.
fn input_key_mismatches(target: &Target, history: &History) -> Vec<String> {
    let Some(key) = &target.file.tool.input_key else { return Vec::new() };
    history
        .operations()
        .iter()
        .filter_map(|op| {
            let requests = op.response().and_then(|r| crate::oracle::reading::at(r, &["result", "inputRequests"]))?.as_object()?;
            if requests.contains_key(key) {
                return None;
            }
            let asked: Vec<&str> = requests.keys().map(String::as_str).collect();
            Some(format!(
                "the target file says tool.input_key = {key:?}, but {} asked under {}: correct input_key",
                label(op),
                if asked.is_empty() { "no key".to_string() } else { asked.join(", ") }
            ))
        })
        .collect()
}

fn failures_of(played: &PlayedOnce) -> Vec<String> {
    let failures = played.play.failures.iter().map(|f| f.to_string().replace('\n', " "));
    // A fault the scenario armed and never got is no pass: what it would have shown was never tried. A drawn
    // event that never fired is the exploration's coverage to report (`target::explore`), not the scenario's.
    let armed = played.unfired.iter().filter(|event| matches!(event.trigger, faults::Trigger::Next { .. }));
    failures.chain(armed.map(|event| format!("fault armed, never fired: {event}"))).collect()
}

/// Whether the spread play can be compared with the reference play on one instance: not when the scenario
/// pauses or kills an instance mid-request (`pause`, `crash … after … receives`: the reference play cannot place
/// them, every instance being one process) or gives instances their own clocks (one process has one clock).
/// When not, says why in `decisions` (a caveat the report shows, never a silent pass).
fn reference_comparable(scenario: &Scenario, decisions: &mut Vec<String>) -> bool {
    let faulted = scenario
        .steps
        .iter()
        .any(|step| matches!(step.action, Action::Pause { .. } | Action::Resume { .. } | Action::Crash { trigger: Some(_), .. }));
    let clocks = scenario.cluster.instances.iter().any(|i| i.clock_offset_ms != 0);
    let staged = scenario.cluster.instances.iter().any(|i| i.stage.is_some())
        || scenario.steps.iter().any(|step| matches!(step.action, Action::Roll { .. }));
    let why = match (faulted, clocks, staged) {
        (true, _, _) => "the scenario pauses or kills an instance mid-request",
        (false, true, _) => "the scenario gives instances their own clocks",
        (false, false, true) => "the scenario runs instances in stages of the target file (or rolls them)",
        (false, false, false) => return true,
    };
    decisions.push(format!("statelessness not compared with the reference play on one instance: {why}, which one process cannot play"));
    false
}

/// One judged play of `scenario` under `plan`: spread over the fleet, and (more than one instance, no faults)
/// on one instance, each on a fresh fleet; the findings, and the failures of the spread play.
pub fn play_judged(
    target: &Target,
    scenario: &Scenario,
    seed: u64,
    plan: &FaultPlan,
    mcpsim: &str,
    work_dir: &Path,
) -> Result<(PlayedOnce, Vec<Finding>, Vec<String>), RunError> {
    let mut spread = play_once(target, scenario, seed, Routing::Spread, plan.clone(), mcpsim, work_dir)?;
    // Under drawn or given faults statelessness is not compared, as in the simulator: a retry takes the flow
    // another way on each play, so the two histories are not the same flow.
    let one = if target.file.instances > 1 && !plan.is_faulty() && reference_comparable(scenario, &mut spread.decisions) {
        Some(play_once(target, scenario, seed, Routing::One, plan.clone(), mcpsim, work_dir)?)
    } else {
        None
    };
    let findings = judge(scenario, &spread, one.as_ref(), &target.masks());
    let mut failures = failures_of(&spread);
    failures.extend(input_key_mismatches(target, &spread.history));
    Ok((spread, findings, failures))
}

/// What a judged play broke, as the shrinker reads it (`None`: it held).
pub fn verdict_of(findings: &[Finding], failures: &[String]) -> explore::Verdict {
    if findings.is_empty() && failures.is_empty() {
        return None;
    }
    let mut properties: Vec<Property> = Vec::new();
    for finding in findings {
        if !properties.contains(&finding.property) {
            properties.push(finding.property);
        }
    }
    Some(properties)
}

/// Plays `scenario` under `plan` (spread, then on one instance), judges, and re-runs a failure `reruns` times
/// from its decision log and plan. Without faults a re-run that decides otherwise is mcpsim's bug; under
/// faults the decisions also follow the servers' answers (a retry goes out when an answer is lost), so such a
/// re-run counts as not reproduced.
pub fn run_scenario(
    target: &Target,
    scenario: &Scenario,
    seed: u64,
    plan: &FaultPlan,
    reruns: usize,
    mcpsim: &str,
    work_dir: &Path,
) -> Result<ScenarioReport, RunError> {
    let (spread, findings, failures) = play_judged(target, scenario, seed, plan, mcpsim, work_dir)?;
    let mut report =
        ScenarioReport { name: scenario.name.clone(), seed, spread, findings, failures, reproduced: None, faulty: plan.is_faulty() };
    if !report.passed() && reruns > 0 {
        let wanted = report.properties();
        let mut again = 0;
        for _ in 0..reruns {
            let (rerun, findings, failures) = play_judged(target, scenario, seed, plan, mcpsim, work_dir)?;
            if rerun.decisions != report.spread.decisions {
                if plan.events.is_empty() {
                    return Err(RunError::RerunDiverged { scenario: scenario.name.clone() });
                }
                continue;
            }
            if explore::same_failure(&wanted, &verdict_of(&findings, &failures)) {
                again += 1;
            }
        }
        report.reproduced = Some((again, reruns));
    }
    Ok(report)
}

/// The target scenarios, in the binary (`targets/scenarios/` of the checkout): `run --target F` plays them
/// anywhere, and names them as `01-retry-lands-elsewhere`.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("01-retry-lands-elsewhere.sim", include_str!("../../targets/scenarios/01-retry-lands-elsewhere.sim")),
    ("02-accepts-race.sim", include_str!("../../targets/scenarios/02-accepts-race.sim")),
    ("03-decline-then-accept.sim", include_str!("../../targets/scenarios/03-decline-then-accept.sim")),
    ("04-cancel-then-accept.sim", include_str!("../../targets/scenarios/04-cancel-then-accept.sim")),
    (
        "05-retry-after-the-first-instance-crashed.sim",
        include_str!("../../targets/scenarios/05-retry-after-the-first-instance-crashed.sim"),
    ),
    ("06-another-principal-replays-the-state.sim", include_str!("../../targets/scenarios/06-another-principal-replays-the-state.sim")),
    ("07-invalid-answers-then-accept.sim", include_str!("../../targets/scenarios/07-invalid-answers-then-accept.sim")),
    ("08-answer-lost-then-retry-elsewhere.sim", include_str!("../../targets/scenarios/08-answer-lost-then-retry-elsewhere.sim")),
    ("09-retry-while-the-first-is-paused.sim", include_str!("../../targets/scenarios/09-retry-while-the-first-is-paused.sim")),
    ("10-accept-delivered-twice.sim", include_str!("../../targets/scenarios/10-accept-delivered-twice.sim")),
    ("11-expiry-on-a-skewed-clock.sim", include_str!("../../targets/scenarios/11-expiry-on-a-skewed-clock.sim")),
    ("12-item-deleted-after-the-form.sim", include_str!("../../targets/scenarios/12-item-deleted-after-the-form.sim")),
    ("13-store-cut-between-claim-and-effect.sim", include_str!("../../targets/scenarios/13-store-cut-between-claim-and-effect.sim")),
    ("14-rotation-mid-confirmation.sim", include_str!("../../targets/scenarios/14-rotation-mid-confirmation.sim")),
    ("15-two-adjacent-stages-at-once.sim", include_str!("../../targets/scenarios/15-two-adjacent-stages-at-once.sim")),
    ("16-old-key-retired-mid-confirmation.sim", include_str!("../../targets/scenarios/16-old-key-retired-mid-confirmation.sim")),
    ("17-restarted-with-an-ephemeral-key.sim", include_str!("../../targets/scenarios/17-restarted-with-an-ephemeral-key.sim")),
    ("18-deploy-old-mints-new-finishes.sim", include_str!("../../targets/scenarios/18-deploy-old-mints-new-finishes.sim")),
    ("19-deploy-new-mints-old-finishes.sim", include_str!("../../targets/scenarios/19-deploy-new-mints-old-finishes.sim")),
    ("20-deploy-during-an-accepts-race.sim", include_str!("../../targets/scenarios/20-deploy-during-an-accepts-race.sim")),
];

/// A target scenario to play: where it comes from (a file, or the binary's) and its text.
#[derive(Debug, Clone)]
pub struct ScenarioSource {
    /// As reports show it: the file's path, or `<embedded>/NAME.sim`.
    pub shown: String,
    /// As the reproduce command names it: the path, or the embedded name.
    pub argument: String,
    pub name: String,
    pub text: String,
    /// The rotation step it is played for ([`per_rotation_step`]).
    pub step: Option<(String, String)>,
}

/// The embedded target scenario `name` means (`04-cancel-then-accept`, with or without `.sim`).
pub fn embedded(name: &str) -> Option<ScenarioSource> {
    let name = name.strip_prefix("<embedded>/").unwrap_or(name);
    let file = if name.ends_with(".sim") { name.to_string() } else { format!("{name}.sim") };
    SCENARIOS.iter().find(|(f, _)| *f == file).map(|(f, text)| {
        let stem = f.trim_end_matches(".sim").to_string();
        ScenarioSource { shown: format!("<embedded>/{f}"), argument: stem.clone(), name: stem, text: text.to_string(), step: None }
    })
}

/// The scenarios `arguments` name: every embedded one when none are named; otherwise each `.sim` file, each
/// folder's `.sim` files (sorted), or an embedded scenario by name. `Err`: an argument that is none of these.
pub fn scenario_sources(arguments: &[PathBuf]) -> Result<Vec<ScenarioSource>, RunError> {
    if arguments.is_empty() {
        return Ok(SCENARIOS.iter().filter_map(|(f, _)| embedded(f)).collect());
    }
    let mut sources = Vec::new();
    for argument in arguments {
        if argument.exists() {
            for path in scenario_files(std::slice::from_ref(argument))? {
                let text = std::fs::read_to_string(&path).map_err(|source| RunError::ReadScenario { path: path.clone(), source })?;
                let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                sources.push(ScenarioSource {
                    shown: path.display().to_string(),
                    argument: path.display().to_string(),
                    name,
                    text,
                    step: None,
                });
            }
        } else if let Some(source) = embedded(&argument.to_string_lossy()) {
            sources.push(source);
        } else {
            let names: Vec<&str> = SCENARIOS.iter().map(|(f, _)| f.trim_end_matches(".sim")).collect();
            return Err(RunError::NoSuchScenario { argument: argument.clone(), names: names.join(", ") });
        }
    }
    Ok(sources)
}

/// A target scenario: its text with the placeholders filled, parsed.
pub fn load_source(target: &Target, source: &ScenarioSource) -> Result<Scenario, RunError> {
    let filled = fill_scenario(target, &source.text, source.step.as_ref())
        .map_err(|why| RunError::FillScenario { shown: source.shown.clone(), source: why })?;
    let scenario = crate::scenario::parse(&source.shown, &source.name, &filled)?;
    // Its stages: each one the file has, and a build its program comes from at hand.
    let rolled = scenario.steps.iter().filter_map(|step| match &step.action {
        Action::Roll { stage, .. } => Some((step.line, stage)),
        _ => None,
    });
    let declared = scenario.cluster.instances.iter().filter_map(|i| i.stage.as_ref().map(|stage| (0, stage)));
    for (line, stage) in declared.chain(rolled) {
        if !target.file.stages.contains_key(stage) {
            let at = if line == 0 { String::new() } else { format!("line {line}: ") };
            return Err(RunError::NeedsKey { shown: source.shown.clone(), what: format!("{at}stage {stage}"), key: "[stages.NAME]" });
        }
        if let Some(variable) = target.file.stage_program_missing(stage) {
            return Err(RunError::NoStageProgram { shown: source.shown.clone(), stage: stage.clone(), variable });
        }
    }
    // A skewed clock needs libfaketime: without it the scenario is skipped, saying what to install.
    if scenario.cluster.instances.iter().any(|i| i.clock_offset_ms != 0) {
        fleet::libfaketime().map_err(|looked| RunError::NoFaketime { shown: source.shown.clone(), looked })?;
    }
    if let Some((what, key)) = unplayable_step(target, &scenario) {
        return Err(RunError::NeedsKey { shown: source.shown.clone(), what, key });
    }
    Ok(scenario)
}

/// A step of `scenario` this target cannot play for want of a table: a store fault without `[store]`, an
/// admin change without its `[admin]` command. `(what, key)`.
fn unplayable_step(target: &Target, scenario: &Scenario) -> Option<(String, &'static str)> {
    use crate::scenario::model::AdminAction;
    let admin = target.file.admin.clone().unwrap_or_default();
    scenario.steps.iter().find_map(|step| match &step.action {
        Action::StoreCut { .. } | Action::StoreLock { .. } if target.file.store.is_none() => {
            Some((format!("line {}: `{}` (a store mcpsim can cut or lock)", step.line, step.text), "[store]"))
        }
        Action::Admin(action) => {
            let (given, key) = match action {
                AdminAction::DeleteNote { .. } => (admin.delete.is_some(), "[admin] delete"),
                AdminAction::MoveNote { .. } => (admin.move_to.is_some(), "[admin] move"),
                AdminAction::RenameNote { .. } => (admin.rename.is_some(), "[admin] rename"),
                _ => return None,
            };
            (!given).then(|| (format!("line {}: `{}`", step.line, step.text), key))
        }
        _ => None,
    })
}

/// The `.sim` files of `paths` (folders listed, sorted).
pub fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, RunError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|source| RunError::ListScenarios { path: path.clone(), source })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "sim"))
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// The spread play's client traffic as an mcp-trace-validator trace (JSON Lines): each request, then its
/// answer, in the order they went on the wire, every event naming the instance that took it (`instance`:
/// the scenario's instance `@` the fleet's, an extra member the validator ignores). A request that was not
/// JSON is left out (the format carries JSON-RPC messages only); a lost answer has no event.
pub fn mcp_trace(target: &Target, played: &PlayedOnce) -> String {
    use std::fmt::Write as _;
    let transport = match target.file.transport {
        file::Transport::Stdio => "stdio",
        file::Transport::Http => "streamable-http",
    };
    let mut out = String::new();
    let mut seq = 0u64;
    for op in played.history.operations() {
        let mut events = Vec::new();
        if let Some(request) = op.request_value.as_deref().filter(|v| v.is_object()) {
            events.push(("client-to-server", request));
        }
        if let Some(response) = op.response() {
            events.push(("server-to-client", response));
        }
        for (direction, payload) in events {
            let event = json!({"seq": seq, "direction": direction, "transport": transport, "kind": "message", "instance": op.instance, "payload": payload});
            let _ = writeln!(out, "{event}");
            seq += 1;
        }
    }
    out
}

/// The report of one scenario, as text.
pub fn render(target: &Target, report: &ScenarioReport, transcript: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# mcpsim target: {} ({})  scenario {}  seed {}",
        shown(&target.file.name),
        shown(&target.path.display().to_string()),
        shown(&report.name),
        report.seed
    );
    if !target.file.differ_by_design.is_empty() {
        let _ = writeln!(
            out,
            "statelessness compares answers with these paths masked (differ_by_design): {}",
            shown(&target.file.differ_by_design.join(", "))
        );
    }
    let _ = writeln!(out, "decisions (mcpsim's, seeded; the servers' own timing is not):");
    for decision in &report.spread.decisions {
        let _ = writeln!(out, "  {}", shown(decision));
    }
    if transcript {
        let _ = writeln!(out, "processes:");
        for event in &report.spread.events {
            let _ = writeln!(out, "  {}", shown(event));
        }
        let _ = writeln!(out, "transcript (scenario instance@fleet instance):");
        for line in &report.spread.transcript {
            let _ = writeln!(out, "  {}", shown(line));
        }
    }
    for record in &report.spread.play.expectations {
        let _ = match &record.result {
            ExpectationResult::Held => writeln!(out, "   ok    line {}: {}", record.line, shown(&record.text)),
            ExpectationResult::HeldVacuously(why) => {
                writeln!(out, "   ok    line {}: {} ({})", record.line, shown(&record.text), shown(why))
            }
            ExpectationResult::Failed(why) => writeln!(out, "   FAIL  line {}: {}: {}", record.line, shown(&record.text), shown_lines(why)),
            ExpectationResult::NotEvaluated(why) => {
                writeln!(out, "   --    line {}: {}: not evaluated: {}", record.line, shown(&record.text), shown(why))
            }
        };
    }
    match &report.spread.effects {
        Ok((before, after)) => {
            let _ = writeln!(out, "effects: the probe read {before} before and {after} after");
        }
        Err(why) => {
            let _ = writeln!(out, "effects: not observed: {}", shown(&why.to_string()));
        }
    }
    for what in judge::indeterminate(&report.spread.history) {
        let _ = writeln!(out, "   ?     may have happened: {}", shown(&what));
    }
    let crossings = judge::crossings(&report.spread.history);
    if !crossings.is_empty() {
        let _ = writeln!(out, "confirmations across stages (round 1 in one stage, the answer in another):");
        for line in crossings {
            let _ = writeln!(out, "   >     {}", shown(&line));
        }
    }
    let mut properties = vec![Property::AtMostOnce, Property::Consent, Property::Refusal, Property::HonestOutcome, Property::Statelessness];
    if report.spread.history.clients_retry() {
        properties.push(Property::Liveness);
    }
    for property in properties {
        let broken: Vec<&Finding> = report.findings.iter().filter(|f| f.property == property).collect();
        if property == Property::Statelessness && report.faulty {
            let _ = writeln!(out, "   --    property statelessness: not compared under faults (a retry takes each play its own way)");
            continue;
        }
        if let (Property::Statelessness, Some(why)) = (
            property,
            report
                .spread
                .decisions
                .iter()
                .find_map(|d| d.strip_prefix("statelessness not compared with the reference play on one instance: ")),
        ) {
            let _ = writeln!(out, "   --    property statelessness: not compared ({})", shown(why));
            continue;
        }
        let property = property.as_str();
        if broken.is_empty() {
            let _ = writeln!(out, "   ok    property {property}");
        }
        for finding in broken {
            let _ = writeln!(out, "   FAIL  property {property}: {}", shown_lines(&finding.message));
        }
    }
    for failure in report.spread.play.failures.iter().filter(|f| f.kind != play::FailureKind::Expectation) {
        let _ = writeln!(out, "   ERROR line {}: {}: {}", failure.line, shown(&failure.statement), shown(&failure.message));
    }
    // A drawn event that never fired is in the decisions and the exploration's coverage, not an error.
    for event in report.spread.unfired.iter().filter(|e| matches!(e.trigger, faults::Trigger::Next { .. })) {
        let _ = writeln!(out, "   ERROR fault armed, never fired: {}", shown(&event.to_string()));
    }
    for failure in report.failures.iter().filter(|f| f.starts_with("the target file says")) {
        let _ = writeln!(out, "   ERROR {}", shown(failure));
    }
    if let Some((again, runs)) = report.reproduced {
        let _ = writeln!(out, "reproduced {again} of {runs} re-runs from its decision log");
    }
    let verdict = if report.passed() {
        "PASS".to_string()
    } else if report.properties().is_empty() {
        "FAIL (expectations)".to_string()
    } else {
        format!("FAIL: {}", report.properties().iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", "))
    };
    let _ = writeln!(out, "{verdict}");
    out
}

/// The planted notes server (no SDK, correct: `tests/peers/python/planted_notes_server.py`), three stdio
/// instances on one SQLite file, as a target file written in a fresh directory `mcpsim-NAME-PID` under the
/// system's temporary one; `extra` (tables such as `[store]`) goes before the principals. For the unit tests
/// of the target world and its plays.
#[cfg(test)]
pub(crate) fn planted_target(name: &str, extra: &str) -> (PathBuf, Target) {
    let dir = std::env::temp_dir().join(format!("mcpsim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    create_private_dir(&dir).unwrap();
    let file = dir.join("planted.toml");
    let text = format!(
        r#"name = "planted notes server (no SDK), correct"
transport = "stdio"
instances = 3
setup = [["python3", "tests/peers/python/planted_notes_server.py", "seed", "{{data_dir}}/notes.db"]]
command = ["python3", "tests/peers/python/planted_notes_server.py", "stdio", "{{data_dir}}/notes.db"]
env = {{ PLANTED = "" }}
{extra}
[principals.alice]
args = ["alice"]

[tool]
name = "notes_delete"
arguments = {{ workspaceUri = "file:///notes", title = "TPS report" }}
input_key = "delete_choice"
accept = {{ note_id = "note-7", confirm = true }}
principal = "alice"

[effects]
method = "resources/list"
count = "result.resources"
"#
    );
    std::fs::write(&file, text).unwrap();
    let target = Target::load(&file).unwrap();
    (dir, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drawn plan against real processes (the planted notes server, correct, three instances over stdio):
    /// the answer of request 2 (the accept) is lost, and the client retries on another instance by itself.
    #[test]
    fn a_drawn_lost_answer_is_retried_on_another_instance_with_a_fresh_id_and_logged() {
        use self::faults::{FaultAction, FaultKind, RetryOn, Trigger};
        let (dir, target) = planted_target("drawn-plan", "");
        let scenario = load_source(&target, &embedded("01-retry-lands-elsewhere").unwrap()).unwrap();
        let event = FaultEvent {
            trigger: Trigger::Request { number: 2 },
            action: FaultAction::LoseAnswer { close_connection: false, retry: RetryOn::Other },
        };
        let plan = FaultPlan { kinds: vec![FaultKind::LostAnswer], events: vec![event.clone()] };
        let played = play_once(&target, &scenario, 1, Routing::Spread, plan, "mcpsim", &dir).unwrap();
        let history = &played.history;
        // The accept (operation 2) lost to the fault, its retry (a fresh id) recorded as such, and answered.
        let accept = crate::oracle::history::OperationId(1);
        assert!(history.lost_to(accept).is_some_and(|f| f.starts_with("at request 2: its answer lost")), "{:?}", played.decisions);
        let retries: Vec<_> =
            history.attempts().iter().filter(|(_, a)| **a == crate::oracle::history::Attempt::Retry { of: accept, number: 1 }).collect();
        assert_eq!(retries.len(), 1, "{:?}", history.attempts());
        let retry = &history.operations()[retries[0].0 .0];
        assert_eq!(retry.request_value.as_ref().and_then(|v| v.get("id")), Some(&json!(1_000_002)));
        assert_ne!(retry.instance, history.operations()[1].instance, "retried on another instance");
        assert!(retry.response().is_some(), "the retry was answered: {:?}", played.transcript);
        assert!(history.clients_retry());
        // Expectations are shown, not judged, under a drawn plan.
        assert_eq!(played.play.judged, 0);
        assert_eq!(played.fired.len(), 1);
        assert_eq!(played.fired[0].0, event);
        assert!(played.unfired.is_empty());
        let effects = played.effects.as_ref().map(|(b, a)| b - a).unwrap();
        assert_eq!(effects, 1, "one deletion");
        let report = ScenarioReport {
            name: scenario.name.clone(),
            seed: 1,
            findings: judge(&scenario, &played, None, &target.masks()),
            failures: failures_of(&played),
            spread: played,
            reproduced: None,
            faulty: true,
        };
        let text = render(&target, &report, false);
        assert!(text.contains("  fault fired: at request 2: its answer lost (read and discarded); the client retries on another instance — request 2 (round2 → t"), "{text}");
        assert!(
            text.contains("the client retries request 2 on t") && text.contains("with id 1000002 after 50 ms (retry 1 of at most"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A drawn store cut against a SQLite fleet (the planted notes server, three instances over stdio): the
    /// dispatcher's `StoreCut` arm holds the file's write lock from request 2 (the accept) for its window; the
    /// server waits it out and deletes once.
    #[test]
    fn a_drawn_store_cut_holds_a_sqlite_fleets_write_lock_through_the_dispatcher() {
        use self::faults::{FaultAction, FaultKind, Trigger};
        let (dir, target) = planted_target(
            "drawn-store-cut",
            "
[store]
kind = \"sqlite\"
path = \"{data_dir}/notes.db\"
",
        );
        let scenario = load_source(&target, &embedded("01-retry-lands-elsewhere").unwrap()).unwrap();
        let event =
            FaultEvent { trigger: Trigger::Request { number: 2 }, action: FaultAction::StoreCut { after_statements: 1, outage_ms: 300 } };
        let plan = FaultPlan { kinds: vec![FaultKind::StoreCut], events: vec![event.clone()] };
        let played = play_once(&target, &scenario, 1, Routing::Spread, plan, "mcpsim", &dir).unwrap();
        assert_eq!(played.fired.len(), 1, "{:?}", played.decisions);
        assert_eq!(played.fired[0].0, event);
        assert!(
            played.decisions.iter().any(|d| d.starts_with("store write lock taken at request 2") && d.ends_with("held for 300 ms")),
            "{:?}",
            played.decisions
        );
        assert!(played.play.failures.is_empty(), "{:?}", played.play.failures);
        assert_eq!(played.effects.as_ref().map(|(b, a)| b - a).unwrap(), 1, "one deletion: {:?}", played.transcript);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn shown_escapes_every_control_and_format_character_and_keeps_the_rest() {
        let forged = "boom\n   ok    property at-most-once\r\nPASS\t\u{1b}[2K\u{7f}\u{9b}\u{202e}\u{2066}\u{200b}\u{2028}\u{feff}";
        assert_eq!(
            shown(forged),
            "boom\\n   ok    property at-most-once\\r\\nPASS\\t\\u{1b}[2K\\u{7f}\\u{9b}\\u{202e}\\u{2066}\\u{200b}\\u{2028}\\u{feff}"
        );
        assert_eq!(shown("é → t1 {\"a\": 1} ✓"), "é → t1 {\"a\": 1} ✓");
    }

    #[test]
    fn a_message_of_several_lines_keeps_its_breaks_behind_a_gutter_and_escapes_the_rest() {
        let diff = "differs at:\n    result.message: the lines from line 2 differ:\n      - a\u{1b}[2K\nPASS: every property held\n   ok    property at-most-once";
        let out = shown_lines(diff);
        assert_eq!(
            out,
            "differs at:\n         |     result.message: the lines from line 2 differ:\n         |       - a\\u{1b}[2K\n         | PASS: every property held\n         |    ok    property at-most-once"
        );
        // Every line after the first starts behind the gutter, which no line of a report starts with.
        assert!(out.lines().skip(1).all(|line| line.starts_with("         | ")), "{out}");
    }

    #[test]
    fn secret_looking_arguments_are_redacted() {
        let argv: Vec<String> = [
            "server",
            "--password=hunter2",
            "--token",
            "t0k",
            "--api-key=k",
            "-p",
            "8080",
            "AWS_SECRET_ACCESS_KEY=s",
            "GITHUB_TOKEN=g",
            "postgres://bob:pw@127.0.0.1/db",
            "--store=postgres://bob:pw@db/x",
            "--key-file",
            "/tmp/keys.toml",
            "plain=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            redact_argv(&argv),
            "server --password=[redacted] --token [redacted] --api-key=[redacted] -p 8080 AWS_SECRET_ACCESS_KEY=[redacted] \
             GITHUB_TOKEN=[redacted] postgres://[redacted]@127.0.0.1/db --store=postgres://[redacted]@db/x --key-file /tmp/keys.toml plain=1"
        );
    }

    #[test]
    fn safe_names_hold_only_safe_characters_and_stay_distinct() {
        assert_eq!(safe_name("02-accepts-race"), "02-accepts-race");
        let hostile = safe_name("x$(touch${IFS}$MARK)");
        assert!(hostile.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)), "{hostile}");
        assert!(hostile.starts_with("x__touch__IFS__MARK_-"), "{hostile}");
        assert_ne!(safe_name("a b"), safe_name("a_b"));
        assert_ne!(safe_name("a;b"), safe_name("a b"));
        assert!(!safe_name("-rf").starts_with('-') && !safe_name("..").starts_with('.'));
        assert!(safe_name(&"é".repeat(200)).len() < 100);
    }
}
