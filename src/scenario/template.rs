//! JSON values in scenarios, with references to earlier values.
//!
//! Inside any JSON a scenario writes, `$name` stands for a value bound by `let name = …` or for the full
//! JSON-RPC response of the step named `as name`; `$name.result.requestState` follows a path into it
//! (object keys, or array positions as numbers; quote a key containing dots: `$r.result._meta."a.b"`).
//! `tamper(STATE, "field", VALUE)` rewrites one claim inside a sealed `requestState` but keeps the
//! original signature: what a client that edits its state would send.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};

/// Why a template could not be given its value: a name without one, a path that leads nowhere, a `tamper`
/// that cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// `$name` names an answer the world did not send (`world` its label, `why` its reason).
    #[error("${name} was not sent {world} ({why})")]
    NotSent { name: String, world: String, why: String },
    /// `$name` is neither bound by `let` nor the name of an answer.
    #[error("${name} is not bound")]
    Unbound { name: String },
    /// `$name` names a request that got no response (`outcome`, what became of it).
    #[error("${name} has no response ({outcome})")]
    NoResponse { name: String, outcome: String },
    /// The path of `reference` does not exist in the value bound to its name (`bound`, a preview of it).
    #[error("{reference} does not exist (${} is {bound})", .reference.name)]
    Missing { reference: Reference, bound: String },
    /// The first argument of `tamper(…)` resolved to something other than a string (a preview of it).
    #[error("tamper() needs a requestState string, got {0}")]
    TamperNotAString(String),
    #[error(transparent)]
    Tamper(#[from] TamperError),
}

/// Why `tamper(…)` could not rewrite a sealed state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TamperError {
    #[error("tamper() needs a sealed state of the form s1.<key>.<payload>.<tag>")]
    NotSealed,
    #[error("tamper(): the payload is not base64url: {0}")]
    NotBase64(String),
    #[error("tamper(): the payload is not JSON: {0}")]
    NotJson(String),
    #[error("tamper(): the payload is not a JSON object")]
    NotAnObject,
    /// The state has no claim `field`; `known`, the claims it has.
    #[error("tamper(): the state has no claim {field:?} (it has {})", .known.join(", "))]
    NoClaim { field: String, known: Vec<String> },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    Literal(Value),
    Object(Vec<(String, Template)>),
    Array(Vec<Template>),
    Ref(Reference),
    Tamper { state: Box<Template>, field: String, value: Box<Template> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub name: String,
    pub path: Vec<String>,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "${}", self.name)?;
        for segment in &self.path {
            if segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '/') && !segment.is_empty() {
                write!(f, ".{segment}")?;
            } else {
                write!(f, ".{segment:?}")?;
            }
        }
        Ok(())
    }
}

impl Template {
    /// Collapses a template with no references into a literal.
    pub(crate) fn simplify(self) -> Template {
        match self {
            Template::Object(members) => {
                let members: Vec<(String, Template)> = members.into_iter().map(|(k, v)| (k, v.simplify())).collect();
                if members.iter().all(|(_, v)| matches!(v, Template::Literal(_))) {
                    let map: Map<String, Value> = members
                        .into_iter()
                        .map(|(k, v)| match v {
                            Template::Literal(value) => (k, value),
                            _ => unreachable!("checked: all literal"),
                        })
                        .collect();
                    Template::Literal(Value::Object(map))
                } else {
                    Template::Object(members)
                }
            }
            Template::Array(items) => {
                let items: Vec<Template> = items.into_iter().map(Template::simplify).collect();
                if items.iter().all(|v| matches!(v, Template::Literal(_))) {
                    Template::Literal(Value::Array(
                        items
                            .into_iter()
                            .map(|v| match v {
                                Template::Literal(value) => value,
                                _ => unreachable!("checked: all literal"),
                            })
                            .collect(),
                    ))
                } else {
                    Template::Array(items)
                }
            }
            other => other,
        }
    }

    /// Every reference inside, in order.
    pub(crate) fn references(&self) -> Vec<&Reference> {
        let mut found = Vec::new();
        self.collect_references(&mut found);
        found
    }

    fn collect_references<'a>(&'a self, found: &mut Vec<&'a Reference>) {
        match self {
            Template::Literal(_) => {}
            Template::Object(members) => members.iter().for_each(|(_, v)| v.collect_references(found)),
            Template::Array(items) => items.iter().for_each(|v| v.collect_references(found)),
            Template::Ref(reference) => found.push(reference),
            Template::Tamper { state, value, .. } => {
                state.collect_references(found);
                value.collect_references(found);
            }
        }
    }

    /// The value, with references looked up by `lookup` (which answers the whole value bound to a name;
    /// only the part a path selects is copied).
    pub(crate) fn resolve<'v>(&self, lookup: &dyn Fn(&str) -> Result<&'v Value, ResolveError>) -> Result<Value, ResolveError> {
        match self {
            Template::Literal(value) => Ok(value.clone()),
            Template::Object(members) => {
                let mut map = Map::new();
                for (key, value) in members {
                    map.insert(key.clone(), value.resolve(lookup)?);
                }
                Ok(Value::Object(map))
            }
            Template::Array(items) => items.iter().map(|item| item.resolve(lookup)).collect::<Result<Vec<_>, _>>().map(Value::Array),
            Template::Ref(reference) => {
                let whole = lookup(&reference.name)?;
                match follow(whole, &reference.path) {
                    Some(value) => Ok(value.clone()),
                    None => Err(ResolveError::Missing { reference: reference.clone(), bound: preview(whole) }),
                }
            }
            Template::Tamper { state, field, value } => {
                let state = state.resolve(lookup)?;
                let Value::String(state) = state else {
                    return Err(ResolveError::TamperNotAString(preview(&state)));
                };
                Ok(Value::String(tamper(&state, field, value.resolve(lookup)?)?))
            }
        }
    }
}

/// Follows a path: object keys, or array positions given as numbers.
pub fn follow<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |current, segment| match current {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|index| items.get(index)),
        _ => None,
    })
}

/// Like [`follow`] for fixed paths, without allocating (unlike `Value::pointer`).
pub fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |current, key| current.get(*key))
}

/// Rewrites claim `field` of a sealed state, keeping its signature (so verification must fail).
pub(crate) fn tamper(state: &str, field: &str, value: Value) -> Result<String, TamperError> {
    let parts: Vec<&str> = state.split('.').collect();
    let [format, key_id, payload, tag] = parts.as_slice() else {
        return Err(TamperError::NotSealed);
    };
    let bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|e| TamperError::NotBase64(e.to_string()))?;
    let mut claims: Value = serde_json::from_slice(&bytes).map_err(|e| TamperError::NotJson(e.to_string()))?;
    let Some(map) = claims.as_object_mut() else { return Err(TamperError::NotAnObject) };
    if !map.contains_key(field) {
        return Err(TamperError::NoClaim { field: field.to_string(), known: map.keys().cloned().collect() });
    }
    map.insert(field.to_string(), value);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("a JSON value serializes"));
    Ok(format!("{format}.{key_id}.{payload}.{tag}"))
}

/// A short rendering of a value for messages.
pub(crate) fn preview(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 160 {
        format!("{}…", text.chars().take(160).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_resolve_through_paths() {
        let template = Template::Object(vec![
            ("a".into(), Template::Ref(Reference { name: "x".into(), path: vec!["list".into(), "1".into()] })),
            ("b".into(), Template::Literal(json!(true))),
        ]);
        let bound = json!({"list": [10, 20]});
        let lookup = |name: &str| if name == "x" { Ok(&bound) } else { Err(ResolveError::Unbound { name: name.into() }) };
        assert_eq!(template.resolve(&lookup), Ok(json!({"a": 20, "b": true})));
        let missing = Template::Ref(Reference { name: "x".into(), path: vec!["nope".into()] });
        let missed = missing.resolve(&lookup).unwrap_err();
        assert!(matches!(&missed, ResolveError::Missing { reference, .. } if reference.path == ["nope"]));
        assert_eq!(missed.to_string(), "$x.nope does not exist ($x is {\"list\":[10,20]})");
        assert!(Template::Ref(Reference { name: "y".into(), path: vec![] }).resolve(&lookup).is_err());
    }

    #[test]
    fn literal_only_templates_simplify() {
        let template =
            Template::Array(vec![Template::Literal(json!(1)), Template::Object(vec![("k".into(), Template::Literal(json!("v")))])]);
        assert_eq!(template.simplify(), Template::Literal(json!([1, {"k": "v"}])));
    }

    #[test]
    fn tamper_keeps_the_tag_and_changes_the_claim() {
        let ring = crate::policy::state::KeyRing::new("k1", vec![3; 32]).unwrap();
        let claims = crate::policy::state::StateClaims {
            principal: "alice".into(),
            method: "tools/call".into(),
            tool: "notes_delete".into(),
            arguments_digest: "00".into(),
            candidates: vec!["note-3".into()],
            revisions: Vec::new(),
            phase: "delete_choice".into(),
            issued_at_ms: 0,
            expires_at_ms: 10,
            nonce: "n".into(),
        };
        let state = ring.seal(&claims);
        let forged = tamper(&state, "principal", json!("bob")).unwrap();
        assert_eq!(forged.rsplit('.').next(), state.rsplit('.').next());
        assert_ne!(forged, state);
        assert_eq!(ring.open(&forged, 0), Err(crate::policy::state::OpenError::Signature));
        assert!(matches!(tamper(&state, "unknown", json!(1)), Err(TamperError::NoClaim { field, .. }) if field == "unknown"));
        assert!(tamper("garbage", "principal", json!(1)).is_err());
    }
}
