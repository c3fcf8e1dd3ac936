//! A world is where a scenario is played: the simulated cluster, a live fleet, someone else's server. The
//! interpreter ([`super::play`]) walks the statements once and asks the world to carry each one out; a world
//! does what it can and says why it cannot do the rest.

use crate::framework::ports::Note;
/// What a client puts on the wire: below `play` (in the history's module), so a world's engine takes it
/// without importing the interpreter.
pub use crate::oracle::history::Outgoing;
use crate::oracle::history::{Attempt, History, OperationId};
use crate::scenario::model::{AdminAction, TriggerSpec};
use crate::servers::gateway::backends::ExportRecord;
use serde_json::Value;

/// One item of a `parallel` block.
#[derive(Debug, Clone)]
pub enum Item {
    Send(Outgoing),
    Admin(AdminAction),
    /// A browser request to the out-of-band page (see [`World::browse`]).
    Browse(Outgoing),
}

/// Why a world without browsers refuses a `browse` step.
pub const NO_BROWSER: &str =
    "this world has no browser actor: a `browse` step (the out-of-band page of URL-mode elicitation) runs only in the simulator; \
     drive the page of a real server with a browser (tests/url_mode_browser.rs) or plain HTTP";

/// A fault a scenario statement arms on the next request of a method to an instance (`drop answer …`,
/// `duplicate …`, `hold …`); instances by their position among the scenario's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArmedFault {
    /// The request is processed; its answer never reaches the client (`closing`: the client stops waiting as
    /// soon as it is written).
    DropAnswer { closing: bool },
    /// A copy (same bytes, same id) also goes to `onto`, or a second time to the same instance.
    Duplicate { onto: Option<usize> },
    /// Not written until [`World::release`] (or the end of the play).
    Hold,
}

/// Why a world without client-side message faults refuses `drop`/`duplicate`/`hold`/`release`.
pub const NO_MESSAGE_FAULTS: &str =
    "this world cannot lose, copy or hold one chosen request: `drop answer`, `duplicate`, `hold` and `release` \
     run against a target (`mcpsim run --target`) and a live fleet (`mcpsim live`), where mcpsim is the client";

/// Why a world did not carry a step out as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// This world cannot do it at all (a live fleet cannot advance the wall clock): the step is skipped.
    Unsupported(String),
    // Only live mode and targets (`http`) compare a play with the simulator's.
    /// It was done, but the world was not as the scenario assumed (the store held no such note): what
    /// follows may differ from the scenario's intent.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    Differs(String),
    /// It was attempted and failed (a request the transport could not deliver, a key the ring refused).
    Failed(String),
    /// The world stopped and cannot continue (a runaway simulation, a diverged replay).
    Stopped(String),
}

impl Refused {
    /// What the world said.
    pub fn reason(&self) -> &str {
        match self {
            Refused::Unsupported(why) | Refused::Differs(why) | Refused::Failed(why) | Refused::Stopped(why) => why,
        }
    }
}

/// Why a world cannot observe its store (an expectation about it is then not evaluated, and says this).
// The simulator observes everything: only live mode and targets (with `http`/`cli`) say why they cannot.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unobservable {
    /// Live mode without `--reseed`: the store is not known.
    #[error("it reads the store; pass --reseed SPEC (the fleet's --store) to re-seed it and evaluate this")]
    NoStore,
    /// The store could not be read (`spec`, as shown, without a password).
    #[error("cannot read the store {spec}: {error}")]
    Unreadable { spec: String, error: crate::framework::ports::StoreError },
    #[error("exports are recorded inside the gateway's backends, which live mode cannot read")]
    LiveExports,
    #[error("a target's store is not read; its effects are probed (see [effects])")]
    TargetStore,
    #[error("a target's replay store is not read")]
    TargetReplayStore,
    #[error("a target has no gateway backends mcpsim can read")]
    TargetExports,
}

/// Why a world does not judge a scenario's expectations, or does not play its 2025-11-25 clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotPlayed {
    /// Clients retry under a target's faults: a retry may take a flow another way than the scenario wrote, and
    /// a target's expectations are shown, not judged, there (marked `always` or not).
    #[error("not judged under faults")]
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    UnderFaults,
    /// Clients retry under the simulator's faults: only the expectations marked `always` are judged.
    #[error("not judged under faults (not marked `always`)")]
    UnderFaultsUnlessMarked,
    /// A re-run compared by something else than its expectations (what, said by the one that asked).
    #[error("{0}")]
    ComparedOtherwise(&'static str),
    /// This world's transport carries no session and no server→client request (`world`, its label).
    #[error(
        "{world} legacy clients are not played (no session or server→client requests over this world's transport); run the scenario in the simulator (`mcpsim run`), and see tests/eras.rs for the real binary"
    )]
    NoLegacyClients { world: String },
    /// This world has no target file, so no `[stages.NAME]` to start an instance in.
    #[error(
        "stages are a target file's ([stages.NAME]); {world} the instance would run another configuration: play this lesson with --target"
    )]
    NoStages { world: String },
}

/// How many nonces a world's replay store consumed, and how the count was found, for messages.
pub struct Consumed<'w> {
    pub count: usize,
    /// What was counted (the records, or how the count was taken), written only for a message: a count that
    /// is the one expected needs none.
    pub listing: Box<dyn FnOnce() -> String + 'w>,
}

/// What the interpreter tells a world's transcript as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Annotation {
    /// A step begins (`number` counts the steps that act, from 1).
    Step { number: usize, line: usize, text: String },
    /// One item of a `parallel` block.
    Substep { line: usize, text: String },
    /// An expectation, judged (`failure` is why it did not hold).
    Check { line: usize, text: String, failure: Option<String> },
    /// Anything else worth a line.
    Note { text: String },
}

/// A world the interpreter can play a scenario in. Instances and clients are named by their position in
/// the scenario's declarations.
pub trait World {
    /// How messages name this world: "live", "in the simulator".
    fn label(&self) -> &'static str;

    /// Sends one request and lets the world settle (everything it caused is answered or lost).
    fn send(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused>;

    /// Puts every item in flight at once, then lets the world settle. Each send's own result, in order;
    /// `Err` for the whole block when the world cannot race it at all.
    fn parallel(&mut self, items: Vec<Item>) -> Result<Vec<Result<OperationId, Refused>>, Refused>;

    /// A browser request to an instance's out-of-band page (URL-mode elicitation), from the browser actor
    /// `outgoing.client` (signed in as its user); `outgoing.bytes()` is `{"page":"open"|"complete","url":…}`.
    /// The world settles after it. Worlds without a browser actor refuse it.
    fn browse(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused> {
        let _ = outgoing;
        Err(Refused::Unsupported(NO_BROWSER.into()))
    }

    /// An admin change, made behind every client's back; the world settles after it.
    fn admin(&mut self, action: &AdminAction) -> Result<(), Refused>;

    fn advance(&mut self, duration_ms: u64) -> Result<(), Refused>;

    /// Stops an instance now, or (`trigger`) at the moment the trigger names.
    fn crash(&mut self, instance: usize, trigger: Option<&TriggerSpec>) -> Result<(), Refused>;

    fn restart(&mut self, instance: usize) -> Result<(), Refused>;

    /// Stops an instance's processes now, or (`trigger`) right after the request the trigger names is written
    /// to it; its answers wait for [`World::resume`].
    fn pause(&mut self, instance: usize, trigger: Option<&TriggerSpec>) -> Result<(), Refused> {
        let _ = (instance, trigger);
        Err(Refused::Unsupported(format!("{} has no processes to stop: `pause` is played against a target", self.label())))
    }

    /// Continues a paused instance and reads the answers it owes.
    fn resume(&mut self, instance: usize) -> Result<(), Refused> {
        let _ = instance;
        Err(Refused::Unsupported(format!("{} has no processes to continue: `resume` is played against a target", self.label())))
    }

    /// Arms `fault` on the next request of `method` the scenario sends to `instance`. A fault never met by the
    /// end of the play is reported, never silently passed.
    fn arm(&mut self, instance: usize, method: &str, fault: &ArmedFault) -> Result<(), Refused> {
        let _ = (instance, method, fault);
        Err(Refused::Unsupported(NO_MESSAGE_FAULTS.into()))
    }

    /// Puts the requests held for `instance` on the wire now and records their answers; the operations.
    fn release(&mut self, instance: usize) -> Result<Vec<OperationId>, Refused> {
        let _ = instance;
        Err(Refused::Unsupported(NO_MESSAGE_FAULTS.into()))
    }

    /// The client sends the request of `of` again (`outgoing`: the same request with a fresh id), recorded
    /// as its retry number `number`. Every world can: it sends it, and marks what it sent a retry.
    fn retry(&mut self, of: OperationId, number: u32, outgoing: Outgoing) -> Result<OperationId, Refused> {
        let id = self.send(outgoing)?;
        self.mark_attempt(id, Attempt::Retry { of, number });
        Ok(id)
    }

    /// Records that the operation `id`, just sent, repeats another (`attempt`).
    fn mark_attempt(&mut self, id: OperationId, attempt: Attempt);

    /// The store (`notes` or `replay`) refuses its next `calls` calls as unavailable, doing nothing they ask.
    fn store_unavailable(&mut self, store: &str, _calls: u32) -> Result<(), Refused> {
        Err(Refused::Unsupported(format!("the {store} store of this world cannot be made unavailable on command")))
    }

    /// `store cut after N statements [for DURATION]`: armed on the next request any instance receives, the store
    /// lets `after_statements` more statements through, then every connection to it is cut and new ones are
    /// refused for `outage_ms` (`None`: until the next step). The simulator's stores have no connections and
    /// statements (its `store … unavailable` refuses whole calls, which is another fault): refused there.
    fn store_cut(&mut self, _after_statements: u32, _outage_ms: Option<u64>) -> Result<(), Refused> {
        Err(Refused::Unsupported(
            "a store cut acts on a real fleet's database connections (a target with [store]); this world's stores have none \
             (`store notes|replay unavailable for N calls` is its outage)"
                .into(),
        ))
    }

    /// `store lock for DURATION`: the store's write lock held from now for the window (a SQLite target).
    fn store_lock(&mut self, _window_ms: u64) -> Result<(), Refused> {
        Err(Refused::Unsupported("a store lock holds a real SQLite file's write lock (a target with [store] kind = \"sqlite\")".into()))
    }

    /// Restarts these instances in the target file's stage `stage` (its command, arguments, environment): now,
    /// or right after the next request `trigger` names is written to its receiver.
    fn roll(&mut self, _instances: &[usize], _stage: &str, _trigger: Option<&TriggerSpec>) -> Result<(), Refused> {
        Err(Refused::Unsupported("stages are a target file's ([stages.NAME]): play this lesson with --target".into()))
    }

    /// Makes `key_id` (with `secret`) the signing key of these instances; earlier keys still verify.
    fn rotate(&mut self, instances: &[usize], key_id: &str, secret: Vec<u8>) -> Result<(), Refused>;

    /// Forgets `key_id` on these instances.
    fn retire(&mut self, instances: &[usize], key_id: &str) -> Result<(), Refused>;

    /// Every operation and effect so far.
    fn history(&self) -> &History;

    /// The notes the store holds now (`Err`: why this world cannot read them). Shared: a world that keeps
    /// its listing whole (the simulator's note store) hands it out without copying it.
    fn notes(&self) -> Result<std::sync::Arc<Vec<Note>>, Unobservable>;

    /// Nonces consumed since the scenario began.
    fn consumed(&self) -> Result<Consumed<'_>, Unobservable>;

    /// The record a nonce was consumed with (`None`: unused).
    fn nonce_record(&self, nonce: &str) -> Result<Option<Value>, Unobservable>;

    /// Exports the gateway's backends recorded.
    fn exports(&self) -> Result<Vec<ExportRecord>, Unobservable>;

    /// Why any answer of this world may differ from what the scenario describes (the scenario declares its
    /// own principals, and the world has its deployment's), if it may.
    fn global_caveat(&self) -> Option<String> {
        None
    }

    /// Why answers from `instance` may differ from what the scenario describes (it is configured otherwise
    /// than the scenario declares), if they may.
    fn caveat(&self, instance: usize) -> Option<String> {
        let _ = instance;
        None
    }

    /// `Err(why)` when expectations are shown but not judged in this world (under faults, a client's flow may
    /// go another way than the scenario wrote).
    fn expectations_judged(&self) -> Result<(), NotPlayed> {
        Ok(())
    }

    /// `Err(why)` when this world cannot play a 2025-11-25 client (its session, and the server→client requests
    /// answered inside a call): only the simulator models them; the real binary is tested by `tests/eras.rs`.
    fn legacy_clients(&self) -> Result<(), NotPlayed> {
        Err(NotPlayed::NoLegacyClients { world: self.label().to_string() })
    }

    /// `Err(why)` when this world cannot run an instance in a target file's stage (`instance I stage NAME`): only
    /// a target's world can.
    fn stages(&self) -> Result<(), NotPlayed> {
        Err(NotPlayed::NoStages { world: self.label().to_string() })
    }

    /// A line for the world's transcript (worlds without one ignore it).
    fn annotate(&mut self, annotation: Annotation) {
        let _ = annotation;
    }

    /// Whether [`World::annotate`] keeps what it is told (a world recording no transcript need not be told).
    fn annotating(&self) -> bool {
        true
    }
}
