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

/// Checks `arguments` against the approved schema. The error says what to fix.
pub(crate) fn check_arguments(schema: &Value, arguments: &Map<String, Value>) -> Result<(), String> {
    let Some(schema) = schema.as_object() else { return Err("the approved inputSchema is not an object".into()) };
    if let Some(keyword) = schema.keys().find(|k| !ROOT_KEYWORDS.contains(&k.as_str())) {
        return Err(unenforceable(keyword));
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("the approved inputSchema is not of type object".into());
    }
    let empty = Map::new();
    let properties = match schema.get("properties") {
        None => &empty,
        Some(Value::Object(properties)) => properties,
        Some(_) => return Err(unenforceable("properties")),
    };
    if arguments.len() > ARGUMENT_COUNT_MAX {
        return Err(format!("at most {ARGUMENT_COUNT_MAX} arguments are accepted"));
    }
    if serde_json::to_vec(arguments).map_or(usize::MAX, |bytes| bytes.len()) > ARGUMENTS_BYTES_MAX {
        return Err(format!("arguments larger than {ARGUMENTS_BYTES_MAX} bytes are refused"));
    }
    if let Some(unknown) = arguments.keys().find(|key| !properties.contains_key(*key)) {
        let known: Vec<&String> = properties.keys().collect();
        return Err(format!("unknown argument {:?}: this tool takes only {known:?}", crate::wire::errors::echo(unknown)));
    }
    if let Some(required) = schema.get("required") {
        let Some(required) = required.as_array() else { return Err(unenforceable("required")) };
        for name in required {
            let Some(name) = name.as_str() else { return Err(unenforceable("required")) };
            if !arguments.contains_key(name) {
                return Err(format!("argument {name:?} is required"));
            }
        }
    }
    for (name, value) in arguments {
        check_property(name, &properties[name], value)?;
    }
    Ok(())
}

fn unenforceable(keyword: &str) -> String {
    format!(
        "the approved inputSchema uses {keyword:?}, which the gateway does not enforce; it refuses rather than forward unchecked arguments"
    )
}

fn check_property(name: &str, schema: &Value, value: &Value) -> Result<(), String> {
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
        return Err(format!("argument {name:?} must be of type {kind}"));
    }
    if let Some(allowed) = schema.get("enum") {
        let Some(allowed) = allowed.as_array() else { return Err(unenforceable(&format!("properties/{name}/enum"))) };
        if !allowed.contains(value) {
            return Err(format!("argument {name:?} must be one of {}", Value::Array(allowed.clone())));
        }
    }
    if let Some(text) = value.as_str() {
        let chars = text.chars().count();
        let declared_max = schema.get("maxLength").and_then(Value::as_u64).map(|n| n as usize);
        let max = declared_max.unwrap_or(ARGUMENT_STRING_CHARS_MAX).min(ARGUMENT_STRING_CHARS_MAX);
        let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        if chars > max || chars < min {
            return Err(format!("argument {name:?} must be {min} to {max} characters long"));
        }
    }
    if let Some(number) = value.as_f64() {
        if schema.get("minimum").and_then(Value::as_f64).is_some_and(|minimum| number < minimum) {
            return Err(format!("argument {name:?} is below its minimum"));
        }
        if schema.get("maximum").and_then(Value::as_f64).is_some_and(|maximum| number > maximum) {
            return Err(format!("argument {name:?} is above its maximum"));
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

    fn check(arguments: Value) -> Result<(), String> {
        check_arguments(&schema(), arguments.as_object().unwrap())
    }

    #[test]
    fn valid_arguments_pass() {
        check(json!({"query": "tps", "destination": "archive"})).unwrap();
        check(json!({"query": "tps", "destination": "archive", "limit": 3})).unwrap();
    }

    #[test]
    fn every_violation_is_refused_with_a_reason() {
        for (arguments, expected) in [
            (json!({"query": "tps", "destination": "archive", "cc": "x"}), "unknown argument \"cc\""),
            (json!({"query": "tps"}), "\"destination\" is required"),
            (json!({"query": "tps", "destination": "https://paste.example"}), "must be one of"),
            (json!({"query": 7, "destination": "archive"}), "type string"),
            (json!({"query": "", "destination": "archive"}), "1 to 20 characters"),
            (json!({"query": "x".repeat(21), "destination": "archive"}), "1 to 20 characters"),
            (json!({"query": "tps", "destination": "archive", "limit": 2.5}), "type integer"),
            (json!({"query": "tps", "destination": "archive", "limit": 11}), "above its maximum"),
        ] {
            let error = check(arguments.clone()).unwrap_err();
            assert!(error.contains(expected), "{arguments} -> {error}");
        }
    }

    #[test]
    fn open_schemas_are_closed_and_unknown_keywords_refused() {
        let open = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert!(check_arguments(&open, json!({"q": "a", "extra": 1}).as_object().unwrap()).unwrap_err().contains("unknown argument"));
        let long = "x".repeat(ARGUMENT_STRING_CHARS_MAX + 1);
        assert!(check_arguments(&open, json!({"q": long}).as_object().unwrap()).is_err(), "the gateway cap applies without maxLength");
        let nested = json!({"type": "object", "properties": {"q": {"type": "object", "properties": {}}}});
        assert!(check_arguments(&nested, json!({"q": {}}).as_object().unwrap()).unwrap_err().contains("does not enforce"));
        let composed = json!({"type": "object", "oneOf": []});
        assert!(check_arguments(&composed, &Map::new()).unwrap_err().contains("oneOf"));
    }

    #[test]
    fn redaction_keeps_only_values_that_cannot_be_secret() {
        let arguments = json!({"query": "my password is hunter2", "destination": "archive", "limit": 3});
        let shown = redact(&schema(), arguments.as_object().unwrap(), |_| "digest".into());
        assert_eq!(Value::Object(shown), json!({"query": "digest", "destination": "archive", "limit": "digest"}));
    }
}
