//! The simulated cluster as a [`World`]: every step the scenario language has, carried out on the cluster,
//! each followed by running the network until it is quiet (so sequential steps never race; only a
//! `parallel` block puts several messages in flight for the scheduler to interleave).

use super::cluster::{Cluster, CrashTrigger, SimError};
use super::engine::faults::StoreName;
use crate::framework::ports::Note;
use crate::oracle::history::{Attempt, History, OperationId};
use crate::play::world::{Annotation, ArmedFault, Consumed, Item, NotPlayed, Outgoing, Refused, Unobservable, World};
use crate::scenario::model::TriggerSpec;
use crate::servers::gateway::backends::ExportRecord;
use crate::sim::render::transcript::Entry;
use serde_json::Value;

/// Where each sequential request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Routing {
    /// To the instance the scenario names.
    AsWritten,
    /// Rotated among the live instances of identical configuration, so that consecutive rounds of one
    /// flow land on different instances (the statelessness comparison). Instances a crash step names stay
    /// out of the rotation: their requests go where written and nothing else is sent to them, so every
    /// crash happens to the same request as in the original run.
    Shifted { pinned: std::collections::BTreeSet<usize> },
}

pub(crate) struct SimWorld {
    pub cluster: Cluster,
    routing: Routing,
    /// Requests sent so far, sequential and parallel (the rotation's position).
    sent: usize,
    /// Why expectations are not judged in this execution, when they are not: a re-run that only its
    /// history is compared from (the statelessness and determinism comparisons) has no use for them.
    unjudged: Option<&'static str>,
}

fn stopped(error: SimError) -> Refused {
    Refused::Stopped(format!("the simulation stopped: {error}"))
}

impl SimWorld {
    pub fn new(cluster: Cluster, routing: Routing) -> SimWorld {
        SimWorld { cluster, routing, sent: 0, unjudged: None }
    }

    /// This world for a re-run whose history alone is compared: its expectations are skipped, for `why`.
    pub fn without_expectations(self, why: &'static str) -> SimWorld {
        SimWorld { unjudged: Some(why), ..self }
    }

    /// Among the live instances configured like `index` (itself included, in instance order), the one
    /// `steps` places after it, cyclically. With the request's position as `steps`, consecutive requests
    /// written for one instance are spread over its equivalents.
    fn equivalent_instance(&self, index: usize, steps: usize, pinned: &std::collections::BTreeSet<usize>) -> usize {
        let instances = self.cluster.instances();
        if !instances[index].up || pinned.contains(&index) {
            return index;
        }
        let class: Vec<usize> = (0..instances.len())
            .filter(|&other| instances[other].up && !pinned.contains(&other) && instances[other].same_configuration(&instances[index]))
            .collect();
        let position = class.iter().position(|&member| member == index).unwrap_or(0);
        class[(position + steps) % class.len()]
    }
}

impl SimWorld {
    /// Where a request written for `instance` goes under this world's routing. A legacy client's requests
    /// stay where written: its session lives on one instance by design (the 2025-11-25 era is stateful).
    fn target(&mut self, instance: usize, client: usize) -> usize {
        self.sent += 1;
        if self.cluster.is_legacy_client(client) {
            return instance;
        }
        match &self.routing {
            Routing::AsWritten => instance,
            Routing::Shifted { pinned } => self.equivalent_instance(instance, self.sent, pinned),
        }
    }
}

/// Why the simulator skips `drop answer`, `duplicate`, `hold` and `release`.
const SIM_MESSAGE_FAULTS: &str = "the simulator loses, copies and delays messages where the seed places them (`run --faults drop,duplicate,delay`), \
     not on one request a statement chooses; `drop answer`, `duplicate`, `hold` and `release` run against a target (`run --target`) and a live fleet";

impl World for SimWorld {
    fn label(&self) -> &'static str {
        "in the simulator"
    }

    fn send(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused> {
        let target = self.target(outgoing.instance, outgoing.client);
        let operation = self.cluster.send(outgoing, target).map_err(stopped)?;
        self.cluster.run_until_quiet().map_err(stopped)?;
        Ok(operation)
    }

    fn browse(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused> {
        self.send(outgoing)
    }

    fn parallel(&mut self, items: Vec<Item>) -> Result<Vec<Result<OperationId, Refused>>, Refused> {
        let mut sent = Vec::new();
        for item in items {
            match item {
                Item::Send(outgoing) | Item::Browse(outgoing) => {
                    let instance = self.target(outgoing.instance, outgoing.client);
                    sent.push(Ok(self.cluster.send(outgoing, instance).map_err(stopped)?));
                }
                Item::Admin(action) => self.cluster.admin(&action).map_err(|error| Refused::Failed(error.to_string()))?,
            }
        }
        self.cluster.run_until_quiet().map_err(stopped)?;
        Ok(sent)
    }

    fn admin(&mut self, action: &crate::scenario::model::AdminAction) -> Result<(), Refused> {
        self.cluster.admin(action).map_err(|error| Refused::Failed(error.to_string()))?;
        self.cluster.run_until_quiet().map_err(stopped)
    }

    fn advance(&mut self, duration_ms: u64) -> Result<(), Refused> {
        self.cluster.advance(duration_ms);
        Ok(())
    }

    fn crash(&mut self, instance: usize, trigger: Option<&TriggerSpec>) -> Result<(), Refused> {
        match trigger {
            None => self.cluster.crash(instance),
            Some(trigger) => {
                let receiver = self.cluster.actor(&trigger.receiver).expect("the parser checked the receiver");
                let sender = trigger.sender.as_ref().map(|name| self.cluster.actor(name).expect("the parser checked the sender"));
                self.cluster.arm(CrashTrigger { instance, moment: trigger.moment, receiver, label: trigger.label.clone(), sender });
            }
        }
        Ok(())
    }

    fn restart(&mut self, instance: usize) -> Result<(), Refused> {
        self.cluster.restart(instance);
        Ok(())
    }

    fn store_unavailable(&mut self, store: &str, calls: u32) -> Result<(), Refused> {
        let store = if store == crate::scenario::model::NOTE_STORE { StoreName::Notes } else { StoreName::Replay };
        self.cluster.outage(store, calls);
        Ok(())
    }

    fn rotate(&mut self, instances: &[usize], key_id: &str, secret: Vec<u8>) -> Result<(), Refused> {
        self.cluster.rotate(instances, key_id, secret).map_err(|error| Refused::Failed(error.to_string()))
    }

    fn retire(&mut self, instances: &[usize], key_id: &str) -> Result<(), Refused> {
        self.cluster.retire(instances, key_id).map_err(|error| Refused::Failed(error.to_string()))
    }

    fn arm(&mut self, _instance: usize, _method: &str, _fault: &ArmedFault) -> Result<(), Refused> {
        Err(Refused::Unsupported(SIM_MESSAGE_FAULTS.into()))
    }

    fn release(&mut self, _instance: usize) -> Result<Vec<OperationId>, Refused> {
        Err(Refused::Unsupported(SIM_MESSAGE_FAULTS.into()))
    }

    fn mark_attempt(&mut self, id: OperationId, attempt: Attempt) {
        self.cluster.mark_attempt(id, attempt);
    }

    fn history(&self) -> &History {
        self.cluster.history()
    }

    fn notes(&self) -> Result<std::sync::Arc<Vec<Note>>, Unobservable> {
        Ok(self.cluster.note_store().listing())
    }

    fn consumed(&self) -> Result<Consumed<'_>, Unobservable> {
        let store = self.cluster.replay_store();
        let listing = move || store.consumed().iter().map(|(_, record)| record.to_json().to_string()).collect::<Vec<_>>().join(" ");
        Ok(Consumed { count: store.consumed_count(), listing: Box::new(listing) })
    }

    fn nonce_record(&self, nonce: &str) -> Result<Option<Value>, Unobservable> {
        Ok(self.cluster.replay_store().record(nonce).map(|record| record.to_json()))
    }

    fn exports(&self) -> Result<Vec<ExportRecord>, Unobservable> {
        Ok(self.cluster.gateway_world().map(|world| world.exports()).unwrap_or_default())
    }

    fn expectations_judged(&self) -> Result<(), NotPlayed> {
        if let Some(why) = self.unjudged {
            return Err(NotPlayed::ComparedOtherwise(why));
        }
        // Faults on (clients retry): a retry may take a flow another way than the scenario wrote, so
        // expectations are shown but not judged, except those the scenario marks `always`; the properties are.
        if self.cluster.history().clients_retry() {
            Err(NotPlayed::UnderFaultsUnlessMarked)
        } else {
            Ok(())
        }
    }

    fn legacy_clients(&self) -> Result<(), NotPlayed> {
        Ok(())
    }

    fn annotating(&self) -> bool {
        self.cluster.recording()
    }

    fn annotate(&mut self, annotation: Annotation) {
        let entry = match annotation {
            Annotation::Step { number, line, text } => Entry::Step { number, line, text },
            Annotation::Substep { line, text } => Entry::Substep { line, text },
            Annotation::Check { line, text, failure } => Entry::Check { line, text, failure },
            Annotation::Note { text } => Entry::Note { text },
        };
        self.cluster.transcript_mut().push(entry);
    }
}
