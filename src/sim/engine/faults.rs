//! Faults: what can go wrong in a run besides the order of deliveries, drawn from the seed and recorded in
//! the decision log.
//!
//! A fault is planned at a delivery point (counted from 1 over the whole run) and fires at the first
//! delivery at or after that point it applies to: a drop waits for a message between a client and an
//! instance, a duplicate for a client's request. A fault fires at most once, and the cluster records it,
//! with the delivery at which it actually fired, in the run's [`DecisionLog`](crate::sim::engine::scheduler::DecisionLog),
//! so replaying the log repeats every fault exactly.
//!
//! Faults never reach the stores themselves: a store is a database behind a reliable connection, which can
//! be slow but does not lose or repeat a committed transaction. What is unreliable is the network between
//! clients and instances, the instances (they crash), their clocks and their keys.
//!
//! Under faults, clients retry: a request lost to a drop or a crash, or answered "in progress" while its
//! confirmation's claim is still pending, is sent again with the same bytes (same state) to the next
//! instance of the same deployment (same kind, same keys), after the network has gone quiet (a client's timeout). Each request
//! has a bounded retry budget larger than the number of faults a plan can hold, so once the faults stop
//! every request can get an answer: that is what the liveness property judges.

use crate::sim::engine::random::{self, Stream};
use serde::{Deserialize, Serialize};

/// Deliveries within which faults are planned (the scenarios' runs are a few dozen deliveries long).
pub const FAULT_DELIVERY_WINDOW: u64 = 40;
/// Most faults of one kind in one plan.
pub(crate) const FAULTS_PER_KIND_MAX: u64 = 2;
/// Retries one client request may make after its first attempt. More than the faults that can lose an
/// attempt in one plan (crashes, drops, and every call the store outages refuse), so every request has at
/// least one attempt no fault touches.
pub(crate) const RETRIES_MAX: u32 = (2 + UNAVAILABLE_CALLS_MAX as u32) * FAULTS_PER_KIND_MAX as u32 + 2;
/// Virtual time a client waits before retrying (its timeout).
pub(crate) const RETRY_TIMEOUT_MS: u64 = 1_000;
/// Bounds of a delayed message's extra latency, and how many other deliveries overtake it at most.
pub(crate) const DELAY_MS_MAX: u64 = 5_000;
pub(crate) const OVERTAKEN_BY_MAX: u64 = 4;
/// Bound of a slow store's extra latency per answer.
pub(crate) const SLOW_STORE_MS_MAX: u64 = 2_000;
/// Most calls one outage of a store refuses.
pub(crate) const UNAVAILABLE_CALLS_MAX: u64 = 2;

/// The kinds of fault `--faults` can turn on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    Crash,
    Drop,
    Duplicate,
    Delay,
    SlowStore,
    ClockSkew,
    RotateKey,
    StoreUnavailable,
}

impl FaultKind {
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Crash,
        FaultKind::Drop,
        FaultKind::Duplicate,
        FaultKind::Delay,
        FaultKind::SlowStore,
        FaultKind::ClockSkew,
        FaultKind::RotateKey,
        FaultKind::StoreUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::Drop => "drop",
            FaultKind::Duplicate => "duplicate",
            FaultKind::Delay => "delay",
            FaultKind::SlowStore => "slow-store",
            FaultKind::ClockSkew => "clock-skew",
            FaultKind::RotateKey => "rotate-key",
            FaultKind::StoreUnavailable => "store-unavailable",
        }
    }

    /// What it does, for `--help` and errors.
    pub fn meaning(self) -> &'static str {
        match self {
            FaultKind::Crash => "an instance crashes and restarts at once, at any delivery point (even between claim and answer)",
            FaultKind::Drop => "a request or response between a client and an instance is lost; the client retries",
            FaultKind::Duplicate => "a client's request is delivered twice, to the same or another instance",
            FaultKind::Delay => "a message is held back: it arrives later, after other messages overtook it",
            FaultKind::SlowStore => "the note or replay store answers late, behind other traffic",
            FaultKind::ClockSkew => "an instance's clock runs ahead or behind, within the replay store's grace period",
            FaultKind::RotateKey => "every instance starts signing with a new key mid-flow (old states still verify)",
            FaultKind::StoreUnavailable => "the note or replay store refuses its next calls as unavailable (an outage), then recovers",
        }
    }

    /// Parses `--faults` items: kind names, or `all`.
    pub fn parse_list(items: &[String]) -> Result<Vec<FaultKind>, String> {
        let mut kinds = Vec::new();
        for item in items {
            let item = item.trim();
            if item == "all" {
                kinds.extend(FaultKind::ALL);
                continue;
            }
            match FaultKind::ALL.iter().find(|k| k.as_str() == item) {
                Some(kind) => kinds.push(*kind),
                None => {
                    let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.as_str()).collect();
                    return Err(format!("unknown fault {item:?}: the faults are {}, or all", names.join(", ")));
                }
            }
        }
        kinds.sort();
        kinds.dedup();
        Ok(kinds)
    }
}

/// Which store a slow-store or store-unavailable fault affects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreName {
    Notes,
    Replay,
}

impl StoreName {
    pub fn describe(self) -> &'static str {
        match self {
            StoreName::Notes => "note store",
            StoreName::Replay => "replay store",
        }
    }
}

/// One fault, planned at (or, once fired, recorded at) delivery `at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum Fault {
    /// Crash `instance` (index in declaration order) and restart it at once, just before delivery `at`.
    Crash { at: usize, instance: usize },
    /// The message between a client and an instance chosen for delivery `at` (or the first after it) is lost.
    Drop { at: usize },
    /// The client request chosen for delivery `at` (or the first after it) is delivered, and a copy of it
    /// goes to `instance` (the same one, or another of the same kind).
    Duplicate { at: usize, instance: usize },
    /// The message chosen for delivery `at` is not delivered now: it arrives `delay_ms` later, and only after
    /// `overtaken_by` other deliveries (or when nothing else is in flight).
    Delay { at: usize, delay_ms: u64, overtaken_by: usize },
    /// From delivery `at` on, each answer of `store` takes `delay_ms` longer and lets one other delivery
    /// overtake it.
    SlowStore { at: usize, store: StoreName, delay_ms: u64 },
    /// From the start, `instance`'s clock reads `offset_ms` off the true time.
    ClockSkew { instance: usize, offset_ms: i64 },
    /// Just before delivery `at`, every instance starts signing with a new key `key_id`; the keys it had still
    /// verify.
    RotateKey { at: usize, key_id: String },
    /// From delivery `at` on, `store` refuses the next `calls` calls it receives as unavailable, doing nothing
    /// they ask; then it serves again.
    StoreUnavailable { at: usize, store: StoreName, calls: u32 },
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Crash { .. } => FaultKind::Crash,
            Fault::Drop { .. } => FaultKind::Drop,
            Fault::Duplicate { .. } => FaultKind::Duplicate,
            Fault::Delay { .. } => FaultKind::Delay,
            Fault::SlowStore { .. } => FaultKind::SlowStore,
            Fault::ClockSkew { .. } => FaultKind::ClockSkew,
            Fault::RotateKey { .. } => FaultKind::RotateKey,
            Fault::StoreUnavailable { .. } => FaultKind::StoreUnavailable,
        }
    }

    /// The delivery point it is planned (or was fired) at; a clock skew applies from the start.
    pub fn at(&self) -> usize {
        match self {
            Fault::Crash { at, .. }
            | Fault::Drop { at }
            | Fault::Duplicate { at, .. }
            | Fault::Delay { at, .. }
            | Fault::SlowStore { at, .. }
            | Fault::StoreUnavailable { at, .. }
            | Fault::RotateKey { at, .. } => *at,
            Fault::ClockSkew { .. } => 0,
        }
    }

    /// The same fault, recorded at the delivery where it fired.
    pub(crate) fn fired_at(&self, delivery: usize) -> Fault {
        let mut fired = self.clone();
        match &mut fired {
            Fault::Crash { at, .. }
            | Fault::Drop { at }
            | Fault::Duplicate { at, .. }
            | Fault::Delay { at, .. }
            | Fault::SlowStore { at, .. }
            | Fault::StoreUnavailable { at, .. }
            | Fault::RotateKey { at, .. } => *at = delivery,
            Fault::ClockSkew { .. } => {}
        }
        fired
    }

    /// One line for transcripts and reports; `instance` names an instance by index.
    pub(crate) fn describe(&self, instance: &dyn Fn(usize) -> String) -> String {
        match self {
            Fault::Crash { at, instance: i } => format!("crash and restart {} before delivery {at}", instance(*i)),
            Fault::Drop { at } => format!("drop the client message chosen at delivery {at}"),
            Fault::Duplicate { at, instance: i } => format!("duplicate the request chosen at delivery {at}, the copy to {}", instance(*i)),
            Fault::Delay { at, delay_ms, overtaken_by } => {
                format!("delay the message chosen at delivery {at} by {delay_ms}ms, behind {overtaken_by} other deliveries")
            }
            Fault::SlowStore { at, store, delay_ms } => {
                format!("the {} answers {delay_ms}ms late from delivery {at} on", store.describe())
            }
            Fault::StoreUnavailable { at, store, calls } => {
                format!("the {} refuses its next {calls} call(s) as unavailable from delivery {at} on", store.describe())
            }
            Fault::ClockSkew { instance: i, offset_ms } => format!("{}'s clock is skewed by {offset_ms:+}ms", instance(*i)),
            Fault::RotateKey { at, key_id } => format!("every instance signs with new key {key_id} before delivery {at}"),
        }
    }
}

/// What a plan is drawn for: the cluster's size and the clock tolerance the design promises.
#[derive(Debug, Clone, Copy)]
pub struct PlanShape {
    pub instances: usize,
    /// Skews are drawn within ± this (the replay store's retention grace: the design's clock tolerance).
    pub skew_ms_max: u64,
}

/// The fault plan of `seed`: for each kind turned on, with even odds, one or more faults of it at delivery
/// points drawn from the first [`FAULT_DELIVERY_WINDOW`]. A function of the seed, the kinds and the shape.
pub fn plan(seed: u64, kinds: &[FaultKind], shape: PlanShape) -> Vec<Fault> {
    let mut faults = Vec::new();
    if shape.instances == 0 {
        return faults;
    }
    // Kinds in a fixed order, each drawing the same numbers whatever else is on: turning a kind on or off
    // never changes the faults of the others.
    for kind in FaultKind::ALL {
        let mut kind_rng = random::stream(seed, Stream::FaultKind(kind as u16));
        let draws = &mut kind_rng;
        if random::below(draws, 2) == 0 {
            continue;
        }
        let count = 1 + random::below(draws, FAULTS_PER_KIND_MAX);
        for number in 0..count {
            let at = 1 + random::below(draws, FAULT_DELIVERY_WINDOW) as usize;
            let instance = random::below(draws, shape.instances as u64) as usize;
            let fault = match kind {
                FaultKind::Crash => Fault::Crash { at, instance },
                FaultKind::Drop => Fault::Drop { at },
                FaultKind::Duplicate => Fault::Duplicate { at, instance },
                FaultKind::Delay => Fault::Delay {
                    at,
                    delay_ms: 1 + random::below(draws, DELAY_MS_MAX),
                    overtaken_by: 1 + random::below(draws, OVERTAKEN_BY_MAX) as usize,
                },
                FaultKind::SlowStore => Fault::SlowStore {
                    at,
                    store: if random::below(draws, 2) == 0 { StoreName::Notes } else { StoreName::Replay },
                    delay_ms: 1 + random::below(draws, SLOW_STORE_MS_MAX),
                },
                FaultKind::ClockSkew => {
                    let span = 2 * shape.skew_ms_max + 1;
                    let offset_ms = random::below(draws, span) as i64 - shape.skew_ms_max as i64;
                    // One skew per instance: two would add up beyond the tolerance drawn within.
                    if faults.iter().any(|f| matches!(f, Fault::ClockSkew { instance: other, .. } if *other == instance)) {
                        continue;
                    }
                    Fault::ClockSkew { instance, offset_ms }
                }
                FaultKind::RotateKey => Fault::RotateKey { at, key_id: format!("rotated-{}", number + 1) },
                FaultKind::StoreUnavailable => Fault::StoreUnavailable {
                    at,
                    store: if random::below(draws, 2) == 0 { StoreName::Notes } else { StoreName::Replay },
                    calls: 1 + random::below(draws, UNAVAILABLE_CALLS_MAX) as u32,
                },
            };
            if kinds.contains(&kind) {
                faults.push(fault);
            }
        }
    }
    faults.sort_by_key(|f| (f.at(), f.kind()));
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: PlanShape = PlanShape { instances: 3, skew_ms_max: 60_000 };

    #[test]
    fn a_plan_is_a_function_of_the_seed_and_each_kind_is_independent_of_the_others() {
        for seed in 0..200 {
            let all = plan(seed, &FaultKind::ALL, SHAPE);
            assert_eq!(all, plan(seed, &FaultKind::ALL, SHAPE));
            for kind in FaultKind::ALL {
                let alone = plan(seed, &[kind], SHAPE);
                let from_all: Vec<Fault> = all.iter().filter(|f| f.kind() == kind).cloned().collect();
                assert_eq!(alone, from_all, "seed {seed}: {kind:?} drawn alone equals its share of `all`");
            }
        }
    }

    #[test]
    fn plans_stay_within_their_bounds_and_use_every_kind() {
        let mut seen = Vec::new();
        for seed in 0..500 {
            let faults = plan(seed, &FaultKind::ALL, SHAPE);
            let losing: usize = faults
                .iter()
                .map(|f| match f {
                    Fault::Crash { .. } | Fault::Drop { .. } => 1,
                    Fault::StoreUnavailable { calls, .. } => *calls as usize,
                    _ => 0,
                })
                .sum();
            assert!(losing < RETRIES_MAX as usize, "seed {seed}: the retry budget outlasts the faults that lose attempts");
            for fault in &faults {
                seen.push(fault.kind());
                match fault {
                    Fault::Crash { instance, at } | Fault::Duplicate { instance, at } => {
                        assert!(*instance < 3 && (1..=FAULT_DELIVERY_WINDOW as usize).contains(at));
                    }
                    Fault::ClockSkew { instance, offset_ms } => {
                        assert!(*instance < 3 && offset_ms.unsigned_abs() <= 60_000);
                        let skews = faults.iter().filter(|f| matches!(f, Fault::ClockSkew { instance: i, .. } if i == instance)).count();
                        assert_eq!(skews, 1, "seed {seed}: one skew per instance");
                    }
                    Fault::Delay { delay_ms, overtaken_by, .. } => {
                        assert!((1..=DELAY_MS_MAX).contains(delay_ms) && (1..=OVERTAKEN_BY_MAX as usize).contains(overtaken_by));
                    }
                    Fault::SlowStore { delay_ms, .. } => assert!((1..=SLOW_STORE_MS_MAX).contains(delay_ms)),
                    Fault::StoreUnavailable { calls, .. } => assert!((1..=UNAVAILABLE_CALLS_MAX as u32).contains(calls)),
                    Fault::Drop { .. } | Fault::RotateKey { .. } => {}
                }
            }
        }
        for kind in FaultKind::ALL {
            assert!(seen.contains(&kind), "{kind:?} is drawn by some seed");
        }
        assert!(plan(1, &[], SHAPE).is_empty());
    }

    #[test]
    fn fault_lists_parse_by_name_or_all_and_reject_unknown_names() {
        assert_eq!(FaultKind::parse_list(&["all".into()]).unwrap(), FaultKind::ALL);
        assert_eq!(FaultKind::parse_list(&["drop".into(), "crash".into(), "drop".into()]).unwrap(), [FaultKind::Crash, FaultKind::Drop]);
        let error = FaultKind::parse_list(&["partition".into()]).unwrap_err();
        assert!(error.contains("unknown fault \"partition\"") && error.contains("slow-store"), "{error}");
    }

    #[test]
    fn faults_serialize_as_tagged_objects_and_record_where_they_fired() {
        let fault = Fault::Delay { at: 3, delay_ms: 40, overtaken_by: 2 };
        let text = serde_json::to_string(&fault).unwrap();
        assert_eq!(text, r#"{"fault":"delay","at":3,"delayMs":40,"overtakenBy":2}"#);
        assert_eq!(serde_json::from_str::<Fault>(&text).unwrap(), fault);
        assert_eq!(fault.fired_at(9).at(), 9);
        assert!(serde_json::from_str::<Fault>(r#"{"fault":"drop","at":1,"extra":0}"#).is_err());
    }
}
