//! A `requestState` as the inspector shows it: its decoded fields and whether its seal verifies with the
//! keys of the run (the scenario's keys, and any a rotate-key fault introduced).

use crate::policy::state::derived_key_secret;
use crate::policy::state::{KeyRing, OpenError};
use crate::scenario::Scenario;
use crate::sim::engine::faults::Fault;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

/// The claims first, in the order GUARANTEES.md §2.2 lists what a state binds; any others after them.
const FIELD_ORDER: [&str; 9] =
    ["principal", "method", "tool", "argumentsDigest", "candidates", "phase", "issuedAtMs", "expiresAtMs", "nonce"];

/// Every key the run's instances could have signed with.
pub(crate) struct RunKeys {
    ring: Option<KeyRing>,
}

impl RunKeys {
    pub fn of(scenario: &Scenario, fired: &[Fault]) -> RunKeys {
        let mut keys: Vec<(String, Vec<u8>)> = scenario.cluster.keys.iter().map(|k| (k.id.clone(), k.secret.clone())).collect();
        if keys.is_empty() {
            // The runner's default when a scenario declares no key.
            keys.push(("k1".into(), derived_key_secret("k1")));
        }
        for fault in fired {
            if let Fault::RotateKey { key_id, .. } = fault {
                keys.push((key_id.clone(), derived_key_secret(key_id)));
            }
        }
        let mut ring: Option<KeyRing> = None;
        for (id, secret) in keys {
            match ring.as_mut() {
                None => ring = KeyRing::new(&id, secret).ok(),
                Some(ring) => {
                    let _ = ring.add_verify_only(&id, secret);
                }
            }
        }
        RunKeys { ring }
    }

    /// The keys of one ring (`demo`'s fleet).
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub fn of_ring(ring: KeyRing) -> RunKeys {
        RunKeys { ring: Some(ring) }
    }

    fn holds(&self, key_id: &str) -> bool {
        self.ring.as_ref().is_some_and(|ring| ring.key_ids().any(|id| id == key_id))
    }
}

/// One decoded state.
pub(crate) struct StateView {
    /// Where in the message it was (`result.requestState`, `params.requestState`).
    pub path: String,
    pub chars: usize,
    /// `verified`, `altered`, `unknown key`, `malformed`.
    pub status: &'static str,
    /// The status in a sentence.
    pub status_text: String,
    pub fields: Vec<(String, String)>,
}

impl StateView {
    pub fn verified(&self) -> bool {
        self.status == "verified"
    }
}

/// Every `requestState` string in a message, decoded.
pub(crate) fn states_in(value: &Value, keys: &RunKeys) -> Vec<StateView> {
    let mut found = Vec::new();
    collect(value, "", &mut found);
    found.into_iter().map(|(path, token)| decode(&path, &token, keys)).collect()
}

fn collect(value: &Value, path: &str, found: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let here = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match (key.as_str(), inner) {
                    ("requestState", Value::String(token)) => found.push((here, token.clone())),
                    _ => collect(inner, &here, found),
                }
            }
        }
        Value::Array(items) => {
            for (index, inner) in items.iter().enumerate() {
                collect(inner, &format!("{path}[{index}]"), found);
            }
        }
        _ => {}
    }
}

/// One `requestState` token, decoded and checked against `keys` as the inspector shows it (`demo` prints it).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub(crate) fn decode_state(token: &str, keys: &RunKeys) -> StateView {
    decode("requestState", token, keys)
}

fn decode(path: &str, token: &str, keys: &RunKeys) -> StateView {
    let parts: Vec<&str> = token.split('.').collect();
    let payload = match parts.as_slice() {
        ["s1", _, payload, _] => URL_SAFE_NO_PAD.decode(payload).ok().and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok()),
        _ => None,
    };
    let key_id = parts.get(1).copied().unwrap_or("");
    let verified = keys.ring.as_ref().map(|ring| ring.verify_claims::<Value>(token));
    let (status, status_text) = match (verified, &payload) {
        (Some(Ok(_)), _) => ("verified", format!("verified: the HMAC-SHA256 seal checks with key {key_id}, a key of this run")),
        (_, None) => ("malformed", "malformed: not a sealed state of the form s1.KEY.PAYLOAD.TAG with a JSON payload".to_string()),
        (Some(Err(OpenError::Signature)), Some(_)) if keys.holds(key_id) => {
            ("altered", format!("does NOT verify: the seal does not match key {key_id}; the state was changed after it was sealed"))
        }
        (Some(Err(_)), Some(_)) | (None, Some(_)) => {
            ("unknown key", format!("cannot be verified: {key_id:?} is not a key of this run (the fields below are unverified)"))
        }
    };
    let mut fields = Vec::new();
    if let Some(Value::Object(map)) = &payload {
        for name in FIELD_ORDER {
            if let Some(value) = map.get(name) {
                fields.push((name.to_string(), show(value)));
            }
        }
        for (name, value) in map.iter().filter(|(name, _)| !FIELD_ORDER.contains(&name.as_str())) {
            fields.push((name.clone(), show(value)));
        }
    }
    StateView { path: path.to_string(), chars: token.chars().count(), status, status_text, fields }
}

fn show(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(show).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::state::StateClaims;
    use serde_json::json;

    fn scenario() -> Scenario {
        crate::scenario::parse("t.sim", "t", "use demo\nkey k1\ninstance i1 keys k1\nclient alice principal alice\n").unwrap()
    }

    fn token() -> String {
        let ring = KeyRing::new("k1", derived_key_secret("k1")).unwrap();
        ring.seal(&StateClaims {
            principal: "alice".into(),
            method: "tools/call".into(),
            tool: "notes_delete".into(),
            arguments_digest: "ab".repeat(32),
            candidates: vec!["note-3".into(), "note-7".into()],
            revisions: Vec::new(),
            phase: "delete_choice".into(),
            issued_at_ms: 1_000,
            expires_at_ms: 301_000,
            nonce: "bm9uY2U".into(),
        })
    }

    #[test]
    fn a_genuine_state_is_decoded_in_claim_order_and_verified() {
        let keys = RunKeys::of(&scenario(), &[]);
        let states = states_in(&json!({"result": {"requestState": token()}}), &keys);
        assert_eq!(states.len(), 1);
        let state = &states[0];
        assert_eq!((state.path.as_str(), state.status), ("result.requestState", "verified"));
        let names: Vec<&str> = state.fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["principal", "method", "tool", "argumentsDigest", "candidates", "phase", "issuedAtMs", "expiresAtMs", "nonce"]);
        assert_eq!(state.fields[4].1, "note-3, note-7");
    }

    #[test]
    fn an_altered_state_an_unknown_key_and_garbage_are_told_apart() {
        let keys = RunKeys::of(&scenario(), &[]);
        let genuine = token();
        let mut parts: Vec<String> = genuine.split('.').map(str::to_string).collect();
        let mut claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[2]).unwrap()).unwrap();
        claims["candidates"] = json!(["note-99"]);
        parts[2] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
        let altered = parts.join(".");
        let state = &states_in(&json!({"params": {"requestState": altered}}), &keys)[0];
        assert_eq!(state.status, "altered");
        assert!(state.fields.iter().any(|(n, v)| n == "candidates" && v == "note-99"), "the altered fields are still shown");
        let unknown = genuine.replacen("s1.k1.", "s1.k9.", 1);
        assert_eq!(states_in(&json!({"requestState": unknown}), &keys)[0].status, "unknown key");
        let garbage = &states_in(&json!({"requestState": "<script>"}), &keys)[0];
        assert_eq!((garbage.status, garbage.fields.len()), ("malformed", 0));
        let rotated = RunKeys::of(&scenario(), &[Fault::RotateKey { at: 3, key_id: "rotated-1".into() }]);
        assert!(rotated.holds("rotated-1") && rotated.holds("k1"));
    }
}
