//! The JSON-RPC 2.0 envelope, strictly: one object per message, `id` a string or an integer, no batches.

use super::errors::{Reason, RpcError};
use serde_json::{json, Map, Value};

/// The largest message any transport hands to a handler. Bigger bodies are refused before parsing.
pub const MESSAGE_BYTES_MAX: usize = 1024 * 1024;

/// A request id as JSON-RPC allows it here: an integer or a string (never null, never fractional).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl RequestId {
    pub fn to_json(&self) -> Value {
        match self {
            RequestId::Number(n) => json!(n),
            RequestId::String(s) => json!(s),
        }
    }

    /// Reads an id; anything but an integer (fitting i64) or a string is `None`.
    pub(crate) fn from_json(value: &Value) -> Option<RequestId> {
        match value {
            Value::String(s) => Some(RequestId::String(s.clone())),
            Value::Number(n) => n.as_i64().map(RequestId::Number),
            _ => None,
        }
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// One parsed incoming message, borrowing from the JSON value it was read from (the pipeline never copies
/// a request's params: the simulator hands it the value its network carries, a transport the value it parsed).
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming<'a> {
    Request {
        id: RequestId,
        method: &'a str,
        params: Option<&'a Value>,
    },
    /// No `id`: never answered, and (for request methods) never executed.
    Notification {
        method: &'a str,
        params: Option<&'a Value>,
    },
}

/// A refusal to parse: the error and the id to answer with (`None` serializes as `null`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejected {
    pub id: Option<RequestId>,
    pub error: RpcError,
}

/// `-32600` with reason `payload_too_large` and HTTP 413: the message exceeds [`MESSAGE_BYTES_MAX`].
///
/// Transports that stop reading at the limit (stdio's bounded line reader, HTTP's body limit) do not know the
/// full size, so `bytes_received` is optional.
pub fn payload_too_large(bytes_received: Option<usize>) -> RpcError {
    let detail = match bytes_received {
        Some(bytes) => format!("message of {bytes} bytes exceeds the {MESSAGE_BYTES_MAX}-byte limit"),
        None => format!("message exceeds the {MESSAGE_BYTES_MAX}-byte limit"),
    };
    RpcError::invalid_request(detail).with_data(json!({ "reason": Reason::PayloadTooLarge.as_str() })).with_status(413)
}

/// Reads exactly one JSON message: the size bound first, then the JSON text. Its envelope is then read by
/// [`parse_decoded`], which borrows from the value returned here.
pub(crate) fn parse_json(bytes: &[u8]) -> Result<Value, Rejected> {
    if bytes.len() > MESSAGE_BYTES_MAX {
        return Err(Rejected { id: None, error: payload_too_large(Some(bytes.len())) });
    }
    // serde_json refuses nesting deeper than 128 levels, so hostile depth is a parse error, not a stack overflow.
    serde_json::from_slice(bytes).map_err(|e| Rejected { id: None, error: RpcError::parse_error(e) })
}

/// Reads the JSON-RPC request or notification of a message of `length` bytes whose JSON is `value` (parsed
/// by [`parse_json`], or held already decoded by its carrier, as the simulator's network holds what its
/// clients built): the same bounds and checks either way.
pub(crate) fn parse_decoded(value: &Value, length: usize) -> Result<Incoming<'_>, Rejected> {
    let reject = |id: Option<RequestId>, error: RpcError| Rejected { id, error };
    if length > MESSAGE_BYTES_MAX {
        return Err(reject(None, payload_too_large(Some(length))));
    }
    let object = match value {
        Value::Object(object) => object,
        Value::Array(_) => return Err(reject(None, RpcError::invalid_request("batches are not supported; send one message per request"))),
        _ => return Err(reject(None, RpcError::invalid_request("a message must be a JSON object"))),
    };
    parse_object(object)
}

fn parse_object(object: &Map<String, Value>) -> Result<Incoming<'_>, Rejected> {
    let id = match object.get("id") {
        None => None,
        Some(raw) => match RequestId::from_json(raw) {
            Some(id) => Some(id),
            None => {
                return Err(Rejected { id: None, error: RpcError::invalid_request("id must be a string or an integer") });
            }
        },
    };
    let reject = |message: &str| Rejected { id: id.clone(), error: RpcError::invalid_request(message.to_string()) };
    match object.get("jsonrpc") {
        Some(Value::String(version)) if version == "2.0" => {}
        _ => return Err(reject("jsonrpc must be \"2.0\"")),
    }
    if object.contains_key("result") || object.contains_key("error") {
        return Err(reject("clients never send responses to a server"));
    }
    let method = match object.get("method") {
        Some(Value::String(method)) if !method.is_empty() => method.as_str(),
        _ => return Err(reject("method must be a non-empty string")),
    };
    let params = object.get("params");
    if let Some(params) = params {
        if !params.is_object() {
            // MCP params are always objects; arrays (JSON-RPC positional params) are not a form MCP uses.
            let error = RpcError::meta_invalid("params must be an object carrying _meta");
            return Err(Rejected { id, error });
        }
    }
    Ok(match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    })
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub(crate) fn result_response(id: &RequestId, result: Value) -> Value {
    super::object([("jsonrpc", "2.0".into()), ("id", id.to_json()), ("result", result)])
}

/// `{"jsonrpc":"2.0","method":…,"params":…}`: a notification (no `id`, never answered).
pub fn notification(method: &str, params: Value) -> Value {
    super::object([("jsonrpc", "2.0".into()), ("method", method.into()), ("params", params)])
}

/// `{"jsonrpc":"2.0","id":…|null,"error":{…}}`.
pub(crate) fn error_response(id: Option<&RequestId>, error: &RpcError) -> Value {
    into_error_response(id, error.clone())
}

/// [`error_response`] for an error the caller is done with: its message and data move into the response.
pub(crate) fn into_error_response(id: Option<&RequestId>, error: RpcError) -> Value {
    let id = id.map(RequestId::to_json).unwrap_or(Value::Null);
    super::object([("jsonrpc", "2.0".into()), ("id", id), ("error", error.into_json())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::errors::*;

    /// What the pipeline reads of raw bytes: the JSON, then its envelope (with the params copied out).
    fn parse_message(bytes: &[u8]) -> Result<(Option<RequestId>, String, Option<Value>), Rejected> {
        let value = parse_json(bytes)?;
        parse_decoded(&value, bytes.len()).map(owned)
    }

    fn owned(incoming: Incoming<'_>) -> (Option<RequestId>, String, Option<Value>) {
        match incoming {
            Incoming::Request { id, method, params } => (Some(id), method.to_string(), params.cloned()),
            Incoming::Notification { method, params } => (None, method.to_string(), params.cloned()),
        }
    }

    fn code_of(bytes: &[u8]) -> (Option<RequestId>, i64) {
        let rejected = parse_message(bytes).unwrap_err();
        (rejected.id, rejected.error.code)
    }

    #[test]
    fn responses_hold_their_members_as_json_would() {
        let result = json!({ "content": [{ "type": "text", "text": "done" }], "_meta": { "k": [1, null] } });
        let error = RpcError::invalid_params(Reason::ArgumentsInvalid, "no");
        assert_eq!(result_response(&RequestId::Number(3), result.clone()), json!({ "jsonrpc": "2.0", "id": 3, "result": result }));
        assert_eq!(notification("m", json!({ "a": 1 })), json!({ "jsonrpc": "2.0", "method": "m", "params": { "a": 1 } }));
        assert_eq!(error_response(None, &error), json!({ "jsonrpc": "2.0", "id": null, "error": error.to_json() }));
    }

    #[test]
    fn accepts_integer_and_string_ids() {
        let m = parse_message(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#).unwrap();
        assert_eq!(m, (Some(RequestId::Number(7)), "tools/list".to_string(), Some(json!({}))));
        let m = parse_message(br#"{"jsonrpc":"2.0","id":"a","method":"x"}"#).unwrap();
        assert_eq!(m, (Some(RequestId::String("a".into())), "x".to_string(), None));
    }

    #[test]
    fn bad_ids_are_invalid_requests_answered_with_null_id() {
        for body in [
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#,
        ] {
            assert_eq!(code_of(body.as_bytes()), (None, INVALID_REQUEST), "{body}");
        }
    }

    #[test]
    fn batches_and_non_objects_are_invalid_requests() {
        assert_eq!(code_of(br#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#), (None, INVALID_REQUEST));
        assert_eq!(code_of(b"[]"), (None, INVALID_REQUEST));
        assert_eq!(code_of(b"42"), (None, INVALID_REQUEST));
        assert_eq!(code_of(b"\"hi\""), (None, INVALID_REQUEST));
    }

    #[test]
    fn unparseable_is_parse_error() {
        assert_eq!(code_of(b"{"), (None, PARSE_ERROR));
        assert_eq!(code_of(b""), (None, PARSE_ERROR));
        assert_eq!(code_of(&[0xff, 0xfe]), (None, PARSE_ERROR));
    }

    #[test]
    fn the_size_bound_is_on_the_bytes_a_decoded_value_came_as() {
        let value = json!({"jsonrpc": "2.0", "id": 1, "method": "x"});
        assert!(parse_decoded(&value, MESSAGE_BYTES_MAX).is_ok());
        let too_large = parse_decoded(&value, MESSAGE_BYTES_MAX + 1).unwrap_err();
        assert_eq!(too_large.error.code, INVALID_REQUEST);
        assert_eq!(too_large.error.reason(), Some(Reason::PayloadTooLarge));
    }

    #[test]
    fn deep_nesting_is_a_parse_error_not_a_crash() {
        let body = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(code_of(body.as_bytes()).1, PARSE_ERROR);
    }

    #[test]
    fn oversized_messages_are_refused_before_parsing() {
        let body = vec![b' '; MESSAGE_BYTES_MAX + 1];
        let rejected = parse_message(&body).unwrap_err();
        assert_eq!(rejected.error.reason(), Some(Reason::PayloadTooLarge));
        assert_eq!(rejected.error.http_status, 413);
    }

    #[test]
    fn envelope_rules_keep_the_id_when_readable() {
        assert_eq!(code_of(br#"{"jsonrpc":"1.0","id":3,"method":"x"}"#), (Some(RequestId::Number(3)), INVALID_REQUEST));
        assert_eq!(code_of(br#"{"id":3,"method":"x"}"#), (Some(RequestId::Number(3)), INVALID_REQUEST));
        assert_eq!(code_of(br#"{"jsonrpc":"2.0","id":3,"method":7}"#), (Some(RequestId::Number(3)), INVALID_REQUEST));
        assert_eq!(code_of(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#), (Some(RequestId::Number(3)), INVALID_REQUEST));
        assert_eq!(code_of(br#"{"jsonrpc":"2.0","id":3,"method":"x","params":[1]}"#), (Some(RequestId::Number(3)), INVALID_PARAMS));
    }

    #[test]
    fn notifications_have_no_id() {
        let m = parse_message(br#"{"jsonrpc":"2.0","method":"tools/call","params":{}}"#).unwrap();
        assert_eq!(m.0, None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse_message(&bytes);
        }
    }
}
