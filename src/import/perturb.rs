//! Perturbing a scenario as a fleet would (`mcpsim explore FILE --perturb`), in the simulator: each later
//! request moved to each other instance (a load balancer's choice), then every pair of consecutive requests
//! raced in a `parallel` block (two rounds in flight at once). The faults that lose an answer are explore's
//! own (`--faults drop`). A variant is an edit of the scenario's *text* (a `-> iN` rewritten, two statements
//! wrapped in `parallel { … }`, a statement commented out), so what it finds is a `.sim` file that runs in
//! every world (`run`, `run --live`, `run --target`).
//!
//! Verdicts: a moved request must be answered exactly as written (a stateless fleet answers alike wherever a
//! round lands), so every expectation is judged; a race may legitimately reorder who wins, so only the safety
//! properties are. The first failing variant (fewest changes first) is shrunk to the fewest requests: each
//! request is commented out, last first, with the expectations about it, and stays out while the same failure
//! (the same first failed expectation, or the same broken properties) remains.

use crate::play::FailureKind;
use crate::scenario::{self, model::Action, model::Expectation, model::Request, model::Targets, Scenario};
use crate::sim::runner::{self, RunOptions, RunReport};
use std::fmt;

/// Most variants one perturbation plays (each over its seeds).
pub const VARIANTS_MAX: usize = 400;
/// Most plays one shrink makes.
pub const SHRINK_PLAYS_MAX: usize = 200;

/// One change a variant makes to the scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The request of step `step` sent to `to` instead.
    Move { step: usize, to: String },
    /// The requests of steps `first` and `second` (the next request) put in flight together.
    Race { first: usize, second: usize },
    /// The request of step `step` left out, with the expectations about its answer.
    Remove { step: usize },
}

/// What a variant's failure is, to tell "the same failure" while shrinking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    /// The first expectation (or step) that failed, as written.
    Expectation(String),
    /// The properties broken (sorted).
    Properties(Vec<String>),
}

/// A failing variant, shrunk.
pub struct Finding {
    /// The changes that made it fail (moves and races), each described.
    pub changes: Vec<String>,
    /// The requests the shrinker removed (their statements).
    pub removed: Vec<String>,
    /// Requests left (the fewest that still fail).
    pub requests_left: usize,
    /// The seed it fails on.
    pub seed: u64,
    /// The shrunk scenario's text (a `.sim` file).
    pub text: String,
    /// Its failures, as `run` prints them.
    pub failures: Vec<String>,
    /// The run of the shrunk scenario on `seed` (its transcript recorded).
    pub report: Box<RunReport>,
}

/// What a perturbation found.
pub enum Outcome {
    /// The scenario fails as written: nothing to perturb (`failures` as printed).
    FailsVerbatim(Vec<String>),
    /// Every variant held: how many were played.
    Held {
        variants: usize,
        skipped: usize,
        plays: usize,
    },
    Found {
        finding: Finding,
        variants_played: usize,
    },
}

/// Why a perturbation could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerturbError(pub String);

impl fmt::Display for PerturbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The steps that are requests a client sends (`send`, `notify`, `answer`, `send … raw`; not browsers), as
/// indices into `scenario.steps`.
pub fn requests(scenario: &Scenario) -> Vec<usize> {
    scenario
        .steps
        .iter()
        .enumerate()
        .filter(|(_, step)| matches!(&step.action, Action::Send(send) if !matches!(send.request, Request::Page { .. })))
        .map(|(index, _)| index)
        .collect()
}

/// The variants, fewest changes first: each later round answering a form on each other instance, each other
/// later request likewise, then each pair of consecutive requests raced (a pair whose second answers the
/// first's form cannot be: it does not parse, and is skipped).
pub fn variants(scenario: &Scenario) -> Vec<Vec<Change>> {
    let requests = requests(scenario);
    let instances: Vec<&str> = scenario.cluster.instances.iter().map(|i| i.name.as_str()).collect();
    let mut variants = Vec::new();
    // The rounds that answer a form first (the retry a load balancer sends elsewhere), then the others.
    for answers in [true, false] {
        for &step in requests.iter().skip(1) {
            let Action::Send(send) = &scenario.steps[step].action else { continue };
            if matches!(send.request, Request::Answer(_)) != answers {
                continue;
            }
            for to in instances.iter().filter(|name| **name != send.instance) {
                variants.push(vec![Change::Move { step, to: to.to_string() }]);
            }
        }
    }
    for pair in requests.windows(2) {
        variants.push(vec![Change::Race { first: pair[0], second: pair[1] }]);
    }
    variants.truncate(VARIANTS_MAX);
    variants
}

/// The lines of step `index` in `lines` (0-based, end exclusive): from its line to the next step's, less
/// the blank and comment lines before that one.
fn span(scenario: &Scenario, index: usize, lines: &[String]) -> (usize, usize) {
    let start = scenario.steps[index].line - 1;
    let mut end = scenario.steps.get(index + 1).map_or(lines.len(), |next| next.line - 1);
    while end > start + 1 && lines.get(end - 1).is_some_and(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        end -= 1;
    }
    (start, end.min(lines.len()))
}

/// The names a step's expectation is about (the answers it judges).
fn judged(expectation: &Expectation) -> Vec<&str> {
    match expectation {
        Expectation::Answer { targets: Targets::One(name), .. } => vec![name],
        Expectation::Answer { targets: Targets::Some { names, .. }, .. } => names.iter().map(String::as_str).collect(),
        Expectation::Nonce { answer, .. } => vec![answer],
        Expectation::If { condition, consequence } => judged(condition).into_iter().chain(judged(consequence)).collect(),
        _ => Vec::new(),
    }
}

/// `text` (the scenario `scenario` was parsed from) with `changes` made.
pub fn apply(text: &str, scenario: &Scenario, changes: &[Change]) -> Result<String, PerturbError> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // Later lines first, so earlier spans keep their numbers; a race inserts lines, so it is made last.
    let mut ordered: Vec<&Change> = changes.iter().collect();
    ordered.sort_by_key(|change| match change {
        Change::Race { .. } => 1,
        _ => 0,
    });
    let mut races = Vec::new();
    for change in ordered {
        match change {
            Change::Move { step, to } => {
                let Action::Send(send) = &scenario.steps[*step].action else {
                    return Err(PerturbError(format!("step {step} is not a request")));
                };
                let (start, _) = span(scenario, *step, &lines);
                let from = format!(" -> {} ", send.instance);
                let Some(at) = lines[start].find(&from) else {
                    return Err(PerturbError(format!("line {}: cannot find `-> {}` to move it", start + 1, send.instance)));
                };
                lines[start].replace_range(at..at + from.len(), &format!(" -> {to} "));
            }
            Change::Remove { step } => {
                let mut removed = vec![*step];
                let name = match &scenario.steps[*step].action {
                    Action::Send(send) => send.name.clone(),
                    _ => None,
                };
                if let Some(name) = name {
                    for (index, other) in scenario.steps.iter().enumerate() {
                        if let Action::Expect(expectation) = &other.action {
                            if judged(expectation).contains(&name.as_str()) {
                                removed.push(index);
                            }
                        }
                    }
                }
                for index in removed {
                    let (start, end) = span(scenario, index, &lines);
                    for line in &mut lines[start..end] {
                        if !line.starts_with("# removed: ") {
                            *line = format!("# removed: {line}");
                        }
                    }
                }
            }
            Change::Race { first, second } => races.push((*first, *second)),
        }
    }
    for (first, second) in races.into_iter().rev() {
        let (a_start, a_end) = span(scenario, first, &lines);
        let (b_start, b_end) = span(scenario, second, &lines);
        if a_end - a_start != 1 || b_end - b_start != 1 {
            return Err(PerturbError(format!("lines {} and {}: only one-line requests are raced", a_start + 1, b_start + 1)));
        }
        let second_text = lines[b_start].clone();
        lines[b_start] = format!("# raced above: {second_text}");
        let first_text = lines[a_start].clone();
        lines[a_start] = format!("parallel {{\n  {first_text}\n  {second_text}\n}}");
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

/// What is judged of a variant: everything (a move), or the safety properties only (a race).
fn signature(report: &RunReport, properties_only: bool) -> Option<Signature> {
    let mut properties: Vec<String> = report
        .failures
        .iter()
        .filter_map(|failure| match &failure.kind {
            FailureKind::Property(property) => Some(property.as_str().to_string()),
            _ => None,
        })
        .collect();
    properties.sort();
    properties.dedup();
    if !properties_only {
        if let Some(first) = report.failures.iter().find(|f| !matches!(f.kind, FailureKind::Property(_))) {
            return Some(Signature::Expectation(first.statement.clone()));
        }
    }
    (!properties.is_empty()).then_some(Signature::Properties(properties))
}

/// `answer4 (line 30)`.
fn request_name(scenario: &Scenario, step: usize) -> String {
    let s = &scenario.steps[step];
    match &s.action {
        Action::Send(send) => format!("{} (line {})", send.name.clone().unwrap_or_else(|| s.text.clone()), s.line),
        _ => format!("line {}", s.line),
    }
}

fn describe(scenario: &Scenario, change: &Change) -> String {
    let name = |step: usize| request_name(scenario, step);
    match change {
        Change::Move { step, to } => format!("{} sent to {to}", name(*step)),
        Change::Race { first, second } => format!("{} and {} raced", name(*first), name(*second)),
        Change::Remove { step } => format!("{} removed", name(*step)),
    }
}

/// Plays `text` on `seeds`, judging it as `properties_only` says: the first failing seed and its signature.
fn play(
    origin: &str,
    name: &str,
    text: &str,
    seeds: &[u64],
    properties_only: bool,
) -> Result<Option<(u64, Signature, RunReport)>, PerturbError> {
    let scenario = scenario::parse(origin, name, text).map_err(|error| PerturbError(format!("a variant does not parse: {error}")))?;
    let prepared = runner::Prepared::new(&scenario);
    for &seed in seeds {
        let mut options = RunOptions::seeded(seed);
        options.record_transcript = true;
        let report = runner::run_prepared(&prepared, &options);
        if let Some(signature) = signature(&report, properties_only) {
            return Ok(Some((seed, signature, report)));
        }
    }
    Ok(None)
}

/// Perturbs the scenario `text` (from `origin`), each variant on `seeds`.
pub fn perturb(origin: &str, name: &str, text: &str, seeds: &[u64]) -> Result<Outcome, PerturbError> {
    let scenario = scenario::parse(origin, name, text).map_err(|error| PerturbError(error.to_string()))?;
    if let Some((_, _, report)) = play(origin, name, text, &seeds[..1], false)? {
        return Ok(Outcome::FailsVerbatim(report.failures.iter().map(ToString::to_string).collect()));
    }
    let variants = variants(&scenario);
    let mut plays = 0;
    let mut skipped = 0;
    for (played, changes) in variants.iter().enumerate() {
        let race = changes.iter().any(|c| matches!(c, Change::Race { .. }));
        // A move of a sequential request has one order: one seed says it all.
        let seeds_here = if race { seeds } else { &seeds[..1] };
        let Ok(varied) = apply(text, &scenario, changes) else {
            skipped += 1;
            continue;
        };
        // A race whose second request answers the first's form is no variant: the language refuses it.
        if scenario::parse(origin, name, &varied).is_err() {
            skipped += 1;
            continue;
        }
        plays += seeds_here.len();
        let Some((seed, wanted, _)) = play(origin, name, &varied, seeds_here, race)? else { continue };
        let finding = shrink(origin, name, text, &scenario, changes, seed, &wanted, race)?;
        return Ok(Outcome::Found { finding, variants_played: played + 1 });
    }
    Ok(Outcome::Held { variants: variants.len() - skipped, skipped, plays })
}

/// The fewest requests (the variant's own changes kept) that still fail with `wanted` on `seed`.
#[allow(clippy::too_many_arguments)]
fn shrink(
    origin: &str,
    name: &str,
    text: &str,
    scenario: &Scenario,
    changes: &[Change],
    seed: u64,
    wanted: &Signature,
    properties_only: bool,
) -> Result<Finding, PerturbError> {
    let involved: Vec<usize> = changes
        .iter()
        .flat_map(|change| match change {
            Change::Move { step, .. } | Change::Remove { step } => vec![*step],
            Change::Race { first, second } => vec![*first, *second],
        })
        .collect();
    let mut kept: Vec<Change> = changes.to_vec();
    let mut removed = Vec::new();
    let mut plays = 0;
    for &step in requests(scenario).iter().rev() {
        if involved.contains(&step) || plays >= SHRINK_PLAYS_MAX {
            continue;
        }
        let mut trial = kept.clone();
        trial.push(Change::Remove { step });
        let Ok(varied) = apply(text, scenario, &trial) else { continue };
        // A request a later one needs (the form an answer answers) cannot go: the rest no longer parses.
        if scenario::parse(origin, name, &varied).is_err() {
            continue;
        }
        plays += 1;
        if let Some((_, signature, _)) = play(origin, name, &varied, &[seed], properties_only)? {
            if signature == *wanted {
                kept = trial;
                removed.push(request_name(scenario, step));
            }
        }
    }
    let varied = apply(text, scenario, &kept)?;
    let Some((seed, _, report)) = play(origin, name, &varied, &[seed], properties_only)? else {
        return Err(PerturbError("the shrunk variant no longer fails: the failure depends on more than the changes".into()));
    };
    removed.reverse();
    Ok(Finding {
        changes: changes.iter().map(|c| describe(scenario, c)).collect(),
        requests_left: requests(scenario).len() - removed.len(),
        removed,
        seed,
        failures: report.failures.iter().map(ToString::to_string).collect(),
        text: varied,
        report: Box::new(report),
    })
}
