//! A client actor: a host that sends JSON-RPC requests and answers forms as the scenario says.
//!
//! Every request carries this client's `_meta` (protocol version, the capabilities it declares *in this
//! request*, and self-reported client info), unless the scenario wrote `_meta` itself. A client remembers
//! the last form it was shown, so a scenario can say "answer it" without repeating anything. It does not
//! validate its own answers: the server must, because a client controls everything it sends.

use crate::oracle::history::{Operation, OperationId};
use crate::scenario::model::{Answer, AnswerAction};
use crate::scenario::template::ResolveError;
use crate::wire::meta::{KEY_CLIENT_CAPABILITIES, KEY_CLIENT_INFO, KEY_PROTOCOL_VERSION};
use crate::wire::{object, PROTOCOL_VERSION};
use serde_json::{json, Map, Value};

/// Why a step's message could not be built: what the scenario wrote, or the form it answers, does not make
/// one. Its text is the step's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A value the step writes refers to something without a value.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("the params of {method} must be a JSON object")]
    ParamsNotAnObject { method: String },
    #[error("headers must be a JSON object of header names to strings")]
    HeadersNotAnObject,
    #[error("header {name} must be a string")]
    HeaderNotAString { name: String },
    #[error("header {name} is not a routing header (MCP-Protocol-Version, Mcp-Method, Mcp-Name)")]
    NotARoutingHeader { name: String },
    /// A browser step's URL resolved to something other than a string (as JSON).
    #[error("a browser opens a URL, a string; got {0}")]
    UrlNotAString(String),
    /// `answer` from a 2025-11-25 client, which answers inside the call.
    #[error("{client} is a 2025-11-25 client: it answers inside the call (its `answers {{…}}`), never with `answer`")]
    LegacyAnswer { client: String },
    /// The form named was not shown in this world (`world` its label, `why` its reason).
    #[error("the form {name} was not shown {world} ({why})")]
    FormNotShown { name: String, world: String, why: String },
    #[error("no answer is named {name}")]
    NoAnswerNamed { name: String },
    #[error("{client} has not been shown a form yet; say which with `for NAME`")]
    NoFormYet { client: String },
    #[error("the form's request was not JSON")]
    FormRequestNotJson,
    #[error("the form's request got no response")]
    FormUnanswered,
    #[error("the form's request has no method")]
    FormRequestWithoutMethod,
    #[error("the answer named has no result: it did not ask for input")]
    FormWithoutResult,
    #[error("the answer named is not input_required: there is no form to answer")]
    NotInputRequired,
    #[error("the result has no inputRequests")]
    NoInputRequests,
    /// The form asks `0` questions, not one.
    #[error("the result asks {0} questions; this client answers exactly one")]
    Questions(usize),
    #[error("`responses` takes a JSON object")]
    ResponsesNotAnObject,
}

pub struct Client {
    /// The `_meta` every request of this client carries (its declared capabilities among them), built once.
    meta: Value,
    next_request_id: i64,
    /// The last response of this client that asked for input.
    pub last_form: Option<OperationId>,
    /// A 2025-11-25 client: it sends no `_meta` (its `initialize` negotiated what `_meta` would say).
    pub legacy: bool,
}

/// How the user answered a form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FormAction {
    Accept(Option<Value>),
    Decline,
    Cancel,
}

impl FormAction {
    pub fn name(&self) -> &'static str {
        match self {
            FormAction::Accept(_) => "accept",
            FormAction::Decline => "decline",
            FormAction::Cancel => "cancel",
        }
    }
}

impl Client {
    /// A client that calls itself `name` in its `clientInfo` (the principal is the transport's to authenticate,
    /// never the message's).
    pub fn new(name: &str, capabilities: Value) -> Client {
        let meta = object([
            (KEY_PROTOCOL_VERSION, PROTOCOL_VERSION.into()),
            (KEY_CLIENT_CAPABILITIES, capabilities),
            (KEY_CLIENT_INFO, json!({ "name": name, "version": "1.0.0" })),
        ]);
        Client { meta, next_request_id: 1, last_form: None, legacy: false }
    }

    /// The `_meta` this client sends: the protocol version, its capabilities, and its self-reported info.
    pub fn meta(&self) -> Value {
        self.meta.clone()
    }

    /// From now on, sends `victim`'s `_meta` byte for byte (clientInfo, capabilities): an impersonator, whose
    /// credentials are all that differ.
    pub fn copy_meta_of(&mut self, victim: &Client) {
        self.meta = victim.meta.clone();
    }

    /// A JSON-RPC request (or, with `notification`, a notification) with this client's `_meta` added to
    /// `params` unless `params` already has one. Its bytes are its compact serialization.
    /// A fresh request id, as the next request would get (a retry of an earlier request sends one).
    pub fn fresh_id(&mut self) -> i64 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    pub fn request(&mut self, method: &str, params: Value, notification: bool) -> Result<Value, BuildError> {
        let Value::Object(mut params) = params else {
            return Err(BuildError::ParamsNotAnObject { method: method.to_string() });
        };
        if !self.legacy {
            params.entry("_meta").or_insert_with(|| self.meta());
        }
        let mut message = Map::new();
        message.insert("jsonrpc".into(), "2.0".into());
        if !notification {
            message.insert("id".into(), self.next_request_id.into());
            self.next_request_id += 1;
        }
        message.insert("method".into(), method.into());
        message.insert("params".into(), Value::Object(params));
        Ok(Value::Object(message))
    }
}

/// The bytes a scenario's `raw` step sends for its resolved `message` (a string is sent as its text, anything
/// else as compact JSON), the JSON they parse to (if any), and whether that is a notification. Shared by the
/// simulator and live mode, so both send the same bytes.
pub(crate) fn raw_message(message: &Value) -> (Vec<u8>, Option<Value>, bool) {
    let bytes = match message {
        Value::String(text) => text.clone().into_bytes(),
        other => serde_json::to_vec(other).expect("a JSON value serializes"),
    };
    let parsed = serde_json::from_slice::<Value>(&bytes).ok();
    let notification = parsed.as_ref().is_some_and(|v| v.is_object() && v.get("id").is_none());
    (bytes, parsed, notification)
}

/// The retry a scenario's `answer` step sends for the form `form` was shown: the step's action, its
/// replacement arguments and state resolved with `lookup`, then [`answer_params`]. The simulator and live mode
/// both build answers here, so a live answer is byte for byte the simulator's.
pub(crate) fn scenario_answer<'v>(
    answer: &Answer,
    form: &Operation,
    lookup: &dyn Fn(&str) -> Result<&'v Value, ResolveError>,
) -> Result<(String, Value), BuildError> {
    let request = form.request_value.as_deref().ok_or(BuildError::FormRequestNotJson)?;
    let response = form.response().ok_or(BuildError::FormUnanswered)?;
    let action = match &answer.action {
        AnswerAction::Accept(content) => FormAction::Accept(content.as_ref().map(|c| c.resolve(lookup)).transpose()?),
        AnswerAction::Decline => FormAction::Decline,
        AnswerAction::Cancel => FormAction::Cancel,
    };
    let arguments = answer.arguments.as_ref().map(|a| a.resolve(lookup)).transpose()?;
    let state = answer.state.as_ref().map(|s| s.resolve(lookup)).transpose()?;
    let (method, mut params) = answer_params(request, response, &action, arguments, state)?;
    if let Some(extra) = &answer.extra_responses {
        // Keys the form did not ask for, beside the one it did (which they never replace): a server should
        // ignore them.
        let Value::Object(extra) = extra.resolve(lookup)? else { return Err(BuildError::ResponsesNotAnObject) };
        if let Some(Value::Object(responses)) = params.get_mut("inputResponses") {
            for (key, value) in extra {
                responses.entry(key).or_insert(value);
            }
        }
    }
    Ok((method, params))
}

/// The retry that answers a form: the original request's method and params (its `name` and `arguments`),
/// plus `inputResponses` for the form's one input request and the echoed `requestState`.
/// `arguments` and `state` replace the original ones (to show what the server does with changed ones).
pub(crate) fn answer_params(
    form_request: &Value,
    form_response: &Value,
    action: &FormAction,
    arguments: Option<Value>,
    state: Option<Value>,
) -> Result<(String, Value), BuildError> {
    let method = form_request.get("method").and_then(Value::as_str).ok_or(BuildError::FormRequestWithoutMethod)?.to_string();
    let result = form_response.get("result").ok_or(BuildError::FormWithoutResult)?;
    if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return Err(BuildError::NotInputRequired);
    }
    let requests = result.get("inputRequests").and_then(Value::as_object).ok_or(BuildError::NoInputRequests)?;
    let mut keys = requests.keys();
    let (Some(key), None) = (keys.next(), keys.next()) else {
        return Err(BuildError::Questions(requests.len()));
    };
    // The form's params without its `_meta` (the client adds its own again), copied without it.
    let mut params = Map::new();
    if let Some(Value::Object(form_params)) = form_request.get("params") {
        // Inserted in key order, one by one: collecting would gather them in a vector and sort it first.
        for (key, value) in form_params.iter().filter(|(key, _)| *key != "_meta") {
            params.insert(key.clone(), value.clone());
        }
    }
    if let Some(arguments) = arguments {
        params.insert("arguments".into(), arguments);
    }
    let mut response = Map::new();
    response.insert("action".into(), json!(action.name()));
    if let FormAction::Accept(Some(content)) = action {
        response.insert("content".into(), content.clone());
    }
    params.insert("inputResponses".into(), Value::Object(Map::from_iter([(key.clone(), Value::Object(response))])));
    match state.or_else(|| result.get("requestState").cloned()) {
        Some(state) => params.insert("requestState".into(), state),
        None => params.remove("requestState"),
    };
    Ok((method, Value::Object(params)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_meta_and_consecutive_ids() {
        let mut client = Client::new("alice", json!({"elicitation": {"form": {}}}));
        let first = client.request("tools/list", json!({}), false).unwrap();
        let second = client.request("tools/list", json!({}), false).unwrap();
        assert_eq!((first["id"].clone(), second["id"].clone()), (json!(1), json!(2)));
        assert_eq!(first["params"]["_meta"][KEY_CLIENT_CAPABILITIES], json!({"elicitation": {"form": {}}}));
        let note = client.request("tools/call", json!({"_meta": {}}), true).unwrap();
        assert!(note.get("id").is_none());
        assert_eq!(note["params"]["_meta"], json!({}), "a scenario's own _meta is sent as written");
        assert_eq!(client.request("tools/list", json!([1]), false), Err(BuildError::ParamsNotAnObject { method: "tools/list".into() }));
    }

    #[test]
    fn an_answer_repeats_the_call_with_responses_and_state() {
        let request = json!({"method": "tools/call", "params": {"name": "notes_delete", "arguments": {"title": "x"}, "_meta": {}}});
        let response = json!({"result": {"resultType": "input_required", "requestState": "s1.k", "inputRequests": {"pick": {}}}});
        let (method, params) = answer_params(&request, &response, &FormAction::Accept(Some(json!({"a": 1}))), None, None).unwrap();
        assert_eq!(method, "tools/call");
        assert_eq!(
            params,
            json!({"name": "notes_delete", "arguments": {"title": "x"}, "requestState": "s1.k",
                   "inputResponses": {"pick": {"action": "accept", "content": {"a": 1}}}})
        );
        let (_, params) = answer_params(&request, &response, &FormAction::Cancel, Some(json!({})), Some(json!("forged"))).unwrap();
        assert_eq!(params["inputResponses"]["pick"], json!({"action": "cancel"}));
        assert_eq!((params["arguments"].clone(), params["requestState"].clone()), (json!({}), json!("forged")));
        let complete = json!({"result": {"resultType": "complete"}});
        assert_eq!(answer_params(&request, &complete, &FormAction::Decline, None, None), Err(BuildError::NotInputRequired));
    }
}
