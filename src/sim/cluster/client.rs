//! The client actors: a request put on the network as the interpreter built it, and, when faults are on,
//! what a client does about an answer that never comes (or says "try again"): the same request again, on the
//! next live instance of the same deployment, within a retry budget.

use super::{ClientSetup, Cluster, SimError};
use crate::oracle::history::{Attempt, OperationId, Outgoing, Sent};
use crate::scenario::template::at;
use crate::sim::engine::faults::{RETRIES_MAX, RETRY_TIMEOUT_MS};
use crate::sim::engine::message::{Payload, RequestBody};
use crate::sim::engine::network::Hold;
use crate::wire::errors::Reason;
use crate::wire::headers::RoutingHeaders;
use serde_json::Value;
use std::sync::Arc;

/// A client actor: who it is, and what it keeps between requests (only a legacy client keeps anything).
pub(super) struct Client {
    pub(super) setup: ClientSetup,
    /// The `Mcp-Session-Id` a legacy client holds (the last one an `initialize` gave it).
    pub(super) session: Option<String>,
}

/// A client request as sent, to send again.
#[derive(Debug, Clone)]
pub(super) struct SentRequest {
    client: usize,
    body: RequestBody,
    headers: Option<RoutingHeaders>,
}

impl Cluster {
    /// A client's request reaches the network, addressed to `instance` (where the scenario sent it, or where
    /// a rerouted run sends it instead). `outgoing.value` is what the bytes encode, when the client built them
    /// (it is parsed from the bytes otherwise). Returns the operation that tracks the answer.
    pub fn send(&mut self, outgoing: Outgoing, instance: usize) -> Result<OperationId, SimError> {
        let Outgoing { client, raw, value, notification, headers, headers_written, step, name, .. } = outgoing;
        let headers = Some(headers);
        let principal = self.clients[client].setup.principal.clone();
        // A client-built value is what the bytes encode; anything else is parsed, and kept verbatim if odd (the
        // instance then reads those bytes, as a server would; the value is the history's).
        let (body, request_value, request_exact) = match (raw, value) {
            (None, Some(value)) => {
                let value = Arc::new(value);
                (RequestBody::compact(value.clone()), Some(value), None)
            }
            (Some(bytes), Some(value)) => {
                let value = Arc::new(value);
                (RequestBody::exact(bytes, Some(value.clone())), Some(value), None)
            }
            (raw, None) => {
                let bytes = raw.unwrap_or_default();
                let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
                let canonical = parsed.as_ref().is_some_and(|v| serde_json::to_vec(v).is_ok_and(|c| c == bytes));
                match parsed.map(Arc::new) {
                    Some(value) if canonical => (RequestBody::compact(value.clone()), Some(value), None),
                    parsed => {
                        let exact = String::from_utf8_lossy(&bytes).into_owned();
                        (RequestBody::exact(bytes, None), parsed, Some(exact))
                    }
                }
            }
        };
        let now_ms = self.clock.elapsed_ms();
        let id = self.history.request(Sent {
            client: self.clients[client].setup.name.clone(),
            principal: principal.clone(),
            instance: self.instances[instance].name.clone(),
            step,
            name,
            request_exact,
            request_value,
            notification,
            sent_at_ms: now_ms,
        });
        if self.history.clients_retry() {
            let sent = SentRequest { client, body: body.clone(), headers: headers.clone() };
            self.requests.insert(id, sent);
        }
        let from = self.client_actor(client);
        // Every request carries the routing headers an HTTP client sends; the ones a scenario wrote itself
        // (a header attack) are worth a line.
        if let (true, Some(headers)) = (headers_written, &headers) {
            let shown = |value: &Option<String>| value.as_deref().map_or("(absent)".to_string(), |v| format!("{v:?}"));
            let text = format!(
                "sends routing headers MCP-Protocol-Version: {}, Mcp-Method: {}, Mcp-Name: {}",
                shown(&headers.protocol_version),
                shown(&headers.method),
                shown(&headers.name)
            );
            self.event(Some(from), text);
        }
        let session = self.clients[client].session.clone();
        let payload = Payload::Request { operation: id, principal, body, headers, session };
        self.network.send(from, self.instance_actor(instance), now_ms, None, None, payload)?;
        Ok(id)
    }

    /// What the request of `operation` sent, from its first attempt.
    pub(super) fn sent_request(&self, operation: OperationId) -> Option<SentRequest> {
        self.requests.get(&self.history.first_attempt(operation)).cloned()
    }

    /// Sends a request again: a client's retry or the network's copy. Returns the envelope's id.
    pub(super) fn send_attempt(&mut self, sent: SentRequest, instance: usize, attempt: Attempt) -> Result<u64, SimError> {
        let now_ms = self.clock.elapsed_ms();
        let id = self.history.attempt(attempt, self.instances[instance].name.clone(), now_ms);
        let principal = self.clients[sent.client].setup.principal.clone();
        let from = self.client_actor(sent.client);
        let session = self.clients[sent.client].session.clone();
        let payload = Payload::Request { operation: id, principal, body: sent.body, headers: sent.headers, session };
        Ok(self.network.send(from, self.instance_actor(instance), now_ms, None, None, payload)?)
    }

    /// An attempt of a client request will never be answered. If clients retry, this is the latest
    /// attempt and the budget allows, the client sends the same request again to the next instance.
    pub(super) fn lost(&mut self, operation: OperationId, why: &str) {
        if !self.history.clients_retry() || self.history.is_duplicate(operation) || self.history.operations()[operation.0].notification {
            return;
        }
        let first = self.history.first_attempt(operation);
        if self.history.attempts_of(first).last() != Some(&operation) {
            return;
        }
        self.retry(first, operation, why);
    }

    fn retry(&mut self, first: OperationId, failed: OperationId, why: &str) {
        let number = self.history.attempts_of(first).len() as u32;
        let client = self.actor(&self.history.operations()[first.0].client);
        let request_id =
            self.history.operations()[first.0].request_value.as_ref().and_then(|v| v.get("id")).cloned().unwrap_or(Value::Null);
        if number > RETRIES_MAX {
            self.event(client, format!("{why} for request id {request_id}: gives up after {RETRIES_MAX} retries"));
            return;
        }
        let Some(sent) = self.sent_request(first) else { return };
        let failed_instance = self.instances.iter().position(|i| i.name == self.history.operations()[failed.0].instance).unwrap_or(0);
        let target = self.next_instance_like(failed_instance);
        if !self.instances[target].up {
            // Every instance of its kind is down for good (a scenario's crash without restart): not a fault
            // that stops, so there is nothing to wait for.
            self.event(client, format!("{why} for request id {request_id}: no live instance to retry on; gives up"));
            self.history.strand(first);
            return;
        }
        let text = format!(
            "{why} for request id {request_id}: retries it on {} after {RETRY_TIMEOUT_MS}ms (retry {number} of at most {RETRIES_MAX})",
            self.instances[target].name
        );
        self.event(client, text);
        match self.send_attempt(sent, target, Attempt::Retry { of: first, number }) {
            Ok(envelope) => self.network.hold(envelope, RETRY_TIMEOUT_MS, Hold::UntilQuiet),
            Err(error) => self.event(client, format!("the retry could not be sent: {error}")),
        }
    }

    /// Where a client fails over to: the live instance after `index` (cyclically) of the same deployment — the
    /// same kind and the same keys — as a load balancer in front of one deployment would pick; `index` itself
    /// when it is the only one. An instance deliberately given other keys is never a retry target; clocks
    /// may differ (skew is a fault of its own).
    fn next_instance_like(&self, index: usize) -> usize {
        let count = self.instances.len();
        let alike = |other: usize| {
            self.instances[other].is_gateway == self.instances[index].is_gateway
                && self.instances[other].key_ring == self.instances[index].key_ring
        };
        (1..=count).map(|step| (index + step) % count).find(|&other| self.instances[other].up && alike(other)).unwrap_or(index)
    }
}

/// Whether an answer says the confirmation's claim is still pending (a retry will learn how it ended).
/// An answer a retrying client asks again after: the claim is still pending, or a store was unavailable
/// (nothing was changed; the same request may succeed once it is back).
pub(super) fn transient(response: &Value) -> Option<&'static str> {
    match at(response, &["error", "data", "reason"]).and_then(Value::as_str) {
        Some(reason) if reason == Reason::ClaimInProgress.as_str() => Some("answered \"in progress\""),
        Some(reason) if reason == Reason::StoreUnavailable.as_str() => Some("answered \"store unavailable\""),
        _ => None,
    }
}
