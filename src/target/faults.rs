//! Faults against real processes: the simulator's fault kinds (`crate::sim::engine::faults`) as events mcpsim
//! makes happen to a target's fleet — an answer lost after the server processed the request, a request
//! delivered twice, a request held back, a process paused or killed between delivery and answer, a process
//! started under a skewed clock, the store cut. Each fault is bounded in time (a paused process is always
//! continued or killed, a held request always released or reported unsent), written in the play's decision
//! log, and replayable: the same seed draws the same [`FaultPlan`], and a plan can be played as given.
//!
//! A fault fires on a request chosen by its [`Trigger`]: the n-th request the play puts on the wire (a drawn
//! plan), or the next request of a method to a scenario instance (armed by a scenario statement such as
//! `drop answer from i1 to tools/call`). An operation a fault leaves without an answer is recorded in the
//! history as lost ([`crate::oracle::history::NoResponse::Lost`]): it *may* have happened, and the judge
//! accepts either, never both twice.

use serde::{Deserialize, Serialize};

/// Most times a client sends a request again after faults left it unanswered (its first attempt not
/// counted): more than the faults a drawn plan holds (two per kind), so a plan alone never exhausts it.
pub const RETRIES_MAX: u32 = 2 * FaultKind::ALL.len() as u32 + 2;
/// How long a client backs off before its n-th automatic retry: n times this, at most [`RETRY_BACKOFF_MAX_MS`]
/// (so 16 retries wait about 6 s in all: longer than any drawn outage or pause).
pub const RETRY_BACKOFF_MS: u64 = 50;
pub const RETRY_BACKOFF_MAX_MS: u64 = 500;

/// How a decision line says a lost answer's connection was closed right after the request was written.
pub const CLOSED_BEFORE_READING: &str = "the connection closed before reading it";

/// The kinds of fault `--faults` turns on against a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    LostAnswer,
    Duplicate,
    Hold,
    Pause,
    Crash,
    ClockSkew,
    StoreCut,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::LostAnswer,
        FaultKind::Duplicate,
        FaultKind::Hold,
        FaultKind::Pause,
        FaultKind::Crash,
        FaultKind::ClockSkew,
        FaultKind::StoreCut,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::LostAnswer => "lost-answer",
            FaultKind::Duplicate => "duplicate",
            FaultKind::Hold => "hold",
            FaultKind::Pause => "pause",
            FaultKind::Crash => "crash",
            FaultKind::ClockSkew => "clock-skew",
            FaultKind::StoreCut => "store-cut",
        }
    }

    /// What it does to a real fleet, for `--help` and reports.
    pub fn meaning(self) -> &'static str {
        match self {
            FaultKind::LostAnswer => {
                "the request reaches the instance and is processed; mcpsim discards its answer (over HTTP, or closes the connection before reading it) and the client retries with a fresh id"
            }
            FaultKind::Duplicate => "one request is written to two instances, or twice to one, before any answer is read",
            FaultKind::Hold => "a request is held back while later ones proceed, then released",
            FaultKind::Pause => "an instance is stopped (SIGSTOP) after it received a request, the client retries elsewhere, and the instance is continued (SIGCONT) later",
            FaultKind::Crash => "an instance is killed (SIGKILL) after it received a request and before it answered, then restarted",
            FaultKind::ClockSkew => "an instance runs under a shifted clock (libfaketime), ahead or behind",
            FaultKind::StoreCut => "the connections between the instances and their store are cut (a proxy mcpsim owns), or a SQLite file's write lock held, for a window",
        }
    }

    /// Parses `--faults` items against a target: kind names, or `all`.
    pub fn parse_list(items: &[String]) -> Result<Vec<FaultKind>, String> {
        let mut kinds = Vec::new();
        for item in items.iter().flat_map(|i| i.split(',')) {
            let item = item.trim();
            if item == "all" {
                kinds.extend(FaultKind::ALL);
                continue;
            }
            match FaultKind::ALL.iter().find(|k| k.as_str() == item) {
                Some(kind) => kinds.push(*kind),
                None => {
                    let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.as_str()).collect();
                    return Err(format!("unknown fault {item:?} against a target: the faults are {}, or all", names.join(", ")));
                }
            }
        }
        kinds.sort();
        kinds.dedup();
        Ok(kinds)
    }
}

/// Which request a fault fires on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "camelCase")]
pub enum Trigger {
    /// The n-th request the play puts on the wire (counted from 1 over the whole play: first attempts, retries
    /// and copies alike), or the first one after it the fault applies to; 0 (a clock skew): from the start.
    Request { number: usize },
    /// Armed by a scenario statement: the next request to scenario instance `instance` (declaration order)
    /// whose method is `method` (any method when `None`).
    Next { instance: usize, method: Option<String> },
}

/// Where the client sends its retry after a fault left its request without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryOn {
    /// The instance that lost the answer (once it is up again).
    Same,
    /// The next live instance of the fleet, in the play's routing order.
    Other,
    /// No automatic retry: the scenario writes its own (`retry NAME -> I`).
    Scenario,
}

/// What a fault does when it fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum FaultAction {
    /// The request is delivered and processed; its answer never reaches the client. `close_connection`: over
    /// HTTP the connection is closed right after the request was written, before the answer is read (whether
    /// the server finished is then its own timing); otherwise the whole answer is read and discarded.
    LoseAnswer { close_connection: bool, retry: RetryOn },
    /// The request is also written to another instance (`other`) or a second time to the same one, before
    /// either answer is read; the client sees the first answer, the copy's is recorded as the network's.
    Duplicate { other: bool },
    /// The request is not written now: it goes on the wire after `overtaken_by` later requests did (or when
    /// the play ends, whichever comes first).
    Hold { overtaken_by: usize },
    /// After the request is written, the instance's processes are stopped (SIGSTOP); they are continued
    /// (SIGCONT) after `resumed_after` later requests (or when the play ends), and the late answer is read
    /// and recorded then.
    Pause { resumed_after: usize, retry: RetryOn },
    /// After the request is written and before its answer is read, the instance is killed (SIGKILL); it is
    /// restarted after `restarted_after` later requests (or before the effect probe).
    Crash { restarted_after: usize, retry: RetryOn },
    /// Fleet instance `instance` (0-based) runs from its start with its clock `offset_ms` off the true time.
    ClockSkew { instance: usize, offset_ms: i64 },
    /// Once the request is delivered, the store's connections are cut after `after_statements` more
    /// statements reach it, and it stays unreachable for `outage_ms` (a proxy mcpsim owns; a SQLite file's
    /// write lock is held for that window instead).
    StoreCut { after_statements: u32, outage_ms: u64 },
}

impl FaultAction {
    pub fn kind(&self) -> FaultKind {
        match self {
            FaultAction::LoseAnswer { .. } => FaultKind::LostAnswer,
            FaultAction::Duplicate { .. } => FaultKind::Duplicate,
            FaultAction::Hold { .. } => FaultKind::Hold,
            FaultAction::Pause { .. } => FaultKind::Pause,
            FaultAction::Crash { .. } => FaultKind::Crash,
            FaultAction::ClockSkew { .. } => FaultKind::ClockSkew,
            FaultAction::StoreCut { .. } => FaultKind::StoreCut,
        }
    }
}

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultEvent {
    pub trigger: Trigger,
    pub action: FaultAction,
}

/// A play's faults: the kinds turned on and the events drawn (or armed), in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultPlan {
    pub kinds: Vec<FaultKind>,
    pub events: Vec<FaultEvent>,
}

/// Most events of one kind a drawn plan holds.
pub const EVENTS_PER_KIND_MAX: u64 = 2;
/// Bounds of a drawn plan's parameters: later requests that overtake a held one, or go out before a paused
/// instance is continued or a killed one restarted (1 to this).
pub const LATER_REQUESTS_MAX: u64 = 3;
/// A drawn clock skew is up to this far off, ahead or behind: twice mcpsim's own 300 s state TTL, so some
/// skews stay within a TTL and others reach past it.
pub const CLOCK_SKEW_MS_MAX: u64 = 600_000;
/// Most statements a drawn store cut lets through before it cuts (0 to this).
pub const STORE_CUT_AFTER_MAX: u64 = 4;
/// A drawn store outage lasts 100 ms to this.
pub const STORE_OUTAGE_MS_MAX: u64 = 1_000;

impl FaultPlan {
    /// The plan of `seed` against a fleet of `fleet_len` instances: for each kind of `kinds`, with even odds,
    /// one or two events at request numbers in `1..=requests_window` (a clock skew applies from the start:
    /// request 0), their parameters drawn within the bounds above; clients retry on the same or another
    /// instance, as drawn. Each kind draws from a stream of its own
    /// ([`Stream::TargetFaultKind`](crate::sim::engine::random::Stream::TargetFaultKind)), so turning a kind
    /// on or off never changes the others' events. A function of its arguments.
    pub fn draw(seed: u64, kinds: &[FaultKind], requests_window: usize, fleet_len: usize) -> FaultPlan {
        use crate::sim::engine::random::{below, stream, Stream};
        let mut kinds = kinds.to_vec();
        kinds.sort();
        kinds.dedup();
        let mut events: Vec<FaultEvent> = Vec::new();
        if fleet_len == 0 || requests_window == 0 {
            return FaultPlan { kinds, events };
        }
        for &kind in &kinds {
            let mut rng = stream(seed, Stream::TargetFaultKind(kind as u16));
            let draws = &mut rng;
            if below(draws, 2) == 0 {
                continue;
            }
            let count = 1 + below(draws, EVENTS_PER_KIND_MAX);
            for _ in 0..count {
                let number = 1 + below(draws, requests_window as u64) as usize;
                let retry = if below(draws, 2) == 0 { RetryOn::Same } else { RetryOn::Other };
                let later = 1 + below(draws, LATER_REQUESTS_MAX) as usize;
                let action = match kind {
                    FaultKind::LostAnswer => FaultAction::LoseAnswer { close_connection: below(draws, 2) == 1, retry },
                    FaultKind::Duplicate => FaultAction::Duplicate { other: below(draws, 2) == 1 },
                    FaultKind::Hold => FaultAction::Hold { overtaken_by: later },
                    FaultKind::Pause => FaultAction::Pause { resumed_after: later, retry },
                    FaultKind::Crash => FaultAction::Crash { restarted_after: later, retry },
                    FaultKind::ClockSkew => {
                        let instance = below(draws, fleet_len as u64) as usize;
                        let magnitude = 1 + below(draws, CLOCK_SKEW_MS_MAX) as i64;
                        let offset_ms = if below(draws, 2) == 0 { magnitude } else { -magnitude };
                        // One skew per instance: a process runs under one clock.
                        if events.iter().any(|e| matches!(e.action, FaultAction::ClockSkew { instance: i, .. } if i == instance)) {
                            continue;
                        }
                        events.push(FaultEvent {
                            trigger: Trigger::Request { number: 0 },
                            action: FaultAction::ClockSkew { instance, offset_ms },
                        });
                        continue;
                    }
                    FaultKind::StoreCut => FaultAction::StoreCut {
                        after_statements: below(draws, STORE_CUT_AFTER_MAX + 1) as u32,
                        outage_ms: 100 + below(draws, STORE_OUTAGE_MS_MAX - 99),
                    },
                };
                events.push(FaultEvent { trigger: Trigger::Request { number }, action });
            }
        }
        events.sort_by_key(|e| (e.request_number(), e.action.kind()));
        FaultPlan { kinds, events }
    }

    /// Whether faults are on: kinds turned on or events given (a plan shrunk to no event still has its kinds:
    /// the clients still retry, and the play is judged as under faults).
    pub fn is_faulty(&self) -> bool {
        !self.kinds.is_empty() || !self.events.is_empty()
    }

    /// The same plan without event `index` (what shrinking tries).
    pub fn without(&self, index: usize) -> FaultPlan {
        let mut plan = self.clone();
        if index < plan.events.len() {
            plan.events.remove(index);
        }
        plan
    }
}

impl FaultEvent {
    /// The request number a drawn event waits for (0 for one that applies from the start; an armed event,
    /// which waits for a method, sorts last).
    pub fn request_number(&self) -> usize {
        match self.trigger {
            Trigger::Request { number } => number,
            Trigger::Next { .. } => usize::MAX,
        }
    }
}

impl std::fmt::Display for RetryOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RetryOn::Same => "the client retries on the same instance",
            RetryOn::Other => "the client retries on another instance",
            RetryOn::Scenario => "the scenario retries",
        })
    }
}

impl std::fmt::Display for FaultEvent {
    /// One line of a decision log: `at request 3: its answer lost (the connection closed before reading it); the client retries on another instance`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.trigger {
            Trigger::Request { number } => write!(f, "at request {number}: ")?,
            Trigger::Next { instance, method } => {
                write!(f, "at the next {} to scenario instance {}: ", method.as_deref().unwrap_or("request"), instance + 1)?
            }
        }
        match &self.action {
            FaultAction::LoseAnswer { close_connection: true, retry } => {
                write!(f, "its answer lost ({CLOSED_BEFORE_READING}); {retry}")
            }
            FaultAction::LoseAnswer { close_connection: false, retry } => write!(f, "its answer lost (read and discarded); {retry}"),
            FaultAction::Duplicate { other: true } => f.write_str("delivered twice, to its instance and another"),
            FaultAction::Duplicate { other: false } => f.write_str("delivered twice to its instance"),
            FaultAction::Hold { overtaken_by: usize::MAX } => f.write_str("held back until the scenario releases it"),
            FaultAction::Hold { overtaken_by } => write!(f, "held back until {overtaken_by} later request(s) went out"),
            FaultAction::Pause { resumed_after, retry } => {
                write!(f, "its instance paused (SIGSTOP) once it has it, continued after {resumed_after} later request(s); {retry}")
            }
            FaultAction::Crash { restarted_after, retry } => {
                write!(f, "its instance killed (SIGKILL) once it has it, restarted after {restarted_after} later request(s); {retry}")
            }
            FaultAction::ClockSkew { instance, offset_ms } => write!(f, "t{} runs with its clock {offset_ms:+} ms off", instance + 1),
            FaultAction::StoreCut { after_statements, outage_ms } => {
                write!(f, "the store cut after {after_statements} more statement(s), for {outage_ms} ms")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_by_name_or_all_and_an_unknown_one_is_named() {
        assert_eq!(FaultKind::parse_list(&["pause,lost-answer".into()]).unwrap(), vec![FaultKind::LostAnswer, FaultKind::Pause]);
        assert_eq!(FaultKind::parse_list(&["all".into()]).unwrap(), FaultKind::ALL.to_vec());
        let error = FaultKind::parse_list(&["drop".into()]).unwrap_err();
        assert!(error.contains("\"drop\"") && error.contains("lost-answer"), "{error}");
    }

    #[test]
    fn a_plan_round_trips_through_json_and_reads_as_one_line_per_event() {
        let plan = FaultPlan {
            kinds: vec![FaultKind::LostAnswer, FaultKind::Pause],
            events: vec![
                FaultEvent {
                    trigger: Trigger::Request { number: 3 },
                    action: FaultAction::LoseAnswer { close_connection: true, retry: RetryOn::Other },
                },
                FaultEvent {
                    trigger: Trigger::Next { instance: 0, method: Some("tools/call".into()) },
                    action: FaultAction::Pause { resumed_after: 1, retry: RetryOn::Scenario },
                },
            ],
        };
        let json = serde_json::to_string(&plan).unwrap();
        assert_eq!(serde_json::from_str::<FaultPlan>(&json).unwrap(), plan);
        assert_eq!(
            plan.events[0].to_string(),
            "at request 3: its answer lost (the connection closed before reading it); the client retries on another instance"
        );
        assert!(plan.events[1].to_string().starts_with("at the next tools/call to scenario instance 1: its instance paused"));
    }
}

#[cfg(test)]
mod draw_tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_plan_and_each_kind_is_independent_of_the_others() {
        for seed in 0..300 {
            let all = FaultPlan::draw(seed, &FaultKind::ALL, 6, 3);
            assert_eq!(all, FaultPlan::draw(seed, &FaultKind::ALL, 6, 3));
            assert_eq!(all.kinds, FaultKind::ALL.to_vec());
            for kind in FaultKind::ALL {
                let alone = FaultPlan::draw(seed, &[kind], 6, 3);
                let share: Vec<FaultEvent> = all.events.iter().filter(|e| e.action.kind() == kind).cloned().collect();
                assert_eq!(alone.events, share, "seed {seed}: {kind:?} drawn alone is its share of all");
                // Turning one kind off leaves every other kind's events as they were.
                let others: Vec<FaultKind> = FaultKind::ALL.iter().copied().filter(|k| *k != kind).collect();
                let without = FaultPlan::draw(seed, &others, 6, 3);
                let rest: Vec<FaultEvent> = all.events.iter().filter(|e| e.action.kind() != kind).cloned().collect();
                assert_eq!(without.events, rest, "seed {seed}: turning {kind:?} off changed the others");
            }
        }
        assert_ne!(FaultPlan::draw(1, &FaultKind::ALL, 6, 3), FaultPlan::draw(2, &FaultKind::ALL, 6, 3));
    }

    #[test]
    fn drawn_plans_stay_within_their_bounds_and_reach_every_kind_and_variant() {
        let (mut kinds, mut closes, mut keeps, mut same, mut other, mut ahead, mut behind) =
            (Vec::new(), false, false, false, false, false, false);
        for seed in 0..500 {
            let plan = FaultPlan::draw(seed, &FaultKind::ALL, 5, 3);
            assert!(plan.events.windows(2).all(|w| w[0].request_number() <= w[1].request_number()), "seed {seed}: in request order");
            for kind in FaultKind::ALL {
                assert!(plan.events.iter().filter(|e| e.action.kind() == kind).count() as u64 <= EVENTS_PER_KIND_MAX);
            }
            for event in &plan.events {
                kinds.push(event.action.kind());
                let number = event.request_number();
                match &event.action {
                    FaultAction::ClockSkew { instance, offset_ms } => {
                        assert_eq!(number, 0);
                        assert!(*instance < 3 && (1..=CLOCK_SKEW_MS_MAX).contains(&offset_ms.unsigned_abs()));
                        ahead |= *offset_ms > 0;
                        behind |= *offset_ms < 0;
                        let skews =
                            plan.events.iter().filter(|e| matches!(e.action, FaultAction::ClockSkew { instance: i, .. } if i == *instance));
                        assert_eq!(skews.count(), 1, "seed {seed}: one skew per instance");
                    }
                    action => {
                        assert!((1..=5).contains(&number), "seed {seed}: {event}");
                        match action {
                            FaultAction::LoseAnswer { close_connection, retry } => {
                                closes |= *close_connection;
                                keeps |= !*close_connection;
                                same |= *retry == RetryOn::Same;
                                other |= *retry == RetryOn::Other;
                                assert_ne!(*retry, RetryOn::Scenario);
                            }
                            FaultAction::Hold { overtaken_by: n }
                            | FaultAction::Pause { resumed_after: n, .. }
                            | FaultAction::Crash { restarted_after: n, .. } => {
                                assert!((1..=LATER_REQUESTS_MAX as usize).contains(n))
                            }
                            FaultAction::StoreCut { after_statements, outage_ms } => {
                                assert!(
                                    u64::from(*after_statements) <= STORE_CUT_AFTER_MAX && (100..=STORE_OUTAGE_MS_MAX).contains(outage_ms)
                                )
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        for kind in FaultKind::ALL {
            assert!(kinds.contains(&kind), "{kind:?} is drawn by some seed");
        }
        assert!(closes && keeps && same && other && ahead && behind);
        assert!(FaultPlan::draw(1, &[], 5, 3).events.is_empty());
        assert!(FaultPlan::draw(1, &FaultKind::ALL, 5, 0).events.is_empty());
    }

    #[test]
    fn a_plan_without_one_event_keeps_the_others_in_order() {
        let plan = (0..).map(|seed| FaultPlan::draw(seed, &FaultKind::ALL, 5, 3)).find(|p| p.events.len() >= 3).unwrap();
        let shorter = plan.without(1);
        assert_eq!(shorter.events.len(), plan.events.len() - 1);
        assert_eq!(shorter.events[0], plan.events[0]);
        assert_eq!(shorter.events[1], plan.events[2]);
        assert_eq!(shorter.kinds, plan.kinds);
    }
}
