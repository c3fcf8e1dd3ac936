//! `explore --target … --faults KINDS`: what an exploration of drawn faults does besides playing — the request
//! window a plan is drawn in, shrinking a failing plan to the fewest fault events that still fail with the
//! same property, and the coverage of an exploration (which kinds fired, on which fleet instance, at which
//! request and statement; a kind turned on that never fired is listed with why, never silently passed).
//!
//! The shrinker is generic over "play this plan, say what broke", so it is tested without processes; the CLI
//! (`cli::target`) gives it a closure that plays the plan on fresh fleets and judges it.

use super::faults::{FaultEvent, FaultKind, FaultPlan};
use crate::oracle::check::Property;
use crate::scenario::model::{Action, ParallelAction, Scenario};
use std::collections::BTreeMap;

/// Most plays one shrink makes (each starts every instance of the fleet twice).
pub const SHRINK_PLAYS_MAX: usize = 40;

/// The requests a scenario puts on the wire without faults (each `send`/`answer`, inside `parallel` blocks
/// too; at least 1): the window a plan's request numbers are drawn in, so that every drawn event meets a
/// request.
pub fn requests_window(scenario: &Scenario) -> usize {
    let requests: usize = scenario
        .steps
        .iter()
        .map(|step| match &step.action {
            Action::Send(_) => 1,
            Action::Parallel(items) => items.iter().filter(|i| matches!(i.item, ParallelAction::Send(_))).count(),
            _ => 0,
        })
        .sum();
    requests.max(1)
}

/// What one play of a plan showed: `None` held, `Some(properties)` failed (no property: expectations or steps).
pub type Verdict = Option<Vec<Property>>;

/// Whether `verdict` is the failure being shrunk: it fails, and breaks every property of `wanted` (any failure
/// when `wanted` is empty).
pub fn same_failure(wanted: &[Property], verdict: &Verdict) -> bool {
    match verdict {
        None => false,
        Some(broken) => wanted.iter().all(|p| broken.contains(p)),
    }
}

/// A shrunk failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shrunk {
    pub plan: FaultPlan,
    /// Events in the plan shrinking began with.
    pub from: usize,
    /// Plays it took.
    pub plays: usize,
    /// Whether it stopped at [`SHRINK_PLAYS_MAX`] (or the bound given) before trying every removal.
    pub bounded: bool,
}

/// Shrinks `plan`, which failed breaking `wanted`, to the fewest events that still fail the same way: the plan
/// with no events first, then each event removed in turn, a removal kept when its plan still fails (each
/// candidate played afresh by `play`), at most `max_plays` plays. `Err`: a play that could not be done.
pub fn shrink<E>(
    plan: &FaultPlan,
    wanted: &[Property],
    max_plays: usize,
    mut play: impl FnMut(&FaultPlan) -> Result<Verdict, E>,
) -> Result<Shrunk, E> {
    let from = plan.events.len();
    let mut current = plan.clone();
    let mut plays = 0;
    if current.events.len() > 1 && plays < max_plays {
        let none = FaultPlan { kinds: plan.kinds.clone(), events: Vec::new() };
        plays += 1;
        if same_failure(wanted, &play(&none)?) {
            return Ok(Shrunk { plan: none, from, plays, bounded: false });
        }
    }
    let mut index = 0;
    while index < current.events.len() {
        if plays >= max_plays {
            return Ok(Shrunk { plan: current, from, plays, bounded: true });
        }
        let candidate = current.without(index);
        plays += 1;
        if same_failure(wanted, &play(&candidate)?) {
            current = candidate;
        } else {
            index += 1;
        }
    }
    Ok(Shrunk { plan: current, from, plays, bounded: false })
}

/// The command that plays `plan` again: `--fault-plan '<json>'`, quoted for a POSIX shell.
pub fn fault_plan_argument(plan: &FaultPlan) -> String {
    let json = serde_json::to_string(plan).expect("a plan serializes");
    format!("--fault-plan '{}'", json.replace('\'', r"'\''"))
}

/// Reads `--fault-plan FILE|JSON`: JSON when it starts with `{`, else the file it names. Refuses an unknown
/// field, a kind or an instance the fleet does not have, with what is wrong.
pub fn read_fault_plan(argument: &str, fleet_len: usize) -> Result<FaultPlan, String> {
    let text = if argument.trim_start().starts_with('{') {
        argument.to_string()
    } else {
        std::fs::read_to_string(argument)
            .map_err(|e| format!("--fault-plan {argument}: cannot read: {e} (give a file or the JSON itself)"))?
    };
    let mut plan: FaultPlan = serde_json::from_str(&text).map_err(|e| {
        format!("--fault-plan: not a fault plan: {e} (a plan is {{\"kinds\": [...], \"events\": [{{\"trigger\": ..., \"action\": ...}}]}}, as explore prints it)")
    })?;
    for event in &plan.events {
        if let super::faults::FaultAction::ClockSkew { instance, .. } = event.action {
            if instance >= fleet_len {
                return Err(format!("--fault-plan: {event}: the fleet has {fleet_len} instance(s), t1 to t{fleet_len}"));
            }
        }
        if !plan.kinds.contains(&event.action.kind()) {
            plan.kinds.push(event.action.kind());
        }
    }
    plan.kinds.sort();
    plan.kinds.dedup();
    Ok(plan)
}

/// One fault that fired in one play: the event, the request it fired on, where (`NAME → tK`), and whether it
/// was applied (`Err`: why not, as the world logged it: `fault not applied: …`).
#[derive(Debug, Clone)]
pub struct Fired {
    pub event: FaultEvent,
    pub request: usize,
    pub place: String,
    pub applied: Result<(), String>,
}

/// The faults of one play, read from what the world returned: the `fired` list, and for each the decision
/// that follows its `fault fired:` line (a `fault not applied: WHY` there means it was not).
pub fn fired_in(decisions: &[String], fired: &[(FaultEvent, usize, String)]) -> Vec<Fired> {
    let mut out = Vec::new();
    let mut lines = decisions.iter().enumerate().filter(|(_, d)| d.starts_with("fault fired: ")).map(|(i, _)| i);
    for (event, request, place) in fired {
        let next = lines.next().and_then(|i| decisions.get(i + 1));
        let applied = match next.and_then(|d| d.strip_prefix("fault not applied: ")) {
            Some(why) => Err(why.to_string()),
            None => Ok(()),
        };
        out.push(Fired { event: event.clone(), request: *request, place: place.clone(), applied });
    }
    out
}

/// Per kind: how often it was drawn, where it fired, and why it was not applied where it was not.
#[derive(Debug, Clone, Default)]
struct KindCoverage {
    drawn: usize,
    seeds_drawn: usize,
    fired: usize,
    seeds_fired: usize,
    /// `NAME → tK` → times.
    places: BTreeMap<String, usize>,
    /// Request numbers it fired on → times.
    requests: BTreeMap<usize, usize>,
    /// Why it was not applied → times.
    not_applied: BTreeMap<String, usize>,
}

/// The coverage of an exploration under faults.
#[derive(Debug, Clone)]
pub struct Coverage {
    kinds: BTreeMap<FaultKind, KindCoverage>,
    seeds: usize,
}

impl Coverage {
    /// Every kind of `on` present, at zero.
    pub fn new(on: &[FaultKind]) -> Coverage {
        Coverage { kinds: on.iter().map(|k| (*k, KindCoverage::default())).collect(), seeds: 0 }
    }

    /// One seed's plan and what fired of it (its spread play).
    pub fn add(&mut self, plan: &FaultPlan, fired: &[Fired]) {
        self.seeds += 1;
        for (kind, coverage) in &mut self.kinds {
            let drawn = plan.events.iter().filter(|e| e.action.kind() == *kind).count();
            coverage.drawn += drawn;
            coverage.seeds_drawn += usize::from(drawn > 0);
            let mut any = false;
            for fired in fired.iter().filter(|f| f.event.action.kind() == *kind) {
                match &fired.applied {
                    Ok(()) => {
                        any = true;
                        coverage.fired += 1;
                        *coverage.places.entry(fired.place.clone()).or_default() += 1;
                        *coverage.requests.entry(fired.request).or_default() += 1;
                    }
                    Err(why) => *coverage.not_applied.entry(why.clone()).or_default() += 1,
                }
            }
            coverage.seeds_fired += usize::from(any);
        }
    }

    /// The kinds turned on that never fired (applied) in any play, each with why.
    pub fn never_fired(&self) -> Vec<(FaultKind, String)> {
        self.kinds
            .iter()
            .filter(|(_, c)| c.fired == 0)
            .map(|(kind, c)| {
                let why = if c.drawn == 0 {
                    format!("no plan of the {} seed(s) drew it (more seeds draw it: each seed turns a kind on with even odds)", self.seeds)
                } else if !c.not_applied.is_empty() {
                    let reasons: Vec<String> = c.not_applied.iter().map(|(why, n)| format!("{why} (×{n})")).collect();
                    format!("drawn {} time(s), never applied: {}", c.drawn, reasons.join("; "))
                } else {
                    format!("drawn {} time(s), but the plays ended before the request it waited for", c.drawn)
                };
                (*kind, why)
            })
            .collect()
    }

    /// The coverage as report lines.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let on: Vec<&str> = self.kinds.keys().map(|k| k.as_str()).collect();
        let _ = writeln!(out, "coverage ({} seed(s), faults turned on: {}):", self.seeds, on.join(", "));
        let width = self.kinds.keys().map(|k| k.as_str().len()).max().unwrap_or(0);
        for (kind, c) in &self.kinds {
            if c.fired == 0 {
                continue;
            }
            let places: Vec<String> = c.places.iter().map(|(p, n)| format!("{p} ×{n}")).collect();
            let requests: Vec<String> = c.requests.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
            let _ = writeln!(
                out,
                "  {:width$}  fired {} of {} drawn, in {} of {} seed(s); on {}; at request {}",
                kind.as_str(),
                c.fired,
                c.drawn,
                c.seeds_fired,
                self.seeds,
                places.join(", "),
                requests.join(", ")
            );
            for (why, n) in &c.not_applied {
                let _ = writeln!(out, "  {:width$}  not applied ×{n}: {why}", "");
            }
        }
        for (kind, why) in self.never_fired() {
            let _ = writeln!(out, "  {:width$}  never fired: {why}", kind.as_str());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::faults::{FaultAction, RetryOn, Trigger};

    fn event(number: usize, action: FaultAction) -> FaultEvent {
        FaultEvent { trigger: Trigger::Request { number }, action }
    }

    fn plan_of(n: usize) -> FaultPlan {
        let events = (1..=n).map(|i| event(i, FaultAction::Hold { overtaken_by: 1 })).collect();
        FaultPlan { kinds: vec![FaultKind::Hold], events }
    }

    #[test]
    fn shrinking_keeps_exactly_the_events_the_failure_needs() {
        // Fails (at-most-once) only while events 2 and 4 are both in the plan; event 3 alone breaks something else.
        let plan = plan_of(5);
        let needs = |p: &FaultPlan| {
            let has = |n| p.events.iter().any(|e| e.trigger == Trigger::Request { number: n });
            Ok::<Verdict, ()>(if has(2) && has(4) {
                Some(vec![Property::AtMostOnce])
            } else if has(3) {
                Some(vec![Property::Statelessness])
            } else {
                None
            })
        };
        let shrunk = shrink(&plan, &[Property::AtMostOnce], SHRINK_PLAYS_MAX, needs).unwrap();
        let left: Vec<usize> = shrunk.plan.events.iter().map(|e| e.request_number()).collect();
        assert_eq!(left, [2, 4]);
        assert_eq!((shrunk.from, shrunk.bounded), (5, false));
        assert_eq!(shrunk.plan.kinds, plan.kinds);
        // The empty plan first, then one play per event tried: 1 + 5 removals tried (3 kept).
        assert_eq!(shrunk.plays, 6);
    }

    #[test]
    fn a_failure_that_needs_no_fault_shrinks_to_the_empty_plan_in_one_play() {
        let shrunk =
            shrink(&plan_of(4), &[Property::AtMostOnce], SHRINK_PLAYS_MAX, |_| Ok::<Verdict, ()>(Some(vec![Property::AtMostOnce])));
        let shrunk = shrunk.unwrap();
        assert!(shrunk.plan.events.is_empty());
        assert_eq!(shrunk.plays, 1);
    }

    #[test]
    fn shrinking_is_bounded_and_stops_at_a_play_it_cannot_do() {
        let mut plays = 0;
        let shrunk = shrink(&plan_of(10), &[], 3, |_| {
            plays += 1;
            Ok::<Verdict, ()>(None)
        })
        .unwrap();
        assert_eq!((shrunk.plays, plays, shrunk.bounded, shrunk.plan.events.len()), (3, 3, true, 10));
        let error = shrink(&plan_of(3), &[], 10, |_| Err::<Verdict, &str>("the fleet did not start"));
        assert_eq!(error.unwrap_err(), "the fleet did not start");
        // Without a property, any failure is the same failure; a pass never is.
        assert!(same_failure(&[], &Some(vec![])) && !same_failure(&[], &None));
        assert!(!same_failure(&[Property::AtMostOnce], &Some(vec![Property::Consent])));
    }

    #[test]
    fn a_given_plan_is_read_from_json_and_an_unknown_field_or_instance_is_refused() {
        let plan = FaultPlan {
            kinds: vec![FaultKind::LostAnswer],
            events: vec![event(2, FaultAction::LoseAnswer { close_connection: false, retry: RetryOn::Other })],
        };
        let argument = fault_plan_argument(&plan);
        let json = argument.strip_prefix("--fault-plan '").and_then(|a| a.strip_suffix('\'')).unwrap();
        assert_eq!(read_fault_plan(json, 3).unwrap(), plan);
        let error = read_fault_plan(r#"{"kinds": [], "events": [], "seed": 1}"#, 3).unwrap_err();
        assert!(error.contains("unknown field `seed`"), "{error}");
        let error = read_fault_plan(
            r#"{"kinds":[],"events":[{"trigger":{"request":{"number":0}},"action":{"fault":"clock-skew","instance":3,"offsetMs":5}}]}"#,
            3,
        )
        .unwrap_err();
        assert!(error.contains("3 instance(s)"), "{error}");
        // A kind an event needs is turned on.
        let read = read_fault_plan(
            r#"{"kinds":[],"events":[{"trigger":{"request":{"number":1}},"action":{"fault":"duplicate","other":true}}]}"#,
            3,
        );
        assert_eq!(read.unwrap().kinds, [FaultKind::Duplicate]);
        assert!(read_fault_plan("/nonexistent/plan.json", 3).unwrap_err().contains("cannot read"));
    }

    #[test]
    fn coverage_says_where_each_kind_fired_and_why_one_never_did() {
        let lost = event(1, FaultAction::LoseAnswer { close_connection: true, retry: RetryOn::Same });
        let cut = event(2, FaultAction::StoreCut { after_statements: 0, outage_ms: 100 });
        let plan =
            FaultPlan { kinds: vec![FaultKind::LostAnswer, FaultKind::Hold, FaultKind::StoreCut], events: vec![lost.clone(), cut.clone()] };
        let decisions: Vec<String> = vec![
            "route i1 → t2".into(),
            format!("fault fired: {lost} — request 1 (round1 → t2)"),
            format!("fault fired: {cut} — request 2 (first → t1)"),
            "fault not applied: the target has no [store]".into(),
        ];
        let fired = fired_in(&decisions, &[(lost, 1, "round1 → t2".into()), (cut, 2, "first → t1".into())]);
        assert!(fired[0].applied.is_ok());
        assert_eq!(fired[1].applied, Err("the target has no [store]".into()));
        let mut coverage = Coverage::new(&plan.kinds);
        coverage.add(&plan, &fired);
        let never: Vec<FaultKind> = coverage.never_fired().into_iter().map(|(k, _)| k).collect();
        assert_eq!(never, [FaultKind::Hold, FaultKind::StoreCut]);
        let text = coverage.render();
        assert!(text.contains("lost-answer  fired 1 of 1 drawn, in 1 of 1 seed(s); on round1 → t2 ×1; at request 1 ×1"), "{text}");
        assert!(text.contains("hold         never fired: no plan of the 1 seed(s) drew it"), "{text}");
        assert!(text.contains("store-cut    never fired: drawn 1 time(s), never applied: the target has no [store] (×1)"), "{text}");
    }
}
