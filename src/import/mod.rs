//! `mcpsim import`: a recorded trace (mcp-trace JSON Lines: `mcp-trace-capture` 0.6.0's, `mcpsim record`'s,
//! mcpsim's own `--format mcp-trace`) turned into a readable `.sim` scenario that replays the exchange in the
//! simulator, on a live fleet and against a target, with the answers it got as expectations.
//!
//! * [`trace`] reads the events, refusing a malformed or truncated trace with `FILE:LINE: what`.
//! * [`import`] pairs each answer with its request by JSON-RPC id (the order the transport gives), then
//!   correlates MRTR rounds by `requestState`, never by id: a request echoing a state that an earlier
//!   `input_required` answer returned is that form's retry, written `answer … for NAME` (its `inputResponses`
//!   keys checked against the form's `inputRequests` keys). Server-minted values (states, cursors, nonces)
//!   are written as `$references` to the answer that minted them. Clients are told apart by their
//!   credential (an HTTP `authorization` value, redacted markers being stable per secret within one file),
//!   else by the session's self-reported `clientInfo` name; each gets a `client NAME principal P`, the
//!   principal matched from the credential (a bearer token of the demo deployment, or `--principal
//!   MARKER=P`), else given (`--principal P`), else guessed and said so in a comment. A credential is never
//!   written into the scenario.
//! * The answers become `expect` lines, member by member, with the values that differ by design
//!   ([`Masks`]: a `requestState`, an out-of-band URL, the server's `_meta` identity, and any `--mask PATH`)
//!   expected `present` rather than equal. A drifted answer then fails at its own member, with the JSON paths
//!   where it differs (`play::expect`).
//! * [`perturb`] varies an imported scenario as a fleet would (a later round on another instance, two
//!   rounds raced) and shrinks a failing variant to the fewest rounds.
//!
//! What cannot be mapped (a legacy server→client request, a truncated message, a request with no answer in
//! the trace, a state no earlier answer minted) is listed in comments at the top with its trace line.

pub mod perturb;
pub mod trace;

use crate::config::deployment::Deployment;
use crate::oracle::outcome::{Mask, Masks};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use trace::{Body, Direction, TraceError};

/// The protocol revision a request's `_meta` is expected to name (any other is sent as recorded).
const PROTOCOL_VERSION: &str = "2026-07-28";
const KEY_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const KEY_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const KEY_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// Most instances an import declares (the language allows 16).
pub const INSTANCES_MAX: usize = 16;

/// How to write the scenario.
#[derive(Debug, Clone)]
pub struct Options {
    /// What the header calls the trace (its path as given).
    pub source: String,
    /// `--principal P` (every client not identified otherwise) and `--principal MARKER=P` (the client whose
    /// credential is or contains MARKER).
    pub principal: Option<String>,
    pub principal_of: Vec<(String, String)>,
    /// Instances declared (at least 1): perturbation moves rounds among them.
    pub instances: usize,
    /// Each round answering a form goes to the instance after the one that showed the form.
    pub spread: bool,
    /// Each instance signs with a key of its own (`key kN` per instance): a fleet without a shared key, as
    /// `mcpsim serve` without `--key-file` is deployed; the default is one shared key.
    pub own_keys: bool,
    /// More values that differ by design: dot paths from the answer's root (`result.structuredContent.at`,
    /// `*` for any member or array item), expected `present` instead of equal.
    pub masks: Vec<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            source: "trace.jsonl".into(),
            principal: None,
            principal_of: Vec::new(),
            instances: 2,
            spread: false,
            own_keys: false,
            masks: Vec::new(),
        }
    }
}

/// The scenario written, and what went into it.
#[derive(Debug, Clone)]
pub struct Imported {
    pub text: String,
    /// Requests and notifications written as steps.
    pub steps: usize,
    /// Rounds that answered a form (correlated by `requestState`).
    pub rounds: usize,
    /// What was not mapped, each `FILE:LINE: what`.
    pub unmapped: Vec<String>,
    /// Each client and how its principal was decided.
    pub clients: Vec<String>,
}

/// The masks of an import: what differs by design (the state, an out-of-band URL), the server's `_meta`
/// (its name and version, which differ from build to build), and the `extra` paths.
pub fn masks(extra: &[String]) -> Masks {
    let mut masks = Masks::by_design()
        .with(Mask::Path { path: vec!["result".into(), "_meta".into()], shown: "<server _meta>".into() })
        .with(Mask::Path { path: vec!["error".into(), "data".into(), "_meta".into()], shown: "<server _meta>".into() });
    for path in extra {
        masks = masks.with(Mask::Path { path: path.split('.').map(str::to_string).collect(), shown: format!("<{path}>") });
    }
    masks
}

/// One client of the trace, as the scenario declares it.
struct ClientOf {
    /// The scenario name (`alice`, `alice2`, `client1`).
    name: String,
    principal: String,
    /// How the principal was decided (a comment line).
    why: String,
    /// The capabilities its first request declared.
    capabilities: Value,
}

/// A request (or notification) of the trace, with its answer once paired.
struct Request {
    line: usize,
    client: usize,
    message: Value,
    answer: Option<(usize, Value)>,
}

/// Imports `text`, the trace read from `options.source`.
pub fn import(text: &str, options: &Options) -> Result<Imported, TraceError> {
    let events = trace::read(&options.source, text)?;
    let file = options.source.as_str();
    let at = |line: usize| format!("{file}:{line}");
    let mut unmapped: Vec<String> = Vec::new();
    let mut transports: Vec<&str> = Vec::new();
    // The credential of the HTTP request whose body comes next (record and capture write them adjacent).
    let mut credential: Option<String> = None;
    let mut identities: Vec<String> = Vec::new();
    let mut requests: Vec<Request> = Vec::new();
    // Requests waiting for their answer, by id (first sent, first answered: ids may repeat across clients).
    let mut pending: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for event in &events {
        if !transports.contains(&event.transport.as_str()) {
            transports.push(&event.transport);
        }
        match (&event.body, event.direction) {
            (Body::Http { method: Some(_), headers, .. }, Direction::ClientToServer) => {
                credential = headers.get("authorization").cloned();
            }
            (Body::Http { .. }, _) => {}
            (Body::Lifecycle(what), _) => {
                if what == "transport-abort" {
                    unmapped.push(format!(
                        "{}: the transport was aborted here (transport-abort): what follows was not recorded",
                        at(event.line)
                    ));
                }
            }
            (Body::Message(message), Direction::ClientToServer) => {
                if let Some(why) = truncated(message) {
                    unmapped.push(format!("{}: {why}; not replayed", at(event.line)));
                    continue;
                }
                let id = message.get("id").map(Value::to_string);
                match (message.get("method").and_then(Value::as_str), id) {
                    (Some(_), id) => {
                        let identity = identity_of(credential.as_deref(), message);
                        let client = match identities.iter().position(|known| *known == identity) {
                            Some(found) => found,
                            None => {
                                identities.push(identity);
                                identities.len() - 1
                            }
                        };
                        if let Some(id) = id {
                            pending.entry(id).or_default().push(requests.len());
                        }
                        requests.push(Request { line: event.line, client, message: message.clone(), answer: None });
                    }
                    (None, _) => unmapped.push(format!(
                        "{}: the client answered a server→client request (a 2025-11-25 session's elicitation or roots); \
                         the scenario language's legacy clients answer those themselves",
                        at(event.line)
                    )),
                }
            }
            (Body::Message(message), Direction::ServerToClient) => {
                if message.get("method").is_some() {
                    unmapped.push(format!(
                        "{}: a server→client request or notification ({}); not replayed",
                        at(event.line),
                        method_of(message)
                    ));
                    continue;
                }
                let Some(id) = message.get("id") else {
                    return Err(TraceError {
                        file: file.into(),
                        line: event.line,
                        what: "a server message with neither `method` nor `id`".into(),
                    });
                };
                if id.is_null() {
                    unmapped.push(format!(
                        "{}: an answer with id null (to a message the server could not read, which the trace does not hold); not replayed",
                        at(event.line)
                    ));
                    continue;
                }
                let waiting = pending.get_mut(&id.to_string()).filter(|waiting| !waiting.is_empty());
                let Some(waiting) = waiting else {
                    return Err(TraceError {
                        file: file.into(),
                        line: event.line,
                        what: format!("a response (id {id}) without a request: no earlier request with that id is waiting"),
                    });
                };
                let index = waiting.remove(0);
                if let Some(why) = truncated(message) {
                    unmapped.push(format!(
                        "{}: the answer to line {} was {why}; nothing expected of it",
                        at(event.line),
                        requests[index].line
                    ));
                    requests[index].answer = Some((event.line, Value::Null));
                } else {
                    requests[index].answer = Some((event.line, message.clone()));
                }
            }
        }
    }
    if requests.is_empty() {
        return Err(TraceError { file: file.into(), line: 0, what: "no request from a client in the trace: nothing to replay".into() });
    }
    let clients = decide_clients(&identities, &requests, options);
    let masks = masks(&options.masks);
    let instances = options.instances.clamp(1, INSTANCES_MAX);

    // The steps.
    let mut body = String::new();
    let mut names: Vec<String> = Vec::new();
    // Where each named answer's request went (an instance index).
    let mut placed: Vec<usize> = Vec::new();
    // Server-minted values seen so far: value → reference text.
    let mut minted: BTreeMap<String, String> = BTreeMap::new();
    // States returned by input_required answers: state → index of the request.
    let mut forms: BTreeMap<String, usize> = BTreeMap::new();
    let mut rounds = 0;
    for (index, request) in requests.iter().enumerate() {
        let message = &request.message;
        let method = method_of(message);
        let client = &clients[request.client];
        let notification = message.get("id").is_none();
        let params = message.get("params").cloned().unwrap_or(Value::Object(Map::new()));
        let state = params.get("requestState").and_then(Value::as_str).map(str::to_string);
        let form = state.as_ref().and_then(|s| forms.get(s)).copied();
        let base = match (method.as_str(), form) {
            (_, Some(_)) => "answer",
            ("tools/call", _) => "call",
            (method, _) => method.rsplit('/').next().filter(|m| m.chars().all(|c| c.is_ascii_alphanumeric())).unwrap_or("request"),
        };
        let name = format!(
            "{}{}",
            if base.is_empty() || !base.starts_with(|c: char| c.is_ascii_alphabetic()) { "request" } else { base },
            index + 1
        );
        let instance = match form {
            Some(form) if options.spread => (placed[form] + 1) % instances,
            _ => 0,
        };
        let _ = writeln!(body, "\n# {} {}", at(request.line), describe(message));
        let meta = params.get("_meta");
        let own_meta = meta_is_default(meta, &client.capabilities);
        if let (Some(state), None) = (&state, form) {
            unmapped.push(format!(
                "{}: echoes a requestState no earlier answer of the trace returned ({}); sent as recorded",
                at(request.line),
                shorten(state)
            ));
        }
        // `answer` always sends a request: a notification echoing a state is written as the notification it was.
        let answered = form.filter(|_| !notification).and_then(|form| answer_statement(&requests[form], &names[form], message, own_meta));
        let statement = match answered {
            Some(answer) => {
                rounds += 1;
                format!("answer {} -> i{} {answer} as {name}", client.name, instance + 1)
            }
            None => {
                let mut params = params.clone();
                if let Value::Object(map) = &mut params {
                    if own_meta {
                        map.remove("_meta");
                    } else if meta.is_some() {
                        unmapped.push(format!(
                            "{}: its _meta differs from the client's usual one (another protocol version or capabilities): sent as recorded",
                            at(request.line)
                        ));
                    }
                }
                let params = referenced(&params, &minted);
                if let Some(form) = form {
                    rounds += 1;
                    let _ = writeln!(body, "# (the retry of {}'s form, written whole: it does not fit `answer`)", names[form]);
                }
                let verb = if notification { "notify" } else { "send" };
                format!("{verb} {} -> i{} {method} {} as {name}", client.name, instance + 1, json_text(&params))
            }
        };
        body.push_str(&statement);
        body.push('\n');
        match &request.answer {
            None if notification => {
                let _ = writeln!(body, "expect {name} no response");
            }
            None => {
                let _ = writeln!(body, "# the trace holds no answer to it: nothing expected");
                unmapped.push(format!(
                    "{}: no answer to {} in the trace (lost, or the recording ended): nothing expected",
                    at(request.line),
                    describe(message)
                ));
            }
            Some((_, Value::Null)) => {
                let _ = writeln!(body, "# its answer was truncated in the trace: nothing expected");
            }
            Some((line, answer)) => {
                let _ = writeln!(body, "# {} {}", at(*line), outcome_words(answer));
                for expectation in expectations(&name, answer, &masks) {
                    body.push_str(&expectation);
                    body.push('\n');
                }
                if let Some(state) = answer.pointer("/result/requestState").and_then(Value::as_str) {
                    if answer.pointer("/result/resultType").and_then(Value::as_str) == Some("input_required") {
                        forms.insert(state.to_string(), index);
                    }
                }
                collect_minted(answer, &name, &mut Vec::new(), &mut minted);
            }
        }
        names.push(name);
        placed.push(instance);
    }

    // The header, the cluster, then the steps.
    let mut text = String::new();
    let _ = writeln!(text, "# Imported from {file} by `mcpsim import`:");
    let _ = writeln!(
        text,
        "# {} event(s) over {}, {} step(s), {rounds} round(s) answering a form.",
        events.len(),
        transports.join(" and "),
        requests.len()
    );
    let _ = writeln!(text, "#");
    let _ = writeln!(text, "# Guarantee taught: regression. The recorded exchange replays with the answers it got: each round");
    let _ = writeln!(text, "# answering a form finds that form by its requestState (never by JSON-RPC id), and each answer is");
    let _ = writeln!(text, "# expected member by member, the values that differ by design (the requestState, the server's _meta)");
    let _ = writeln!(text, "# expected present only. `mcpsim explore FILE --perturb` moves later rounds to other instances and");
    let _ = writeln!(text, "# races two rounds; `--target FILE.toml` or `--live URL,…` replays it against real processes.");
    let _ = writeln!(text, "#");
    let _ = writeln!(text, "# Clients:");
    for client in &clients {
        let _ = writeln!(text, "#   {}: principal {}", client.name, client.principal);
        for line in wrapped(&client.why, 92) {
            let _ = writeln!(text, "#     {line}");
        }
    }
    let dropped: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.message.pointer(&format!("/params/_meta/{}", KEY_CLIENT_INFO.replace('/', "~1"))))
        .filter_map(|info| info.get("name").and_then(Value::as_str))
        .collect();
    if !dropped.is_empty() {
        let _ = writeln!(text, "# clientInfo is not replayed (self-reported, diagnostics only): each client sends its own name.");
    }
    if unmapped.is_empty() {
        let _ = writeln!(text, "# Everything in the trace was mapped.");
    } else {
        let _ = writeln!(text, "# Not mapped (trace line: what):");
        for line in &unmapped {
            for (k, part) in wrapped(line, 94).iter().enumerate() {
                let _ = writeln!(text, "#   {}{part}", if k == 0 { "" } else { "  " });
            }
        }
    }
    text.push('\n');
    text.push_str("use demo\n");
    if options.own_keys {
        for k in 1..=instances {
            let _ = writeln!(text, "key k{k}");
        }
        for k in 1..=instances {
            let _ = writeln!(text, "instance i{k} keys k{k}");
        }
    } else {
        text.push_str("key k1\n");
        for k in 1..=instances {
            let _ = writeln!(text, "instance i{k} keys k1");
        }
    }
    for client in &clients {
        let default_capabilities = serde_json::json!({"elicitation": {"form": {}}});
        if client.capabilities == default_capabilities {
            let _ = writeln!(text, "client {} principal {}", client.name, client.principal);
        } else {
            let _ = writeln!(text, "client {} principal {} capabilities {}", client.name, client.principal, compact(&client.capabilities));
        }
    }
    text.push_str(&body);
    Ok(Imported {
        text,
        steps: requests.len(),
        rounds,
        unmapped,
        clients: clients.iter().map(|c| format!("{}: principal {} ({})", c.name, c.principal, c.why)).collect(),
    })
}

/// Why a recorded message cannot be replayed or judged: `record` marks one it truncated.
fn truncated(message: &Value) -> Option<String> {
    let marked = ["params", "result"].iter().any(|part| message.get(part).and_then(|p| p.pointer("/_meta/mcpsim~1truncated")).is_some())
        || message.pointer("/error/data/_meta/mcpsim~1truncated").is_some();
    marked.then(|| "truncated by the recorder (over its message size)".to_string())
}

/// Who sent a request: its HTTP credential, else its self-reported name, else the one session.
fn identity_of(credential: Option<&str>, message: &Value) -> String {
    if let Some(credential) = credential {
        return format!("credential:{credential}");
    }
    match message.pointer("/params/_meta").and_then(|m| m.get(KEY_CLIENT_INFO)).and_then(|i| i.get("name")).and_then(Value::as_str) {
        Some(name) => format!("info:{name}"),
        None => "session".into(),
    }
}

fn decide_clients(identities: &[String], requests: &[Request], options: &Options) -> Vec<ClientOf> {
    let demo = Deployment::demo();
    let tokens = demo.tokens();
    let mut clients: Vec<ClientOf> = Vec::new();
    for (k, identity) in identities.iter().enumerate() {
        let first = requests.iter().find(|r| r.client == k).map(|r| &r.message);
        let capabilities = first
            .and_then(|m| m.pointer("/params/_meta"))
            .and_then(|m| m.get(KEY_CAPABILITIES))
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        let (principal, why) = if let Some(credential) = identity.strip_prefix("credential:") {
            let given = options.principal_of.iter().find(|(marker, _)| credential.contains(marker.as_str()));
            let token = credential.strip_prefix("Bearer ").and_then(|t| tokens.get(t.trim()));
            match (given, token, &options.principal) {
                (Some((_, p)), _, _) => (p.clone(), format!("credential #{} named by --principal", k + 1)),
                (None, Some(p), _) => (p.clone(), format!("credential #{}: a bearer token of the demo deployment", k + 1)),
                (None, None, Some(p)) => (p.clone(), format!("credential #{} not matched; --principal", k + 1)),
                (None, None, None) => {
                    guess(first, &demo, &format!("credential #{} (redacted) matches no token: say --principal MARKER=P", k + 1))
                }
            }
        } else {
            match &options.principal {
                Some(p) => (p.clone(), "--principal".into()),
                None => guess(first, &demo, "no credential in the trace (stdio, or not recorded): say --principal P"),
            }
        };
        let base = if principal.starts_with(|c: char| c.is_ascii_alphabetic()) { principal.clone() } else { format!("client{}", k + 1) };
        let mut name = base.clone();
        let mut n = 2;
        while clients.iter().any(|c| c.name == name) || matches!(name.as_str(), "notes" | "replay" | "admin") {
            name = format!("{base}{n}");
            n += 1;
        }
        clients.push(ClientOf { name, principal, why, capabilities });
    }
    clients
}

/// A principal for a client nothing identified: its clientInfo name when the demo has such a principal
/// (mcpsim's own traces), else the demo's first principal; `why` says so.
fn guess(first: Option<&Value>, demo: &Deployment, unknown: &str) -> (String, String) {
    let info = first
        .and_then(|m| m.pointer("/params/_meta"))
        .and_then(|m| m.get(KEY_CLIENT_INFO))
        .and_then(|i| i.get("name"))
        .and_then(Value::as_str);
    match info {
        Some(name) if demo.principals.contains_key(name) => {
            (name.to_string(), format!("GUESSED from clientInfo.name {name:?}, which is self-reported, never identity; {unknown}"))
        }
        _ => {
            let first = demo.principals.keys().next().cloned().unwrap_or_else(|| "alice".into());
            (first.clone(), format!("GUESSED: the demo's first principal; {unknown}"))
        }
    }
}

/// Whether `meta` is what the scenario's client sends by itself (the revision and these capabilities; its
/// clientInfo is its own), so the step may leave it out.
fn meta_is_default(meta: Option<&Value>, capabilities: &Value) -> bool {
    let Some(Value::Object(meta)) = meta else { return false };
    meta.get(KEY_VERSION).and_then(Value::as_str) == Some(PROTOCOL_VERSION)
        && meta.get(KEY_CAPABILITIES) == Some(capabilities)
        && meta.keys().all(|k| k == KEY_VERSION || k == KEY_CAPABILITIES || k == KEY_CLIENT_INFO)
}

/// `accept {…} for NAME [arguments …] [responses {…}]` when `retry` is what `answer` builds from the form's
/// request (`form`): the same method and params but for the arguments, one response to the form's one question,
/// the state echoed. `None` when it is not (written as a whole `send` instead).
fn answer_statement(form: &Request, form_name: &str, retry: &Value, own_meta: bool) -> Option<String> {
    if !own_meta || method_of(&form.message) != method_of(retry) {
        return None;
    }
    let (_, answer) = form.answer.as_ref()?;
    let asked = answer.pointer("/result/inputRequests")?.as_object()?;
    let mut asked_keys = asked.keys();
    let (Some(question), None) = (asked_keys.next(), asked_keys.next()) else { return None };
    let params = retry.get("params")?.as_object()?;
    let responses = params.get("inputResponses")?.as_object()?;
    let response = responses.get(question)?.as_object()?;
    if response.keys().any(|k| k != "action" && k != "content") {
        return None;
    }
    let action = match (response.get("action").and_then(Value::as_str)?, response.get("content")) {
        ("accept", Some(content)) => format!("accept {}", compact(content)),
        ("accept", None) => "accept".to_string(),
        ("decline", None) => "decline".into(),
        ("cancel", None) => "cancel".into(),
        _ => return None,
    };
    // The rest of the params must be the form's, the arguments aside.
    let original = form.message.get("params").and_then(Value::as_object);
    let rest = |map: &Map<String, Value>| -> Map<String, Value> {
        map.iter()
            .filter(|(k, _)| !matches!(k.as_str(), "_meta" | "inputResponses" | "requestState" | "arguments"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    if rest(params) != original.map(rest).unwrap_or_default() {
        return None;
    }
    let mut statement = format!("{action} for {form_name}");
    if params.get("arguments") != original.and_then(|o| o.get("arguments")) {
        let _ = write!(statement, " arguments {}", compact(params.get("arguments")?));
    }
    let extra: Map<String, Value> = responses.iter().filter(|(k, _)| *k != question).map(|(k, v)| (k.clone(), v.clone())).collect();
    if !extra.is_empty() {
        let _ = write!(statement, " responses {}", compact(&Value::Object(extra)));
    }
    Some(statement)
}

/// Whether a member named `key` holds a value a server minted (a state, a cursor, a nonce, a token): written
/// as a reference to the answer that returned it.
fn is_minted_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["requeststate", "cursor", "nonce", "token", "handle"].iter().any(|k| key.contains(k))
}

fn collect_minted(value: &Value, name: &str, path: &mut Vec<String>, minted: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                path.push(key.clone());
                match value {
                    Value::String(text) if is_minted_key(key) && text.len() >= 8 => {
                        minted.entry(text.clone()).or_insert_with(|| format!("${name}.{}", path_text(path)));
                    }
                    _ => collect_minted(value, name, path, minted),
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(index.to_string());
                collect_minted(item, name, path, minted);
                path.pop();
            }
        }
        _ => {}
    }
}

/// A value written as scenario JSON, with every minted string replaced by its reference.
fn referenced(value: &Value, minted: &BTreeMap<String, String>) -> Template {
    match value {
        Value::String(text) if minted.contains_key(text) => Template::Ref(minted[text].clone()),
        Value::Object(map) => Template::Object(map.iter().map(|(k, v)| (k.clone(), referenced(v, minted))).collect()),
        Value::Array(items) => Template::Array(items.iter().map(|v| referenced(v, minted)).collect()),
        other => Template::Literal(other.clone()),
    }
}

/// JSON with references, as the scenario writes it.
enum Template {
    Literal(Value),
    Ref(String),
    Object(Vec<(String, Template)>),
    Array(Vec<Template>),
}

impl Template {
    fn write(&self, out: &mut String) {
        match self {
            Template::Literal(value) => out.push_str(&value.to_string()),
            Template::Ref(reference) => out.push_str(reference),
            Template::Object(members) => {
                out.push('{');
                for (k, (key, value)) in members.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push_str(": ");
                    value.write(out);
                }
                out.push('}');
            }
            Template::Array(items) => {
                out.push('[');
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
        }
    }
}

fn json_text(template: &Template) -> String {
    let mut out = String::new();
    template.write(&mut out);
    out
}

/// Compact JSON with a space after `:` and `,` outside strings, as the library's scenarios are written.
fn compact(value: &Value) -> String {
    json_text(&referenced(value, &BTreeMap::new()))
}

/// A value in an `expect` line: on one line when short, indented over several otherwise (the language reads
/// JSON until its brackets close).
fn expected_text(value: &Value) -> String {
    let mut out = String::new();
    readable(value, 0, &mut out);
    out
}

/// `value` compact when it fits in 100 columns at `indent`, else its members one per line, each written
/// the same way (so short objects and arrays inside stay on one line).
fn readable(value: &Value, indent: usize, out: &mut String) {
    let one = compact(value);
    let (open, close, members): (char, char, Vec<(Option<&String>, &Value)>) = match value {
        Value::Object(map) if indent + one.len() > 100 => ('{', '}', map.iter().map(|(k, v)| (Some(k), v)).collect()),
        Value::Array(items) if indent + one.len() > 100 => ('[', ']', items.iter().map(|v| (None, v)).collect()),
        _ => {
            out.push_str(&one);
            return;
        }
    };
    out.push(open);
    for (k, (key, member)) in members.iter().enumerate() {
        out.push('\n');
        out.push_str(&" ".repeat(indent + 2));
        if let Some(key) = key {
            out.push_str(&Value::String((*key).clone()).to_string());
            out.push_str(": ");
        }
        readable(member, indent + 2, out);
        if k + 1 < members.len() {
            out.push(',');
        }
    }
    out.push('\n');
    out.push_str(&" ".repeat(indent));
    out.push(close);
}

/// A path as an `expect` line writes it: keys that are not plain words quoted.
fn path_text(path: &[String]) -> String {
    path.iter()
        .map(|segment| {
            let plain = segment.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if plain || (!segment.is_empty() && segment.chars().all(|c| c.is_ascii_digit())) {
                segment.clone()
            } else {
                Value::String(segment.clone()).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The `expect` lines of one answer: its kind, then each member (masked ones `present`).
pub fn expectations(name: &str, answer: &Value, masks: &Masks) -> Vec<String> {
    let mut lines = Vec::new();
    let mut path = Vec::new();
    if let Some(result) = answer.get("result") {
        match (result.get("resultType").and_then(Value::as_str), result.get("isError")) {
            (Some("complete"), Some(Value::Bool(true))) => lines.push(format!("expect {name} tool_error")),
            (Some(kind @ ("complete" | "input_required")), _) => lines.push(format!("expect {name} {kind}")),
            _ => {}
        }
        path.push("result".to_string());
        if let Value::Object(members) = result {
            for (key, value) in members {
                if matches!(key.as_str(), "resultType" | "isError") && matches!(value, Value::String(_) | Value::Bool(_)) {
                    if key == "resultType" && !matches!(value.as_str(), Some("complete" | "input_required")) {
                        lines.push(format!("expect {name} result.resultType = {}", compact(value)));
                    }
                    continue;
                }
                member(name, &mut path, key, value, masks, &mut lines);
            }
        }
    } else if let Some(error) = answer.get("error") {
        let code = error.get("code").and_then(Value::as_i64);
        let reason =
            error.pointer("/data/reason").and_then(Value::as_str).filter(|r| r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if let Some(code) = code {
            lines.push(match reason {
                Some(reason) => format!("expect {name} error {code} {reason}"),
                None => format!("expect {name} error {code}"),
            });
        }
        path.push("error".to_string());
        if let Value::Object(members) = error {
            for (key, value) in members {
                if key == "code" && code.is_some() {
                    continue;
                }
                member(name, &mut path, key, value, masks, &mut lines);
            }
        }
    }
    lines
}

fn member(name: &str, path: &mut Vec<String>, key: &str, value: &Value, masks: &Masks, lines: &mut Vec<String>) {
    path.push(key.to_string());
    let mask_path: Vec<&str> = path.iter().map(String::as_str).collect();
    if masks.masked(&mask_path, value) {
        lines.push(format!("expect {name} {} present", path_text(path)));
    } else if holds_masked(value, path, masks) {
        match value {
            Value::Object(members) => {
                for (key, value) in members {
                    member(name, path, key, value, masks, lines);
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    member(name, path, &index.to_string(), item, masks, lines);
                }
            }
            _ => {}
        }
    } else {
        lines.push(format!("expect {name} {} = {}", path_text(path), expected_text(value)));
    }
    path.pop();
}

/// Whether a masked member lies anywhere inside `value` (found at `path`).
fn holds_masked(value: &Value, path: &mut Vec<String>, masks: &Masks) -> bool {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(members) => members.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(items) => items.iter().map(|v| ("*".to_string(), v)).collect(),
        _ => return false,
    };
    children.into_iter().any(|(key, child)| {
        path.push(key);
        let mask_path: Vec<&str> = path.iter().map(String::as_str).collect();
        let found = masks.masked(&mask_path, child) || holds_masked(child, path, masks);
        path.pop();
        found
    })
}

fn method_of(message: &Value) -> String {
    message.get("method").and_then(Value::as_str).unwrap_or("?").to_string()
}

/// `tools/call notes_delete (id 3)`.
fn describe(message: &Value) -> String {
    let mut text = method_of(message);
    if let Some(tool) = message.pointer("/params/name").and_then(Value::as_str) {
        let _ = write!(text, " {tool}");
    }
    match message.get("id") {
        Some(id) => {
            let _ = write!(text, " (id {id})");
        }
        None => text.push_str(" (a notification)"),
    }
    text
}

/// `answered input_required`, `answered error -32602 state_consumed`.
fn outcome_words(answer: &Value) -> String {
    let observed = crate::oracle::outcome::Observed::read(answer);
    format!("answered {observed}").chars().take(100).collect()
}

/// `text` cut into lines of at most `width` characters at spaces (a longer word stays whole).
fn wrapped(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

fn shorten(text: &str) -> String {
    if text.chars().count() > 24 {
        format!("{}…", text.chars().take(24).collect::<String>())
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests;
