//! `mcpsim serve`: the notes server for real, over stdio or streamable HTTP.
//!
//! Wiring only: load the deployment, build the server with [`build_notes_server`], start one transport.

use crate::config::{ConfigError, Deployment, DEFAULT_PRINCIPAL};
use crate::transport::build_notes_server;
use crate::transport::http::{self, HttpOptions, OriginPolicy, Tokens, MCP_PATH};
use crate::transport::stdio::serve_stdio;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Longest `requestState` lifetime `--state-ttl` accepts: a confirmation is meant to be answered soon.
pub const STATE_TTL_SECS_MAX: u64 = 86_400;

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

fn serve(args: ServeArgs) -> Result<(), Failure> {
    let deployment = load_deployment(args.config.as_ref())?;
    let (server, _notes) = build_notes_server(&deployment, args.state_ttl).map_err(|error| Failure::usage(config_hint(error)))?;
    let keys = match deployment.keys.first() {
        Some(key) => format!("configured key {:?} signs", key.id),
        None => "a random key of this process signs (states from it fail on other processes)".to_string(),
    };
    let state_ttl_secs = args.state_ttl.unwrap_or(deployment.state_ttl_secs);
    match args.http {
        None => {
            let principal = args.principal.unwrap_or_else(|| DEFAULT_PRINCIPAL.to_string());
            if !deployment.principals.contains_key(&principal) {
                let known: Vec<&str> = deployment.principals.keys().map(String::as_str).collect();
                return Err(Failure::usage(format!(
                    "unknown principal {principal:?}: the configuration defines {}. Pass one of them with --principal.",
                    if known.is_empty() { "no principals".to_string() } else { known.join(", ") }
                )));
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| Failure::failed(format!("cannot start the async runtime: {error}")))?;
            tracing::info!("serving stdio for principal {principal}; {keys}; requestState lives {state_ttl_secs} s");
            runtime.block_on(serve_stdio(&server, &principal)).map_err(|error| Failure::failed(format!("stdio failed: {error}")))?;
            tracing::info!("end of input; stopped");
            Ok(())
        }
        Some(address) => {
            let origins = OriginPolicy::from_allowed(&args.allow_origins).map_err(Failure::usage)?;
            let tokens = deployment.tokens();
            if tokens.is_empty() {
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
                let principals: Vec<&str> = tokens.values().map(String::as_str).collect();
                tracing::info!("principals with tokens: {}; {keys}; requestState lives {state_ttl_secs} s", principals.join(", "));
                let shutdown = http::shutdown_signal()
                    .map_err(|error| Failure::failed(format!("cannot install the SIGTERM/ctrl-c handlers: {error}")))?;
                let router =
                    http::router(Arc::new(server), Tokens::new(tokens.clone()), HttpOptions { origins, ..HttpOptions::default() }, local);
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
