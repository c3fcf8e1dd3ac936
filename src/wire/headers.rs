//! HTTP routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) checked against the body.
//!
//! The transport only copies header values out of the request; the comparison lives here so the gateway,
//! the notes server and the simulator all apply the same rule in the same order.

use super::errors::{echo, RpcError};
use base64::Engine;
use serde_json::Value;

/// Header values as received (already trimmed of surrounding whitespace by the transport, or not present).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingHeaders {
    pub protocol_version: Option<String>,
    pub method: Option<String>,
    pub name: Option<String>,
}

/// Methods whose target travels in `Mcp-Name`, and the params field it mirrors.
pub(crate) fn named_target_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

impl RoutingHeaders {
    /// The routing headers a conforming HTTP client sends with `message`: `MCP-Protocol-Version` from
    /// `params._meta`, `Mcp-Method` from `method`, and `Mcp-Name` from the field the method names (when each
    /// is a string). A value that is not printable ASCII travels base64-wrapped (`=?base64?…?=`), as
    /// SPEC-HTTP-13 asks. The one builder of these headers: the simulator's clients, live mode and every HTTP
    /// client of ours use it, so all worlds take the pipeline's header check the same way.
    pub fn for_message(message: &Value) -> RoutingHeaders {
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(encode_header_value);
        let params = message.get("params");
        let method = message.get("method").and_then(Value::as_str);
        let name = method.and_then(named_target_field).and_then(|field| params.and_then(|p| p.get(field)));
        RoutingHeaders {
            protocol_version: text(params.and_then(|p| p.get("_meta")).and_then(|m| m.get(crate::wire::meta::KEY_PROTOCOL_VERSION))),
            method: method.map(encode_header_value),
            name: text(name),
        }
    }

    /// As HTTP header (name, value) pairs, the absent ones left out.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut pairs = Vec::new();
        if let Some(version) = &self.protocol_version {
            pairs.push(("MCP-Protocol-Version", version.as_str()));
        }
        if let Some(method) = &self.method {
            pairs.push(("Mcp-Method", method.as_str()));
        }
        if let Some(name) = &self.name {
            pairs.push(("Mcp-Name", name.as_str()));
        }
        pairs
    }
}

/// A header value as a client sends it: as is when it is printable ASCII, base64-wrapped otherwise.
pub(crate) fn encode_header_value(text: &str) -> String {
    if text.chars().all(|c| c.is_ascii() && !c.is_control()) {
        text.to_string()
    } else {
        format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(text))
    }
}

/// `-32020` (HTTP 400) if a required header is missing, malformed, or disagrees with the body.
pub(crate) fn check_routing_headers(
    headers: &RoutingHeaders,
    body_version: &str,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    let version = require(&headers.protocol_version, "MCP-Protocol-Version")?;
    if version != body_version {
        return Err(mismatch("MCP-Protocol-Version", &version, body_version));
    }
    let header_method = require(&headers.method, "Mcp-Method")?;
    if header_method != method {
        return Err(mismatch("Mcp-Method", &header_method, method));
    }
    if let Some(field) = named_target_field(method) {
        let name = require(&headers.name, "Mcp-Name")?;
        let body_value = params.and_then(|p| p.get(field)).and_then(Value::as_str).unwrap_or("");
        if name != body_value {
            return Err(mismatch("Mcp-Name", &name, body_value));
        }
    }
    Ok(())
}

fn require(value: &Option<String>, header: &str) -> Result<String, RpcError> {
    let raw = value.as_deref().ok_or_else(|| RpcError::header_mismatch(format!("Header mismatch: required header {header} is missing")))?;
    decode_header_value(raw).ok_or_else(|| RpcError::header_mismatch(format!("Header mismatch: {header} header value is not valid")))
}

/// Decodes the `=?base64?…?=` sentinel; refuses control characters, raw non-ASCII (which clients must send
/// base64-wrapped, SPEC-HTTP-13) and invalid base64.
pub(crate) fn decode_header_value(raw: &str) -> Option<String> {
    if raw.chars().any(|c| c.is_control() || !c.is_ascii()) {
        return None;
    }
    match raw.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(raw.to_string()),
    }
}

fn mismatch(header: &str, header_value: &str, body_value: &str) -> RpcError {
    RpcError::header_mismatch(format!(
        "Header mismatch: {header} header value {:?} does not match body value {:?}",
        echo(header_value),
        echo(body_value)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers(version: &str, method: &str, name: Option<&str>) -> RoutingHeaders {
        RoutingHeaders { protocol_version: Some(version.into()), method: Some(method.into()), name: name.map(Into::into) }
    }

    #[test]
    fn agreeing_headers_pass() {
        let params = json!({"name": "notes_delete"});
        assert!(check_routing_headers(
            &headers("2026-07-28", "tools/call", Some("notes_delete")),
            "2026-07-28",
            "tools/call",
            Some(&params)
        )
        .is_ok());
        assert!(check_routing_headers(&headers("2026-07-28", "tools/list", None), "2026-07-28", "tools/list", None).is_ok());
    }

    #[test]
    fn every_disagreement_is_32020() {
        let params = json!({"name": "notes_delete", "uri": "file:///a"});
        let cases = [
            (RoutingHeaders::default(), "tools/call"),
            (headers("2026-07-28", "tools/list", Some("notes_delete")), "tools/call"),
            (headers("2025-11-25", "tools/call", Some("notes_delete")), "tools/call"),
            (headers("2026-07-28", "tools/call", Some("other")), "tools/call"),
            (headers("2026-07-28", "tools/call", None), "tools/call"),
            (headers("2026-07-28", "resources/read", Some("file:///b")), "resources/read"),
            (headers("2026-07-28", "tools/call", Some("=?base64?!!!?=")), "tools/call"),
            (headers("2026-07-28", "tools/call", Some("notes\u{7}delete")), "tools/call"),
        ];
        for (h, method) in cases {
            let error = check_routing_headers(&h, "2026-07-28", method, Some(&params)).unwrap_err();
            assert_eq!((error.code, error.http_status), (-32020, 400), "{h:?}");
        }
    }

    #[test]
    fn raw_non_ascii_is_refused_even_when_it_equals_the_body() {
        // Non-ASCII must travel base64-wrapped; a transport turns undecodable bytes into U+FFFD, refused here too.
        for name in ["caf\u{e9}", "\u{fffd}"] {
            let params = json!({ "name": name });
            let error = check_routing_headers(&headers("2026-07-28", "tools/call", Some(name)), "2026-07-28", "tools/call", Some(&params))
                .unwrap_err();
            assert_eq!(error.code, -32020, "{name:?}");
            let encoded = format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(name));
            assert!(check_routing_headers(&headers("2026-07-28", "tools/call", Some(&encoded)), "2026-07-28", "tools/call", Some(&params))
                .is_ok());
        }
    }

    #[test]
    fn headers_built_for_a_message_pass_the_check() {
        for name in ["notes_delete", "caf\u{e9}", "tab\there"] {
            let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                 "params": {"name": name, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
            let headers = RoutingHeaders::for_message(&message);
            assert_eq!(headers.method.as_deref(), Some("tools/call"));
            assert!(check_routing_headers(&headers, "2026-07-28", "tools/call", message.get("params")).is_ok(), "{name:?}: {headers:?}");
        }
        let listing = RoutingHeaders::for_message(&json!({"method": "tools/list", "params": {}}));
        assert_eq!((listing.protocol_version, listing.name), (None, None), "absent fields are not invented");
        let read = RoutingHeaders::for_message(&json!({"method": "resources/read", "params": {"uri": "file:///a"}}));
        assert_eq!(read.pairs().last(), Some(&("Mcp-Name", "file:///a")));
    }

    #[test]
    fn base64_sentinel_is_decoded_before_comparing() {
        let params = json!({"name": "notes_delete"});
        let encoded = format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode("notes_delete"));
        assert!(
            check_routing_headers(&headers("2026-07-28", "tools/call", Some(&encoded)), "2026-07-28", "tools/call", Some(&params)).is_ok()
        );
    }
}
