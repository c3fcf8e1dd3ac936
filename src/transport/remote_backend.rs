//! The gateway's backends in other processes (`[remote.ID]` of a gateway file): a [`Backend`] over streamable
//! HTTP (one POST per request, through live mode's bounded client) or over a stdio server the gateway starts
//! (one per gateway process, killed with it; requests one at a time, each answer awaited within a deadline).
//!
//! Only the carrying lives here: what the gateway asks (`tools/list`, `tools/call` with the idempotency key
//! in `_meta`) is built by [`crate::servers::gateway::ports`]'s rules, and what comes back is judged by the
//! gateway like any backend's answer.

use crate::config::gateway::RemoteBackendConfig;
use crate::live::http_client::HttpClient;
use crate::servers::gateway::ports::{listing_from_result, Backend, BackendCall, BackendError, ToolListing, IDEMPOTENCY_KEY_META};
use crate::wire::errors::RpcError;
use crate::wire::headers::RoutingHeaders;
use crate::wire::meta::{KEY_CLIENT_CAPABILITIES, KEY_PROTOCOL_VERSION};
use crate::wire::PROTOCOL_VERSION;
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// How long one backend request may take, end to end.
pub const REMOTE_TIMEOUT_MS: u64 = 10_000;
/// Most bytes of one backend answer the gateway reads.
pub const REMOTE_ANSWER_BYTES_MAX: usize = 4 * 1024 * 1024;

/// A backend reached over HTTP or stdio.
pub struct RemoteBackend {
    id: String,
    carrier: Carrier,
    next_id: AtomicU64,
}

enum Carrier {
    Http { url: String, client: HttpClient },
    Stdio { command: Vec<String>, process: Mutex<Option<Box<StdioProcess>>> },
}

struct StdioProcess {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl RemoteBackend {
    pub fn new(id: &str, config: &RemoteBackendConfig) -> RemoteBackend {
        let carrier = match (&config.url, &config.command) {
            (Some(url), _) => Carrier::Http {
                url: url.clone(),
                client: HttpClient::new(Duration::from_millis(REMOTE_TIMEOUT_MS), REMOTE_ANSWER_BYTES_MAX),
            },
            (None, command) => Carrier::Stdio { command: command.clone().unwrap_or_default(), process: Mutex::new(None) },
        };
        RemoteBackend { id: id.to_string(), carrier, next_id: AtomicU64::new(1) }
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, BackendError> {
        let id = format!("gateway-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let answer = match &self.carrier {
            Carrier::Http { url, client } => {
                let headers = RoutingHeaders::for_message(&message);
                let mut pairs = vec![("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
                pairs.extend(headers.pairs());
                let body = serde_json::to_vec(&message).expect("a JSON value serializes");
                let answer = client.post(url, &pairs, body).await.map_err(|e| BackendError::Unreachable(e.message))?;
                let text = String::from_utf8_lossy(&answer.body).into_owned();
                let streamed = answer.content_type.as_deref().is_some_and(|v| v.starts_with("text/event-stream"));
                let json = if streamed { last_sse_data(&text) } else { text };
                serde_json::from_str::<Value>(&json).map_err(|e| {
                    BackendError::Unreachable(format!(
                        "backend {} answered HTTP {} with a body that is not JSON ({e})",
                        self.id, answer.status
                    ))
                })?
            }
            Carrier::Stdio { command, process } => {
                let mut guard = process.lock().await;
                let deadline = Duration::from_millis(REMOTE_TIMEOUT_MS);
                let exchanged = tokio::time::timeout(deadline, exchange_stdio(command, &mut guard, &message, &id)).await;
                match exchanged {
                    Ok(Ok(answer)) => answer,
                    Ok(Err(error)) => {
                        // A broken pipe or a garbled line: start it afresh next time.
                        *guard = None;
                        return Err(BackendError::Unreachable(format!("backend {}: {error}", self.id)));
                    }
                    Err(_) => {
                        *guard = None;
                        return Err(BackendError::Unreachable(format!("backend {} did not answer within {REMOTE_TIMEOUT_MS} ms", self.id)));
                    }
                }
            }
        };
        if let Some(result) = answer.get("result") {
            return Ok(result.clone());
        }
        let error = answer.get("error");
        match error.and_then(|e| e.get("code")).and_then(Value::as_i64) {
            Some(code) => {
                let message = error.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("");
                let mut refused = RpcError::new(code, message);
                refused.data = error.and_then(|e| e.get("data")).cloned();
                Err(BackendError::Refused(refused))
            }
            None => Err(BackendError::Unreachable(format!("backend {} answered neither a result nor an error", self.id))),
        }
    }
}

/// Writes `message` to the stdio backend (starting it first if needed) and reads lines until the answer to `id`.
async fn exchange_stdio(command: &[String], slot: &mut Option<Box<StdioProcess>>, message: &Value, id: &str) -> Result<Value, String> {
    if slot.is_none() {
        let mut child = tokio::process::Command::new(&command[0])
            .args(&command[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command[0]))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        *slot = Some(Box::new(StdioProcess { child, stdin, lines: BufReader::new(stdout).lines() }));
    }
    let process = slot.as_mut().expect("started above");
    let mut line = serde_json::to_vec(message).expect("a JSON value serializes");
    line.push(b'\n');
    process.stdin.write_all(&line).await.map_err(|e| format!("writing to it failed: {e}"))?;
    process.stdin.flush().await.map_err(|e| format!("writing to it failed: {e}"))?;
    loop {
        let Some(line) = process.lines.next_line().await.map_err(|e| format!("reading from it failed: {e}"))? else {
            let status = process.child.try_wait().ok().flatten();
            return Err(format!("it closed its stdout (exit: {status:?})"));
        };
        if line.len() > REMOTE_ANSWER_BYTES_MAX {
            return Err(format!("an answer longer than {REMOTE_ANSWER_BYTES_MAX} bytes"));
        }
        let Ok(value) = serde_json::from_str::<Value>(&line) else { return Err("a line that is not JSON on its stdout".into()) };
        if value.get("id").and_then(Value::as_str) == Some(id) {
            return Ok(value);
        }
        // A notification or a stray answer: not ours, skipped.
    }
}

fn last_sse_data(text: &str) -> String {
    text.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim).rfind(|d| !d.is_empty()).unwrap_or("").to_string()
}

fn base_meta() -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert(KEY_PROTOCOL_VERSION.into(), Value::String(PROTOCOL_VERSION.into()));
    meta.insert(KEY_CLIENT_CAPABILITIES.into(), Value::Object(Map::new()));
    meta
}

#[async_trait]
impl Backend for RemoteBackend {
    async fn list_tools(&self) -> Result<ToolListing, BackendError> {
        let result = self.request("tools/list", json!({ "_meta": base_meta() })).await?;
        listing_from_result(result)
    }

    async fn call_tool(&self, call: BackendCall<'_>) -> Result<Value, BackendError> {
        let mut meta = base_meta();
        if let Some(key) = call.idempotency_key {
            meta.insert(IDEMPOTENCY_KEY_META.into(), Value::String(key.into()));
        }
        self.request("tools/call", json!({ "_meta": meta, "name": call.tool, "arguments": call.arguments })).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_data_line_of_a_stream_is_the_answer() {
        assert_eq!(last_sse_data("event: message\ndata: {\"a\":1}\n\ndata: {\"b\":2}\n\n"), "{\"b\":2}");
        assert_eq!(last_sse_data(""), "");
    }
}
