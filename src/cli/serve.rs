//! `mcpsim serve`: the notes server for real, over stdio or streamable HTTP.
//!
//! Wiring only: load the deployment, build the server with [`build_notes_server`] (or the conformance fixture
//! with [`build_conformance_fixture`], or the security gateway with [`build_real_gateway`]), start one transport.

use crate::config::{ConfigError, Deployment, DEFAULT_PRINCIPAL};
use crate::gateway_config::{build_real_gateway, load_pins, GatewayFile};
use crate::handlers::fixture::DEFAULT_STATE_TTL_MS;
use crate::handlers::gateway::ports::AuditSink;
use crate::handlers::Service;
use crate::policy::origin::OriginPolicy;
use crate::stores::gateway::JsonLinesAuditSink;
use crate::transport::http::{self, Authentication, HttpOptions, Tokens, MCP_PATH};
use crate::transport::stdio::serve_stdio;
use crate::transport::{build_conformance_fixture, build_notes_server};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Longest `requestState` lifetime `--state-ttl` accepts: a confirmation is meant to be answered soon.
pub const STATE_TTL_SECS_MAX: u64 = 86_400;

/// The principal every request acts for when a fixture is served (fixtures have no authentication).
pub const FIXTURE_PRINCIPAL: &str = "anonymous";

/// Exit status for invalid arguments or configuration (as clap uses for usage errors).
const EXIT_USAGE: u8 = 2;
/// Exit status when serving failed at run time (e.g. the address is in use).
const EXIT_FAILED: u8 = 1;

const AFTER_HELP: &str = r#"Pointing an MCP client at it:

  stdio  The client starts the server as a subprocess and talks on its stdin/stdout. A typical client entry:
           {"command": "mcpsim", "args": ["serve", "--stdio", "--principal", "alice"]}
         One process serves one principal. Stdout carries only JSON-RPC; logs go to stderr.

  HTTP   Start it, then give the client the URL it prints and a bearer token:
           mcpsim serve --http 127.0.0.1:8080
           URL:     http://127.0.0.1:8080/mcp
           Header:  Authorization: Bearer demo-alice       (demo-bob for bob)
         Each JSON-RPC message is its own POST; there is no session. Try it with curl:
           curl -s http://127.0.0.1:8080/mcp -H 'Authorization: Bearer demo-alice' \
             -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
             -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list' \
             -d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'

The embedded demo (used without --config): principal alice (token demo-alice) may use
file:///Users/alice/Documents/Notes, principal bob (token demo-bob) may use file:///Users/bob/Notes;
seven notes, three of them alice's TPS reports.

A --config file is TOML:
    state_ttl_secs = 300                  # optional, default 300
    [principals.alice]
    token = "a-long-random-secret"        # HTTP bearer token of this principal
    workspaces = ["file:///home/alice/notes"]
    [[notes]]
    id = "note-1"
    title = "TPS report"
    uri = "file:///home/alice/notes/tps.md"
    body = "..."
    [[keys]]                              # optional; the first signs, later ones only verify
    id = "k1"
    secret_base64 = "..."                 # at least 32 bytes once decoded

Without [[keys]] each process draws a random key, so a requestState minted by one process fails
(state_signature) on another; give processes the same [[keys]] so any of them can finish any retry.

Logs: one line per request on stderr (principal, method, tool, outcome, latency; never tokens or
arguments). Filter them with MCPSIM_LOG, e.g. MCPSIM_LOG=warn.

With --gateway it serves the security gateway instead: backends notes, issues and an unreviewed look-alike
(notes_mirror) behind one endpoint, tools named backend.tool (notes.search, notes.export, issues.search),
only tools whose full descriptor matches a reviewed pin listed or callable (see `mcpsim pins --help`),
notes.export confirmed by the user through a form, per-principal rate limits, and one redacted audit
record per tools/call (JSON Lines, to --audit-log FILE or stderr). Same tokens, same transport rules.

Exit status: 0 after end of input (stdio) or ctrl-c / SIGTERM (HTTP); 1 if serving failed (e.g. the
address is in use); 2 for invalid arguments or configuration."#;

/// Run the notes server for real, over stdio or streamable HTTP.
#[derive(Debug, clap::Args)]
#[command(
    group(clap::ArgGroup::new("transport").required(true).args(["stdio", "http"])),
    after_long_help = AFTER_HELP,
    after_help = "Run `mcpsim serve --help` for how to point an MCP client at it and the --config format."
)]
pub struct ServeArgs {
    /// Serve newline-delimited JSON-RPC on stdin/stdout.
    ///
    /// For MCP clients that start the server as a subprocess. The process acts for one principal (see
    /// --principal) and stops cleanly at the end of its input.
    #[arg(long)]
    pub stdio: bool,

    /// Serve streamable HTTP at http://ADDR/mcp, e.g. --http 127.0.0.1:8080.
    ///
    /// Port 0 picks a free port; the bound address is printed on stderr as "listening on http://ADDR/mcp".
    /// Callers authenticate with Authorization: Bearer TOKEN. Stop with ctrl-c or SIGTERM: requests in
    /// flight are finished first.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen_address)]
    pub http: Option<SocketAddr>,

    /// Deployment file (TOML) [default: the embedded demo].
    ///
    /// Principals with their tokens and workspaces, notes, signing keys, state TTL; the format is shown
    /// below.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// How long a confirmation (requestState) stays valid, in seconds [default: 300].
    ///
    /// Overrides the configuration's state_ttl_secs (itself 300 unless set). At most one day.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=STATE_TTL_SECS_MAX))]
    pub state_ttl: Option<u64>,

    /// With --stdio: the principal this process acts for [default: alice].
    ///
    /// It must be a principal of the configuration. Over HTTP the bearer token decides instead.
    #[arg(long, value_name = "NAME", conflicts_with = "http")]
    pub principal: Option<String>,

    /// With --http: a browser origin allowed to call the server (repeatable).
    ///
    /// E.g. https://app.example.com. Without it, only pages served from this machine (localhost,
    /// 127.0.0.1, [::1]) may; with it, exactly the listed origins. Requests without an Origin header
    /// (non-browser clients) are not affected.
    #[arg(long = "allow-origin", value_name = "ORIGIN", conflicts_with = "stdio")]
    pub allow_origins: Vec<String>,

    /// Serve a test fixture instead of the notes server.
    ///
    /// conformance: the "everything server" the official MCP conformance suite expects (tools, prompts,
    /// resources, MRTR flows, progress and list-changed streams; see docs/conformance.md). It has no
    /// authentication, so over HTTP it only listens on loopback and answers only loopback Host/Origin values.
    #[arg(long, value_enum, value_name = "NAME", conflicts_with_all = ["config", "principal"])]
    pub fixture: Option<Fixture>,

    /// Serve the security gateway in front of its backends instead of the notes server.
    ///
    /// Tools are named backend.tool; only tools whose full descriptor matches a reviewed pin are listed or
    /// callable; notes.export asks the user to confirm each call; quotas are per principal and tool.
    #[arg(long, conflicts_with = "fixture")]
    pub gateway: bool,

    /// With --gateway: the gateway configuration (TOML: backends, policy, issues) [default: the embedded demo gateway].
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub gateway_config: Option<PathBuf>,

    /// With --gateway: the pin file, as `mcpsim pins approve` writes it [default: the embedded demo pins].
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub pins: Option<PathBuf>,

    /// With --gateway: append the audit log (JSON Lines, one record per tools/call) to FILE [default: stderr].
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub audit_log: Option<PathBuf>,
}

/// The fixtures `--fixture` can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fixture {
    /// The official conformance suite's "everything server".
    Conformance,
}

fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    if let Some(port) = text.strip_prefix("localhost:").and_then(|port| port.parse::<u16>().ok()) {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    Err("expected IP:PORT, e.g. 127.0.0.1:8080 (port 0 picks a free port; [::1]:8080 for IPv6)".into())
}

pub fn run(args: ServeArgs) -> ExitCode {
    init_logging();
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("mcpsim serve: {}", failure.message);
            ExitCode::from(failure.exit_code)
        }
    }
}

/// Why `serve` stopped unsuccessfully: a message saying what to do next, and the exit status.
struct Failure {
    message: String,
    exit_code: u8,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), exit_code: EXIT_USAGE }
    }

    fn failed(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), exit_code: EXIT_FAILED }
    }
}

/// What one `mcpsim serve` process serves, and for whom.
struct Served {
    service: Arc<dyn Service>,
    /// How callers are told apart over HTTP.
    authentication: Authentication,
    /// The principal a stdio process acts for.
    stdio_principal: String,
    /// One line for the startup log: keys, principals, state lifetime.
    summary: String,
}

fn serve(args: ServeArgs) -> Result<(), Failure> {
    let served = match args.fixture {
        Some(Fixture::Conformance) => {
            if let Some(address) = args.http.filter(|address| !address.ip().is_loopback()) {
                return Err(Failure::usage(format!(
                    "--fixture runs without authentication, so it only listens on loopback, not {address}: use --http 127.0.0.1:PORT"
                )));
            }
            let fixture = build_conformance_fixture(args.state_ttl);
            Served {
                service: Arc::new(fixture),
                authentication: Authentication::Anonymous { principal: FIXTURE_PRINCIPAL.to_string() },
                stdio_principal: FIXTURE_PRINCIPAL.to_string(),
                summary: format!(
                    "conformance fixture, no authentication (principal {FIXTURE_PRINCIPAL:?}), a random key of this process signs; requestState lives {} s",
                    args.state_ttl.unwrap_or(DEFAULT_STATE_TTL_MS / 1000)
                ),
            }
        }
        None if args.gateway => gateway_server(&args)?,
        None => notes_server(&args)?,
    };
    match args.http {
        None => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| Failure::failed(format!("cannot start the async runtime: {error}")))?;
            tracing::info!("serving stdio for principal {}; {}", served.stdio_principal, served.summary);
            runtime
                .block_on(serve_stdio(&*served.service, &served.stdio_principal))
                .map_err(|error| Failure::failed(format!("stdio failed: {error}")))?;
            tracing::info!("end of input; stopped");
            Ok(())
        }
        Some(address) => {
            let origins =
                OriginPolicy::from_allowed(&args.allow_origins).map_err(|error| Failure::usage(format!("--allow-origin {error}")))?;
            if matches!(&served.authentication, Authentication::Bearer(tokens) if tokens.is_empty()) {
                tracing::warn!("no principal has a token: every HTTP request will be refused (401). Add token = \"...\" to a principal.");
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|error| Failure::failed(format!("cannot start the async runtime: {error}")))?;
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind(address).await.map_err(|error| {
                    Failure::failed(format!(
                        "cannot listen on {address}: {error}. Choose another address or port (port 0 picks a free one)."
                    ))
                })?;
                let local = listener.local_addr().map_err(|error| Failure::failed(format!("cannot read the bound address: {error}")))?;
                if !local.ip().is_loopback() {
                    tracing::warn!(
                        "listening on a non-loopback address: bearer tokens travel in clear text; put TLS and network policy in front"
                    );
                }
                tracing::info!("{}", served.summary);
                let shutdown = http::shutdown_signal()
                    .map_err(|error| Failure::failed(format!("cannot install the SIGTERM/ctrl-c handlers: {error}")))?;
                let options = HttpOptions { origins, ..HttpOptions::default() };
                let router = http::router(served.service, served.authentication, options, local).map_err(Failure::usage)?;
                // Printed once, exactly so: tests and scripts read the address from it.
                eprintln!("listening on http://{local}{MCP_PATH}");
                http::serve_http(listener, router, shutdown)
                    .await
                    .map_err(|error| Failure::failed(format!("the HTTP server failed: {error}")))?;
                tracing::info!("stopped");
                Ok(())
            })
        }
    }
}

/// The notes server of the configured (or embedded demo) deployment.
fn notes_server(args: &ServeArgs) -> Result<Served, Failure> {
    let deployment = load_deployment(args.config.as_ref())?;
    let (server, _notes) = build_notes_server(&deployment, args.state_ttl).map_err(|error| Failure::usage(config_hint(error)))?;
    let stdio_principal = args.principal.clone().unwrap_or_else(|| DEFAULT_PRINCIPAL.to_string());
    if args.http.is_none() && !deployment.principals.contains_key(&stdio_principal) {
        let known: Vec<&str> = deployment.principals.keys().map(String::as_str).collect();
        return Err(Failure::usage(format!(
            "unknown principal {stdio_principal:?}: the configuration defines {}. Pass one of them with --principal.",
            if known.is_empty() { "no principals".to_string() } else { known.join(", ") }
        )));
    }
    if !deployment.keys.is_empty() {
        // Shared keys make states portable, but this process's replay store is its own (memory): until the
        // processes share a store, one confirmation could be used once on each of them.
        tracing::warn!(
            "configured [[keys]] let other processes accept this process's confirmations, but each process keeps its own replay store and notes in memory"
        );
    }
    let keys = match deployment.keys.first() {
        Some(key) => format!("configured key {:?} signs", key.id),
        None => "a random key of this process signs (states from it fail on other processes)".to_string(),
    };
    let tokens = deployment.tokens();
    let principals: Vec<&str> = tokens.values().map(String::as_str).collect();
    let summary = format!(
        "notes server; principals with tokens: {}; {keys}; requestState lives {} s",
        if principals.is_empty() { "none".to_string() } else { principals.join(", ") },
        args.state_ttl.unwrap_or(deployment.state_ttl_secs)
    );
    Ok(Served { service: Arc::new(server), authentication: Authentication::Bearer(Tokens::new(tokens)), stdio_principal, summary })
}

/// The security gateway of the configured (or embedded demo) gateway file, over the deployment's principals.
fn gateway_server(args: &ServeArgs) -> Result<Served, Failure> {
    let deployment = load_deployment(args.config.as_ref())?;
    let file = match &args.gateway_config {
        None => GatewayFile::demo(),
        Some(path) => GatewayFile::load(path).map_err(|error| Failure::usage(config_hint(error)))?,
    };
    let pins = load_pins(args.pins.as_deref()).map_err(|error| Failure::usage(config_hint(error)))?;
    let audit: Arc<dyn AuditSink> = match &args.audit_log {
        None => Arc::new(JsonLinesAuditSink::stderr()),
        Some(path) => Arc::new(JsonLinesAuditSink::open(path).map_err(|error| {
            Failure::usage(format!("cannot open the audit log {}: {error}. Pass a writable file path.", path.display()))
        })?),
    };
    let world = build_real_gateway(&file, &deployment, pins, audit, args.state_ttl).map_err(|error| Failure::usage(config_hint(error)))?;
    let stdio_principal = args.principal.clone().unwrap_or_else(|| DEFAULT_PRINCIPAL.to_string());
    if args.http.is_none() && !deployment.principals.contains_key(&stdio_principal) {
        return Err(Failure::usage(format!(
            "unknown principal {stdio_principal:?}: pass one of the configuration's principals with --principal"
        )));
    }
    let backends: Vec<String> = world.gateway.backends().iter().map(|b| b.id.clone()).collect();
    let summary = format!(
        "security gateway; backends: {}; policy {}; pins: {}; audit log: {}",
        backends.join(", "),
        file.policy.version,
        args.pins.as_ref().map_or("embedded demo pins".to_string(), |p| p.display().to_string()),
        args.audit_log.as_ref().map_or("stderr".to_string(), |p| p.display().to_string()),
    );
    let tokens = deployment.tokens();
    Ok(Served { service: Arc::new(world.gateway), authentication: Authentication::Bearer(Tokens::new(tokens)), stdio_principal, summary })
}

fn load_deployment(path: Option<&PathBuf>) -> Result<Deployment, Failure> {
    match path {
        None => Ok(Deployment::demo()),
        Some(path) => Deployment::load(path).map_err(|error| Failure::usage(config_hint(error))),
    }
}

fn config_hint(error: ConfigError) -> String {
    match error {
        ConfigError::Read { .. } => {
            format!("{error}. Pass the path of a TOML deployment file, or omit --config to serve the embedded demo.")
        }
        ConfigError::Parse { .. } | ConfigError::Invalid(_) => {
            format!("{error}. Fix the file; `mcpsim serve --help` shows the format.")
        }
    }
}

fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("MCPSIM_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Stdout belongs to JSON-RPC on stdio: logs only ever go to stderr.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_parse_with_a_helpful_error() {
        assert_eq!(parse_listen_address("127.0.0.1:0").unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(parse_listen_address("localhost:8080").unwrap(), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(parse_listen_address("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        for bad in ["8080", "127.0.0.1", "example.com:80", "127.0.0.1:99999", ""] {
            assert!(parse_listen_address(bad).unwrap_err().contains("IP:PORT"), "{bad}");
        }
    }
}
