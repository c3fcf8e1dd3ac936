//! Bring your own gateway (`mcpsim gateway-lab run FILE`): mcpsim serves malicious backends ([`backend`])
//! behind N replicas of the gateway a gateway target file ([`file`](mod@file)) describes, plays hostile
//! clients in front of them, and judges the seed's defences from both edges — what each client got back and
//! what each backend recorded receiving.
//!
//! One run: the lab's backends start (HTTP ones as processes on loopback; stdio ones are started by the
//! gateway, from the command the configuration template is given), the target's files are written and its
//! setup run, its replicas start, and the battery runs in a fixed order, its free choices (which replica is
//! "A" and which "B" in each cross-replica step, the query tokens) drawn from the seed and logged:
//!
//! | Defence | What the lab does | What must hold (judged from the backends' records) |
//! |---|---|---|
//! | `poisoning` | calls each `tricks` tool (pinned, but each carries one scanner category) | none reaches `tricks` |
//! | `identity` | calls `mirror.search` (display name "Notes", never reviewed) | none reaches `mirror` |
//! | `shadowing` | calls `notes.search`, `issues.search`, and bare `search` | each qualified call reaches its own backend once; the bare one none |
//! | `header_body` | `tools/call` whose `Mcp-Name`/`Mcp-Method` disagree with the body, then the quota's calls | none reaches a backend, and none spent a quota token |
//! | `rate_limits` | the quota's calls spread over the replicas, then one more | exactly the quota reaches the backend |
//! | `capabilities` | a principal not granted the destructive tool declares every capability; a granted one declares none | neither call reaches the backend |
//! | `confirmation` | round 1 at replica A, the answer at B; the same answer again; a state answered with other arguments; a decline, then an accept | the export runs once, with round 1's arguments, never after a decline |
//! | `rug_pull` | switches `notes` to its second listing (same description, new `inputSchema`; `export` renamed) and calls both | neither reaches `notes` |
//!
//! Mediation: every `tools/call` a backend recorded must be explained by a lab request for that very backend
//! tool, with its arguments, that the lab's model allows (granted, reviewed descriptor in force). A record
//! that no request explains, or that a forbidden request explains, is a finding named with the defence and
//! the clause, with the exchanges of that request (bounded, escaped, `requestState` shortened; tokens are
//! never shown). A defence the file does not claim is reported as "not claimed", its violations as
//! observations.

pub mod backend;
pub mod file;

use self::backend::{BackendSpec, Carrier, Record, EXPORT, EXPORT_RENAMED, INJECTED_INSTRUCTION, POISONED};
use self::file::{fill, GatewayTargetFile, DEFENCES, LEGACY_CONFIRMATION, LEGACY_NOT_APPLICABLE, LEGACY_PROTOCOL};
use super::process::Process;
use crate::live::http_client::HttpClient;
use crate::policy::pinning::{descriptor_digest, Approval, PinFile, PublisherEvidence};
use crate::wire::headers::RoutingHeaders;
use crate::wire::meta::{KEY_CLIENT_CAPABILITIES, KEY_PROTOCOL_VERSION};
use crate::wire::PROTOCOL_VERSION;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

/// Longest one lab request may take.
pub const REQUEST_TIMEOUT_MS: u64 = 15_000;
/// How much of one message a finding shows.
pub const SHOWN_CHARS_MAX: usize = 600;
/// Longest a setup command may run.
pub const SETUP_TIMEOUT_MS: u64 = 60_000;
/// Longest the lab waits for every replica to stop listing a revoked backend's tool.
pub const REVOCATION_WAIT_MS: u64 = 5_000;
/// Most bytes of one 2025-11-25 answer (an event stream with the requests inside the call) the lab reads.
const LEGACY_ANSWER_BYTES_MAX: usize = 1 << 20;
/// Most server→client requests inside one 2025-11-25 call the lab answers (as `eras` bounds its rounds).
const LEGACY_ROUNDS_MAX: usize = crate::eras::LEGACY_ROUNDS_MAX;
/// How many of its last stderr lines a process that failed to start shows.
const STDERR_TAIL_LINES: usize = 6;
/// One step of waiting for a process to listen or end.
const WAIT_STEP_MS: u64 = 25;

/// What a run needs from its caller.
pub struct LabOptions {
    pub seed: u64,
    /// How to start mcpsim itself (the backends are `mcpsim gateway-lab backend`).
    pub mcpsim: String,
    /// The run's contained work directory.
    pub work_dir: PathBuf,
}

/// A claimed defence that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabFinding {
    pub defence: &'static str,
    pub clause: &'static str,
    /// The property broken: `mediation`, `at_most_once` or `consent`.
    pub property: &'static str,
    pub message: String,
    /// The messages of the request that explains it (bounded, escaped).
    pub exchanges: Vec<String>,
}

/// One defence's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Held,
    Broken,
    NotClaimed,
}

#[derive(Debug, Clone)]
pub struct LabReport {
    pub name: String,
    pub seed: u64,
    /// The lab's own decisions, in order (seeded choices, phase switches, processes started).
    pub decisions: Vec<String>,
    pub verdicts: Vec<(&'static str, Verdict)>,
    /// Findings under claimed defences.
    pub findings: Vec<LabFinding>,
    /// Violations of defences the gateway does not claim, and what the lab saw beside the checks.
    pub observations: Vec<String>,
    /// What kept a check from being judged (an allowed call refused, a confirmation never asked).
    pub problems: Vec<String>,
    pub processes_started: usize,
    pub records: usize,
}

impl LabReport {
    /// The report as text (within 100 columns where the lab writes it; messages are escaped).
    pub fn render(&self) -> String {
        let mut out = format!("gateway lab: {} (seed {})\n", super::shown(&self.name), self.seed);
        for line in &self.decisions {
            out.push_str(&format!("  decided: {line}\n"));
        }
        out.push_str(&format!("  {} processes started; {} backend records\n", self.processes_started, self.records));
        for (defence, verdict) in &self.verdicts {
            let said = match verdict {
                Verdict::Held => "held",
                Verdict::Broken => "BROKEN",
                Verdict::NotClaimed => "not claimed",
            };
            out.push_str(&format!("  {defence:<13} {said}\n"));
        }
        for finding in &self.findings {
            out.push_str(&format!(
                "FINDING {} ({}; {}): {}\n",
                finding.defence,
                finding.property,
                finding.clause,
                super::shown(&finding.message)
            ));
            for exchange in &finding.exchanges {
                out.push_str(&format!("    {exchange}\n"));
            }
        }
        for observation in &self.observations {
            out.push_str(&format!("  observed: {}\n", super::shown(observation)));
        }
        for problem in &self.problems {
            out.push_str(&format!("UNJUDGED: {}\n", super::shown(problem)));
        }
        let verdict = if !self.findings.is_empty() {
            format!("{} finding(s)", self.findings.len())
        } else if !self.problems.is_empty() {
            "unjudged".to_string()
        } else {
            "every claimed defence held".to_string()
        };
        out.push_str(&format!("result: {verdict}\n"));
        out
    }
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{0}")]
    Setup(String),
}

fn setup(message: impl Into<String>) -> LabError {
    LabError::Setup(message.into())
}

/// What the lab expects of one intent (a query token): how often it may reach its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Exactly once (an allowed call); absence is a problem, or, with `missing`, a finding of that defence.
    Once { missing: Option<(&'static str, &'static str)> },
    /// Never.
    Never,
}

/// One thing a lab client meant: a backend tool with arguments, carried by one or more requests.
struct Intent {
    token: String,
    backend: String,
    tool: String,
    arguments: Value,
    expect: Expect,
    defence: &'static str,
    clause: &'static str,
    exchanges: Vec<String>,
}

/// The lab: backends, replicas, the client, and what was sent.
struct Lab<'a> {
    file: &'a GatewayTargetFile,
    options: &'a LabOptions,
    specs: Vec<BackendSpec>,
    lab_dir: PathBuf,
    urls: Vec<String>,
    http: HttpClient,
    intents: Vec<Intent>,
    decisions: Vec<String>,
    observations: Vec<String>,
    problems: Vec<String>,
    rng: u64,
    next_id: u64,
    processes: Vec<Process>,
    started: usize,
    /// Every placeholder's value (the replicas' own added per replica).
    values: BTreeMap<String, String>,
    /// Each backend's endpoint, as the review records its publisher.
    endpoints: BTreeMap<String, String>,
    /// Each replica's process id and port, by replica.
    replicas: Vec<(u32, u16)>,
    /// 2025-11-25 only: the session of each (replica, principal, declared capabilities), opened by
    /// `initialize`; `None` when the gateway minted no `Mcp-Session-Id` (a stateless one).
    sessions: BTreeMap<(usize, String, String), Option<String>>,
    /// 2025-11-25 only: the intents asked inside their call, and how the lab answered.
    asked_inside: BTreeMap<usize, &'static str>,
}

/// Runs the battery against the gateway `file` describes.
pub async fn run_lab(file: &GatewayTargetFile, options: &LabOptions) -> Result<LabReport, LabError> {
    let lab_dir = options.work_dir.join("lab");
    std::fs::create_dir_all(&lab_dir).map_err(|e| setup(format!("cannot create {}: {e}", lab_dir.display())))?;
    let mut lab = Lab {
        file,
        options,
        specs: backend::battery(),
        lab_dir,
        urls: Vec::new(),
        http: HttpClient::new(Duration::from_millis(REQUEST_TIMEOUT_MS), 1 << 20),
        intents: Vec::new(),
        decisions: Vec::new(),
        observations: Vec::new(),
        problems: Vec::new(),
        rng: options.seed ^ 0x9e37_79b9_7f4a_7c15,
        next_id: 0,
        processes: Vec::new(),
        started: 0,
        values: BTreeMap::new(),
        endpoints: BTreeMap::new(),
        replicas: Vec::new(),
        sessions: BTreeMap::new(),
        asked_inside: BTreeMap::new(),
    };
    lab.decisions.push(format!("work directory {}", options.work_dir.display()));
    if file.is_legacy() {
        lab.decisions.push(format!(
            "clients speak MCP {LEGACY_PROTOCOL}: a session per replica, principal and declared capabilities, opened by initialize"
        ));
    }
    let values = lab.start_backends()?;
    lab.start_gateway(&values)?;
    lab.values = values;
    lab.battery().await;
    let records = lab.read_records();
    let report = lab.judge(&records);
    // Every process is killed here (and again by the run's containment at its end, counted there).
    for mut process in lab.processes.drain(..) {
        process.kill();
    }
    Ok(report)
}

impl Lab<'_> {
    fn draw(&mut self) -> u64 {
        // splitmix64: the lab's only source of choices, from the seed.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Two distinct replicas (A, B), drawn; one replica plays both when there is one.
    fn pair(&mut self, what: &str) -> (usize, usize) {
        let n = self.urls.len();
        let a = (self.draw() % n as u64) as usize;
        let b = if n == 1 { a } else { (a + 1 + (self.draw() % (n as u64 - 1)) as usize) % n };
        self.decisions.push(format!("{what}: replica A = {a}, B = {b}"));
        (a, b)
    }

    fn token(&self, label: &str) -> String {
        format!("lab-{}-{label}", self.options.seed)
    }

    fn spec(&self, id: &str) -> &BackendSpec {
        self.specs.iter().find(|s| s.id == id).expect("a battery backend")
    }

    fn start_process(&mut self, argv: Vec<String>, env: &[(String, String)], what: &str) -> Result<(), LabError> {
        let stderr = self.lab_dir.join(format!("{}.stderr", super::safe_name(&what.replace(' ', "-"))));
        let process = Process::start(&argv, env, stderr, false)
            .map_err(|e| setup(format!("cannot start {what} ({}): {e}", super::redact_argv(&argv))))?;
        self.decisions.push(format!("started {what} (pid {})", process.pid));
        self.processes.push(process);
        self.started += 1;
        Ok(())
    }

    /// The last lines of what `what` wrote to stderr (the work directory is removed when the run ends), bounded
    /// and escaped: for the error that says why the run could not start.
    fn stderr_tail(&self, what: &str) -> String {
        let path = self.lab_dir.join(format!("{}.stderr", super::safe_name(&what.replace(' ', "-"))));
        let text = std::fs::read(&path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        // One line (the caller's error is one line): each of the last lines escaped, joined by " | ".
        let tail = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].iter().map(|l| super::shown(l)).collect::<Vec<_>>().join(" | ");
        if tail.is_empty() {
            return "; it wrote nothing to stderr".into();
        }
        let count = tail.chars().count();
        let cut: String = tail.chars().skip(count.saturating_sub(SHOWN_CHARS_MAX)).collect();
        let more = if count > SHOWN_CHARS_MAX { "…" } else { "" };
        format!("; the end of its stderr: {more}{cut}")
    }

    fn wait_port(&mut self, port: u16, what: &str, timeout_ms: u64) -> Result<(), LabError> {
        // Counted sleeps, not the wall clock (the lab reads no clock): the bound is at least `timeout_ms`.
        let mut waited: u64 = 0;
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.processes.last_mut().and_then(Process::exited) {
                return Err(setup(format!("{what} exited before listening on port {port} ({status}){}", self.stderr_tail(what))));
            }
            if waited * WAIT_STEP_MS > timeout_ms {
                return Err(setup(format!("{what} did not listen on 127.0.0.1:{port} within {timeout_ms} ms")));
            }
            waited += 1;
            std::thread::sleep(Duration::from_millis(WAIT_STEP_MS));
        }
    }

    /// Writes the specs, starts the HTTP backends, and returns every placeholder's value.
    fn start_backends(&mut self) -> Result<BTreeMap<String, String>, LabError> {
        let mut values = BTreeMap::new();
        values.insert("mcpsim".to_string(), self.options.mcpsim.clone());
        values.insert("work".to_string(), self.options.work_dir.display().to_string());
        let mut endpoints = BTreeMap::new();
        for spec in self.specs.clone() {
            let spec_path = self.lab_dir.join(format!("{}.json", spec.id));
            let phase_path = self.lab_dir.join(format!("{}.phase", spec.id));
            let record_path = self.lab_dir.join(format!("{}.jsonl", spec.id));
            std::fs::write(&spec_path, serde_json::to_vec_pretty(&spec).expect("a spec serializes"))
                .and_then(|()| std::fs::write(&phase_path, "0"))
                .map_err(|e| setup(format!("cannot write {}: {e}", spec_path.display())))?;
            let mut argv: Vec<String> = vec![self.options.mcpsim.clone(), "gateway-lab".into(), "backend".into()];
            for (flag, path) in [("--spec", &spec_path), ("--phase-file", &phase_path), ("--record", &record_path)] {
                argv.push(flag.into());
                argv.push(path.display().to_string());
            }
            let key = |what: &str| format!("backend.{}.{what}", spec.id);
            let endpoint = match spec.carrier {
                Carrier::Http => {
                    let port = free_port()?;
                    argv.extend(["--http".to_string(), format!("127.0.0.1:{port}")]);
                    let what = format!("backend {}", spec.id);
                    self.start_process(argv, &[], &what)?;
                    self.wait_port(port, &what, 20_000)?;
                    let url = format!("http://127.0.0.1:{port}/mcp");
                    values.insert(key("url"), url.clone());
                    url
                }
                Carrier::Stdio => {
                    argv.push("--stdio".into());
                    values.insert(key("command"), serde_json::to_string(&argv).expect("strings serialize"));
                    format!("stdio:{}", argv.join(" "))
                }
            };
            values.insert(key("endpoint"), endpoint.clone());
            endpoints.insert(spec.id.clone(), endpoint);
        }
        self.endpoints = endpoints;
        let (pins_path, review_path) = self.write_review(None)?;
        values.insert("pins".into(), pins_path.display().to_string());
        values.insert("review".into(), review_path.display().to_string());
        Ok(values)
    }

    /// The review: what an operator approved before the run (phase 0 of notes, issues and tricks; mirror is
    /// never reviewed), less the backend `revoked`. As mcpsim's pin file (`{pins}`) and as plain JSON
    /// (`{review}`) for other gateways; rewritten in place when the lab revokes a backend.
    fn write_review(&self, revoked: Option<&str>) -> Result<(PathBuf, PathBuf), LabError> {
        let endpoints = &self.endpoints;
        let mut pins = PinFile::default();
        let mut review = Vec::new();
        for spec in self.specs.iter().filter(|s| s.id != "mirror" && Some(s.id.as_str()) != revoked) {
            for descriptor in &spec.phases[0] {
                let tool = descriptor["name"].as_str().unwrap_or_default();
                let publisher = PublisherEvidence {
                    backend: spec.id.clone(),
                    endpoint: endpoints[&spec.id].clone(),
                    server_name: spec.server_name.clone(),
                    server_version: spec.server_version.clone(),
                };
                let approval =
                    Approval { publisher, approved_at_ms: 0, approved_by: "mcpsim gateway-lab".into(), acknowledged_findings: Vec::new() };
                pins.approve(&format!("{}.{tool}", spec.id), descriptor, approval).map_err(|e| setup(e.to_string()))?;
                review.push(json!({ "backend": spec.id, "publicName": self.file.public_name(&spec.id, tool), "descriptor": descriptor, "digest": descriptor_digest(descriptor) }));
            }
        }
        let pins_path = self.lab_dir.join("pins.json");
        let review_path = self.lab_dir.join("review.json");
        std::fs::write(&pins_path, pins.to_json_string())
            .and_then(|()| std::fs::write(&review_path, serde_json::to_vec_pretty(&review).expect("serializes")))
            .map_err(|e| setup(format!("cannot write the review: {e}")))?;
        Ok((pins_path, review_path))
    }

    /// Writes the target's files, runs its setup, starts its replicas.
    fn start_gateway(&mut self, values: &BTreeMap<String, String>) -> Result<(), LabError> {
        let filled =
            |text: &str, values: &BTreeMap<String, String>| fill(text, values).map_err(|e| setup(format!("the gateway target file: {e}")));
        for (name, template) in &self.file.files {
            let path = self.options.work_dir.join(name);
            std::fs::write(&path, filled(template, values)?).map_err(|e| setup(format!("cannot write {}: {e}", path.display())))?;
        }
        for (index, command) in self.file.setup.iter().enumerate() {
            let argv: Vec<String> = command.iter().map(|word| filled(word, values)).collect::<Result<_, _>>()?;
            if argv.first().is_none_or(String::is_empty) {
                return Err(setup(format!("setup command {} is empty", index + 1)));
            }
            self.run_to_end(argv, &format!("setup {}", index + 1))?;
        }
        for replica in 0..self.file.replicas {
            let port = free_port()?;
            let mut values = values.clone();
            values.insert("port".into(), port.to_string());
            values.insert("replica".into(), replica.to_string());
            let argv: Vec<String> = self.file.command.iter().map(|word| filled(word, &values)).collect::<Result<_, _>>()?;
            let env: Vec<(String, String)> =
                self.file.env.iter().map(|(k, v)| Ok((k.clone(), filled(v, &values)?))).collect::<Result<_, LabError>>()?;
            let url = filled(self.file.url.as_deref().unwrap_or("http://127.0.0.1:{port}/mcp"), &values)?;
            let what = format!("replica {replica}");
            self.start_process(argv, &env, &what)?;
            let pid = self.processes.last().map_or(0, |p| p.pid);
            self.wait_port(port, &what, self.file.start_timeout_ms())?;
            self.urls.push(url);
            self.replicas.push((pid, port));
        }
        Ok(())
    }

    /// Runs one command of the target's (setup, revocation) to its end, which must be status 0.
    fn run_to_end(&mut self, argv: Vec<String>, what: &str) -> Result<(), LabError> {
        self.start_process(argv.clone(), &[], what)?;
        let mut waited: u64 = 0;
        let status = loop {
            if let Some(status) = self.processes.last_mut().and_then(Process::exited) {
                break status;
            }
            waited += 1;
            if waited * WAIT_STEP_MS > SETUP_TIMEOUT_MS {
                return Err(setup(format!("{what} ({}) did not end within {SETUP_TIMEOUT_MS} ms", super::redact_argv(&argv))));
            }
            std::thread::sleep(Duration::from_millis(WAIT_STEP_MS));
        };
        if status != "exit status: 0" {
            return Err(setup(format!("{what} ({}) failed: {status}{}", super::redact_argv(&argv), self.stderr_tail(what))));
        }
        Ok(())
    }

    fn token_of(&self, principal: &str) -> String {
        self.file.principals.get(principal).map(|p| p.token.clone()).unwrap_or_default()
    }

    /// One POST of `message` to `replica` as `principal`: the answer's session id and its JSON-RPC message
    /// (the last `data:` of an event stream), or what came instead as JSON (`httpStatus`, `transportError`).
    async fn post(
        &self,
        replica: usize,
        principal: &str,
        session: Option<&str>,
        routing: &RoutingHeaders,
        message: &Value,
        action: &str,
    ) -> (Option<String>, Value, Vec<String>) {
        let authorization = format!("Bearer {}", self.token_of(principal));
        let mut pairs = vec![
            ("Authorization", authorization.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        if self.file.is_legacy() && message.get("method").and_then(Value::as_str) != Some("initialize") {
            pairs.push(("MCP-Protocol-Version", LEGACY_PROTOCOL));
        }
        if let Some(session) = session {
            pairs.push(("Mcp-Session-Id", session));
        }
        let answering = pairs.clone();
        pairs.extend(routing.pairs());
        let body = serde_json::to_vec(message).expect("a JSON value serializes");
        if self.file.is_legacy() {
            let url = &self.urls[replica];
            let exchange = self.legacy_exchange(url, &pairs, &answering, body, message.get("id"), action);
            return match tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), exchange).await {
                Ok(done) => done,
                Err(_) => (None, json!({ "transportError": format!("no answer within {REQUEST_TIMEOUT_MS} ms") }), Vec::new()),
            };
        }
        match self.http.post(&self.urls[replica], &pairs, body).await {
            Ok(answer) => {
                let text = String::from_utf8_lossy(&answer.body).into_owned();
                let streamed = answer.content_type.as_deref().is_some_and(|v| v.starts_with("text/event-stream"));
                let json = if streamed {
                    text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).rfind(|d| !d.is_empty()).unwrap_or("").to_string()
                } else {
                    text
                };
                let value = if json.trim().is_empty() && answer.status < 300 {
                    json!({ "httpStatus": answer.status })
                } else {
                    serde_json::from_str::<Value>(&json).unwrap_or_else(|_| json!({ "httpStatus": answer.status, "body": json }))
                };
                (answer.session_id, value, Vec::new())
            }
            Err(error) => (None, json!({ "transportError": error.message }), Vec::new()),
        }
    }

    /// One 2025-11-25 exchange: the answer read as it arrives, and every server→client request inside it
    /// answered at once (an elicitation with `action`, as [`input_response`] answers a form; `roots/list` with
    /// no roots; `ping`; anything else refused), as a 2025-11-25 client must for the call to go on. Returns the
    /// session id, the call's own answer, and the requests and answers inside it (shown bounded). Bounded in
    /// bytes, in rounds and, by the caller, in time.
    async fn legacy_exchange(
        &self,
        url: &str,
        pairs: &[(&str, &str)],
        answering: &[(&str, &str)],
        body: Vec<u8>,
        id: Option<&Value>,
        action: &str,
    ) -> (Option<String>, Value, Vec<String>) {
        use http_body_util::BodyExt;
        let mut inside = Vec::new();
        let answer = match self.http.post_streamed(url, pairs, body).await {
            Ok(answer) => answer,
            Err(error) => return (None, json!({ "transportError": error.message }), inside),
        };
        let (status, session) = (answer.status, answer.session_id.clone());
        let streamed = answer.content_type.as_deref().is_some_and(|v| v.starts_with("text/event-stream"));
        let mut body = answer.body;
        let mut buffer: Vec<u8> = Vec::new();
        let mut read = 0usize;
        let mut rounds = 0usize;
        loop {
            let chunk = match body.frame().await {
                None => break,
                Some(Err(error)) => return (session, json!({ "transportError": format!("reading the answer failed: {error}") }), inside),
                Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
            };
            read += chunk.len();
            if read > LEGACY_ANSWER_BYTES_MAX {
                return (session, json!({ "transportError": format!("an answer over {LEGACY_ANSWER_BYTES_MAX} bytes") }), inside);
            }
            // Carriage returns only ever frame an event (JSON escapes its own), so they are dropped here.
            buffer.extend(chunk.iter().filter(|b| **b != b'\r'));
            if !streamed {
                continue;
            }
            while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = buffer.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let data: Vec<&str> =
                    text.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| d.strip_prefix(' ').unwrap_or(d)).collect();
                let Ok(message) = serde_json::from_str::<Value>(&data.join("\n")) else { continue };
                if message.get("method").is_some() && message.get("id").is_some() {
                    rounds += 1;
                    if rounds > LEGACY_ROUNDS_MAX {
                        return (
                            session,
                            json!({ "transportError": format!("more than {LEGACY_ROUNDS_MAX} requests inside one call") }),
                            inside,
                        );
                    }
                    let result = match message["method"].as_str().unwrap_or("") {
                        "elicitation/create" => json!({ "result": input_response(&message, action) }),
                        "roots/list" => json!({ "result": { "roots": [] } }),
                        "ping" => json!({ "result": {} }),
                        other => json!({ "error": { "code": -32601, "message": format!("the lab's client does not answer {other}") } }),
                    };
                    let mut reply = json!({ "jsonrpc": "2.0", "id": message["id"].clone() });
                    if let (Value::Object(reply), Value::Object(result)) = (&mut reply, result) {
                        reply.extend(result);
                    }
                    inside.push(format!("  ⇠ inside the call {}", bounded(&message)));
                    inside.push(format!("  ⇢ answered {}", bounded(&reply)));
                    let sent = serde_json::to_vec(&reply).expect("a JSON value serializes");
                    if let Err(error) = self.http.post(url, answering, sent).await {
                        inside.push(format!("  ⇢ the answer could not be sent: {}", super::shown(&error.message)));
                    }
                } else if message.get("id") == id && (message.get("result").is_some() || message.get("error").is_some()) {
                    return (session, message, inside);
                }
            }
        }
        let text = String::from_utf8_lossy(&buffer).into_owned();
        let value = if text.trim().is_empty() && status < 300 {
            json!({ "httpStatus": status })
        } else if streamed {
            json!({ "httpStatus": status, "body": "the event stream ended without the call's answer" })
        } else {
            serde_json::from_str::<Value>(&text).unwrap_or_else(|_| json!({ "httpStatus": status, "body": text }))
        };
        (session, value, inside)
    }

    /// The 2025-11-25 session of (`replica`, `principal`, `capabilities`), opened on first use: `initialize`
    /// declaring those capabilities, then `notifications/initialized` under the minted `Mcp-Session-Id` (if
    /// any). A refused `initialize` is a problem of the run; the calls are still sent (without a session).
    async fn session(&mut self, replica: usize, principal: &str, capabilities: &Value) -> Option<String> {
        let key = (replica, principal.to_string(), capabilities.to_string());
        if let Some(session) = self.sessions.get(&key) {
            return session.clone();
        }
        self.next_id += 1;
        let initialize = json!({ "jsonrpc": "2.0", "id": self.next_id, "method": "initialize", "params": {
            "protocolVersion": LEGACY_PROTOCOL,
            "capabilities": capabilities,
            "clientInfo": { "name": "mcpsim-gateway-lab", "version": env!("CARGO_PKG_VERSION") },
        } });
        let (session, answer, _) = self.post(replica, principal, None, &RoutingHeaders::default(), &initialize, "decline").await;
        let version = answer.pointer("/result/protocolVersion").and_then(Value::as_str);
        if version != Some(LEGACY_PROTOCOL) {
            self.problems.push(format!("replica {replica} answered {principal}'s initialize with {}", bounded(&answer)));
        } else {
            let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
            let (_, answer, _) =
                self.post(replica, principal, session.as_deref(), &RoutingHeaders::default(), &initialized, "decline").await;
            if answer.get("transportError").is_some() || answer.get("httpStatus").and_then(Value::as_u64).is_none_or(|s| s >= 300) {
                self.problems.push(format!("replica {replica} refused {principal}'s notifications/initialized: {}", bounded(&answer)));
            }
        }
        let minted = if session.is_some() { "a session" } else { "no session id (stateless)" };
        self.decisions.push(format!("initialize at replica {replica} as {principal} declaring {capabilities}: {minted}"));
        self.sessions.insert(key, session.clone());
        session
    }

    /// One request to `replica` as `principal`; `headers` overrides the routing headers the body implies.
    /// Returns the answer (or the error, as a JSON string) and records the exchange on the intent `intent`.
    #[allow(clippy::too_many_arguments)] // Each is one free choice of a hostile client's request.
    async fn send(
        &mut self,
        replica: usize,
        principal: &str,
        method: &str,
        mut params: Value,
        capabilities: Value,
        headers: Option<RoutingHeaders>,
        intent: Option<usize>,
    ) -> Value {
        self.next_id += 1;
        let legacy = self.file.is_legacy();
        let session = if legacy { self.session(replica, principal, &capabilities).await } else { None };
        if let (Value::Object(map), false) = (&mut params, legacy) {
            map.insert("_meta".into(), json!({ KEY_PROTOCOL_VERSION: PROTOCOL_VERSION, KEY_CLIENT_CAPABILITIES: capabilities }));
        }
        let message = json!({ "jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params });
        let routing = match (headers, legacy) {
            // A hostile legacy client may still send routing headers; it never sends the modern version.
            (Some(mut headers), true) => {
                headers.protocol_version = None;
                headers
            }
            (Some(headers), false) => headers,
            (None, true) => RoutingHeaders::default(),
            (None, false) => RoutingHeaders::for_message(&message),
        };
        // Inside a 2025-11-25 call, what the lab means decides its answer: an allowed call is accepted, a
        // forbidden one declined.
        let action = match intent.map(|i| self.intents[i].expect) {
            Some(Expect::Once { .. }) => "accept",
            _ => "decline",
        };
        let (_, answer, inside) = self.post(replica, principal, session.as_deref(), &routing, &message, action).await;
        if let (Some(index), false) = (intent, inside.is_empty()) {
            self.asked_inside.insert(index, action);
        }
        if let Some(index) = intent {
            let headers_shown: Vec<String> = routing.pairs().iter().map(|(k, v)| format!("{k}: {v}")).collect();
            let sent = format!("→ replica {replica} as {principal} [{}] {}", headers_shown.join(", "), bounded(&message));
            let got = format!("← {}", bounded(&answer));
            self.intents[index].exchanges.push(sent);
            self.intents[index].exchanges.extend(inside);
            self.intents[index].exchanges.push(got);
        }
        answer
    }

    #[allow(clippy::too_many_arguments)] // What the lab means, where it goes, and the clause it upholds.
    fn intent(
        &mut self,
        label: &str,
        backend: &str,
        tool: &str,
        extra: Value,
        expect: Expect,
        defence: &'static str,
        clause: &'static str,
    ) -> usize {
        let token = self.token(label);
        let mut arguments = json!({ "query": token });
        if let (Value::Object(arguments), Value::Object(extra)) = (&mut arguments, extra) {
            arguments.extend(extra);
        }
        self.intents.push(Intent {
            token,
            backend: backend.into(),
            tool: tool.into(),
            arguments,
            expect,
            defence,
            clause,
            exchanges: Vec::new(),
        });
        self.intents.len() - 1
    }

    /// A plain `tools/call` of intent `index` under public name `public`.
    async fn call(&mut self, index: usize, replica: usize, principal: &str, public: &str, capabilities: Value) -> Value {
        let arguments = self.intents[index].arguments.clone();
        self.send(replica, principal, "tools/call", json!({ "name": public, "arguments": arguments }), capabilities, None, Some(index))
            .await
    }

    /// The principal granted `public` (the first in name order), if any.
    fn granted(&self, public: &str) -> Option<String> {
        self.file.principals.iter().find(|(_, p)| p.tools.iter().any(|t| t == public)).map(|(name, _)| name.clone())
    }

    async fn battery(&mut self) {
        let none = json!({});
        let form = json!({ "elicitation": { "form": {} } });
        let public = |lab: &Lab<'_>, backend: &str, tool: &str| lab.file.public_name(backend, tool);
        let principal = self
            .granted(&public(self, "notes", "search"))
            .unwrap_or_else(|| self.file.principals.keys().next().cloned().unwrap_or_default());

        // What the gateway lists (an observation: the calls decide).
        let listing = self.send(0, &principal, "tools/list", json!({}), none.clone(), None, None).await;
        let listed: Vec<String> = listing
            .pointer("/result/tools")
            .and_then(Value::as_array)
            .map(|tools| tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string)).collect())
            .unwrap_or_default();
        self.observations
            .push(format!("{principal} is listed: {}", if listed.is_empty() { "nothing".to_string() } else { listed.join(", ") }));

        // Poisoning: every poisoned tool was reviewed (pinned), so only a scanner stops it.
        for (tool, label, _) in POISONED {
            let caller = self.granted(&public(self, "tricks", tool)).unwrap_or_else(|| principal.clone());
            let index = self.intent(&format!("poison-{tool}"), "tricks", tool, json!({}), Expect::Never, "poisoning", label_clause(label));
            let name = public(self, "tricks", tool);
            self.call(index, 0, &caller, &name, none.clone()).await;
        }

        // Identity: a familiar display name from a publisher nobody reviewed.
        let caller = self.granted(&public(self, "mirror", "search")).unwrap_or_else(|| principal.clone());
        let index = self.intent(
            "mirror",
            "mirror",
            "search",
            json!({}),
            Expect::Never,
            "identity",
            "an unreviewed publisher's tool is never callable, whatever name it shows",
        );
        let name = public(self, "mirror", "search");
        self.call(index, 0, &caller, &name, none.clone()).await;

        // Shadowing: both qualified names reach their own backend; the bare name reaches none.
        let clause = "each qualified name is routed to its own backend, never by discovery order";
        for backend in ["notes", "issues"] {
            let caller = self.granted(&public(self, backend, "search")).unwrap_or_else(|| principal.clone());
            let index = self.intent(
                &format!("shadow-{backend}"),
                backend,
                "search",
                json!({}),
                Expect::Once { missing: None },
                "shadowing",
                clause,
            );
            let name = public(self, backend, "search");
            let answer = self.call(index, 1 % self.urls.len(), &caller, &name, none.clone()).await;
            if backend == "issues" {
                let text = answer.pointer("/result/content/0/text").and_then(Value::as_str).unwrap_or("");
                let passed = if text.contains(INJECTED_INSTRUCTION) { "passed through unchanged" } else { "not passed through as sent" };
                self.observations
                    .push(format!("the instruction in issues.search's result was {passed} (results are not one of the seven surfaces)"));
            }
        }
        for backend in ["notes", "issues"] {
            let index = self.intent(
                &format!("bare-{backend}"),
                backend,
                "search",
                json!({}),
                Expect::Never,
                "shadowing",
                "a bare, ambiguous name is never resolved",
            );
            // Two intents, one request: whichever backend it reaches is a finding. The token is the notes one.
            if backend == "notes" {
                self.call(index, 0, &principal, "search", none.clone()).await;
            } else {
                let notes = self.intents.len() - 2;
                self.intents[index].token = self.intents[notes].token.clone();
                self.intents[index].arguments = self.intents[notes].arguments.clone();
                self.intents[index].exchanges = self.intents[notes].exchanges.clone();
            }
        }

        // Header/body confusion, then the quota across replicas.
        if let Some(rate) = self.file.rate_limit.clone() {
            let (backend, tool) = self.lab_tool(&rate.tool).unwrap_or_else(|| ("issues".into(), "search".into()));
            let other = if rate.tool == public(self, "notes", "search") {
                public(self, "issues", "search")
            } else {
                public(self, "notes", "search")
            };
            for (n, (method, name)) in [("tools/call", other.clone()), ("tools/list", rate.tool.clone())].into_iter().enumerate() {
                let index = self.intent(
                    &format!("confused-{n}"),
                    &backend,
                    &tool,
                    json!({}),
                    Expect::Never,
                    "header_body",
                    "a header that disagrees with the body is refused before any backend call",
                );
                let arguments = self.intents[index].arguments.clone();
                let params = json!({ "name": rate.tool, "arguments": arguments });
                let mut headers = RoutingHeaders::for_message(&json!({ "method": "tools/call", "params": params.clone() }));
                headers.protocol_version = Some(PROTOCOL_VERSION.into());
                headers.method = Some(method.into());
                headers.name = Some(name);
                let replica = n % self.urls.len();
                self.send(replica, &rate.principal, "tools/call", params, none.clone(), Some(headers), Some(index)).await;
            }
            // A principal granted both tools: the body's passes authorization, so a gateway that then routes by
            // the header runs the header's tool. Two intents share the request's token, one per backend.
            let both = self.file.principals.iter().find(|(_, p)| p.tools.contains(&rate.tool) && p.tools.contains(&other));
            match (both.map(|(name, _)| name.clone()), self.lab_tool(&other)) {
                (Some(both), Some((other_backend, other_tool))) => {
                    let clause = "the body names the tool, even when the header's would be allowed too";
                    let index = self.intent("confused-both", &backend, &tool, json!({}), Expect::Never, "header_body", clause);
                    let arguments = self.intents[index].arguments.clone();
                    let params = json!({ "name": rate.tool, "arguments": arguments });
                    let mut headers = RoutingHeaders::for_message(&json!({ "method": "tools/call", "params": params.clone() }));
                    headers.protocol_version = Some(PROTOCOL_VERSION.into());
                    headers.name = Some(other.clone());
                    self.send(0, &both, "tools/call", params, none.clone(), Some(headers), Some(index)).await;
                    let shared = self.intent("confused-both", &other_backend, &other_tool, json!({}), Expect::Never, "header_body", clause);
                    self.intents[shared].exchanges = self.intents[index].exchanges.clone();
                }
                _ => self.observations.push(format!(
                    "no principal is granted both {} and {other}: the lab could not send a confused call both would allow",
                    rate.tool
                )),
            }
            let missing = Some(("header_body", "a refused request spends no rate-limit token"));
            // Spread over the replicas in turn, from a drawn one: the quota must follow the principal.
            let first = (self.draw() % self.urls.len() as u64) as usize;
            for n in 0..rate.calls {
                let replica = (first + n as usize) % self.urls.len();
                self.decisions.push(format!("quota call {} of {} at replica {replica}", n + 1, rate.calls));
                let index = self.intent(
                    &format!("quota-{n}"),
                    &backend,
                    &tool,
                    json!({}),
                    Expect::Once { missing },
                    "rate_limits",
                    "the quota allows its calls",
                );
                self.call(index, replica, &rate.principal, &rate.tool, none.clone()).await;
            }
            let replica = (first + rate.calls as usize) % self.urls.len();
            self.decisions.push(format!("the call past the quota at replica {replica}"));
            let index = self.intent(
                "quota-over",
                &backend,
                &tool,
                json!({}),
                Expect::Never,
                "rate_limits",
                "the quota follows the principal across replicas",
            );
            self.call(index, replica, &rate.principal, &rate.tool, none.clone()).await;
        }

        // Capabilities and confirmation on the destructive tool.
        let export = public(self, "notes", EXPORT);
        let destination = json!({ "destination": "archive" });
        if let Some(confirm) = self.file.confirm.clone() {
            let outsider = self.file.principals.iter().find(|(_, p)| !p.tools.contains(&export)).map(|(name, _)| name.clone());
            if let Some(outsider) = outsider {
                let every =
                    json!({ "elicitation": { "form": {}, "url": {} }, "sampling": {}, "roots": {}, "experimental": { "admin": true } });
                let index = self.intent(
                    "caps-outsider",
                    "notes",
                    EXPORT,
                    destination.clone(),
                    Expect::Never,
                    "capabilities",
                    "declared capabilities never grant a tool",
                );
                self.call(index, 0, &outsider, &export, every).await;
            }
            let index = self.intent(
                "caps-no-form",
                "notes",
                EXPORT,
                destination.clone(),
                Expect::Never,
                "capabilities",
                "a client that cannot be asked is not a reason to skip the confirmation",
            );
            self.call(index, 0, &confirm.principal, &export, none.clone()).await;

            let (a, b) = self.pair("confirmation accepted");
            let once = Expect::Once { missing: None };
            let index = self.intent(
                "confirm-accept",
                "notes",
                EXPORT,
                destination.clone(),
                once,
                "confirmation",
                "a confirmation answered at another replica runs once",
            );
            let round1 = self.call(index, a, &confirm.principal, &export, form.clone()).await;
            match round_two(&round1, "accept") {
                Some((state, responses)) => {
                    let arguments = self.intents[index].arguments.clone();
                    let params = json!({ "name": export, "arguments": arguments, "requestState": state, "inputResponses": responses });
                    self.send(b, &confirm.principal, "tools/call", params.clone(), form.clone(), None, Some(index)).await;
                    self.send(a, &confirm.principal, "tools/call", params, form.clone(), None, Some(index)).await;
                }
                None => self.not_asked(index, &round1),
            }

            let (a, b) = self.pair("confirmation with other arguments");
            let asked = self.intent(
                "confirm-asked",
                "notes",
                EXPORT,
                destination.clone(),
                Expect::Never,
                "confirmation",
                "round 1's arguments were never confirmed",
            );
            let other = self.intent(
                "confirm-other",
                "notes",
                EXPORT,
                destination.clone(),
                Expect::Never,
                "confirmation",
                "a confirmation never runs with other arguments",
            );
            let round1 = self.call(asked, a, &confirm.principal, &export, form.clone()).await;
            match round_two(&round1, "accept") {
                Some((state, responses)) => {
                    let arguments = self.intents[other].arguments.clone();
                    let params = json!({ "name": export, "arguments": arguments, "requestState": state, "inputResponses": responses });
                    self.send(b, &confirm.principal, "tools/call", params, form.clone(), None, Some(other)).await;
                }
                None => self.not_asked(asked, &round1),
            }

            let (a, b) = self.pair("confirmation declined");
            let index = self.intent(
                "confirm-decline",
                "notes",
                EXPORT,
                destination.clone(),
                Expect::Never,
                "confirmation",
                "a decline is terminal on every replica",
            );
            let round1 = self.call(index, a, &confirm.principal, &export, form.clone()).await;
            match (round_two(&round1, "decline"), round_two(&round1, "accept")) {
                (Some((state, declined)), Some((_, accepted))) => {
                    let arguments = self.intents[index].arguments.clone();
                    let params = json!({ "name": export, "arguments": arguments, "requestState": state, "inputResponses": declined });
                    self.send(b, &confirm.principal, "tools/call", params.clone(), form.clone(), None, Some(index)).await;
                    let mut again = params;
                    again["inputResponses"] = accepted;
                    self.send(a, &confirm.principal, "tools/call", again, form.clone(), None, Some(index)).await;
                }
                _ => self.not_asked(index, &round1),
            }
        }

        // The rug pull: notes switches to its second listing; neither the changed nor the renamed tool runs.
        std::fs::write(self.lab_dir.join("notes.phase.next"), "1")
            .and_then(|()| std::fs::rename(self.lab_dir.join("notes.phase.next"), self.lab_dir.join("notes.phase")))
            .unwrap_or_else(|e| self.problems.push(format!("the lab could not switch notes to its second listing: {e}")));
        self.decisions
            .push("notes switched to listing 1 (search: inputSchema changed, description kept; export renamed export_all)".into());
        let caller = self.granted(&public(self, "notes", "search")).unwrap_or_else(|| principal.clone());
        let index = self.intent(
            "rug-search",
            "notes",
            "search",
            json!({}),
            Expect::Never,
            "rug_pull",
            "a changed inputSchema under an unchanged description is quarantined",
        );
        let name = public(self, "notes", "search");
        self.call(index, 1 % self.urls.len(), &caller, &name, none.clone()).await;
        let caller = self.file.confirm.as_ref().map_or(principal.clone(), |c| c.principal.clone());
        let index = self.intent(
            "rug-rename",
            "notes",
            EXPORT_RENAMED,
            destination,
            Expect::Never,
            "rug_pull",
            "a renamed tool is a new, unreviewed tool",
        );
        let name = public(self, "notes", EXPORT_RENAMED);
        let round1 = self.call(index, 0, &caller, &name, form.clone()).await;
        if let Some((state, responses)) = round_two(&round1, "accept") {
            let arguments = self.intents[index].arguments.clone();
            let params = json!({ "name": name, "arguments": arguments, "requestState": state, "inputResponses": responses });
            self.send(0, &caller, "tools/call", params, form, None, Some(index)).await;
        }

        self.revocation(&principal).await;
    }

    /// An operator revokes the review of `issues` while the replicas run: the lab rewrites `{pins}` and
    /// `{review}` without it and runs the file's `[revocation] command` for each replica. A call just before
    /// must reach `issues` (so the revoked backend was reachable); none after, at any replica, may.
    async fn revocation(&mut self, principal: &str) {
        let Some(revocation) = self.file.revocation.clone() else { return };
        let none = json!({});
        let name = self.file.public_name("issues", "search");
        // Not the quota's principal (its quota is spent), and the last in name order: the earlier steps call as
        // the first, and a tool's quota counts per principal.
        let quota = self.file.rate_limit.as_ref().map(|r| r.principal.clone());
        let granted: Vec<String> = self.file.principals.iter().filter(|(_, p)| p.tools.contains(&name)).map(|(n, _)| n.clone()).collect();
        let caller =
            granted.iter().rev().find(|n| Some(*n) != quota.as_ref()).or(granted.first()).cloned().unwrap_or(principal.to_string());
        let (a, _) = self.pair("revocation");
        let index = self.intent(
            "revoke-before",
            "issues",
            "search",
            json!({}),
            Expect::Once { missing: None },
            "revocation",
            "a reviewed backend is callable until it is revoked",
        );
        self.call(index, a, &caller, &name, none.clone()).await;
        if let Err(e) = self.write_review(Some("issues")) {
            self.problems.push(format!("the lab could not revoke issues: {e}"));
            return;
        }
        self.decisions.push("revoked the review of issues ({pins} and {review} rewritten without issues.search)".into());
        for (replica, (pid, port)) in self.replicas.clone().into_iter().enumerate() {
            let mut values = self.values.clone();
            values.insert("pid".into(), pid.to_string());
            values.insert("port".into(), port.to_string());
            values.insert("replica".into(), replica.to_string());
            let argv: Result<Vec<String>, String> = revocation.command.iter().map(|word| fill(word, &values)).collect();
            let ran = match argv {
                Ok(argv) => self.run_to_end(argv, &format!("revocation {replica}")),
                Err(e) => Err(setup(format!("the gateway target file's [revocation] command: {e}"))),
            };
            if let Err(e) = ran {
                self.problems.push(format!("the revocation at replica {replica} could not be made: {e}"));
                return;
            }
        }
        // The replicas apply a revocation in their own time: wait (bounded) until none lists the tool. The
        // calls after it decide; a replica that still lists it is reported beside them.
        for replica in 0..self.urls.len() {
            let mut waited: u64 = 0;
            loop {
                let listing = self.send(replica, &caller, "tools/list", json!({}), none.clone(), None, None).await;
                let listed = listing
                    .pointer("/result/tools")
                    .and_then(Value::as_array)
                    .is_some_and(|tools| tools.iter().any(|t| t.get("name").and_then(Value::as_str) == Some(name.as_str())));
                if !listed {
                    break;
                }
                waited += 1;
                if waited * WAIT_STEP_MS > REVOCATION_WAIT_MS {
                    self.observations.push(format!("replica {replica} still listed {name} {REVOCATION_WAIT_MS} ms after the revocation"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(WAIT_STEP_MS)).await;
            }
        }
        for replica in 0..self.urls.len() {
            let index = self.intent(
                &format!("revoke-after-{replica}"),
                "issues",
                "search",
                json!({}),
                Expect::Never,
                "revocation",
                "a revoked backend is never called again, at any replica",
            );
            let answer = self.call(index, replica, &caller, &name, none.clone()).await;
            // A quota refusal hides whether the revocation was in force there.
            if answer.pointer("/error/data/reason").and_then(Value::as_str) == Some("rate_limited") {
                self.problems.push(format!(
                    "the call after the revocation at replica {replica} was refused rate_limited: {caller}'s quota on {name} is spent, \
                     so the revocation there is unjudged"
                ));
            }
        }
    }

    /// The destructive tool answered round 1 without asking: judged from the records (it may have run).
    fn not_asked(&mut self, index: usize, round1: &Value) {
        if let Some(action) = self.asked_inside.get(&index) {
            let token = &self.intents[index].token;
            self.observations.push(format!("{token} was asked inside the call (2025-11-25), and the lab answered {action}"));
            return;
        }
        // A 2025-11-25 result carries no resultType: a result is complete there.
        let kind = match (round1.pointer("/result/resultType").and_then(Value::as_str), round1.get("result"), round1.get("error")) {
            (Some(kind), _, _) => kind,
            (None, Some(_), _) => "complete",
            (None, None, Some(_)) => "error",
            (None, None, None) => "no result",
        };
        self.observations.push(format!("{} was not asked for confirmation (round 1 answered: {kind})", self.intents[index].token));
    }

    /// The lab's (backend, tool) behind a public name.
    fn lab_tool(&self, public: &str) -> Option<(String, String)> {
        self.specs
            .iter()
            .flat_map(|s| s.tool_names().into_iter().map(move |t| (s.id.clone(), t)))
            .find(|(b, t)| self.file.public_name(b, t) == public)
    }

    fn read_records(&mut self) -> Vec<Record> {
        let mut records = Vec::new();
        for spec in &self.specs {
            let path = self.lab_dir.join(format!("{}.jsonl", spec.id));
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            for line in text.lines() {
                match serde_json::from_str::<Record>(line) {
                    Ok(record) => records.push(record),
                    Err(e) => self.problems.push(format!("an unreadable record of {}: {e}", spec.id)),
                }
            }
        }
        records
    }

    fn judge(&mut self, records: &[Record]) -> LabReport {
        let claims = self.file.claims;
        let mut findings = Vec::new();
        let mut observations = std::mem::take(&mut self.observations);
        let mut problems = std::mem::take(&mut self.problems);
        let report = |finding: LabFinding, findings: &mut Vec<LabFinding>, observations: &mut Vec<String>| {
            if claims.claims(finding.defence) {
                findings.push(finding);
            } else {
                observations.push(format!("(not claimed) {}: {}", finding.defence, finding.message));
            }
        };
        let calls: Vec<&Record> = records.iter().filter(|r| r.method == "tools/call").collect();
        // Records no intent explains.
        for record in &calls {
            let query = record.arguments.as_ref().and_then(|a| a.get("query")).and_then(Value::as_str).unwrap_or("");
            if !self.intents.iter().any(|i| i.token == query) {
                let message = format!(
                    "{} received {} with {} that no lab request explains",
                    record.backend,
                    record.tool.as_deref().unwrap_or("?"),
                    bounded(&record.arguments.clone().unwrap_or(Value::Null))
                );
                findings.push(LabFinding {
                    defence: "mediation",
                    clause: "every backend call is a granted client request",
                    property: "mediation",
                    message,
                    exchanges: Vec::new(),
                });
            }
        }
        for intent in &self.intents {
            let reached: Vec<&&Record> = calls
                .iter()
                .filter(|r| r.arguments.as_ref().and_then(|a| a.get("query")).and_then(Value::as_str) == Some(intent.token.as_str()))
                .collect();
            let exact = |r: &&&Record| {
                r.backend == intent.backend
                    && r.tool.as_deref() == Some(intent.tool.as_str())
                    && r.arguments.as_ref() == Some(&intent.arguments)
            };
            let finding = |property: &'static str, message: String| LabFinding {
                defence: intent.defence,
                clause: intent.clause,
                property,
                message,
                exchanges: intent.exchanges.clone(),
            };
            let describe = |r: &&&Record| format!("{}.{} (listing {})", r.backend, r.tool.as_deref().unwrap_or("?"), r.phase);
            match intent.expect {
                Expect::Never => {
                    // Two intents share the bare call's token: only the one whose backend it reached is judged.
                    let mine: Vec<_> = reached.iter().filter(|r| r.backend == intent.backend).collect();
                    if let Some(first) = mine.first() {
                        let message = format!("{} call(s) reached the backend: {}", mine.len(), describe(first));
                        let property = if intent.defence == "confirmation" { "consent" } else { "mediation" };
                        report(finding(property, message), &mut findings, &mut observations);
                    }
                }
                Expect::Once { missing } => {
                    let wrong: Vec<_> = reached.iter().filter(|r| !exact(r)).collect();
                    if let Some(first) = wrong.first() {
                        let message = format!("a call for {}.{} reached {}", intent.backend, intent.tool, describe(first));
                        report(finding("mediation", message), &mut findings, &mut observations);
                    }
                    // A re-drive under an executed idempotency key runs nothing more at the backend.
                    let right = reached.iter().filter(|r| exact(r) && !r.redriven).count();
                    let unreviewed = reached.iter().filter(|r| exact(r) && self.spec(&r.backend).phases.len() > 1 && r.phase != 0).count();
                    if unreviewed > 0 {
                        report(finding("mediation", "it ran under a descriptor nobody reviewed".into()), &mut findings, &mut observations);
                    }
                    if right > 1 {
                        let property = if intent.defence == "confirmation" { "at_most_once" } else { "mediation" };
                        report(finding(property, format!("it ran {right} times at the backend")), &mut findings, &mut observations);
                    } else if right == 0 && wrong.is_empty() {
                        let answer = intent.exchanges.last().cloned().unwrap_or_default();
                        match missing {
                            Some((defence, clause)) => {
                                let message = format!("an allowed call was refused after refused requests: {answer}");
                                let refused =
                                    LabFinding { defence, clause, property: "mediation", message, exchanges: intent.exchanges.clone() };
                                report(refused, &mut findings, &mut observations);
                            }
                            None => problems.push(format!(
                                "{} ({}.{}) is allowed but never reached its backend; last answer: {answer}",
                                intent.token, intent.backend, intent.tool
                            )),
                        }
                    }
                }
            }
        }
        if self.file.is_legacy() {
            for (defence, why) in LEGACY_NOT_APPLICABLE {
                observations.push(format!("{defence} is not applicable over {LEGACY_PROTOCOL}: {why}"));
            }
            if self.file.confirm.is_some() {
                observations.push(LEGACY_CONFIRMATION.to_string());
            }
        }
        let verdicts = DEFENCES
            .iter()
            .map(|defence| {
                let verdict = if !claims.claims(defence) {
                    Verdict::NotClaimed
                } else if findings.iter().any(|f| f.defence == *defence) {
                    Verdict::Broken
                } else {
                    Verdict::Held
                };
                (*defence, verdict)
            })
            .collect();
        let listings = records.iter().filter(|r| r.method == "tools/list").count();
        observations.push(format!("the backends recorded {} tools/call and {listings} tools/list request(s)", calls.len()));
        LabReport {
            name: self.file.name.clone(),
            seed: self.options.seed,
            decisions: std::mem::take(&mut self.decisions),
            verdicts,
            findings,
            observations,
            problems,
            processes_started: self.started,
            records: records.len(),
        }
    }
}

/// The scanner category a poisoned tool carries, as the clause its refusal upholds.
fn label_clause(label: &str) -> &'static str {
    match label {
        "role_tag" => "a descriptor with a role tag is blocked until reviewed",
        "instruction_override" => "a descriptor overriding instructions is blocked until reviewed",
        "concealment" => "a descriptor asking to hide things from the user is blocked until reviewed",
        "secret_access" => "a descriptor reaching for secrets is blocked until reviewed",
        _ => "a descriptor naming a suspicious destination is blocked until reviewed",
    }
}

/// From an `input_required` answer: its `requestState` and answers to every form it asks — `accept` with each
/// boolean property `true` and each string property its first enum value (or `"yes"`), or `decline`.
fn round_two(answer: &Value, action: &str) -> Option<(Value, Value)> {
    let result = answer.get("result")?;
    if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return None;
    }
    let state = result.get("requestState")?.clone();
    let requests = result.get("inputRequests")?.as_object()?;
    let responses = requests.iter().map(|(key, request)| (key.clone(), input_response(request, action))).collect();
    Some((state, Value::Object(responses)))
}

/// The answer to one form request (`{ method, params: { requestedSchema } }`, embedded in an MRTR result or
/// sent inside a 2025-11-25 call): `accept` with each boolean property `true` and each other its first enum
/// value (or `"yes"`), or the bare `action`.
fn input_response(request: &Value, action: &str) -> Value {
    if action != "accept" {
        return json!({ "action": action });
    }
    let mut content = serde_json::Map::new();
    let properties = request.pointer("/params/requestedSchema/properties").and_then(Value::as_object);
    for (name, schema) in properties.into_iter().flatten() {
        let value = match schema.get("type").and_then(Value::as_str) {
            Some("boolean") => json!(true),
            _ => schema.pointer("/enum/0").cloned().unwrap_or(json!("yes")),
        };
        content.insert(name.clone(), value);
    }
    json!({ "action": "accept", "content": content })
}

/// A message as a finding shows it: `requestState` shortened, at most [`SHOWN_CHARS_MAX`] characters, escaped.
fn bounded(message: &Value) -> String {
    let mut message = message.clone();
    shorten_states(&mut message);
    let text = message.to_string();
    let cut: String = text.chars().take(SHOWN_CHARS_MAX).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    super::shown(&format!("{cut}{more}"))
}

fn shorten_states(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value {
                    Value::String(state) if key == "requestState" && state.chars().count() > 16 => {
                        *state = format!("{}…", state.chars().take(12).collect::<String>());
                    }
                    other => shorten_states(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(shorten_states),
        _ => {}
    }
}

fn free_port() -> Result<u16, LabError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| setup(format!("no free port on loopback: {e}")))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| setup(format!("no free port on loopback: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_two_answers_every_form_it_is_asked() {
        let answer = json!({ "result": { "resultType": "input_required", "requestState": "s", "inputRequests": {
            "confirm": { "method": "elicitation/create", "params": { "requestedSchema": { "properties": {
                "confirm": { "type": "boolean" }, "mode": { "type": "string", "enum": ["fast", "slow"] } } } } } } } });
        let (state, accepted) = round_two(&answer, "accept").unwrap();
        assert_eq!(state, json!("s"));
        assert_eq!(accepted, json!({ "confirm": { "action": "accept", "content": { "confirm": true, "mode": "fast" } } }));
        assert_eq!(round_two(&answer, "decline").unwrap().1, json!({ "confirm": { "action": "decline" } }));
        assert!(round_two(&json!({ "result": { "resultType": "complete" } }), "accept").is_none());
    }

    #[test]
    fn findings_show_bounded_escaped_messages_without_states() {
        let shown = bounded(&json!({ "requestState": "a".repeat(100), "text": "x\ny\u{202e}" }));
        assert!(shown.contains("aaaaaaaaaaaa…") && !shown.contains(&"a".repeat(13)), "{shown}");
        assert!(shown.contains("x\\ny\\u{202e}") && !shown.contains('\n') && !shown.contains('\u{202e}'), "{shown}");
        assert!(bounded(&json!("z".repeat(2000))).chars().count() <= SHOWN_CHARS_MAX + 1);
    }
}
