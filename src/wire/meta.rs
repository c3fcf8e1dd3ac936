//! Per-request `params._meta`: the protocol version and client capabilities every request must carry.
//!
//! Nothing is remembered between requests: capabilities declared earlier count for nothing (SPEC-META-8).

use super::errors::RpcError;
use super::PROTOCOL_VERSION;
use serde_json::{json, Map, Value};

pub const KEY_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const KEY_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const KEY_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const KEY_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub(crate) const KEY_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub(crate) const KEY_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The syslog severities of `notifications/message`, least severe first (the derived order is severity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    pub fn parse(text: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|level| level.as_str() == text)
    }
}

/// The request's opt-in to log messages (`_meta["io.modelcontextprotocol/logLevel"]`, deprecated logging).
/// Absent: the server must send no `notifications/message` for this request. Unknown: `-32602` (SPEC-META-11).
pub(crate) fn read_log_level(params: &Value) -> Result<Option<LogLevel>, RpcError> {
    match params.get("_meta").and_then(|meta| meta.get(KEY_LOG_LEVEL)) {
        None => Ok(None),
        Some(Value::String(level)) => match LogLevel::parse(level) {
            Some(level) => Ok(Some(level)),
            None => {
                Err(invalid_field(KEY_LOG_LEVEL, "is not a log level (debug, info, notice, warning, error, critical, alert, emergency)"))
            }
        },
        Some(_) => Err(invalid_field(KEY_LOG_LEVEL, "must be a string")),
    }
}

/// The validated `_meta` of one request, read in place from its params.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMeta<'a> {
    pub protocol_version: &'a str,
    /// Borrowed from the request (owned only where something builds capabilities of its own).
    pub client_capabilities: std::borrow::Cow<'a, Map<String, Value>>,
    /// Self-reported, diagnostics only: never identity, never authorization.
    pub client_info: Option<&'a Value>,
    pub progress_token: Option<&'a Value>,
}

/// Reads `params._meta`. A missing or wrong-typed required field is `-32602` with HTTP 400.
///
/// A non-string version is treated like a missing one (SPEC-META-5): `-32022` echoes `requested` as a string.
pub(crate) fn read_meta(params: Option<&Value>) -> Result<RequestMeta<'_>, RpcError> {
    let params = match params {
        Some(Value::Object(params)) => params,
        Some(_) => return Err(RpcError::meta_invalid("params must be an object carrying _meta")),
        None => return Err(RpcError::meta_invalid("params with _meta is required on every request")),
    };
    let meta = match params.get("_meta") {
        Some(Value::Object(meta)) => meta,
        Some(_) => return Err(RpcError::meta_invalid("params._meta must be an object")),
        None => return Err(RpcError::meta_invalid("params._meta is required on every request")),
    };
    let protocol_version = match meta.get(KEY_PROTOCOL_VERSION) {
        Some(Value::String(version)) => version.as_str(),
        Some(_) => return Err(invalid_field(KEY_PROTOCOL_VERSION, "must be a string")),
        None => return Err(invalid_field(KEY_PROTOCOL_VERSION, "is required")),
    };
    let client_capabilities = match meta.get(KEY_CLIENT_CAPABILITIES) {
        Some(Value::Object(capabilities)) => std::borrow::Cow::Borrowed(capabilities),
        Some(_) => return Err(invalid_field(KEY_CLIENT_CAPABILITIES, "must be an object")),
        None => return Err(invalid_field(KEY_CLIENT_CAPABILITIES, "is required")),
    };
    let client_info = match meta.get(KEY_CLIENT_INFO) {
        None => None,
        Some(info @ Value::Object(_)) => Some(info),
        Some(_) => return Err(invalid_field(KEY_CLIENT_INFO, "must be an object when present")),
    };
    let progress_token = match meta.get("progressToken") {
        None => None,
        Some(token @ Value::String(_)) => Some(token),
        Some(token @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(token),
        Some(_) => return Err(invalid_field("progressToken", "must be a string or an integer")),
    };
    Ok(RequestMeta { protocol_version, client_capabilities, client_info, progress_token })
}

fn invalid_field(key: &str, problem: &str) -> RpcError {
    RpcError::meta_invalid(format!("params._meta[\"{key}\"] {problem}")).with_detail("field", json!(key))
}

/// `-32022` unless the request's version is the one we implement.
pub(crate) fn check_version(meta: &RequestMeta<'_>) -> Result<(), RpcError> {
    if meta.protocol_version == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(RpcError::unsupported_version(meta.protocol_version))
    }
}

/// Form elicitation is declared by `{"elicitation":{}}` (compatibility form) or `{"elicitation":{"form":{}}}`.
/// URL-only (`{"elicitation":{"url":{}}}`) does not declare it.
pub(crate) fn supports_form_elicitation(capabilities: &Map<String, Value>) -> bool {
    match capabilities.get("elicitation") {
        Some(Value::Object(elicitation)) => elicitation.is_empty() || elicitation.get("form").is_some_and(Value::is_object),
        _ => false,
    }
}

/// `-32021` with `requiredCapabilities` exactly `{"elicitation":{"form":{}}}` when form elicitation is undeclared.
pub(crate) fn require_form_elicitation(meta: &RequestMeta<'_>) -> Result<(), RpcError> {
    if supports_form_elicitation(&meta.client_capabilities) {
        Ok(())
    } else {
        Err(RpcError::missing_capability(
            json!({ "elicitation": { "form": {} } }),
            "This request needs form elicitation to ask the user; declare it in this request's clientCapabilities",
        ))
    }
}

/// URL-mode elicitation is declared only by `{"elicitation":{"url":{}}}` (alone or beside `form`); the
/// compatibility form `{"elicitation":{}}` means form only (SPEC-META-13).
pub(crate) fn supports_url_elicitation(capabilities: &Map<String, Value>) -> bool {
    capabilities.get("elicitation").and_then(|elicitation| elicitation.get("url")).is_some_and(Value::is_object)
}

/// `-32021` with `requiredCapabilities` exactly `{"elicitation":{"url":{}}}` when URL elicitation is undeclared.
pub(crate) fn require_url_elicitation(meta: &RequestMeta<'_>) -> Result<(), RpcError> {
    if supports_url_elicitation(&meta.client_capabilities) {
        Ok(())
    } else {
        Err(RpcError::missing_capability(
            json!({ "elicitation": { "url": {} } }),
            "This request needs URL-mode elicitation to send the user to an authorization page; declare it in this request's clientCapabilities",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::errors::*;

    /// Whether `params` reads as `_meta`, and the error when it does not.
    fn meta(params: Value) -> Result<(), RpcError> {
        read_meta(Some(&params)).map(|_| ())
    }

    #[test]
    fn missing_or_mistyped_required_fields_are_invalid_params_with_400() {
        for params in [
            json!({}),
            json!({"_meta": 1}),
            json!({"_meta": {}}),
            json!({"_meta": {KEY_PROTOCOL_VERSION: "2026-07-28"}}),
            json!({"_meta": {KEY_CLIENT_CAPABILITIES: {}}}),
            json!({"_meta": {KEY_PROTOCOL_VERSION: 20260728, KEY_CLIENT_CAPABILITIES: {}}}),
            json!({"_meta": {KEY_PROTOCOL_VERSION: "2026-07-28", KEY_CLIENT_CAPABILITIES: []}}),
            json!({"_meta": {KEY_PROTOCOL_VERSION: "2026-07-28", KEY_CLIENT_CAPABILITIES: {}, "progressToken": 1.5}}),
        ] {
            let error = meta(params.clone()).unwrap_err();
            assert_eq!((error.code, error.http_status), (INVALID_PARAMS, 400), "{params}");
        }
        assert_eq!(read_meta(None).unwrap_err().code, INVALID_PARAMS);
    }

    #[test]
    fn client_info_is_optional() {
        let params = json!({"_meta": {KEY_PROTOCOL_VERSION: "2026-07-28", KEY_CLIENT_CAPABILITIES: {}}});
        let m = read_meta(Some(&params)).unwrap();
        assert!(m.client_info.is_none());
        assert!(check_version(&m).is_ok());
    }

    #[test]
    fn unknown_version_is_32022_with_exact_data() {
        let params = json!({"_meta": {KEY_PROTOCOL_VERSION: "2025-11-25", KEY_CLIENT_CAPABILITIES: {}}});
        let m = read_meta(Some(&params)).unwrap();
        let error = check_version(&m).unwrap_err();
        assert_eq!(error.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(error.data, Some(json!({"supported":["2026-07-28"],"requested":"2025-11-25"})));
    }

    #[test]
    fn form_elicitation_declarations() {
        let caps = |v: Value| v.as_object().unwrap().clone();
        assert!(supports_form_elicitation(&caps(json!({"elicitation": {}}))));
        assert!(supports_form_elicitation(&caps(json!({"elicitation": {"form": {}}}))));
        assert!(supports_form_elicitation(&caps(json!({"elicitation": {"form": {}, "url": {}}}))));
        assert!(!supports_form_elicitation(&caps(json!({"elicitation": {"url": {}}}))));
        assert!(!supports_form_elicitation(&caps(json!({}))));
        assert!(!supports_form_elicitation(&caps(json!({"elicitation": true}))));
        assert!(!supports_form_elicitation(&caps(json!({"elicitation": {"form": true}}))));
    }

    #[test]
    fn log_level_is_optional_ordered_and_validated() {
        assert_eq!(read_log_level(&json!({"_meta": {}})).unwrap(), None);
        assert_eq!(read_log_level(&json!({"_meta": {KEY_LOG_LEVEL: "warning"}})).unwrap(), Some(LogLevel::Warning));
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Alert < LogLevel::Emergency);
        for bad in [json!("verbose"), json!(3)] {
            let error = read_log_level(&json!({"_meta": {KEY_LOG_LEVEL: bad}})).unwrap_err();
            assert_eq!(error.code, INVALID_PARAMS);
        }
    }

    #[test]
    fn missing_capability_data_is_exact() {
        let params = json!({"_meta": {KEY_PROTOCOL_VERSION: "2026-07-28", KEY_CLIENT_CAPABILITIES: {"elicitation":{"url":{}}}}});
        let m = read_meta(Some(&params)).unwrap();
        let error = require_form_elicitation(&m).unwrap_err();
        assert_eq!(error.code, MISSING_REQUIRED_CLIENT_CAPABILITY);
        assert_eq!(error.data, Some(json!({"requiredCapabilities":{"elicitation":{"form":{}}}})));
    }
}
