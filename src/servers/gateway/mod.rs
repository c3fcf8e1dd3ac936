//! The security gateway (GUARANTEES.md §3): one stateless handler in front of several backend MCP servers.
//!
//! A model reads descriptions to pick tools, a router reads names to pick backends, a user reads labels to
//! approve; a malicious descriptor can aim at all three. So the gateway treats every descriptor, annotation,
//! clientInfo and serverInfo as untrusted, publishes only tools whose full descriptor matches a reviewed pin
//! and passes the scanner, names every tool `backend.tool`, and runs every `tools/call` through one pipeline:
//!
//! | # | Stage | Refusal | Spends |
//! |---|-------|---------|--------|
//! | 1 | envelope, `_meta` ([`crate::framework::pipeline`]) | -32700/-32600/-32602 (400) | nothing |
//! | 2 | HTTP routing headers vs body | -32020 (400) | nothing: no backend chosen, no grant read, no token |
//! | 3 | protocol version | -32022 (400) | nothing |
//! | 4 | method | -32601 (404) | nothing |
//! | 5 | route: qualified name → configured backend (never discovery order) | `unknown_tool` | nothing |
//! | 6 | capability compatibility (a confirmation needs form elicitation) | -32021 (400) | nothing |
//! | 7 | authorization: principal's grant, the approved pin, arguments against the *approved* closed schema, destination | `tool_unauthorized`, `tool_quarantined`, `arguments_invalid`, `destination_unauthorized` | nothing |
//! | 8 | catalog: the backend's *current* descriptor re-checked (pin, publisher, scanner) | `tool_quarantined`, `tool_blocked` | one descriptor read |
//! | 9 | rate limit on (principal, tool, window): a tool that runs at once counts each call; a confirmed tool counts each confirmation once, when it is asked for | `rate_limited` (429) | nothing (a refusal counts nothing) |
//! | 10 | execute, or ask the user (MRTR) and, on a validated accept, claim the nonce and execute | | the call |
//!
//! A confirmed tool's round 2 (and every retry or re-drive of it) counts nothing: the confirmation was counted
//! when it was asked for, and it runs at most once. So a quota of N a minute allows N confirmations a minute,
//! and a client that lost its answer and retries learns what happened instead of hitting its own quota.
//!
//! Capabilities are compatibility declarations (stage 6), never permissions (stage 7). Every `tools/call`
//! that reaches stage 5 — and, through [`Service::refused`], every one the shared pipeline refuses at
//! stages 1–3, whichever transport carried it (HTTP, stdio, the simulator) — leaves one redacted audit record.
//!
//! **Confirmation and recovery.** A tool whose rule says `confirm` (e.g. `notes.export`) answers round 1 with
//! `input_required`: a form `{confirm: boolean}` and a `requestState` sealed with [`KeyRing`] that binds the
//! principal, the tool, the exact arguments (digest), an expiry and a nonce. Round 2 re-runs stages 1–9, then
//! opens the state, checks the binding and validates the answer. `cancel` and malformed answers consume
//! nothing; an explicit `decline` consumes the nonce; a validated `accept` claims the nonce in the shared
//! [`ReplayStore`] (a port shared by every instance — never a field of one gateway) with the record
//! `{"outcome":"confirmed","tool",…,"argumentsDigest",…}` and then calls the backend **with the nonce as its
//! idempotency key**. If an instance crashes after the claim and before (or during) the backend call, the
//! retry finds the nonce claimed *for this very call* and re-drives it with the same key; the backend's
//! idempotent export returns the first outcome. The export therefore happens exactly once, however many
//! retries, instances or races. Any other record (`declined`, a different call) is `state_consumed`.

pub mod arguments;
pub mod audit;
pub mod backends;
pub mod catalog;
pub mod policy;
pub mod ports;

use self::arguments::{check_arguments, redact, ARGUMENTS_BYTES_MAX};
use self::audit::{keyed_digest, keyed_digest_bytes, outcome_of, reason_of, recorded_name, AuditRecord, Decision, Stage};
use self::catalog::{evaluate_listing, judge, Catalog, CatalogEntry, Judgement, Quarantine, ScanMemo, ToolStatus};
use self::policy::AccessPolicy;
use self::ports::{AuditSink, Backend, BackendCall, BackendError, PinSource, RateDecision, RateLimiter};
use crate::framework::pipeline::{handle_message, Reply, RequestContext, Service};
use crate::framework::ports::{ClaimOutcome, ClaimRecord, Clock, NonceClaim, NonceSource, ReplayStore, StoreError};
use crate::framework::refusals::{self, Action};
use crate::policy::pinning::{is_backend_id, split_qualified, PinFile};
use crate::policy::state::{KeyRing, StateClaims};
use crate::wire::canonical::canonical_string;
use crate::wire::errors::{echo, Reason, RpcError, HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION};
use crate::wire::headers::RoutingHeaders;
use crate::wire::jsonrpc::RequestId;
use crate::wire::meta::{require_form_elicitation, KEY_SERVER_INFO};
use crate::wire::result::{complete, complete_cacheable, input_required, CacheScope, ServerInfo};
use crate::wire::PROTOCOL_VERSION;
use async_trait::async_trait;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The `inputRequests` key of the confirmation form, and the phase sealed into its state.
pub(crate) const INPUT_CONFIRM: &str = "confirm";
/// The catalog can change under a listing (quarantine, rug pull), so listings are fresh briefly.
pub(crate) const GATEWAY_TOOLS_TTL_MS: u64 = 30_000;
pub(crate) const GATEWAY_DISCOVER_TTL_MS: u64 = 3_600_000;
pub(crate) const AUDIT_KEY_BYTES_MIN: usize = 32;
pub(crate) const INSTANCE_NAME_CHARS_MAX: usize = 64;

const METHODS: [&str; 3] = ["server/discover", "tools/list", "tools/call"];

/// Per-instance configuration. Immutable while a request runs.
#[derive(Clone)]
pub struct GatewayConfig {
    pub server_info: ServerInfo,
    /// Names this instance in audit records.
    pub instance: String,
    pub policy: AccessPolicy,
    /// Seals confirmation states; every instance that may receive a retry holds the same keys.
    pub key_ring: KeyRing,
    pub state_ttl_ms: u64,
    /// Keys the audit log's argument digests.
    pub audit_key: Vec<u8>,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("server_info", &self.server_info)
            .field("instance", &self.instance)
            .field("policy", &self.policy)
            .field("key_ring", &self.key_ring)
            .field("state_ttl_ms", &self.state_ttl_ms)
            .finish_non_exhaustive()
    }
}

/// A configured backend: the id that prefixes its tools, where the gateway reaches it, and the port.
#[derive(Clone)]
pub struct BackendHandle {
    pub id: String,
    /// Where the gateway reaches it (recorded as publisher evidence), e.g. `in-process:notes`.
    pub endpoint: String,
    pub port: Arc<dyn Backend>,
}

/// The shared ports. Everything here may be shared by many gateway instances.
#[derive(Clone)]
pub struct GatewayPorts {
    pub pins: Arc<dyn PinSource>,
    pub replay: Arc<dyn ReplayStore>,
    pub rate_limiter: Arc<dyn RateLimiter>,
    pub audit: Arc<dyn AuditSink>,
    pub clock: Arc<dyn Clock>,
    pub nonces: Arc<dyn NonceSource>,
}

/// What is wrong with a gateway's configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayConfigError {
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    #[error("the audit key must be at least {AUDIT_KEY_BYTES_MIN} bytes")]
    AuditKey,
    #[error("the instance name must be 1 to {INSTANCE_NAME_CHARS_MAX} characters")]
    InstanceName,
    #[error("two backends share the id {0:?}")]
    DuplicateBackend(String),
    #[error("backend id {0:?} must be 1 to 32 characters of a-z 0-9 _ - (no dot)")]
    BackendId(String),
}

/// The gateway: configuration, backends and ports. Holds no per-client state.
#[derive(Clone)]
pub struct Gateway {
    pub config: Arc<GatewayConfig>,
    backends: Arc<Vec<BackendHandle>>,
    pub ports: GatewayPorts,
    scan_memo: Arc<ScanMemo>,
}

impl Gateway {
    /// Checks the configuration; the error says what to fix.
    pub fn new(config: GatewayConfig, mut backends: Vec<BackendHandle>, ports: GatewayPorts) -> Result<Gateway, GatewayConfigError> {
        config.policy.validate()?;
        if config.audit_key.len() < AUDIT_KEY_BYTES_MIN {
            return Err(GatewayConfigError::AuditKey);
        }
        if config.instance.is_empty() || config.instance.chars().count() > INSTANCE_NAME_CHARS_MAX {
            return Err(GatewayConfigError::InstanceName);
        }
        backends.sort_by(|a, b| a.id.cmp(&b.id));
        for pair in backends.windows(2) {
            if pair[0].id == pair[1].id {
                return Err(GatewayConfigError::DuplicateBackend(pair[0].id.clone()));
            }
        }
        if let Some(bad) = backends.iter().find(|b| !is_backend_id(&b.id)) {
            return Err(GatewayConfigError::BackendId(bad.id.clone()));
        }
        Ok(Gateway { config: Arc::new(config), backends: Arc::new(backends), ports, scan_memo: Arc::default() })
    }

    /// Another instance sharing this one's backends and ports (as a second process would, through real
    /// stores), with its own name and its own scan memo.
    pub fn sibling(&self, instance: &str) -> Gateway {
        let mut config = self.config.as_ref().clone();
        config.instance = instance.to_string();
        Gateway { config: Arc::new(config), backends: self.backends.clone(), ports: self.ports.clone(), scan_memo: Arc::default() }
    }

    pub fn backends(&self) -> &[BackendHandle] {
        &self.backends
    }

    fn info(&self) -> &ServerInfo {
        &self.config.server_info
    }

    /// Lists every backend and judges every descriptor against the current pins.
    pub async fn catalog(&self) -> Catalog {
        let pins = self.ports.pins.pins();
        let mut catalog = Catalog::default();
        for backend in self.backends.iter() {
            match backend.port.list_tools().await {
                Ok(listing) => catalog.entries.extend(evaluate_listing(&backend.id, &backend.endpoint, &listing, &pins, &self.scan_memo)),
                Err(error) => {
                    catalog.unreachable.insert(backend.id.clone(), error);
                }
            }
        }
        // Stable: duplicates of one name keep the backend's order; nothing else depends on listing order.
        catalog.entries.sort_by(|a, b| a.name.cmp(&b.name));
        catalog
    }

    /// Handles one raw message exactly as a transport does ([`handle_message`]). A `tools/call` the shared
    /// pipeline refuses before the gateway runs is audited through [`Service::refused`].
    pub async fn handle(&self, principal: &str, raw: &[u8], headers: Option<&RoutingHeaders>) -> Reply {
        handle_message(self, principal, raw, headers).await
    }

    /// The audit record of a `tools/call` refused by the shared pipeline (bad `_meta`, header/body mismatch,
    /// unsupported version): nothing was resolved and nothing ran.
    async fn audit_pipeline_refusal(&self, principal: &str, id: &RequestId, method: &str, params: Option<&Value>, error: &RpcError) {
        if method != "tools/call" {
            return;
        }
        let code = error.code;
        let reason = reason_of(error);
        let stage = match code {
            HEADER_MISMATCH => Stage::RoutingHeaders,
            UNSUPPORTED_PROTOCOL_VERSION => Stage::Version,
            _ => Stage::Request,
        };
        let now_ms = self.ports.clock.now_ms();
        let tool = params.and_then(|p| p.get("name")).and_then(Value::as_str).map(recorded_name);
        let record = AuditRecord {
            instance: self.config.instance.clone(),
            at_ms: now_ms,
            latency_ms: 0,
            request_id: id.to_json(),
            principal: principal.to_string(),
            tool,
            backend: None,
            backend_tool: None,
            descriptor_digest: None,
            policy_version: self.config.policy.version.clone(),
            target: None,
            arguments_digest: None,
            arguments: None,
            stage,
            decision: Decision::Refused,
            reason: Some(reason.clone()),
            approved_by: None,
            execution_began: false,
            redriven: false,
            outcome: json!({ "error": code, "reason": reason }),
        };
        self.append_audit(record).await;
    }

    async fn append_audit(&self, record: AuditRecord) {
        // The call has already been decided (and maybe executed); failing it now would invite a retry of
        // something that ran. So a sink failure is reported loudly and the answer stands.
        if let Err(error) = self.ports.audit.append(&record).await {
            tracing::error!(instance = %self.config.instance, %error, "audit record could not be appended");
        }
    }

    fn discover(&self) -> Value {
        complete_cacheable(
            json!({
                "supportedVersions": [PROTOCOL_VERSION],
                "capabilities": { "tools": {} },
                "instructions": "A gateway in front of several servers. Every tool is named backend.tool; only reviewed tools are listed, and consequential tools ask you to confirm each call.",
            }),
            GATEWAY_DISCOVER_TTL_MS,
            CacheScope::Public,
            self.info(),
        )
    }

    /// Approved tools the principal is granted, sorted by qualified name. It depends on the principal, so it
    /// is `private`: a shared cache must never hand one principal's list to another.
    async fn tools_list(&self, principal: &str) -> Value {
        let catalog = self.catalog().await;
        let tools: Vec<Value> = catalog
            .entries
            .iter()
            .filter(|entry| entry.status.is_approved() && self.config.policy.grant(principal, &entry.name).is_some())
            .map(CatalogEntry::public_descriptor)
            .collect();
        complete_cacheable(json!({ "tools": tools }), GATEWAY_TOOLS_TTL_MS, CacheScope::Private, self.info())
    }

    async fn tools_call(&self, context: RequestContext<'_>, params: &Value) -> Result<Value, RpcError> {
        let started_ms = self.ports.clock.now_ms();
        let mut draft = Draft::default();
        let result = self.call_stages(context, params, &mut draft).await;
        let record = AuditRecord {
            instance: self.config.instance.clone(),
            at_ms: started_ms,
            latency_ms: self.ports.clock.now_ms().saturating_sub(started_ms),
            request_id: context.id.to_json(),
            principal: context.principal.to_string(),
            tool: draft.tool,
            backend: draft.backend,
            backend_tool: draft.backend_tool,
            descriptor_digest: draft.descriptor_digest,
            policy_version: self.config.policy.version.clone(),
            target: draft.target,
            arguments_digest: draft.arguments_digest,
            arguments: draft.arguments,
            stage: draft.stage,
            decision: if result.is_err() && !draft.execution_began { Decision::Refused } else { draft.decision },
            reason: result.as_ref().err().map(reason_of),
            approved_by: draft.approved_by,
            execution_began: draft.execution_began,
            redriven: draft.redriven,
            outcome: outcome_of(&result),
        };
        self.append_audit(record).await;
        result
    }

    /// Stages 5–10 (1–4 ran in the shared pipeline). `draft.stage` always names the stage being run, so a
    /// refusal is recorded where it happened.
    async fn call_stages(&self, context: RequestContext<'_>, params: &Value, draft: &mut Draft) -> Result<Value, RpcError> {
        let name = match params.get("name") {
            Some(Value::String(name)) => name.as_str(),
            _ => return Err(invalid_arguments("tools/call needs params.name, a string naming a tool as backend.tool".into())),
        };
        draft.tool = Some(recorded_name(name));
        static NO_ARGUMENTS: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let arguments = match params.get("arguments") {
            None => NO_ARGUMENTS.get_or_init(Map::new),
            Some(Value::Object(arguments)) => arguments,
            Some(_) => return Err(invalid_arguments("arguments must be an object".into())),
        };
        let refusals::RoundTwoFields { request_state, input_responses } = refusals::round_two_fields(params)?;

        draft.stage = Stage::Route;
        let unknown = || {
            RpcError::invalid_params(
                Reason::UnknownTool,
                format!("Unknown tool: {} (tools are named backend.tool; see tools/list)", echo(name)),
            )
        };
        let (backend_id, backend_tool) = split_qualified(name).ok_or_else(unknown)?;
        let backend = self.backends.iter().find(|backend| backend.id == backend_id).ok_or_else(unknown)?;
        draft.backend = Some(backend.id.clone());
        draft.backend_tool = Some(backend_tool.to_string());
        let rule = self.config.policy.rule(name);
        if !rule.confirm && (request_state.is_some() || input_responses.is_some()) {
            return Err(RpcError::invalid_params(
                Reason::StateMismatch,
                format!("{} never asks for input: send the call without requestState and inputResponses", echo(name)),
            ));
        }

        draft.stage = Stage::Capability;
        if rule.confirm && request_state.is_none() {
            require_form_elicitation(context.meta)?;
        }

        draft.stage = Stage::Authorization;
        let Some(grant) = self.config.policy.grant(context.principal, name) else {
            return Err(RpcError::invalid_params(Reason::ToolUnauthorized, format!("you are not granted {}", echo(name)))
                .with_detail("tool", json!(echo(name))));
        };
        let pins = self.ports.pins.pins();
        let Some(pin) = pins.get(name) else {
            draft.stage = Stage::Catalog;
            let refusal = ToolStatus::Quarantined(Quarantine::Unreviewed).refusal(name, "");
            return Err(refusal.expect("a quarantine always refuses"));
        };
        let schema = pin.descriptor.get("inputSchema").unwrap_or(&Value::Null);
        // The canonical bytes of the arguments, computed once: size cap, state digest and audit digest.
        let argument_bytes = serde_json::to_vec(arguments).expect("a JSON object serializes");
        if argument_bytes.len() > ARGUMENTS_BYTES_MAX {
            return Err(invalid_arguments(format!("{name}: arguments larger than {ARGUMENTS_BYTES_MAX} bytes are refused")));
        }
        check_arguments(schema, arguments).map_err(|problem| invalid_arguments(format!("{name}: {problem}")))?;
        let audit_key = &self.config.audit_key;
        draft.arguments_digest = Some(keyed_digest_bytes(audit_key, &argument_bytes));
        draft.arguments = Some(redact(schema, arguments, |value| keyed_digest(audit_key, value)));
        draft.target = Some(name.to_string());
        if let Some(argument) = &rule.destination_argument {
            let Some(destination) = arguments.get(argument).and_then(Value::as_str) else {
                return Err(invalid_arguments(format!("{name} needs the {argument} argument, a string")));
            };
            draft.target = Some(format!("{name} -> {destination}"));
            if !grant.destinations.contains(destination) {
                return Err(RpcError::invalid_params(
                    Reason::DestinationUnauthorized,
                    format!("you are not granted the destination {destination:?} for {name}"),
                ));
            }
        }

        draft.stage = Stage::Catalog;
        let entry = self.current_entry(backend, backend_tool, &pins).await?;
        draft.descriptor_digest = Some(entry.digest.clone());
        if let Some(refusal) = entry.status.refusal(name, &entry.digest) {
            return Err(refusal);
        }

        let arguments_digest = self.config.key_ring.signing_arguments_digest(&argument_bytes);
        let call = Call { context, name, backend, backend_tool, arguments, argument_bytes: &argument_bytes, arguments_digest };
        if !rule.confirm {
            self.spend_quota(&call, draft).await?;
            return self.execute(&call, None, draft).await;
        }
        match (request_state, input_responses) {
            (None, None) => {
                self.spend_quota(&call, draft).await?;
                draft.stage = Stage::Confirmation;
                Ok(self.ask(&call, draft))
            }
            (Some(state), Some(responses)) => {
                draft.stage = Stage::Confirmation;
                self.answer(&call, state, responses, draft).await
            }
            (Some(_), None) => {
                draft.stage = Stage::Confirmation;
                Err(refusals::state_without_responses("the form"))
            }
            (None, Some(_)) => {
                draft.stage = Stage::Confirmation;
                Err(refusals::responses_without_state())
            }
        }
    }

    /// Stage 9: counts one call of the quota on (principal, tool, window), or refuses with nothing counted.
    async fn spend_quota(&self, call: &Call<'_>, draft: &mut Draft) -> Result<(), RpcError> {
        draft.stage = Stage::RateLimit;
        let limit = self.config.policy.rate_limit(call.name);
        let now_ms = self.ports.clock.now_ms();
        match self.ports.rate_limiter.acquire(call.context.principal, call.name, limit, now_ms).await.map_err(store_failed)? {
            RateDecision::Allowed { .. } => Ok(()),
            RateDecision::Limited { retry_after_ms } => Err(RpcError::invalid_params(
                Reason::RateLimited,
                format!(
                    "{}: your quota of {} call(s) per {} ms is spent; retry in {retry_after_ms} ms. Nothing ran.",
                    call.name, limit.calls, limit.window_ms
                ),
            )
            .with_detail("retryAfterMs", json!(retry_after_ms))
            .with_status(429)),
        }
    }

    /// The backend's current descriptor for one tool, judged against the pins now.
    async fn current_entry(&self, backend: &BackendHandle, tool: &str, pins: &PinFile) -> Result<Judgement, RpcError> {
        let listing =
            backend.port.list_tools().await.map_err(|error| {
                backend_unavailable(&backend.id, &error, "its descriptor could not be re-checked, so nothing ran", false)
            })?;
        let named = |d: &Value| d.get("name").and_then(Value::as_str) == Some(tool);
        let Some(index) = listing.tools.iter().position(named) else {
            return Err(RpcError::invalid_params(
                Reason::UnknownTool,
                format!("Unknown tool: {}.{tool} (the backend no longer offers it)", backend.id),
            ));
        };
        let duplicated = listing.tools.iter().skip(index + 1).any(named);
        Ok(judge(&backend.id, &backend.endpoint, &listing, &listing.tools[index], index, duplicated, pins, &self.scan_memo))
    }

    /// Round 1 of a confirmed call: the form and a sealed state.
    fn ask(&self, call: &Call<'_>, draft: &mut Draft) -> Value {
        let now_ms = self.ports.clock.now_ms();
        let claims = StateClaims {
            principal: call.context.principal.to_string(),
            method: "tools/call".into(),
            tool: call.name.to_string(),
            arguments_digest: call.arguments_digest.clone(),
            candidates: Vec::new(),
            revisions: Vec::new(),
            phase: INPUT_CONFIRM.into(),
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(self.config.state_ttl_ms),
            nonce: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.ports.nonces.nonce()),
        };
        let state = self.config.key_ring.seal(&claims);
        draft.decision = Decision::Asked;
        input_required(json!({ INPUT_CONFIRM: confirm_form(call) }), &state, self.info())
    }

    /// Round 2: verify the state, validate the answer, then consume and execute.
    async fn answer(&self, call: &Call<'_>, state: &str, responses: &Map<String, Value>, draft: &mut Draft) -> Result<Value, RpcError> {
        let claims = self.open_state(call, state)?;
        let Some(answer) = responses.get(INPUT_CONFIRM) else {
            // The answer we need is missing: ask again with the same state (SPEC-MRTR-17). Nothing consumed.
            draft.stage = Stage::Capability;
            require_form_elicitation(call.context.meta)?;
            draft.stage = Stage::Confirmation;
            draft.decision = Decision::Asked;
            return Ok(input_required(json!({ INPUT_CONFIRM: confirm_form(call) }), state, self.info()));
        };
        let (action, answer) = refusals::elicitation_answer(INPUT_CONFIRM, answer)?;
        match action {
            Action::Cancel => {
                draft.decision = Decision::Cancelled;
                Ok(self.outcome(
                    json!({ "executed": false, "outcome": "cancelled" }),
                    "This answer ran nothing: the confirmation was dismissed, which uses nothing up. It can be answered until it \
                     expires; if it was already used, that answer reports what it did.",
                ))
            }
            Action::Decline => {
                let claim = NonceClaim {
                    nonce: claims.nonce.clone(),
                    principal: claims.principal.clone(),
                    expires_at_ms: claims.expires_at_ms,
                    record: ClaimRecord::Declined { tool: Some(call.name.to_string()) },
                };
                match self.ports.replay.claim(claim).await.map_err(store_failed)? {
                    ClaimOutcome::Claimed => {
                        draft.decision = Decision::Declined;
                        Ok(self.outcome(
                            json!({ "executed": false, "outcome": "declined" }),
                            "Nothing ran: the user declined. This confirmation is now used up.",
                        ))
                    }
                    ClaimOutcome::AlreadyClaimed { record } => Err(refusals::consumed(call.name, record)),
                    ClaimOutcome::Full => Err(refusals::replay_full()),
                    ClaimOutcome::Expired => Err(refusals::replay_window_closed(call.name)),
                }
            }
            Action::Accept => {
                validate_confirmation(answer.get("content"))?;
                // The digest the state carries (under the key that sealed it, which may no longer sign).
                let confirmed = ClaimRecord::Confirmed { tool: call.name.to_string(), arguments_digest: claims.arguments_digest.clone() };
                let claim = NonceClaim {
                    nonce: claims.nonce.clone(),
                    principal: claims.principal.clone(),
                    expires_at_ms: claims.expires_at_ms,
                    record: confirmed.clone(),
                };
                match self.ports.replay.claim(claim).await.map_err(store_failed)? {
                    ClaimOutcome::Claimed => {}
                    // Claimed for this very call by an earlier attempt that may have crashed before (or while)
                    // calling the backend: re-drive it. The nonce is the idempotency key, so it runs once.
                    ClaimOutcome::AlreadyClaimed { record } if record == confirmed => draft.redriven = true,
                    ClaimOutcome::AlreadyClaimed { record } => return Err(refusals::consumed(call.name, record)),
                    ClaimOutcome::Full => return Err(refusals::replay_full()),
                    ClaimOutcome::Expired => return Err(refusals::replay_window_closed(call.name)),
                }
                draft.approved_by = Some(call.context.principal.to_string());
                self.execute(call, Some(&claims.nonce), draft).await
            }
        }
    }

    fn open_state(&self, call: &Call<'_>, state: &str) -> Result<StateClaims, RpcError> {
        let expected = refusals::Continuation {
            issuer: "gateway",
            principal: call.context.principal,
            tool: call.name,
            phase: INPUT_CONFIRM,
            arguments: call.argument_bytes,
            restart_hint: "to be asked again",
        };
        refusals::open_continuation(&self.config.key_ring, state, self.ports.clock.now_ms(), &expected)
    }

    async fn execute(&self, call: &Call<'_>, idempotency_key: Option<&str>, draft: &mut Draft) -> Result<Value, RpcError> {
        draft.stage = Stage::Execution;
        draft.decision = Decision::Allowed;
        draft.execution_began = true;
        let retry_safe = idempotency_key.is_some();
        let advice = if retry_safe {
            "retry with the same requestState and answer: the call runs at most once"
        } else {
            "it may or may not have run"
        };
        let forwarded =
            BackendCall { principal: call.context.principal, tool: call.backend_tool, arguments: call.arguments, idempotency_key };
        match call.backend.port.call_tool(forwarded).await {
            Ok(result) if result.get("resultType").and_then(Value::as_str) == Some("complete") => Ok(self.rebrand(result)),
            Ok(_) => Err(backend_unavailable(
                &call.backend.id,
                &BackendError::Unreachable("it answered with something other than a complete tool result".into()),
                advice,
                retry_safe,
            )),
            Err(BackendError::Refused(error)) => Err(error),
            Err(error) => Err(backend_unavailable(&call.backend.id, &error, advice, retry_safe)),
        }
    }

    /// The backend's result under the gateway's identity: clients talk to the gateway, and a backend's
    /// self-reported `_meta` is not passed on.
    fn rebrand(&self, mut result: Value) -> Value {
        if let Value::Object(map) = &mut result {
            map.insert("_meta".into(), json!({ KEY_SERVER_INFO: self.info().to_json() }));
        }
        result
    }

    fn outcome(&self, structured: Value, text: &str) -> Value {
        complete(json!({ "content": [{ "type": "text", "text": text }], "structuredContent": structured, "isError": false }), self.info())
    }
}

#[async_trait]
impl Service for Gateway {
    fn has_method(&self, method: &str) -> bool {
        METHODS.contains(&method)
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            "server/discover" => Ok(self.discover()),
            "tools/list" => Ok(self.tools_list(context.principal).await),
            "tools/call" => self.tools_call(context, params).await,
            other => Err(RpcError::method_not_found(other)),
        }
    }

    async fn refused(&self, principal: &str, id: &RequestId, method: &str, params: Option<&Value>, error: &RpcError) {
        self.audit_pipeline_refusal(principal, id, method, params, error).await;
    }
}

/// What the audit record will say, filled in as the stages run.
struct Draft {
    tool: Option<String>,
    backend: Option<String>,
    backend_tool: Option<String>,
    descriptor_digest: Option<String>,
    target: Option<String>,
    arguments_digest: Option<String>,
    arguments: Option<Map<String, Value>>,
    stage: Stage,
    decision: Decision,
    approved_by: Option<String>,
    execution_began: bool,
    redriven: bool,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            tool: None,
            backend: None,
            backend_tool: None,
            descriptor_digest: None,
            target: None,
            arguments_digest: None,
            arguments: None,
            stage: Stage::Request,
            decision: Decision::Refused,
            approved_by: None,
            execution_began: false,
            redriven: false,
        }
    }
}

/// One authorized call on its way to the backend.
struct Call<'a> {
    context: RequestContext<'a>,
    /// The qualified name.
    name: &'a str,
    backend: &'a BackendHandle,
    backend_tool: &'a str,
    arguments: &'a Map<String, Value>,
    /// The canonical arguments (sorted keys), as the state's digest covers them.
    argument_bytes: &'a [u8],
    /// Their digest under the signing key, as a state sealed now carries it.
    arguments_digest: String,
}

/// The confirmation form. It names the tool by its qualified name and shows the exact arguments — never the
/// backend's own title or description, which are the backend's words, not the gateway's.
fn confirm_form(call: &Call<'_>) -> Value {
    let lines: Vec<String> = call.arguments.iter().map(|(name, value)| format!("  {name}: {}", canonical_string(value))).collect();
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": format!(
                "Allow {} (backend {}) to run once with these arguments?\n{}\nConfirm to run it; decline to refuse.",
                call.name,
                call.backend.id,
                lines.join("\n")
            ),
            "requestedSchema": {
                "type": "object",
                "properties": { "confirm": { "type": "boolean", "title": format!("Yes, run {} once with these arguments", call.name) } },
                "required": ["confirm"],
            },
        },
    })
}

/// Server-side validation of the accepted form: exactly `{confirm: true}`.
fn validate_confirmation(content: Option<&Value>) -> Result<(), RpcError> {
    let invalid = |message: &str| RpcError::invalid_params(Reason::ResponseInvalid, message.to_string());
    let Some(Value::Object(content)) = content else {
        return Err(invalid("accept without content is not consent: content {confirm} is required"));
    };
    if let Some(unknown) = content.keys().find(|key| *key != "confirm") {
        return Err(invalid(&format!("the form has no field {unknown:?}")));
    }
    match content.get("confirm") {
        Some(Value::Bool(true)) => Ok(()),
        Some(Value::Bool(false)) => Err(RpcError::invalid_params(
            Reason::NotConfirmed,
            "confirm was false: nothing ran and nothing was consumed; answer decline to refuse",
        )),
        _ => Err(invalid("content.confirm is required and must be a boolean")),
    }
}

fn invalid_arguments(message: String) -> RpcError {
    RpcError::invalid_params(Reason::ArgumentsInvalid, message)
}

fn store_failed(error: StoreError) -> RpcError {
    refusals::store_failed(error, "nothing ran")
}

/// `retry_safe`: the call carried an idempotency key, so retrying with the same state runs it at most once.
fn backend_unavailable(backend: &str, error: &BackendError, advice: &str, retry_safe: bool) -> RpcError {
    RpcError::internal(Reason::BackendUnavailable, format!("backend {backend}: {error}; {advice}"))
        .with_detail("backend", json!(backend))
        .with_detail("retrySafe", json!(retry_safe))
}
