//! Authority narrowing for arguments: every forwarded call is checked against the *approved* `inputSchema`
//! (the one in the pin, not whatever the backend says today), closed and capped, before any policy decision
//! that depends on an argument value.
//!
//! The gateway enforces a small, explicit JSON Schema subset — a flat object of string, integer, number and
//! boolean properties with `required`, `enum`, `minLength`/`maxLength`, `minimum`/`maximum`. An approved
//! schema using anything else is refused rather than half-enforced. Unknown fields are refused whether or not
//! the schema says `additionalProperties: false`.

use serde_json::{Map, Value};

/// Largest arguments object forwarded, in canonical bytes.
pub(crate) const ARGUMENTS_BYTES_MAX: usize = 16 * 1024;
pub(crate) const ARGUMENT_COUNT_MAX: usize = 32;
/// Longest string argument, whatever the schema's `maxLength` says.
pub(crate) const ARGUMENT_STRING_CHARS_MAX: usize = 4096;

const ROOT_KEYWORDS: [&str; 7] = ["type", "properties", "required", "additionalProperties", "description", "title", "$schema"];
const PROPERTY_KEYWORDS: [&str; 10] =
    ["type", "description", "title", "minLength", "maxLength", "enum", "minimum", "maximum", "default", "format"];

/// Why arguments were refused: what to fix (a caller's argument) or what the approved schema uses that the
/// gateway does not enforce. Its text goes into the refusal's message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ArgumentError {
    #[error("the approved inputSchema is not an object")]
    SchemaNotAnObject,
    #[error("the approved inputSchema is not of type object")]
    SchemaNotOfTypeObject,
    /// `keyword`: where in the schema, e.g. `properties/q/type`.
    #[error(
        "the approved inputSchema uses {keyword:?}, which the gateway does not enforce; it refuses rather than forward unchecked arguments"
    )]
    Unenforceable { keyword: String },
    #[error("at most {ARGUMENT_COUNT_MAX} arguments are accepted")]
    TooMany,
    #[error("arguments larger than {ARGUMENTS_BYTES_MAX} bytes are refused")]
    TooLarge,
    /// `name` as echoed (bounded, see `wire::errors::echo`); `known`, the schema's properties.
    #[error("unknown argument {name:?}: this tool takes only {known:?}")]
    Unknown { name: String, known: Vec<String> },
    #[error("argument {name:?} is required")]
    Required { name: String },
    #[error("argument {name:?} must be of type {kind}")]
    WrongType { name: String, kind: String },
    #[error("argument {name:?} must be one of {allowed}")]
    NotAllowed { name: String, allowed: Value },
    #[error("argument {name:?} must be {min} to {max} characters long")]
    Length { name: String, min: usize, max: usize },
    #[error("argument {name:?} is below its minimum")]
    BelowMinimum { name: String },
    #[error("argument {name:?} is above its maximum")]
    AboveMaximum { name: String },
}

/// Checks `arguments` against the approved schema. The error says what to fix.
pub(crate) fn check_arguments(schema: &Value, arguments: &Map<String, Value>) -> Result<(), ArgumentError> {
    let Some(schema) = schema.as_object() else { return Err(ArgumentError::SchemaNotAnObject) };
    if let Some(keyword) = schema.keys().find(|k| !ROOT_KEYWORDS.contains(&k.as_str())) {
        return Err(unenforceable(keyword));
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(ArgumentError::SchemaNotOfTypeObject);
    }
    let empty = Map::new();
    let properties = match schema.get("properties") {
        None => &empty,
        Some(Value::Object(properties)) => properties,
        Some(_) => return Err(unenforceable("properties")),
    };
    if arguments.len() > ARGUMENT_COUNT_MAX {
        return Err(ArgumentError::TooMany);
    }
    if serde_json::to_vec(arguments).map_or(usize::MAX, |bytes| bytes.len()) > ARGUMENTS_BYTES_MAX {
        return Err(ArgumentError::TooLarge);
    }
    if let Some(unknown) = arguments.keys().find(|key| !properties.contains_key(*key)) {
        let known = properties.keys().cloned().collect();
        return Err(ArgumentError::Unknown { name: crate::wire::errors::echo(unknown), known });
    }
    if let Some(required) = schema.get("required") {
        let Some(required) = required.as_array() else { return Err(unenforceable("required")) };
        for name in required {
            let Some(name) = name.as_str() else { return Err(unenforceable("required")) };
            if !arguments.contains_key(name) {
                return Err(ArgumentError::Required { name: name.to_string() });
            }
        }
    }
    for (name, value) in arguments {
        check_property(name, &properties[name], value)?;
    }
    Ok(())
}

fn unenforceable(keyword: &str) -> ArgumentError {
    ArgumentError::Unenforceable { keyword: keyword.to_string() }
}

fn check_property(name: &str, schema: &Value, value: &Value) -> Result<(), ArgumentError> {
    let named = || name.to_string();
    let Some(schema) = schema.as_object() else { return Err(unenforceable(&format!("properties/{name}"))) };
    if let Some(keyword) = schema.keys().find(|k| !PROPERTY_KEYWORDS.contains(&k.as_str())) {
        return Err(unenforceable(&format!("properties/{name}/{keyword}")));
    }
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let type_ok = match kind {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => return Err(unenforceable(&format!("properties/{name}/type"))),
    };
    if !type_ok {
        return Err(ArgumentError::WrongType { name: named(), kind: kind.to_string() });
    }
    if let Some(allowed) = schema.get("enum") {
        let Some(allowed) = allowed.as_array() else { return Err(unenforceable(&format!("properties/{name}/enum"))) };
        if !allowed.contains(value) {
            return Err(ArgumentError::NotAllowed { name: named(), allowed: Value::Array(allowed.clone()) });
        }
    }
    if let Some(text) = value.as_str() {
        let chars = text.chars().count();
        let declared_max = schema.get("maxLength").and_then(Value::as_u64).map(|n| n as usize);
        let max = declared_max.unwrap_or(ARGUMENT_STRING_CHARS_MAX).min(ARGUMENT_STRING_CHARS_MAX);
        let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        if chars > max || chars < min {
            return Err(ArgumentError::Length { name: named(), min, max });
        }
    }
    if let Some(number) = value.as_f64() {
        if schema.get("minimum").and_then(Value::as_f64).is_some_and(|minimum| number < minimum) {
            return Err(ArgumentError::BelowMinimum { name: named() });
        }
        if schema.get("maximum").and_then(Value::as_f64).is_some_and(|maximum| number > maximum) {
            return Err(ArgumentError::AboveMaximum { name: named() });
        }
    }
    Ok(())
}

/// The arguments as the audit log may show them: a value stays readable only when it cannot be a secret —
/// a boolean, or a member of the approved schema's `enum`. Everything else becomes `digest(value)`.
pub fn redact(schema: &Value, arguments: &Map<String, Value>, digest: impl Fn(&Value) -> String) -> Map<String, Value> {
    arguments
        .iter()
        .map(|(name, value)| {
            let property = schema.get("properties").and_then(|p| p.get(name));
            let enumerated = property.and_then(|p| p.get("enum")).and_then(Value::as_array).is_some_and(|allowed| allowed.contains(value));
            let shown = if value.is_boolean() || enumerated { value.clone() } else { Value::String(digest(value)) };
            (name.clone(), shown)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "additionalProperties": false, "required": ["query", "destination"], "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 20},
            "destination": {"type": "string", "enum": ["archive"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        }})
    }

    fn check(arguments: Value) -> Result<(), ArgumentError> {
        check_arguments(&schema(), arguments.as_object().unwrap())
    }

    #[test]
    fn valid_arguments_pass() {
        check(json!({"query": "tps", "destination": "archive"})).unwrap();
        check(json!({"query": "tps", "destination": "archive", "limit": 3})).unwrap();
    }

    #[test]
    fn every_violation_is_refused_with_a_reason() {
        let known = vec!["destination".to_string(), "limit".to_string(), "query".to_string()];
        let string = |name: &str, kind: &str| ArgumentError::WrongType { name: name.into(), kind: kind.into() };
        let length = ArgumentError::Length { name: "query".into(), min: 1, max: 20 };
        for (arguments, expected, text) in [
            (
                json!({"query": "tps", "destination": "archive", "cc": "x"}),
                ArgumentError::Unknown { name: "cc".into(), known },
                "unknown argument \"cc\": this tool takes only [\"destination\", \"limit\", \"query\"]",
            ),
            (json!({"query": "tps"}), ArgumentError::Required { name: "destination".into() }, "argument \"destination\" is required"),
            (
                json!({"query": "tps", "destination": "https://paste.example"}),
                ArgumentError::NotAllowed { name: "destination".into(), allowed: json!(["archive"]) },
                "argument \"destination\" must be one of [\"archive\"]",
            ),
            (json!({"query": 7, "destination": "archive"}), string("query", "string"), "argument \"query\" must be of type string"),
            (json!({"query": "", "destination": "archive"}), length.clone(), "argument \"query\" must be 1 to 20 characters long"),
            (json!({"query": "x".repeat(21), "destination": "archive"}), length, "argument \"query\" must be 1 to 20 characters long"),
            (json!({"query": "tps", "destination": "archive", "limit": 2.5}), string("limit", "integer"), "must be of type integer"),
            (
                json!({"query": "tps", "destination": "archive", "limit": 11}),
                ArgumentError::AboveMaximum { name: "limit".into() },
                "argument \"limit\" is above its maximum",
            ),
        ] {
            let error = check(arguments.clone()).unwrap_err();
            assert_eq!(error, expected, "{arguments}");
            assert!(error.to_string().ends_with(text), "{arguments} -> {error}");
        }
    }

    #[test]
    fn open_schemas_are_closed_and_unknown_keywords_refused() {
        let open = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let extra = check_arguments(&open, json!({"q": "a", "extra": 1}).as_object().unwrap());
        assert!(matches!(extra, Err(ArgumentError::Unknown { name, .. }) if name == "extra"));
        let long = "x".repeat(ARGUMENT_STRING_CHARS_MAX + 1);
        assert!(check_arguments(&open, json!({"q": long}).as_object().unwrap()).is_err(), "the gateway cap applies without maxLength");
        let nested = json!({"type": "object", "properties": {"q": {"type": "object", "properties": {}}}});
        let unenforced = |keyword: &str| Err(ArgumentError::Unenforceable { keyword: keyword.into() });
        assert_eq!(check_arguments(&nested, json!({"q": {}}).as_object().unwrap()), unenforced("properties/q/properties"));
        let composed = json!({"type": "object", "oneOf": []});
        let refused = check_arguments(&composed, &Map::new());
        assert_eq!(refused, unenforced("oneOf"));
        assert!(refused.unwrap_err().to_string().contains("uses \"oneOf\", which the gateway does not enforce"));
    }

    #[test]
    fn redaction_keeps_only_values_that_cannot_be_secret() {
        let arguments = json!({"query": "my password is hunter2", "destination": "archive", "limit": 3});
        let shown = redact(&schema(), arguments.as_object().unwrap(), |_| "digest".into());
        assert_eq!(Value::Object(shown), json!({"query": "digest", "destination": "archive", "limit": "digest"}));
    }
}
