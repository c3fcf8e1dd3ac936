//! The gateway's backends: a notes server (`search`, `export`) and an issues server (`search`). Each is a
//! real [`Service`] with its own descriptors, reachable over stdio/HTTP like any server of ours.
//!
//! Their descriptors live in [`LiveDescriptors`], which an operator (or the simulator's adversary) can change
//! while the server runs: that is how a rug pull happens. Behaviour is fixed by the backend's tool name; only
//! what the model and the reviewer *read* changes.
//!
//! `export` is keyed: every call carries an idempotency key in `_meta["io.mcpsim/idempotencyKey"]`, and the
//! [`ExportLedger`] records key → outcome in one atomic step, so a repeated key returns the first outcome
//! without exporting again. The gateway passes a confirmation's nonce as that key; this is what makes its
//! crash-recovery rule ("re-drive a claimed confirmation") export exactly once.

use crate::framework::pipeline::{RequestContext, Service};
use crate::framework::ports::{NoteStore, StoreError};
use crate::policy::authorization::Authorizations;
use crate::policy::containment::FileUri;
use crate::servers::gateway::ports::{LiveListing, ToolListing, IDEMPOTENCY_KEY_META};
use crate::wire::canonical::digest_hex;
use crate::wire::errors::{echo, Reason, RpcError};
use crate::wire::result::{complete, complete_cacheable, CacheScope, ServerInfo};
use crate::wire::PROTOCOL_VERSION;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

pub(crate) const TOOL_SEARCH: &str = "search";
pub(crate) const TOOL_EXPORT: &str = "export";
pub(crate) const QUERY_CHARS_MAX: usize = 200;
pub(crate) const SEARCH_RESULTS_MAX: usize = 50;
/// Most notes one export bundles.
pub(crate) const EXPORT_NOTES_MAX: usize = 500;
pub(crate) const IDEMPOTENCY_KEY_CHARS_MAX: usize = 128;
/// Most descriptors a backend publishes.
pub(crate) const DESCRIPTORS_MAX: usize = 64;
pub(crate) const BACKEND_TOOLS_TTL_MS: u64 = 300_000;
pub(crate) const BACKEND_DISCOVER_TTL_MS: u64 = 3_600_000;

const METHODS: [&str; 3] = ["server/discover", "tools/list", "tools/call"];

/// A backend's descriptors, replaceable at run time. Always listed sorted by name (deterministic bytes).
#[derive(Debug, Default)]
pub struct LiveDescriptors {
    tools: Mutex<Arc<Vec<Value>>>,
}

impl LiveDescriptors {
    pub fn new(tools: Vec<Value>) -> Self {
        let live = LiveDescriptors::default();
        live.replace_all(tools);
        live
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arc<Vec<Value>>> {
        self.tools.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn current(&self) -> Arc<Vec<Value>> {
        self.lock().clone()
    }

    /// Replaces every descriptor (keeping at most [`DESCRIPTORS_MAX`]).
    pub(crate) fn replace_all(&self, mut tools: Vec<Value>) {
        tools.truncate(DESCRIPTORS_MAX);
        tools.sort_by(|a, b| name_of(a).cmp(name_of(b)));
        *self.lock() = Arc::new(tools);
    }

    /// Changes the descriptor named `name` in place. Returns whether it existed.
    pub fn update(&self, name: &str, change: impl FnOnce(&mut Value)) -> bool {
        let mut tools: Vec<Value> = self.current().as_ref().clone();
        let Some(descriptor) = tools.iter_mut().find(|d| name_of(d) == name) else { return false };
        change(descriptor);
        self.replace_all(tools);
        true
    }

    /// Adds a descriptor (even one whose name is already taken: a backend may publish a duplicate).
    pub fn push(&self, descriptor: Value) {
        let mut tools: Vec<Value> = self.current().as_ref().clone();
        tools.push(descriptor);
        self.replace_all(tools);
    }
}

fn name_of(descriptor: &Value) -> &str {
    descriptor.get("name").and_then(Value::as_str).unwrap_or("")
}

// ---------------------------------------------------------------------------------------------------------
// Export ledger (port)

/// What one export asks for. `request_digest` covers principal, destination and query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRequest {
    pub key: String,
    pub request_digest: String,
    pub principal: String,
    pub destination: String,
    pub note_ids: Vec<String>,
}

/// What an export did, as recorded under its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRecord {
    pub export_id: String,
    pub key: String,
    pub request_digest: String,
    pub principal: String,
    pub destination: String,
    pub note_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportOutcome {
    /// Exported now.
    Exported(ExportRecord),
    /// This key already exported; nothing was exported again. The record is the first outcome.
    AlreadyExported(ExportRecord),
    /// This key was used for a different request; nothing exported.
    KeyConflict,
    /// The ledger is full; nothing exported (fail closed).
    Full,
}

/// Idempotent exports: key → outcome, written in the same atomic step as the export itself.
#[async_trait]
pub trait ExportLedger: Send + Sync {
    async fn export_once(&self, request: ExportRequest) -> Result<ExportOutcome, StoreError>;
}

// ---------------------------------------------------------------------------------------------------------
// Notes backend

#[derive(Debug, Clone)]
pub struct NotesBackendConfig {
    pub server_info: ServerInfo,
    pub authorizations: Authorizations,
    /// Export destinations this backend knows (the `destination` enum of its `export` descriptor).
    pub destinations: BTreeSet<String>,
}

/// The notes backend: `search {query}` and `export {query, destination}` over the notes a principal may read.
#[derive(Clone)]
pub struct NotesBackend {
    pub config: Arc<NotesBackendConfig>,
    pub descriptors: Arc<LiveDescriptors>,
    pub notes: Arc<dyn NoteStore>,
    pub ledger: Arc<dyn ExportLedger>,
}

impl NotesBackend {
    /// A backend publishing its standard descriptors.
    pub fn new(config: NotesBackendConfig, notes: Arc<dyn NoteStore>, ledger: Arc<dyn ExportLedger>) -> Self {
        let descriptors = Arc::new(LiveDescriptors::new(notes_descriptors(&config.destinations)));
        NotesBackend { config: Arc::new(config), descriptors, notes, ledger }
    }

    async fn matching_notes(&self, principal: &str, query: &str) -> Result<Vec<crate::framework::ports::Note>, RpcError> {
        let needle = query.to_lowercase();
        let notes = self.notes.list_notes().await.map_err(store_failed)?;
        Ok(notes
            .into_iter()
            .filter(|note| FileUri::parse(&note.uri).is_ok_and(|uri| self.config.authorizations.may_access(principal, &uri)))
            .filter(|note| note.title.to_lowercase().contains(&needle) || note.body.to_lowercase().contains(&needle))
            .collect())
    }

    async fn search(&self, principal: &str, arguments: &Map<String, Value>) -> Result<Value, RpcError> {
        closed_arguments(arguments, &["query"])?;
        let query = query_argument(arguments)?;
        let mut found = self.matching_notes(principal, &query).await?;
        found.truncate(SEARCH_RESULTS_MAX);
        let results: Vec<Value> = found.iter().map(|n| json!({ "id": n.id, "title": n.title, "uri": n.uri })).collect();
        let lines: Vec<String> = found.iter().map(|n| format!("{}: {} ({})", n.id, n.title, n.uri)).collect();
        let text = if lines.is_empty() { format!("No note you may read matches {query:?}.") } else { lines.join("\n") };
        Ok(tool_result(json!({ "results": results }), &text, &self.config.server_info))
    }

    async fn export(&self, principal: &str, arguments: &Map<String, Value>, params: &Value) -> Result<Value, RpcError> {
        closed_arguments(arguments, &["query", "destination"])?;
        let query = query_argument(arguments)?;
        let destination = match arguments.get("destination") {
            Some(Value::String(destination)) if self.config.destinations.contains(destination) => destination.clone(),
            _ => {
                let known: Vec<&String> = self.config.destinations.iter().collect();
                return Err(invalid(format!("destination must be one of {known:?}")));
            }
        };
        let key = match params.get("_meta").and_then(|meta| meta.get(IDEMPOTENCY_KEY_META)) {
            Some(Value::String(key)) if !key.is_empty() && key.chars().count() <= IDEMPOTENCY_KEY_CHARS_MAX => key.clone(),
            _ => {
                return Err(invalid(format!(
                    "export needs an idempotency key (1 to {IDEMPOTENCY_KEY_CHARS_MAX} characters) in _meta[{IDEMPOTENCY_KEY_META:?}], so a retry never exports twice"
                )))
            }
        };
        let mut notes = self.matching_notes(principal, &query).await?;
        notes.truncate(EXPORT_NOTES_MAX);
        let request = ExportRequest {
            key,
            request_digest: digest_hex(&json!({ "principal": principal, "destination": destination, "query": query })),
            principal: principal.to_string(),
            destination,
            note_ids: notes.iter().map(|note| note.id.clone()).collect(),
        };
        match self.ledger.export_once(request).await.map_err(store_failed)? {
            ExportOutcome::Exported(record) | ExportOutcome::AlreadyExported(record) => {
                // The recorded outcome, byte for byte, whether exported now or earlier under the same key.
                let text = format!("Export {} to {}: {} note(s).", record.export_id, record.destination, record.note_ids.len());
                Ok(tool_result(
                    json!({ "exported": true, "exportId": record.export_id, "destination": record.destination, "noteIds": record.note_ids, "outcome": "exported" }),
                    &text,
                    &self.config.server_info,
                ))
            }
            ExportOutcome::KeyConflict => Err(RpcError::invalid_params(
                Reason::IdempotencyConflict,
                "this idempotency key was already used for a different export; nothing was exported",
            )),
            ExportOutcome::Full => Err(RpcError::internal(Reason::StoreUnavailable, "the export ledger is full; nothing was exported")),
        }
    }
}

impl LiveListing for NotesBackend {
    fn live_listing(&self) -> ToolListing {
        listing(&self.descriptors, &self.config.server_info)
    }
}

#[async_trait]
impl Service for NotesBackend {
    fn has_method(&self, method: &str) -> bool {
        METHODS.contains(&method)
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            "server/discover" => Ok(discover(
                &self.config.server_info,
                "Notes you are authorized to read: search them, or export matches to a configured archive.",
            )),
            "tools/list" => Ok(tools_list(&self.descriptors, &self.config.server_info)),
            "tools/call" => {
                let (name, arguments) = call_target(params)?;
                match name {
                    TOOL_SEARCH => self.search(context.principal, arguments).await,
                    TOOL_EXPORT => self.export(context.principal, arguments, params).await,
                    other => Err(RpcError::invalid_params(Reason::UnknownTool, format!("Unknown tool: {}", echo(other)))),
                }
            }
            other => Err(RpcError::method_not_found(other)),
        }
    }
}

/// The notes backend's standard descriptors: closed input schemas, and a destination enum from configuration.
pub fn notes_descriptors(destinations: &BTreeSet<String>) -> Vec<Value> {
    vec![
        json!({
            "name": TOOL_SEARCH,
            "title": "Search notes",
            "description": "Find notes you are authorized to read whose title or body contains the query (case-insensitive). Returns note ids, titles and URIs.",
            "inputSchema": {
                "type": "object",
                "properties": { "query": { "type": "string", "minLength": 1, "maxLength": QUERY_CHARS_MAX, "description": "Text to look for." } },
                "required": ["query"],
                "additionalProperties": false,
            },
            "annotations": { "title": "Search notes", "readOnlyHint": true, "openWorldHint": false },
        }),
        json!({
            "name": TOOL_EXPORT,
            "title": "Export notes",
            "description": "Copy the notes you are authorized to read that match the query into one bundle at a configured archive destination. Each export is keyed, so repeating a call with the same key returns the first outcome.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": { "type": "string", "minLength": 1, "maxLength": QUERY_CHARS_MAX, "description": "Text the exported notes contain." },
                    "destination": { "type": "string", "enum": destinations.iter().collect::<Vec<_>>(), "description": "Configured archive to write the bundle to." },
                },
                "required": ["query", "destination"],
                "additionalProperties": false,
            },
            "annotations": { "title": "Export notes", "readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": true },
        }),
    ]
}

// ---------------------------------------------------------------------------------------------------------
// Issues backend

/// One issue of the tracker.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Issue {
    pub id: String,
    pub title: String,
    pub state: String,
    #[serde(default)]
    pub body: String,
}

/// The issues backend: `search {query}` over a read-only tracker every principal may read.
#[derive(Clone)]
pub struct IssuesBackend {
    pub server_info: ServerInfo,
    pub descriptors: Arc<LiveDescriptors>,
    pub issues: Arc<Vec<Issue>>,
}

impl IssuesBackend {
    pub fn new(server_info: ServerInfo, issues: Vec<Issue>) -> Self {
        IssuesBackend { server_info, descriptors: Arc::new(LiveDescriptors::new(issues_descriptors())), issues: Arc::new(issues) }
    }

    fn search(&self, arguments: &Map<String, Value>) -> Result<Value, RpcError> {
        closed_arguments(arguments, &["query"])?;
        let query = query_argument(arguments)?;
        let needle = query.to_lowercase();
        let found: Vec<&Issue> = self
            .issues
            .iter()
            .filter(|issue| issue.title.to_lowercase().contains(&needle) || issue.body.to_lowercase().contains(&needle))
            .take(SEARCH_RESULTS_MAX)
            .collect();
        let results: Vec<Value> = found.iter().map(|i| json!({ "id": i.id, "title": i.title, "state": i.state })).collect();
        let lines: Vec<String> = found.iter().map(|i| format!("{} [{}] {}", i.id, i.state, i.title)).collect();
        let text = if lines.is_empty() { format!("No issue matches {query:?}.") } else { lines.join("\n") };
        Ok(tool_result(json!({ "results": results }), &text, &self.server_info))
    }
}

impl LiveListing for IssuesBackend {
    fn live_listing(&self) -> ToolListing {
        listing(&self.descriptors, &self.server_info)
    }
}

#[async_trait]
impl Service for IssuesBackend {
    fn has_method(&self, method: &str) -> bool {
        METHODS.contains(&method)
    }

    async fn call(&self, _context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            "server/discover" => Ok(discover(&self.server_info, "A read-only issue tracker: search issues by text.")),
            "tools/list" => Ok(tools_list(&self.descriptors, &self.server_info)),
            "tools/call" => {
                let (name, arguments) = call_target(params)?;
                match name {
                    TOOL_SEARCH => self.search(arguments),
                    other => Err(RpcError::invalid_params(Reason::UnknownTool, format!("Unknown tool: {}", echo(other)))),
                }
            }
            other => Err(RpcError::method_not_found(other)),
        }
    }
}

/// The issues backend's standard descriptor. Its bare name collides with the notes backend's `search` on
/// purpose: the gateway must keep them apart by qualified name, never by discovery order.
pub(crate) fn issues_descriptors() -> Vec<Value> {
    vec![json!({
        "name": TOOL_SEARCH,
        "title": "Search issues",
        "description": "Find issues whose title or body contains the query (case-insensitive). Returns issue ids, titles and states.",
        "inputSchema": {
            "type": "object",
            "properties": { "query": { "type": "string", "minLength": 1, "maxLength": QUERY_CHARS_MAX, "description": "Text to look for." } },
            "required": ["query"],
            "additionalProperties": false,
        },
        "annotations": { "title": "Search issues", "readOnlyHint": true, "openWorldHint": false },
    })]
}

// ---------------------------------------------------------------------------------------------------------
// Shared pieces

fn discover(server_info: &ServerInfo, instructions: &str) -> Value {
    complete_cacheable(
        json!({ "supportedVersions": [PROTOCOL_VERSION], "capabilities": { "tools": {} }, "instructions": instructions }),
        BACKEND_DISCOVER_TTL_MS,
        CacheScope::Public,
        server_info,
    )
}

fn tools_list(descriptors: &LiveDescriptors, server_info: &ServerInfo) -> Value {
    // A plain clone: `json!` would copy the descriptors through the serializer, which costs several times more.
    let mut fields = Map::new();
    fields.insert("tools".into(), Value::Array(descriptors.current().as_ref().clone()));
    complete_cacheable(Value::Object(fields), BACKEND_TOOLS_TTL_MS, CacheScope::Public, server_info)
}

fn listing(descriptors: &LiveDescriptors, server_info: &ServerInfo) -> ToolListing {
    ToolListing { server_name: server_info.name.clone(), server_version: server_info.version.clone(), tools: descriptors.current() }
}

fn call_target(params: &Value) -> Result<(&str, &Map<String, Value>), RpcError> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    let name = match params.get("name") {
        Some(Value::String(name)) => name.as_str(),
        _ => return Err(invalid("tools/call needs params.name, a string".into())),
    };
    let arguments = match params.get("arguments") {
        None => EMPTY.get_or_init(Map::new),
        Some(Value::Object(arguments)) => arguments,
        Some(_) => return Err(invalid("arguments must be an object".into())),
    };
    Ok((name, arguments))
}

fn closed_arguments(arguments: &Map<String, Value>, allowed: &[&str]) -> Result<(), RpcError> {
    match arguments.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(unknown) => Err(invalid(format!("unknown argument {:?}: this tool takes only {allowed:?}", echo(unknown)))),
        None => Ok(()),
    }
}

fn query_argument(arguments: &Map<String, Value>) -> Result<String, RpcError> {
    match arguments.get("query") {
        Some(Value::String(query)) if !query.trim().is_empty() && query.chars().count() <= QUERY_CHARS_MAX => Ok(query.clone()),
        _ => Err(invalid(format!("query is required: a non-blank string of at most {QUERY_CHARS_MAX} characters"))),
    }
}

fn tool_result(structured: Value, text: &str, server_info: &ServerInfo) -> Value {
    complete(json!({ "content": [{ "type": "text", "text": text }], "structuredContent": structured, "isError": false }), server_info)
}

fn invalid(message: String) -> RpcError {
    RpcError::invalid_params(Reason::ArgumentsInvalid, message)
}

fn store_failed(error: StoreError) -> RpcError {
    RpcError::internal(Reason::StoreUnavailable, format!("{error}; nothing was exported"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::scanner::scan_descriptor;

    #[test]
    fn standard_descriptors_are_scanner_clean() {
        let destinations: BTreeSet<String> = ["archive".to_string()].into();
        for descriptor in notes_descriptors(&destinations).iter().chain(issues_descriptors().iter()) {
            let report = scan_descriptor(descriptor);
            assert!(report.is_clean(), "{:?}", report.findings);
        }
    }

    #[tokio::test]
    async fn the_live_listing_is_exactly_what_tools_list_serves() {
        use crate::servers::gateway::ports::{Backend, LocalBackend};
        let issues = Arc::new(IssuesBackend::new(ServerInfo { name: "i".into(), version: "1".into() }, vec![]));
        issues.descriptors.update(TOOL_SEARCH, |d| d["description"] = json!("changed at run time"));
        let through_service = LocalBackend::new(issues.clone()).list_tools().await.unwrap();
        let live = LocalBackend::with_live_listing(issues.clone(), issues).list_tools().await.unwrap();
        assert_eq!(through_service, live);
        assert_eq!(live.tools[0]["description"], "changed at run time");
    }

    #[test]
    fn live_descriptors_stay_sorted_and_bounded() {
        let live = LiveDescriptors::new(vec![json!({"name": "b"}), json!({"name": "a"})]);
        assert_eq!(live.current().iter().map(name_of).collect::<Vec<_>>(), ["a", "b"]);
        assert!(live.update("b", |d| d["description"] = json!("changed")));
        assert!(!live.update("zz", |_| {}));
        assert_eq!(live.current()[1]["description"], "changed");
        live.replace_all((0..DESCRIPTORS_MAX + 5).map(|i| json!({"name": format!("t{i:03}")})).collect());
        assert_eq!(live.current().len(), DESCRIPTORS_MAX);
    }
}
