//! The notes server on the official Rust SDK, rmcp 3.11: MCP 2026-07-28 over stdio, the MRTR flow of
//! notes_delete, for fleets of processes sharing one SQLite file (targets/sdk/rust-*.toml, docs/targets.md
//! "Planted mistakes"). The same behaviour, switches and environment as the reference server with no SDK,
//! tests/peers/nosdk/notes_server.py (read it for the rules); this file says only where it differs.
//!
//!     notes-server seed DB      # create DB with the three TPS notes and an empty ledger (idempotent)
//!     notes-server stdio DB     # serve over stdio
//!
//! Environment: the requestState key (one of the three below, required), NOTES_PRINCIPAL (required),
//! NOTES_BUG (unset, or one of BUGS), NOTES_AUDIT=random, NOTES_EFFECT_MS.
//!
//! The requestState key, in rmcp's own terms (rmcp-3.11.0/src/model/request_state.rs; `codec_from_env`):
//!   - NOTES_STATE_KEY=KEY (>= 32 bytes): one shared key, `RequestStateCodec::try_new` (seals and opens
//!     `rs1` values only; what a fleet runs before a rotation);
//!   - NOTES_STATE_KEYRING=KID=KEY,KID=KEY with NOTES_STATE_ACTIVE_KID=KID: `new_with_keyring(active, ring)`
//!     (seals `rs2` under the active kid, opens `rs2` under any kid of the ring), plus
//!     NOTES_STATE_RS1_SIGNING=KID (`with_rs1_signing`: still seals `rs1` with KID, rotation step 1) and
//!     NOTES_STATE_RS1_FALLBACK=KID[,KID] (`with_rs1_fallback`: opens in-flight `rs1` values, step 2); a ring
//!     without either (step 3) opens no `rs1` value at all. Keys are the bytes of the text (no `,` in a key);
//!   - NOTES_STATE_EPHEMERAL=1: a 32-byte key drawn at random when the process starts. rmcp has no default key
//!     (no `Default` for the codec; without one a state is whatever plain string the tool writes), so this is
//!     the closest to "a process that makes a key of its own": a restart or another process cannot open it.
//!
//! An empty variable counts as unset (a target's stage clears the file's NOTES_STATE_KEY with `""`).
//!
//! What rmcp 3.11 gives, and this server uses:
//!   - the stateless 2026-07-28 lifecycle over stdio: no initialize; `_meta` protocolVersion and
//!     clientCapabilities required on every request (-32602 when missing), an unsupported version answered
//!     -32022 with the supported list (`supported_protocol_versions` is narrowed to 2026-07-28 only), the
//!     JSON-RPC framing, server/discover, `ttlMs`/`cacheScope` on tools/list, `resultType` on every result;
//!   - `CallToolRequestParams::{request_state, input_responses}` parsed, `CallToolResponse::InputRequired`
//!     with an `InputRequiredResult` (refused by the SDK to a peer on an older version), `InputRequest`
//!     (elicitation/create), `ElicitResult` to read an answer, `CallToolResult` for tool errors;
//!   - `RequestStateCodec` (feature `request-state`): requestState sealed with HMAC-SHA256, an expiry
//!     (`SealOptions::ttl`) and associated data (`SealOptions::associated_data`: the principal and a digest of
//!     the arguments, so a state opens only for the same caller and the same request).
//!
//! What rmcp 3.11 does not give, written here: single use. The codec's docs say so ("Single-use/nonce
//! enforcement ... still has to be done server-side"): the nonce sealed in the state is claimed in a SQLite
//! ledger row in the delete's own transaction (BEGIN IMMEDIATE), a decline claims it, a cancel and an invalid
//! answer claim nothing. Also written here: the candidates shown (sealed in the state) checked against the
//! answer, the form-elicitation capability check (-32021), the planted mistakes, the audit id.
use std::{
    borrow::Cow,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitResult, ElicitationAction, ErrorCode, Implementation,
        InputRequest, InputRequests, InputRequiredResult, JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
        RequestStateCodec, SealOptions, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
    },
    service::RequestContext,
    ErrorData, RoleServer, ServerHandler, ServiceExt,
};
use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

const WORKSPACE: &str = "file:///work/notes";
const SEED: [(&str, &str); 3] = [("note-3", "TPS report 2023"), ("note-7", "TPS report 2024"), ("note-14", "TPS report 2025")];
const TTL: Duration = Duration::from_secs(300);
const INPUT_KEY: &str = "delete_choice";
const VERSIONS: &[ProtocolVersion] = &[ProtocolVersion::V_2026_07_28];
const BUGS: [&str; 6] = [
    "burn-on-cancel",   // the state's nonce is claimed when a cancel arrives
    "burn-on-invalid",  // the nonce is claimed before the answer is validated
    "bind-client-info", // the state is bound to _meta clientInfo.name instead of NOTES_PRINCIPAL
    "error-on-retry",   // the accepted retry deletes the note, then answers isError: true
    "check-then-act",   // the ledger is read, the note deleted, then the nonce claimed (no transaction)
    "no-single-use",    // no ledger at all (what the SDK does by default); the delete checks its row count
];

/// What the sealed requestState carries; the principal and the arguments' digest are its associated data.
#[derive(Serialize, Deserialize)]
struct State {
    /// The nonce claimed in the ledger.
    n: String,
    /// The candidates shown.
    c: Vec<String>,
}

#[derive(Clone)]
struct Notes {
    codec: Arc<RequestStateCodec>,
    principal: String,
    bug: Option<&'static str>,
    audit: bool,
    effect: Duration,
    db: Arc<Mutex<Connection>>,
}

fn connect(path: &str) -> rusqlite::Result<Connection> {
    let db = Connection::open(path)?;
    db.busy_timeout(Duration::from_secs(10))?;
    db.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, workspace TEXT NOT NULL, title TEXT NOT NULL);
         CREATE TABLE IF NOT EXISTS ledger (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL);",
    )?;
    Ok(db)
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::getrandom(&mut buf).expect("the OS random source");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The environment variable's value, None when unset or empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The requestState codec the environment configures (the module's comment): a message naming the variable
/// when it is wrong, never a key.
fn codec_from_env() -> Result<RequestStateCodec, String> {
    let key = env("NOTES_STATE_KEY");
    let keyring = env("NOTES_STATE_KEYRING");
    let ephemeral = env("NOTES_STATE_EPHEMERAL");
    let ring_only = ["NOTES_STATE_ACTIVE_KID", "NOTES_STATE_RS1_SIGNING", "NOTES_STATE_RS1_FALLBACK"];
    if keyring.is_none() {
        if let Some(name) = ring_only.iter().find(|name| env(name).is_some()) {
            return Err(format!("{name} configures a keyring: set NOTES_STATE_KEYRING too"));
        }
    }
    match (key, keyring, ephemeral) {
        (Some(key), None, None) => RequestStateCodec::try_new(key.into_bytes())
            .map_err(|e| format!("NOTES_STATE_KEY must be a shared key of at least 32 bytes ({e})")),
        (None, Some(keyring), None) => {
            let mut ring = Vec::new();
            for (index, entry) in keyring.split(',').enumerate() {
                let Some((kid, key)) = entry.split_once('=') else {
                    return Err(format!("NOTES_STATE_KEYRING entry {} is not KID=KEY", index + 1));
                };
                ring.push((kid.to_owned(), key.as_bytes().to_vec()));
            }
            let active = env("NOTES_STATE_ACTIVE_KID").ok_or("NOTES_STATE_ACTIVE_KID must name the keyring's key that seals")?;
            let mut codec = RequestStateCodec::new_with_keyring(active, ring).map_err(|e| format!("NOTES_STATE_KEYRING: {e}"))?;
            if let Some(kid) = env("NOTES_STATE_RS1_SIGNING") {
                codec = codec.with_rs1_signing(kid).map_err(|e| format!("NOTES_STATE_RS1_SIGNING: {e}"))?;
            }
            for kid in env("NOTES_STATE_RS1_FALLBACK").unwrap_or_default().split(',').filter(|kid| !kid.is_empty()) {
                codec = codec.with_rs1_fallback(kid).map_err(|e| format!("NOTES_STATE_RS1_FALLBACK: {e}"))?;
            }
            Ok(codec)
        }
        (None, None, Some(ephemeral)) if ephemeral == "1" => {
            let mut key = vec![0u8; RequestStateCodec::MIN_KEY_LENGTH];
            getrandom::getrandom(&mut key).map_err(|e| format!("the OS random source: {e}"))?;
            RequestStateCodec::try_new(key).map_err(|e| e.to_string())
        }
        (None, None, Some(_)) => Err("NOTES_STATE_EPHEMERAL must be 1 or unset".into()),
        (None, None, None) => Err("a requestState key is required: NOTES_STATE_KEY (one shared key of at least 32 bytes), \
             NOTES_STATE_KEYRING with NOTES_STATE_ACTIVE_KID, or NOTES_STATE_EPHEMERAL=1"
            .into()),
        _ => Err("set only one of NOTES_STATE_KEY, NOTES_STATE_KEYRING and NOTES_STATE_EPHEMERAL".into()),
    }
}

fn digest(value: &Value) -> String {
    Sha256::digest(value.to_string().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn invalid_state() -> ErrorData {
    ErrorData::invalid_params("Invalid or expired requestState", Some(json!({"reason": "invalid_request_state"})))
}

fn internal(error: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(error.to_string(), None)
}

impl Notes {
    fn from_env(path: &str) -> Result<Self, String> {
        let codec = codec_from_env()?;
        let principal = std::env::var("NOTES_PRINCIPAL").unwrap_or_default();
        if principal.is_empty() {
            return Err("NOTES_PRINCIPAL must name who this process acts for".into());
        }
        let bug = match std::env::var("NOTES_BUG").unwrap_or_default().as_str() {
            "" => None,
            name => {
                Some(*BUGS.iter().find(|b| **b == name).ok_or_else(|| format!("unknown NOTES_BUG {name}; one of {}", BUGS.join(", ")))?)
            }
        };
        let effect_ms = std::env::var("NOTES_EFFECT_MS").unwrap_or_else(|_| "0".into());
        let effect_ms: u64 = effect_ms.parse().map_err(|_| format!("NOTES_EFFECT_MS must be milliseconds, not {effect_ms:?}"))?;
        let db = connect(path).map_err(|e| format!("{path}: {e}"))?;
        Ok(Self {
            codec: Arc::new(codec),
            principal,
            bug,
            audit: std::env::var("NOTES_AUDIT").as_deref() == Ok("random"),
            effect: Duration::from_millis(effect_ms),
            db: Arc::new(Mutex::new(db)),
        })
    }

    fn result(&self, text: &str, structured: Value, is_error: bool) -> CallToolResult {
        let mut structured = match structured {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        if self.audit {
            structured.insert("audit".into(), Value::String(random_hex(8)));
        }
        let mut result = if is_error {
            CallToolResult::error(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(text)])
        };
        if !structured.is_empty() {
            result.structured_content = Some(Value::Object(structured));
        }
        result
    }

    fn used(&self) -> CallToolResult {
        self.result("this confirmation was already used", json!({"deleted": false, "outcome": "used"}), true)
    }

    /// Runs `work` on the connection off the async workers (SQLite and the effect's sleep block).
    async fn with_db<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, ErrorData> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let mut db = db.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            work(&mut db)
        })
        .await
        .map_err(internal)?
        .map_err(internal)
    }

    /// Claims a nonce on its own (a decline, or a planted mistake); false when it was already claimed.
    async fn claim(&self, nonce: &str, outcome: &'static str) -> Result<bool, ErrorData> {
        let nonce = nonce.to_owned();
        self.with_db(move |db| {
            db.execute("INSERT OR IGNORE INTO ledger (nonce, outcome) VALUES (?1, ?2)", (nonce, outcome)).map(|inserted| inserted == 1)
        })
        .await
    }

    fn bound_principal(&self, context: &RequestContext<RoleServer>) -> String {
        if self.bug == Some("bind-client-info") {
            return context.client_info().map(|info| info.name).unwrap_or_default();
        }
        self.principal.clone()
    }

    async fn notes_list(&self) -> Result<CallToolResult, ErrorData> {
        let notes = self
            .with_db(|db| {
                let mut rows = db.prepare("SELECT id, title FROM notes ORDER BY id")?;
                let notes = rows
                    .query_map([], |row| Ok(json!({"id": row.get::<_, String>(0)?, "title": row.get::<_, String>(1)?})))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(notes)
            })
            .await?;
        Ok(self.result(&Value::from(notes.clone()).to_string(), json!({"notes": notes}), false))
    }

    async fn notes_delete(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let (Some(workspace), Some(title)) =
            (arguments.get("workspaceUri").and_then(Value::as_str), arguments.get("title").and_then(Value::as_str))
        else {
            return Ok(self.result("workspaceUri and title must be strings", Value::Null, true).into());
        };
        let principal = self.bound_principal(&context);
        let associated = format!("{principal}\n{}", digest(&arguments));
        let Some(sealed) = request.request_state else {
            return self.ask(&context, workspace, title, &associated).await;
        };
        let state: State = self.codec.open_json_with(&sealed, associated.as_bytes()).map_err(|_| invalid_state())?;
        let answer = request
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get(INPUT_KEY))
            .and_then(|answer| serde_json::from_value::<ElicitResult>(answer.clone()).ok());
        let Some(answer) = answer else {
            return Ok(self.result(&format!("missing {INPUT_KEY}"), Value::Null, true).into());
        };
        let result = match answer.action {
            ElicitationAction::Decline => {
                if !self.claim(&state.n, "declined").await? {
                    return Ok(self.used().into());
                }
                self.result("not deleted (decline)", json!({"deleted": false, "outcome": "decline"}), false)
            }
            ElicitationAction::Cancel => {
                if self.bug == Some("burn-on-cancel") && !self.claim(&state.n, "cancelled").await? {
                    return Ok(self.used().into());
                }
                self.result("not deleted (cancel)", json!({"deleted": false, "outcome": "cancel"}), false)
            }
            _ => {
                let claimed = self.bug == Some("burn-on-invalid");
                if claimed && !self.claim(&state.n, "answered").await? {
                    return Ok(self.used().into());
                }
                let content = answer.content.unwrap_or(Value::Null);
                let note_id = content.get("note_id").and_then(Value::as_str);
                match note_id {
                    Some(id) if state.c.iter().any(|c| c == id) && content.get("confirm") == Some(&Value::Bool(true)) => {
                        self.delete(state.n, id.to_owned(), claimed).await?
                    }
                    _ => self.result("invalid answer: note_id must be one of the candidates shown and confirm true", Value::Null, true),
                }
            }
        };
        Ok(result.into())
    }

    async fn ask(
        &self,
        context: &RequestContext<RoleServer>,
        workspace: &str,
        title: &str,
        associated: &str,
    ) -> Result<CallToolResponse, ErrorData> {
        let elicitation = context.client_capabilities().and_then(|caps| caps.elicitation);
        if elicitation.is_none_or(|e| e.form.is_none() && e.url.is_some()) {
            return Err(ErrorData::new(
                ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                "form elicitation required",
                Some(json!({"requiredCapabilities": {"elicitation": {"form": {}}}})),
            ));
        }
        let (workspace_owned, title_owned) = (workspace.to_owned(), title.to_owned());
        let candidates = self
            .with_db(move |db| {
                let mut rows =
                    db.prepare("SELECT id FROM notes WHERE workspace = ?1 AND instr(lower(title), lower(?2)) > 0 ORDER BY id")?;
                let ids =
                    rows.query_map((workspace_owned, title_owned), |row| row.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(ids)
            })
            .await?;
        if candidates.is_empty() {
            return Ok(self.result("no matching note", Value::Null, true).into());
        }
        let request: InputRequest = serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": format!("Which '{title}' should be deleted?"),
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "note_id": {"type": "string", "enum": candidates, "title": "Note"},
                        "confirm": {"type": "boolean", "title": "Really delete?"},
                    },
                    "required": ["note_id", "confirm"],
                },
            },
        }))
        .map_err(internal)?;
        let state = State { n: random_hex(16), c: candidates };
        let sealed =
            self.codec.seal_json_with(&state, &SealOptions::new().associated_data(associated.as_bytes()).ttl(TTL)).map_err(internal)?;
        let requests = InputRequests::from([(INPUT_KEY.to_owned(), request)]);
        Ok(InputRequiredResult::new(Some(requests), Some(sealed)).into())
    }

    async fn delete(&self, nonce: String, note_id: String, claimed: bool) -> Result<CallToolResult, ErrorData> {
        let (bug, effect) = (self.bug, self.effect);
        let id = note_id.clone();
        // Some(true): deleted; Some(false): already gone; None: the state was used.
        let outcome = self
            .with_db(move |db| {
                if bug == Some("no-single-use") {
                    let removed = db.execute("DELETE FROM notes WHERE id = ?1", [&id])?;
                    std::thread::sleep(effect);
                    return Ok(Some(removed == 1));
                }
                if bug == Some("check-then-act") {
                    let seen: Option<i64> = db.query_row("SELECT 1 FROM ledger WHERE nonce = ?1", [&nonce], |row| row.get(0)).ok();
                    if seen.is_some() {
                        return Ok(None);
                    }
                    // The ledger is trusted to make the state single-use, so the row count is not looked at.
                    db.execute("DELETE FROM notes WHERE id = ?1", [&id])?;
                    std::thread::sleep(effect);
                    db.execute("INSERT OR IGNORE INTO ledger (nonce, outcome) VALUES (?1, 'accepted')", [&nonce])?;
                    return Ok(Some(true));
                }
                // The correct way: claim and delete in one transaction; a claim that conflicts means the state
                // was used, a delete that removed nothing rolls back (the transaction drops uncommitted).
                let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
                if !claimed {
                    let used = tx.query_row("SELECT 1 FROM ledger WHERE nonce = ?1", [&nonce], |_| Ok(())).is_ok();
                    if used {
                        return Ok(None);
                    }
                    tx.execute("INSERT INTO ledger (nonce, outcome) VALUES (?1, 'accepted')", [&nonce])?;
                }
                let removed = tx.execute("DELETE FROM notes WHERE id = ?1", [&id])?;
                std::thread::sleep(effect);
                if removed != 1 {
                    return Ok(Some(false));
                }
                tx.commit()?;
                Ok(Some(true))
            })
            .await?;
        Ok(match outcome {
            None => self.used(),
            Some(false) => self.result(&format!("{note_id} is already gone"), json!({"deleted": false, "outcome": "gone"}), true),
            // The note is deleted; reading it back to describe it then fails, and the failure is answered.
            Some(true) if self.bug == Some("error-on-retry") => {
                self.result(&format!("{note_id} not found"), json!({"deleted": false, "outcome": "error"}), true)
            }
            Some(true) => {
                self.result(&format!("deleted {note_id}"), json!({"deleted": true, "noteId": note_id, "outcome": "deleted"}), false)
            }
        })
    }
}

fn tools() -> Vec<Tool> {
    let object = |value: Value| -> Arc<JsonObject> {
        match value {
            Value::Object(map) => Arc::new(map),
            _ => unreachable!("a literal object"),
        }
    };
    vec![
        Tool::new("notes_list", "Every note (id and title).", object(json!({"type": "object", "properties": {}})))
            .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "notes_delete",
            "Delete a note by title inside a workspace; asks the user to pick and confirm.",
            object(json!({
                "type": "object",
                "properties": {"workspaceUri": {"type": "string"}, "title": {"type": "string"}},
                "required": ["workspaceUri", "title"],
            })),
        )
        .with_annotations(ToolAnnotations::new().destructive(true).read_only(false)),
    ]
}

impl ServerHandler for Notes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(Implementation::new("notes-rmcp", "0.1.0"))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "notes_list" => Ok(self.notes_list().await?.into()),
            "notes_delete" => self.notes_delete(request, context).await,
            name => Err(ErrorData::invalid_params(format!("Unknown tool: {name}"), None)),
        }
    }
}

fn seed(path: &str) -> rusqlite::Result<()> {
    let db = connect(path)?;
    for (id, title) in SEED {
        db.execute("INSERT OR REPLACE INTO notes (id, workspace, title) VALUES (?1, ?2, ?3)", (id, WORKSPACE, title))?;
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let fail = |message: String| -> ! {
        eprintln!("{message}");
        std::process::exit(1)
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>()[1..] {
        ["seed", path] => seed(path).unwrap_or_else(|e| fail(format!("{path}: {e}"))),
        ["stdio", path] => {
            let notes = Notes::from_env(path).unwrap_or_else(|e| fail(e));
            let service = notes.serve(rmcp::transport::stdio()).await.unwrap_or_else(|e| fail(format!("serving stdio: {e}")));
            if let Err(e) = service.waiting().await {
                fail(format!("serving stdio: {e}"));
            }
        }
        _ => fail("usage: notes-server seed DB | stdio DB".into()),
    }
}
