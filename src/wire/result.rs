//! Result envelopes: every result carries `resultType` and `_meta["io.modelcontextprotocol/serverInfo"]`.

use super::meta::KEY_SERVER_INFO;
use serde_json::{json, Map, Value};

/// Self-reported server identity, placed in every result's `_meta` (it is never proof of anything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
}

impl ServerInfo {
    pub fn to_json(&self) -> Value {
        super::object([("name", self.name.as_str().into()), ("version", self.version.as_str().into())])
    }
}

/// Cache hint for the six cacheable methods' complete results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Public => "public",
            CacheScope::Private => "private",
        }
    }
}

/// `resultType: "complete"` plus server identity; `fields` are the method-specific members.
pub fn complete(fields: Value, server_info: &ServerInfo) -> Value {
    finish(fields, "complete", server_info)
}

/// A complete result carrying `ttlMs` and `cacheScope`.
pub(crate) fn complete_cacheable(fields: Value, ttl_ms: u64, scope: CacheScope, server_info: &ServerInfo) -> Value {
    let mut result = complete(fields, server_info);
    result["ttlMs"] = json!(ttl_ms);
    result["cacheScope"] = json!(scope.as_str());
    result
}

/// `resultType: "input_required"` with `inputRequests` and a `requestState`. Never cacheable.
pub fn input_required(input_requests: Value, request_state: &str, server_info: &ServerInfo) -> Value {
    finish(super::object([("inputRequests", input_requests), ("requestState", request_state.into())]), "input_required", server_info)
}

fn finish(fields: Value, result_type: &str, server_info: &ServerInfo) -> Value {
    let mut map = match fields {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    map.insert("resultType".into(), result_type.into());
    let meta = map.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(KEY_SERVER_INFO.into(), server_info.to_json());
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_has_result_type_and_server_info() {
        let info = ServerInfo { name: "mcpsim".into(), version: "0.1.0".into() };
        let result = complete_cacheable(json!({"tools": []}), 1000, CacheScope::Public, &info);
        assert_eq!(result["resultType"], "complete");
        assert_eq!(result["_meta"][KEY_SERVER_INFO]["name"], "mcpsim");
        assert_eq!(result["cacheScope"], "public");
        let result = input_required(json!({}), "s", &info);
        assert_eq!(result["resultType"], "input_required");
        assert!(result.get("ttlMs").is_none());
    }
}
