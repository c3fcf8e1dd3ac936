//! The audit record of one `tools/call`: who asked, who approved, which descriptor and policy version, the
//! normalized target, the decision, the stage that made it, whether execution began, latency and outcome.
//!
//! Argument values that could be secret never appear: the record holds an HMAC-SHA256 digest (keyed with the
//! gateway's audit key, so a short secret cannot be recovered by guessing and hashing) of the whole arguments
//! object and of each non-enumerated value. Records are plain JSON objects with sorted keys, appended as JSON
//! Lines; in the simulator they are part of the transcript.

use crate::wire::canonical::{canonical_bytes, hex};
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::Sha256;

/// Longest tool name copied into a record (a hostile client chooses it).
pub(crate) const RECORDED_NAME_CHARS_MAX: usize = 160;

/// The pipeline stage that decided, in pipeline order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// JSON-RPC envelope and `_meta` (shared pipeline).
    Request,
    /// HTTP routing headers against the body (`-32020`).
    RoutingHeaders,
    /// Protocol version (`-32022`).
    Version,
    /// The qualified name and the backend it maps to.
    Route,
    /// Client capability compatibility (`-32021`).
    Capability,
    /// Principal, tool, approved schema, arguments, destination.
    Authorization,
    /// The backend's current descriptor against its pin and the scanner.
    Catalog,
    RateLimit,
    /// The MRTR confirmation: state, answer, nonce.
    Confirmation,
    /// The backend call.
    Execution,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Forwarded to the backend.
    Allowed,
    /// The user was asked to confirm (`input_required`).
    Asked,
    /// The user declined; nothing ran.
    Declined,
    /// The user dismissed the form; nothing ran, nothing consumed.
    Cancelled,
    Refused,
}

/// One audit record. Fields are declared in the alphabetical order of their JSON names, so serializing the
/// struct directly (as the sinks do) writes sorted keys: the same bytes as every other JSON we emit.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// The principal whose validated `accept` authorized this call.
    pub approved_by: Option<String>,
    /// Redacted arguments (see `servers::gateway::arguments::redact`).
    pub arguments: Option<Map<String, Value>>,
    pub arguments_digest: Option<String>,
    pub at_ms: u64,
    pub backend: Option<String>,
    pub backend_tool: Option<String>,
    pub decision: Decision,
    /// Digest of the backend's descriptor at decision time (when it was looked at).
    pub descriptor_digest: Option<String>,
    pub execution_began: bool,
    /// Which gateway instance decided.
    pub instance: String,
    pub latency_ms: u64,
    pub outcome: Value,
    pub policy_version: String,
    /// Who asked: the authenticated principal (never clientInfo).
    pub principal: String,
    /// `error.data.reason`, or the protocol error's name.
    pub reason: Option<String>,
    /// Whether this call re-drove a confirmation claimed by an earlier attempt (crash recovery or a race).
    pub redriven: bool,
    pub request_id: Value,
    pub stage: Stage,
    /// What the call acts on, normalized: `notes.export -> archive`, or the tool.
    pub target: Option<String>,
    /// The qualified tool name as requested.
    pub tool: Option<String>,
}

impl AuditRecord {
    /// The record as a JSON object (for the simulator's transcript and for inspection).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("audit records serialize")
    }

    /// One JSON Lines line (without the newline): sorted keys, compact.
    pub fn to_line(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("audit records serialize")
    }
}

/// `hmac-sha256:<hex>` of the canonical value under the audit key.
pub(crate) fn keyed_digest(key: &[u8], value: &Value) -> String {
    keyed_digest_bytes(key, &canonical_bytes(value))
}

/// [`keyed_digest`] of bytes already in canonical form.
pub(crate) fn keyed_digest_bytes(key: &[u8], canonical: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(canonical);
    format!("hmac-sha256:{}", hex(&mac.finalize().into_bytes()))
}

/// A client-chosen name, bounded.
pub(crate) fn recorded_name(name: &str) -> String {
    if name.chars().count() <= RECORDED_NAME_CHARS_MAX {
        name.to_string()
    } else {
        let mut cut: String = name.chars().take(RECORDED_NAME_CHARS_MAX).collect();
        cut.push('…');
        cut
    }
}

/// `{"resultType": …, "isError": …}` for results, `{"error": code, "reason": …}` for errors.
pub fn outcome_of(result: &Result<Value, crate::wire::errors::RpcError>) -> Value {
    match result {
        Ok(value) => json!({
            "resultType": value.get("resultType").cloned().unwrap_or(Value::Null),
            "isError": value.get("isError").and_then(Value::as_bool).unwrap_or(false),
        }),
        Err(error) => json!({ "error": error.code, "reason": reason_of(error) }),
    }
}

/// `data.reason`, or the name of a protocol error that carries none.
pub(crate) fn reason_of(error: &crate::wire::errors::RpcError) -> String {
    use crate::wire::errors::*;
    if let Some(reason) = error.reason() {
        return reason.as_str().to_string();
    }
    match error.code {
        PARSE_ERROR => "parse_error",
        INVALID_REQUEST => "invalid_request",
        METHOD_NOT_FOUND => "method_not_found",
        HEADER_MISMATCH => "header_mismatch",
        MISSING_REQUIRED_CLIENT_CAPABILITY => "missing_required_client_capability",
        UNSUPPORTED_PROTOCOL_VERSION => "unsupported_protocol_version",
        INVALID_PARAMS => "invalid_params",
        _ => "internal_error",
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_digests_depend_on_the_key_and_the_value_only() {
        let a = keyed_digest(b"key-one", &json!({"q": "hunter2"}));
        assert!(a.starts_with("hmac-sha256:") && a.len() == "hmac-sha256:".len() + 64);
        assert_eq!(a, keyed_digest(b"key-one", &json!({"q": "hunter2"})));
        assert_ne!(a, keyed_digest(b"key-two", &json!({"q": "hunter2"})));
        assert_ne!(a, keyed_digest(b"key-one", &json!({"q": "hunter3"})));
    }

    #[test]
    fn records_serialize_with_sorted_keys() {
        let record = AuditRecord {
            approved_by: Some("alice".into()),
            arguments: Some(Map::new()),
            arguments_digest: Some("a".into()),
            at_ms: 1,
            backend: Some("notes".into()),
            backend_tool: None,
            decision: Decision::Asked,
            descriptor_digest: Some("d".into()),
            execution_began: true,
            instance: "g".into(),
            latency_ms: 2,
            outcome: json!({"error": -32602}),
            policy_version: "v".into(),
            principal: "alice".into(),
            reason: None,
            redriven: false,
            request_id: json!(3),
            stage: Stage::RateLimit,
            target: None,
            tool: Some("notes.export".into()),
        };
        let line = record.to_line();
        assert_eq!(line, serde_json::to_vec(&record.to_json()).unwrap(), "direct serialization writes sorted keys");
        assert!(String::from_utf8(line).unwrap().starts_with(r#"{"approvedBy":"alice","arguments":{},"argumentsDigest":"a","atMs":1"#));
    }

    #[test]
    fn names_are_bounded() {
        assert_eq!(recorded_name("notes.export"), "notes.export");
        assert_eq!(recorded_name(&"x".repeat(1000)).chars().count(), RECORDED_NAME_CHARS_MAX + 1);
    }
}
