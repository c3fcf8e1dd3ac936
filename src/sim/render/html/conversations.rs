//! The confirmations a run page groups its messages by: the client operations that carried one
//! `requestState` (by the nonce sealed in it), with their retries and copies, and the role each message
//! plays in its confirmation.

use crate::oracle::history::{Attempt, History, OperationId};
use crate::sim::render::transcript::{Entry, Kind, Message};
use crate::sim::runner::RunReport;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use std::collections::BTreeMap;

/// The confirmations of a run: the client operations that sent or received one `requestState` (by the
/// nonce sealed in it), with their retries and copies, numbered in the order the timeline first shows them.
pub(super) struct Conversations {
    /// The conversation (numbered from 1) of each operation.
    pub(super) of_operation: Vec<Option<usize>>,
    pub(super) list: Vec<ConversationInfo>,
    history_roles: Vec<Option<String>>,
}

pub(super) struct ConversationInfo {
    pub(super) principal: String,
    pub(super) tool: String,
    pub(super) nonce: String,
}

impl Conversations {
    pub(super) fn of(report: &RunReport) -> Conversations {
        let history = &report.history;
        let count = history.operations().len();
        let mut parent: Vec<usize> = (0..count).collect();
        fn root(parent: &mut [usize], mut at: usize) -> usize {
            while parent[at] != at {
                parent[at] = parent[parent[at]];
                at = parent[at];
            }
            at
        }
        let join = |parent: &mut Vec<usize>, a: usize, b: usize| {
            let (a, b) = (root(parent, a), root(parent, b));
            if a != b {
                parent[a.max(b)] = a.min(b);
            }
        };
        for op in history.operations() {
            let first = history.first_attempt(op.id);
            join(&mut parent, op.id.0, first.0);
        }
        // Each nonce, with the first operation that carried it and the claims that came with it.
        let mut owners: BTreeMap<String, (usize, Value)> = BTreeMap::new();
        for entry in &report.transcript.entries {
            let (Entry::Delivery { message, cause: Some(op), .. } | Entry::Dropped { message, cause: Some(op), .. }) = entry else {
                continue;
            };
            if op.0 >= count || matches!(message.kind, Kind::Call | Kind::Return) {
                continue;
            }
            for claims in state_claims(&message.value()) {
                let Some(nonce) = claims.get("nonce").and_then(Value::as_str).map(str::to_string) else { continue };
                match owners.get(&nonce) {
                    Some((owner, _)) => join(&mut parent, *owner, op.0),
                    None => {
                        owners.insert(nonce, (op.0, claims));
                    }
                }
            }
        }
        // A component is a conversation if some operation of it carried a state; its claims are those of
        // the first state seen (by operation order) in it.
        let mut claims_of_root: BTreeMap<usize, (usize, String, Value)> = BTreeMap::new();
        for (nonce, (owner, claims)) in owners {
            let r = root(&mut parent, owner);
            let entry = claims_of_root.entry(r).or_insert((owner, nonce.clone(), claims.clone()));
            if owner < entry.0 {
                *entry = (owner, nonce, claims);
            }
        }
        let mut number_of_root: BTreeMap<usize, usize> = BTreeMap::new();
        let mut list = Vec::new();
        let mut of_operation = vec![None; count];
        let mut assign = |op: usize, parent: &mut Vec<usize>, of_operation: &mut Vec<Option<usize>>| {
            let r = root(parent, op);
            let Some((_, nonce, claims)) = claims_of_root.get(&r) else { return };
            let number = *number_of_root.entry(r).or_insert_with(|| {
                list.push(ConversationInfo {
                    principal: claims.get("principal").and_then(Value::as_str).unwrap_or("?").to_string(),
                    tool: claims.get("tool").and_then(Value::as_str).unwrap_or("?").to_string(),
                    nonce: nonce.clone(),
                });
                list.len()
            });
            of_operation[op] = Some(number);
        };
        for entry in &report.transcript.entries {
            if let Entry::Delivery { cause: Some(op), .. } | Entry::Dropped { cause: Some(op), .. } = entry {
                if op.0 < count {
                    assign(op.0, &mut parent, &mut of_operation);
                }
            }
        }
        for op in 0..count {
            assign(op, &mut parent, &mut of_operation);
        }
        let history_roles = history.operations().iter().map(|op| base_role(history, op.id, of_operation[op.id.0].is_some())).collect();
        Conversations { of_operation, list, history_roles }
    }

    /// The role a message plays in its operation's conversation: `round 1`, `form`, `answer (accept)`,
    /// `retry 1 of answer (accept)`.
    pub(super) fn role(&self, op: OperationId, message: &Message) -> Option<String> {
        let base = self.history_roles.get(op.0).cloned().flatten()?;
        match message.kind {
            Kind::Response => {
                let value = message.value();
                let form = value.pointer("/result/resultType").and_then(Value::as_str) == Some("input_required");
                Some(if form { format!("form, to {base}") } else { format!("reply to {base}") })
            }
            Kind::Request | Kind::Notify => Some(base),
            Kind::Call | Kind::Return => Some(format!("for {base}")),
        }
    }
}

fn base_role(history: &History, id: OperationId, in_conversation: bool) -> Option<String> {
    let op = &history.operations()[id.0];
    let action = op
        .params()
        .and_then(|p| p.get("inputResponses"))
        .and_then(Value::as_object)
        .and_then(|r| r.values().next())
        .map(|answer| answer.get("action").and_then(Value::as_str).unwrap_or("?").to_string());
    let base = match action {
        Some(action) => format!("answer ({action})"),
        None if in_conversation => "round 1".to_string(),
        None => return None,
    };
    Some(match history.attempts().get(&id) {
        Some(Attempt::Retry { number, .. }) => format!("retry {number} of {base}"),
        Some(Attempt::Duplicate { .. }) => format!("network copy of {base}"),
        None => base,
    })
}

/// The decoded payloads of every `requestState` in a message (unverified: only grouping needs them).
fn state_claims(value: &Value) -> Vec<Value> {
    let mut found = Vec::new();
    fn walk(value: &Value, found: &mut Vec<Value>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    match (key.as_str(), inner) {
                        ("requestState", Value::String(token)) => {
                            let payload = token.split('.').nth(2).and_then(|p| URL_SAFE_NO_PAD.decode(p).ok());
                            if let Some(claims) = payload.and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok()) {
                                found.push(claims);
                            }
                        }
                        _ => walk(inner, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|inner| walk(inner, found)),
            _ => {}
        }
    }
    walk(value, &mut found);
    found
}
