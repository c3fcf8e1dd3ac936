//! Instances over their lifetimes: an incarnation started (its nonce stream, its legacy adapter, its server
//! built through `assembly` by the factory), crashed (its tasks and envelopes dropped), restarted, and rebuilt
//! when its configuration changes (keys rotated or retired, a clock skewed, a grant revoked).

use super::admin::AdminError;
use super::{Cluster, ReplyTo, Task, SIM_PAGE_BASE};
use crate::config::server_info;
use crate::eras::session::SessionLimits;
use crate::eras::LegacyAdapter;
use crate::framework::Service;
use crate::policy::state::KeyError;
use crate::servers::notes::{NotesConfig, NotesPorts};
use crate::sim::actors::instance::{incarnation_nonces, InstanceParts};
use crate::sim::actors::legacy::CurrentService;
use crate::sim::actors::legacy_mutants::{self, LegacyMemory};
use crate::sim::actors::StoreClient;
use crate::sim::engine::message::TaskId;
use crate::sim::engine::random::{self, Stream};
use crate::stores::deterministic::SeededNonces;
use std::sync::Arc;

impl Cluster {
    /// Starts the current incarnation of instance `index`: a fresh nonce stream, a fresh legacy adapter
    /// (`eras both`), and its server.
    pub(super) fn start_incarnation(&mut self, index: usize) {
        let instance = &mut self.instances[index];
        instance.nonces = Some(Arc::new(incarnation_nonces(self.seed, instance.index, instance.incarnation)));
        let (instance_index, incarnation, offset) = (instance.index, instance.incarnation, instance.clock_offset_ms);
        let clock = &self.clock;
        instance.legacy = instance.eras_both.then(|| {
            // One adapter per incarnation: its sessions die with the process, as a real server's do.
            let current = CurrentService::default();
            let sessions = SeededNonces::from_rng(random::stream(self.seed, Stream::Sessions { instance: instance_index, incarnation }));
            let adapter = LegacyAdapter::new(
                Arc::new(current.clone()),
                SessionLimits::default(),
                Arc::new(clock.with_offset(offset)),
                Arc::new(sessions),
            );
            (Arc::new(adapter), current)
        });
        instance.legacy_memory = LegacyMemory::default();
        self.rebuild_service(index);
    }

    /// Builds the instance's service from its current configuration, keeping its nonce stream.
    pub(super) fn rebuild_service(&mut self, index: usize) {
        let instance = &self.instances[index];
        let Some(nonces) = instance.nonces.clone() else { return };
        if let (true, Some(world)) = (instance.is_gateway, &self.gateway_world) {
            let gateway = world.gateway(
                &instance.name,
                instance.key_ring.clone(),
                self.state_ttl_ms,
                &self.exchange,
                self.backends.iter().map(|backend| backend.actor),
                Arc::new(StoreClient::new(self.exchange.clone(), self.replay_store_actor)),
                Arc::new(self.clock.with_offset(instance.clock_offset_ms)),
                nonces,
            );
            self.instances[index].service = Some(Arc::new(gateway.clone()));
            self.instances[index].gateway = Some(gateway);
            return;
        }
        let config = NotesConfig {
            server_info: server_info(),
            authorizations: self.authorizations.clone(),
            key_ring: instance.key_ring.clone(),
            state_ttl_ms: self.state_ttl_ms,
        };
        let config = Arc::new(config);
        let out_of_band = self.clients.iter().any(|client| client.setup.browser).then(|| crate::servers::notes::OutOfBand {
            store: Arc::new(StoreClient::new(self.exchange.clone(), self.replay_store_actor)),
            page_base: SIM_PAGE_BASE.to_string(),
        });
        let ports = NotesPorts {
            notes: Arc::new(StoreClient::new(self.exchange.clone(), self.note_store_actor)),
            replay: Arc::new(StoreClient::new(self.exchange.clone(), self.replay_store_actor)),
            clock: Arc::new(self.clock.with_offset(instance.clock_offset_ms)),
            nonces,
            out_of_band,
        };
        let parts = InstanceParts { config, ports };
        // The adapter of an `eras both` instance reaches the same service; a mutant adapter may want the real
        // notes server over the same parts (built by `assembly`, as the factory's is).
        let legacy = instance.legacy.as_ref().map(|(_, current)| (current.clone(), parts.clone()));
        let mut service: Arc<dyn Service> = (self.factory)(parts);
        if let Some((current, parts)) = legacy {
            let memory = &self.instances[index].legacy_memory;
            current.set(legacy_mutants::adapter_service(self.era_variant, memory, service.clone(), move || parts.notes_server()));
            service = legacy_mutants::modern_service(self.era_variant, memory, service);
        }
        self.instances[index].service = Some(service);
    }

    /// Stops an instance: its tasks are dropped, and every envelope to or from it is lost.
    pub fn crash(&mut self, index: usize) {
        self.crash_then(index, false)
    }

    pub(super) fn crash_then(&mut self, index: usize, restart: bool) {
        let actor = self.instance_actor(index);
        if !self.instances[index].up {
            self.event(Some(actor), "crash: already down".into());
            return;
        }
        self.instances[index].up = false;
        self.instances[index].service = None;
        self.instances[index].gateway = None;
        self.instances[index].nonces = None;
        self.instances[index].legacy = None;
        let dropped: Vec<TaskId> = self.tasks.iter().filter(|(_, t)| t.actor == actor).map(|(id, _)| *id).collect();
        let mut lost = Vec::new();
        for task in &dropped {
            if let Some(Task { reply_to: ReplyTo::Client { operation, .. }, .. }) = self.tasks.remove(task).map(|task| *task) {
                lost.push(operation);
            }
        }
        self.exchange.forget(&dropped);
        let work = match dropped.len() {
            0 => "no work in progress".to_string(),
            1 => "1 request in progress lost".to_string(),
            n => format!("{n} requests in progress lost"),
        };
        self.event(Some(actor), format!("crash ({work})"));
        for envelope in self.network.remove_touching(actor) {
            let reason = format!("{} crashed", self.names[actor]);
            self.record_drop(&envelope, reason);
            lost.extend(super::recording::client_operation(&envelope));
        }
        if restart {
            self.restart(index);
        }
        for operation in lost {
            self.lost(operation, "no answer (the instance crashed)");
        }
    }

    /// Starts a new incarnation from the same configuration (instances are stateless: nothing to recover).
    pub fn restart(&mut self, index: usize) {
        let actor = self.instance_actor(index);
        if self.instances[index].up {
            self.event(Some(actor), "restart: already up".into());
            return;
        }
        self.instances[index].up = true;
        self.instances[index].incarnation += 1;
        self.start_incarnation(index);
        let incarnation = self.instances[index].incarnation;
        self.event(Some(actor), format!("restart (incarnation {incarnation}, fresh nonce stream)"));
    }

    /// Makes `key_id` the signing key of these instances; their previous keys still verify.
    pub fn rotate(&mut self, indexes: &[usize], key_id: &str, key: Vec<u8>) -> Result<(), AdminError> {
        for &index in indexes {
            self.instances[index].key_ring.rotate(key_id, key.clone()).map_err(|source| self.key_error(index, source))?;
            self.rebuild_service(index);
            let ids: Vec<&str> = self.instances[index].key_ring.key_ids().collect();
            let text = format!("keys rotated: signs with {key_id}, verifies {}", ids.join(" "));
            self.event(Some(index), text);
        }
        Ok(())
    }

    /// Forgets `key_id` on these instances: states it signed fail closed there.
    pub fn retire(&mut self, indexes: &[usize], key_id: &str) -> Result<(), AdminError> {
        for &index in indexes {
            self.instances[index].key_ring.retire(key_id).map_err(|source| self.key_error(index, source))?;
            self.rebuild_service(index);
            let ids: Vec<&str> = self.instances[index].key_ring.key_ids().collect();
            let text = format!("key {key_id} retired: verifies {}", ids.join(" "));
            self.event(Some(index), text);
        }
        Ok(())
    }

    fn key_error(&self, index: usize, source: KeyError) -> AdminError {
        AdminError::Key { instance: self.instances[index].name.clone(), source }
    }
}
