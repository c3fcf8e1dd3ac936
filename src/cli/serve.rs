//! `mcpsim serve`: the notes server for real, over stdio or streamable HTTP, alone or as a fleet.
//!
//! Wiring only: load the deployment and the signing keys, open the store, build the server with
//! [`real_notes_server`] (or the conformance fixture with [`real_conformance_fixture`], or the security
//! gateway with [`real_gateway`]), start one transport:
//! stdio, or N HTTP listeners serving the same server (one store, one key ring). On SIGTERM every listener
//! stops accepting, finishes its requests in flight, and then the store is closed.

use crate::assembly::{real_conformance_fixture, real_gateway, real_notes_server};
use crate::cli::sandbox::{self, SandboxMode, SandboxPlan};
use crate::config::gateway::{load_pins, GatewayFile};
use crate::config::{load_key_file, ConfigError, Deployment, DEFAULT_PRINCIPAL};
use crate::eras::session::{
    SessionLimits, LEGACY_PRINCIPAL_SESSION_BYTES_MAX, LEGACY_SESSIONS_BYTES_MAX, LEGACY_SESSIONS_MAX, LEGACY_SESSION_BYTES_MAX,
    LEGACY_SESSION_IDLE_MS, LEGACY_SESSION_LIFETIME_MS,
};
use crate::eras::{LegacyAdapter, LEGACY_ANSWER_TIMEOUT_MS};
use crate::framework::Service;
use crate::policy::origin::OriginPolicy;
use crate::policy::pinning::PinFile;
use crate::policy::state::KeyRing;
use crate::policy::state::DEFAULT_STATE_TTL_MS;
use crate::servers::fixture::legacy_suite::LegacySuiteFixture;
use crate::servers::gateway::ports::{AuditSink, Backend};
use crate::servers::gateway::BackendHandle;
use crate::sim::actors::gateway_mutants::{DescriptionOnlyBackend, GatewayVariant, RealMutant};
use crate::stores::database::Durability;
use crate::stores::gateway::{JsonLinesAuditSink, SharedPins};
use crate::stores::memory::{
    default_replay_capacity, sustained_claims_per_second, ReplayLimits, REPLAY_PRINCIPAL_SHARE_PERCENT, REPLAY_RETENTION_GRACE_MS,
};
use crate::stores::out_of_band::{OutOfBandLimits, OUT_OF_BAND_CAPACITY, OUT_OF_BAND_PRINCIPAL_SHARE_PERCENT};
use crate::stores::spec::{open_for_gateway, open_with_limits, redact_store_text, STORE_SPEC_HELP};
use crate::stores::system::{OsNonces, SystemClock};
use crate::stores::{StoreSpec, Stores};
use crate::transport::http::{
    self, Authentication, ConnectionSlots, HttpLimits, HttpOptions, Tokens, BODY_READ_TIMEOUT_MS, CLIENT_CONNECTIONS_MAX, CONNECTIONS_MAX,
    HEADER_READ_TIMEOUT_MS, LEGACY_WAITING_MAX, LEGACY_WAITING_PER_PRINCIPAL_MAX, MCP_PATH, PAGE_BODY_BYTES_MAX,
    PRINCIPAL_REQUESTS_IN_FLIGHT_MAX, REQUESTS_IN_FLIGHT_MAX,
};
use crate::transport::page::{PageBase, SIGN_IN_BURST_PER_CLIENT, SIGN_IN_BURST_PER_REFERENCE, SIGN_IN_INTERVAL_MS};
use crate::transport::remote_backend::RemoteBackend;
use crate::transport::stdio::serve_stdio;
use crate::wire::jsonrpc::MESSAGE_BYTES_MAX;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Longest `requestState` lifetime `--state-ttl` accepts: a confirmation is meant to be answered soon.
pub(crate) const STATE_TTL_SECS_MAX: u64 = 86_400;

/// Most HTTP instances one `mcpsim serve` process runs (`--instances`).
pub(crate) const INSTANCES_MAX: u16 = 64;

/// The principal every request acts for when a fixture is served (fixtures have no authentication).
pub(crate) const FIXTURE_PRINCIPAL: &str = "anonymous";

/// The environment variable `--store` may come from (keeps a database password out of the process list).
pub(crate) const STORE_VARIABLE: &str = "MCPSIM_STORE";

/// Parses a `--store` (or `MCPSIM_STORE`) value. clap's own error for a bad value repeats it whole, password
/// included; this one repeats it with the password redacted ([`redact_store_text`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoreSpecParser;

impl clap::builder::TypedValueParser for StoreSpecParser {
    type Value = StoreSpec;

    fn parse_ref(&self, command: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr) -> Result<StoreSpec, clap::Error> {
        let flag = arg.and_then(clap::Arg::get_long).map_or("--store".to_string(), |long| format!("--{long}"));
        let Some(text) = value.to_str() else {
            return Err(clap::Error::raw(clap::error::ErrorKind::InvalidUtf8, format!("{flag} is not valid UTF-8\n")).with_cmd(command));
        };
        text.parse::<StoreSpec>().map_err(|error| {
            let message = format!("invalid value {:?} for {flag}: {error}\n", redact_store_text(text));
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(command)
        })
    }
}

/// Invalid arguments or configuration: `EXIT_USAGE`; serving failed at run time (e.g. the address is in use):
/// `EXIT_FAILED`.
use super::common::{EXIT_FAILED, EXIT_USAGE};

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
             -d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
                   "io.modelcontextprotocol/protocolVersion":"2026-07-28",
                   "io.modelcontextprotocol/clientCapabilities":{}}}}'

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
    public_url = "https://notes.example.com"   # optional, top of the file: what --public-url says
    [[keys]]                              # optional; the first signs, later ones only verify
    id = "k1"
    secret_base64 = "..."                 # at least 32 bytes once decoded

A fleet: instances that share one store and one key ring, so any of them finishes any retry and a
confirmation is used at most once across all of them (examples/deployment.toml in the repository is the
demo deployment written out, to start from):
    mcpsim keygen --out keys.toml                                               # once: the shared key file
    mcpsim seed --store sqlite:./fleet.db --config deployment.toml              # once; idempotent
    mcpsim serve --http 127.0.0.1:8080 --instances 3 \
        --store sqlite:./fleet.db --config deployment.toml --key-file keys.toml
  More processes (on this machine for sqlite:, on any machine for postgres:) join the same fleet by
  naming the same --store and --key-file. A --key-file holds only [[keys]] tables, as above: make one
  with `mcpsim keygen --out keys.toml` (created private, mode 600).
  With a shared store the notes live in the store: [[notes]] of --config are loaded by `mcpsim seed`,
  not by serve. The memory store (the default) is this process's alone, loaded from --config.

Without shared keys each process draws a random key, so a requestState minted by one process fails
(state_signature) on another; without a shared store each process has its own replay store, so a
confirmation could be used once on each process. The startup log warns about both.

Logs: one line per request on stderr (listener, principal, method, tool, outcome, latency; never
tokens, requestState or arguments). Filter them with MCPSIM_LOG, e.g. MCPSIM_LOG=warn.

With --gateway it serves the security gateway instead: backends notes, issues and an unreviewed look-alike
(notes_mirror) behind one endpoint, tools named backend.tool (notes.search, notes.export, issues.search),
only tools whose full descriptor matches a reviewed pin listed or callable (see `mcpsim pins --help`),
notes.export confirmed by the user through a form, per-principal rate limits, and one redacted audit
record per tools/call (JSON Lines, to --audit-log FILE or stderr). Same tokens, same transport rules.
Gateway processes given the same [[keys]] and --store sqlite:PATH or postgres:URL are one deployment: the
replay ledger, the rate counters and the export ledgers live in that store, so a confirmation exports at
most once, a decline is terminal, and a quota holds across all of them.

Examples:
    mcpsim serve --http 127.0.0.1:8080                          # the demo over HTTP, tokens demo-alice, demo-bob
    mcpsim serve --stdio --principal alice                      # for an MCP client that starts it itself
    mcpsim serve --http 127.0.0.1:0 --instances 3 --store sqlite:./fleet.db --key-file keys.toml
    mcpsim serve --http 127.0.0.1:3000 --fixture conformance    # the conformance suite's fixture
    mcpsim serve --http 127.0.0.1:8080 --eras both              # also MCP 2025-11-25 clients (initialize, sessions)
    mcpsim serve --http 127.0.0.1:8080 --gateway                # the security gateway in front of its backends
    mcpsim serve --stdio --store dir:$HOME/Notes --config me.toml --sandbox required   # a real folder, sandboxed

Exit status: 0 after end of input (stdio) or ctrl-c / SIGTERM (HTTP); 1 if serving failed (e.g. the
address is in use, the store is unreachable); 2 for invalid arguments or configuration."#;

/// File descriptors kept free of HTTP connections for everything else a process opens (its store, its logs).
const FILES_RESERVED: usize = 64;

/// The long help: [`AFTER_HELP`], then the HTTP limits as the named constants say them.
fn after_long_help() -> String {
    format!(
        "{AFTER_HELP}

HTTP limits (each refusal carries a JSON-RPC error body; docs/serving.md lists every check in order):
  headers      within {HEADER_READ_TIMEOUT_MS} ms of connecting or of the previous response (an idle keep-alive
               connection closes then too), else the connection is closed
  body         within {BODY_READ_TIMEOUT_MS} ms of its headers on every route (the page's too) and at most
               {MESSAGE_BYTES_MAX} bytes ({PAGE_BODY_BYTES_MAX} off /mcp), else 408 (the connection closes) or 413
  connections  {CONNECTIONS_MAX} open at once per process, over all its --instances (fewer if ulimit -n is
               lower); one more is answered 503 (Retry-After: 1) and closed; at most {CLIENT_CONNECTIONS_MAX} of them from one
               client address (an IPv6 /64), beyond that 429 (Retry-After: 1) and closed
  in flight    {REQUESTS_IN_FLIGHT_MAX} requests per listener, of which {PRINCIPAL_REQUESTS_IN_FLIGHT_MAX} per principal; beyond, 503 or 429
               (Retry-After: 1), never a queue; off /mcp (the page) as many again, {PRINCIPAL_REQUESTS_IN_FLIGHT_MAX} per client address
  legacy       (--eras both) a call waiting for its client's answer holds no place in flight but one of
               {LEGACY_WAITING_MAX} waiting places ({LEGACY_WAITING_PER_PRINCIPAL_MAX} per principal), until the answer, {LEGACY_ANSWER_TIMEOUT_S} s, or the client
               closing its stream; a session keeps at most {LEGACY_SESSION_BYTES_MAX} bytes of capabilities and clientInfo,
               a principal's sessions {LEGACY_PRINCIPAL_SESSION_BYTES_MAX}, an instance's {LEGACY_SESSIONS_BYTES_MAX}
  page         (--out-of-band) sign-in attempts: a burst of {SIGN_IN_BURST_PER_CLIENT} per client address and {SIGN_IN_BURST_PER_REFERENCE} per
               link, then one per {SIGN_IN_INTERVAL_MS} ms each; beyond, 429 (Retry-After) before the token is looked at",
        LEGACY_ANSWER_TIMEOUT_S = LEGACY_ANSWER_TIMEOUT_MS / 1000
    )
}

/// Run the notes server for real, over stdio or streamable HTTP, alone or as a fleet of instances.
#[derive(Debug, clap::Args)]
#[command(
    group(clap::ArgGroup::new("transport").required(true).args(["stdio", "http"])),
    after_long_help = after_long_help(),
    after_help = "Examples:
  mcpsim serve --http 127.0.0.1:8080             # the demo over HTTP: POST http://127.0.0.1:8080/mcp
  mcpsim serve --stdio --principal alice         # newline-delimited JSON-RPC on stdin/stdout

Run `mcpsim serve --help` for how to point an MCP client at it, a fleet, and the --config format."
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
    /// E.g. `https://app.example.com`. Without it, only pages served from this machine (localhost,
    /// 127.0.0.1, `[::1]`) may; with it, exactly the listed origins. Requests without an Origin header
    /// (non-browser clients) are not affected.
    #[arg(long = "allow-origin", value_name = "ORIGIN", conflicts_with = "stdio")]
    pub allow_origins: Vec<String>,

    /// Serve a test fixture instead of the notes server.
    ///
    /// conformance: the "everything server" the official MCP conformance suite expects (tools, prompts,
    /// resources, MRTR flows, progress and list-changed streams; see docs/conformance.md). It has no
    /// authentication, so over HTTP it only listens on loopback and answers only loopback Host/Origin values.
    #[arg(long, value_enum, value_name = "NAME", conflicts_with_all = ["config", "principal", "key_file"])]
    pub fixture: Option<Fixture>,

    /// Serve the security gateway in front of its backends instead of the notes server.
    ///
    /// Tools are named backend.tool; only tools whose full descriptor matches a reviewed pin are listed or
    /// callable; notes.export asks the user to confirm each call; quotas are per principal and tool.
    #[arg(long, conflicts_with_all = ["fixture", "key_file"])]
    pub gateway: bool,

    /// With --gateway: the gateway configuration (TOML: backends, policy, issues) [default: the embedded demo gateway].
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub gateway_config: Option<PathBuf>,

    /// With --gateway: the pin file, as `mcpsim pins approve` writes it [default: the embedded demo pins].
    /// SIGHUP re-reads it: an approval takes effect, a removed pin is revoked, without a restart.
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub pins: Option<PathBuf>,

    /// With --gateway: append the audit log (JSON Lines, one record per tools/call) to FILE [default: stderr].
    #[arg(long, value_name = "FILE", requires = "gateway")]
    pub audit_log: Option<PathBuf>,

    /// Test-only (hidden): serve a deliberately broken gateway of the mutant zoo, for `gateway-lab` to catch.
    /// Refused without --i-know-this-gateway-is-broken; the startup line says MUTANT.
    #[arg(long, value_name = "NAME", requires = "gateway", hide = true)]
    pub gateway_mutant: Option<String>,

    /// Test-only (hidden): the explicit consent --gateway-mutant needs.
    #[arg(long, requires = "gateway_mutant", hide = true)]
    pub i_know_this_gateway_is_broken: bool,

    /// Where notes and used confirmations live: memory | sqlite:PATH | postgres:URL [default: memory].
    ///
    /// memory: inside this process; its --instances share it, other processes cannot, and it is loaded from
    /// --config at start. sqlite:PATH: one SQLite file shared by every process on this machine.
    /// postgres:URL: a PostgreSQL database shared by processes on any machine (e.g.
    /// postgres://mcpsim:secret@db.internal:5432/mcpsim). A shared store is created and migrated at start
    /// and loaded with `mcpsim seed --store SPEC`. Also read from MCPSIM_STORE, which keeps a database
    /// password out of the process list.
    #[arg(long, value_name = "SPEC", env = STORE_VARIABLE, hide_env_values = true, value_parser = StoreSpecParser)]
    pub store: Option<StoreSpec>,

    /// When a sqlite: or postgres: store acknowledges a commit: durable | relaxed [default: durable].
    ///
    /// durable: a confirmation is answered only once its commit is on stable storage (SQLite
    /// synchronous=FULL, PostgreSQL synchronous_commit=on); an answered deletion survives power loss.
    /// relaxed: answered before the flush (SQLite synchronous=NORMAL, PostgreSQL synchronous_commit=off for
    /// this process's sessions). The store stays consistent after any crash and a confirmation is still used
    /// at most once (its claim and its delete are lost together), but the last deletions before a power loss
    /// (SQLite) or a database crash (PostgreSQL) can be undone. A crash of mcpsim itself loses nothing.
    #[arg(long, value_name = "MODE")]
    pub durability: Option<Durability>,

    /// With --http: offer `notes_publish`, whose URL-mode elicitation sends the user to this server's own
    /// out-of-band page (GET /connect/REFERENCE on the same listener): the user signs in there with their own
    /// token and authorizes; the MCP retry then publishes. The flows live in the store (shared through
    /// sqlite:/postgres:, so any instance finishes any flow); page sessions are sealed with keys derived from
    /// the signing key ring, so every process with the same --key-file accepts them. On a non-loopback
    /// address it needs --public-url.
    #[arg(long, requires = "http", conflicts_with = "gateway")]
    pub out_of_band: bool,

    /// With --out-of-band: the base URL browsers reach this server at, e.g. <https://notes.example.com>.
    ///
    /// The page's links start with it, and the page answers only requests whose Host names it (a proxy in
    /// front must pass the original Host on) and whose Origin, when sent, is it. Required when --http is not
    /// a loopback address (0.0.0.0:PORT names no reachable host); without it a loopback listener's links
    /// name the listener (<http://127.0.0.1:PORT>), and with one a loopback listener's /mcp accepts that Host
    /// too (a reverse proxy on this machine). Overrides public_url in --config. A scheme, a host and a port only: no path.
    #[arg(long, value_name = "URL", requires = "out_of_band", value_parser = crate::policy::origin::parse_public_url)]
    pub public_url: Option<String>,

    /// With --http: run N instances, each its own listener, sharing one store and one key ring.
    ///
    /// They listen on ADDR's port and the next N-1 ports (with port 0, each on a free port); each prints its
    /// "listening on" line. At most 64. [default: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=i64::from(INSTANCES_MAX)), conflicts_with = "stdio")]
    pub instances: Option<u16>,

    /// Signing keys shared by a fleet: a TOML file of `[[keys]]` tables (id, secret_base64).
    ///
    /// The first key signs, the rest only verify (states sealed before a key rotation). Every process of a
    /// fleet reads the same file; keep it private (chmod 600). Replaces `[[keys]]` in --config, which must
    /// then have none.
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,

    /// The share of the replay store (its `[replay] capacity`) one principal may hold, in percent [default: 25].
    ///
    /// A principal that fills its share (declining confirmations as fast as it can, say) is refused with
    /// replay_store_full while every other principal keeps working; the whole store's bound is kept too.
    /// Every process of a fleet should use the same share.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100), conflicts_with = "fixture")]
    pub replay_share: Option<u8>,

    /// Test setting of the replay store's capacity (hidden: the default is the documented one), so a test
    /// fills a principal's share in a few requests.
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "fixture")]
    pub replay_capacity: Option<u32>,

    /// With --out-of-band: the share of the out-of-band store (100,000 unexpired flows) one principal may
    /// hold, in percent [default: 25].
    ///
    /// A principal that fills its share (starting notes_publish flows as fast as it can, say) is refused with
    /// out_of_band_store_full while every other principal keeps starting flows; the whole store's bound is kept
    /// too. Every process of a fleet should use the same share.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100), requires = "out_of_band")]
    pub out_of_band_share: Option<u8>,

    /// Test setting of the out-of-band store's capacity (hidden: the default is the documented one), so a
    /// test fills a principal's share in a few requests.
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), requires = "out_of_band")]
    pub out_of_band_capacity: Option<u32>,

    /// Test settings of the HTTP limits (hidden: the defaults are the documented ones). Short deadlines and
    /// small bounds let a test attack them in seconds.
    #[arg(long, hide = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "stdio")]
    pub http_header_timeout_ms: Option<u64>,
    #[arg(long, hide = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "stdio")]
    pub http_body_timeout_ms: Option<u64>,
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "stdio")]
    pub http_connections_max: Option<u32>,
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "stdio")]
    pub http_client_connections_max: Option<u32>,
    /// Test setting of the page's sign-in throttle (hidden): one attempt per MS after the bursts.
    #[arg(long, hide = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..), requires = "out_of_band")]
    pub page_sign_in_interval_ms: Option<u64>,
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "stdio")]
    pub http_requests_max: Option<u32>,
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "stdio")]
    pub http_principal_requests_max: Option<u32>,
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), requires = "eras")]
    pub http_legacy_waiting_max: Option<u32>,

    /// Restrict this process with Landlock (Linux) to the files its store needs: required | best-effort | off.
    ///
    /// Applied before serving: with a dir: store, read/remove in the folder and read/write in its .mcpsim;
    /// with sqlite:, the database's folder; nothing else on disk. The start-up line says whether it is active
    /// and at which Landlock ABI. best-effort serves without it on a kernel that lacks Landlock (and says so);
    /// required refuses to start there. [default: best-effort]
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,

    /// Which MCP eras to serve: modern | both [default: modern].
    ///
    /// modern: MCP 2026-07-28 only; initialize gets -32601 naming the supported version, and no session
    /// exists. both: also MCP 2025-11-25 clients that open with initialize, through a separate adapter over
    /// the same server code (a confirmation becomes an elicitation/create request inside the call). Legacy
    /// HTTP sessions (Mcp-Session-Id) live in the instance that made them: a fleet needs sticky routing for
    /// legacy clients, while modern requests still go anywhere.
    #[arg(long, value_enum, value_name = "ERAS")]
    pub eras: Option<ErasArg>,
}

/// The eras `--eras` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ErasArg {
    /// MCP 2026-07-28 only.
    Modern,
    /// MCP 2026-07-28 and, for clients that open with initialize, 2025-11-25.
    Both,
}

/// A fresh 2025-11-25 adapter over `service` (one per instance: its sessions are that instance's own).
fn legacy_adapter(service: &Arc<dyn Service>, eras: Option<ErasArg>, stdio: bool) -> Option<Arc<LegacyAdapter>> {
    if eras != Some(ErasArg::Both) {
        return None;
    }
    // A stdio process is one client's: its session lasts as long as the process.
    let limits = if stdio {
        SessionLimits { idle_ms: u64::MAX, lifetime_ms: u64::MAX, ..SessionLimits::default() }
    } else {
        SessionLimits::default()
    };
    Some(Arc::new(LegacyAdapter::new(service.clone(), limits, Arc::new(SystemClock), Arc::new(OsNonces))))
}

impl ServeArgs {
    /// The replay store's bounds: the deployment's `[replay] capacity`, else the store's default (memory by
    /// bytes, databases by rows); the documented grace; each principal's share as configured.
    fn replay_limits(&self, store: &StoreSpec, deployment: &Deployment) -> ReplayLimits {
        let share = self.replay_share.map_or(REPLAY_PRINCIPAL_SHARE_PERCENT, usize::from);
        let configured = self.replay_capacity.map(u64::from).or(deployment.replay.capacity);
        let capacity =
            configured.map_or_else(|| default_replay_capacity(store.replay_medium()), |n| usize::try_from(n).unwrap_or(usize::MAX));
        ReplayLimits::with_share(capacity, share, REPLAY_RETENTION_GRACE_MS)
    }

    /// The out-of-band store's bounds: the documented capacity (unless the hidden test setting says otherwise)
    /// and each principal's share as configured.
    fn out_of_band_limits(&self) -> OutOfBandLimits {
        let capacity = self.out_of_band_capacity.map_or(OUT_OF_BAND_CAPACITY, |n| usize::try_from(n).unwrap_or(usize::MAX));
        OutOfBandLimits::with_share(capacity, self.out_of_band_share.map_or(OUT_OF_BAND_PRINCIPAL_SHARE_PERCENT, usize::from))
    }

    /// The HTTP limits: the documented defaults, unless a (hidden) test setting says otherwise.
    fn http_limits(&self) -> HttpLimits {
        let defaults = HttpLimits::default();
        let count = |value: Option<u32>, default: usize| value.map_or(default, |n| n as usize);
        HttpLimits {
            header_read_timeout_ms: self.http_header_timeout_ms.unwrap_or(defaults.header_read_timeout_ms),
            body_read_timeout_ms: self.http_body_timeout_ms.unwrap_or(defaults.body_read_timeout_ms),
            connections_max: count(self.http_connections_max, defaults.connections_max),
            client_connections_max: count(self.http_client_connections_max, defaults.client_connections_max),
            requests_in_flight_max: count(self.http_requests_max, defaults.requests_in_flight_max),
            principal_requests_in_flight_max: count(self.http_principal_requests_max, defaults.principal_requests_in_flight_max),
            legacy_waiting_max: count(self.http_legacy_waiting_max, defaults.legacy_waiting_max),
            ..defaults
        }
    }
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
    /// What legacy sessions are served by, when not `service` itself (the fixture adds the 2025-11-25
    /// suite's own tools for them, leaving modern answers untouched).
    legacy_service: Option<Arc<dyn Service>>,
    /// How callers are told apart over HTTP.
    authentication: Authentication,
    /// The principal a stdio process acts for.
    stdio_principal: String,
    /// One line for the startup log: store, keys, principals, state lifetime.
    summary: String,
    /// Closed after the last request (the fixture has none).
    stores: Option<Stores>,
    /// With `--out-of-band`: what each listener needs to offer `notes_publish` and serve its page.
    page: Option<PagePlan>,
}

/// The notes server and what its out-of-band page needs, before the listeners' addresses are known (a
/// page URL names the listener that issued it).
struct PagePlan {
    /// What each listener's notes server is built from: the configuration and the ports of the store, to
    /// which the listener adds its own out-of-band page base.
    config: Arc<crate::servers::notes::NotesConfig>,
    ports: crate::servers::notes::NotesPorts,
    tokens: Tokens,
    store: Arc<dyn crate::framework::out_of_band::OutOfBandStore>,
    /// Seals page sessions and signs CSRF tokens: the signing key ring derived for the page, the same in
    /// every process holding the same ring.
    keys: KeyRing,
    /// The configured public base URL (`--public-url`, else the deployment's `public_url`), as
    /// [`crate::policy::origin::parse_public_url`] writes it.
    public_url: Option<String>,
}

/// The notes server, decided before anything is opened: every argument and file is checked first.
struct NotesPlan {
    deployment: Deployment,
    key_ring: KeyRing,
    /// Where the key ring came from, for the startup log (ids only, never key bytes).
    keys: String,
    /// Whether other processes can hold the same keys (configured or from a key file, not drawn here).
    keys_shared: bool,
    store: StoreSpec,
    durability: Durability,
    stdio_principal: String,
    /// With --out-of-band: the public base URL of the page, if configured.
    public_url: Option<String>,
}

/// What a process serves, decided before the runtime starts.
enum Plan {
    Fixture,
    Gateway(GatewayPlan),
    Notes(NotesPlan),
}

fn serve(args: ServeArgs) -> Result<(), Failure> {
    let refuse_store = |what: &str| match &args.store {
        Some(store) => {
            Err(Failure::usage(format!("{what} keeps its state in the process; drop --store {store} (or unset {STORE_VARIABLE})")))
        }
        None if args.durability.is_some() => Err(Failure::usage(format!("{what} keeps its state in the process; drop --durability"))),
        None => Ok(()),
    };
    let plan = match args.fixture {
        Some(Fixture::Conformance) => {
            if let Some(address) = args.http.filter(|address| !address.ip().is_loopback()) {
                return Err(Failure::usage(format!(
                    "--fixture runs without authentication, so it only listens on loopback, not {address}: use --http 127.0.0.1:PORT"
                )));
            }
            refuse_store("--fixture")?;
            Plan::Fixture
        }
        None if args.gateway => Plan::Gateway(plan_gateway(&args)?),
        None => Plan::Notes(plan_notes_server(&args)?),
    };
    let origins = OriginPolicy::from_allowed(&args.allow_origins).map_err(|error| Failure::usage(format!("--allow-origin {error}")))?;
    let limits = args.http_limits();
    let addresses =
        args.http.map(|address| instance_addresses(address, args.instances.unwrap_or(1))).transpose().map_err(Failure::usage)?;
    // The sandbox comes before the runtime: Landlock restricts the calling thread and the threads it starts
    // later, so every runtime thread is inside it. Every file the plan needed was read above.
    let store_spec = match &plan {
        Plan::Notes(notes) => notes.store.clone(),
        // A gateway fleet shares its ledgers in its store: the sandbox lets it reach that store's files.
        Plan::Gateway(gateway) => gateway.store.clone(),
        Plan::Fixture => StoreSpec::Memory,
    };
    let mut sandbox_plan = SandboxPlan::for_store(&store_spec).map_err(|error| Failure::usage(format!("--sandbox: {error}")))?;
    if let Plan::Gateway(GatewayPlan { pins_path: Some(path), .. }) = &plan {
        // SIGHUP re-reads the pin file, which `pins approve` replaces by a rename: its folder, read only.
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let folder = std::fs::canonicalize(&folder)
            .map_err(|error| Failure::usage(format!("--sandbox: the folder of --pins {}: {error}", path.display())))?;
        sandbox_plan.read.push(folder);
    }
    let sandboxed = sandbox::apply(args.sandbox.unwrap_or_default(), &sandbox_plan).map_err(|error| Failure::usage(error.to_string()))?;
    let runtime = match addresses {
        Some(_) => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        // One message at a time on stdio: one thread is enough.
        None => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    }
    .map_err(|error| Failure::failed(format!("cannot start the async runtime: {error}")))?;
    runtime.block_on(async move {
        let mut served = match plan {
            Plan::Fixture => conformance_fixture(args.state_ttl),
            Plan::Gateway(plan) => {
                let limits = args.replay_limits(&plan.store, &plan.deployment);
                open_gateway(plan, args.state_ttl, limits).await?
            }
            Plan::Notes(plan) => {
                let limits = args.replay_limits(&plan.store, &plan.deployment);
                let flows = args.out_of_band.then(|| args.out_of_band_limits());
                open_notes_server(plan, args.state_ttl, limits, flows).await?
            }
        };
        served.summary = format!("{}; {sandboxed}", served.summary);
        let result = match addresses {
            None => run_stdio(&served, legacy_adapter(served.legacy_service.as_ref().unwrap_or(&served.service), args.eras, true)).await,
            Some(addresses) => {
                let sign_in_interval_ms = args.page_sign_in_interval_ms.unwrap_or(SIGN_IN_INTERVAL_MS);
                run_http(&served, addresses, origins, limits, args.eras, sign_in_interval_ms).await
            }
        };
        if let Some(stores) = &served.stores {
            // After the last request: every committed change is durable already; this only releases connections.
            match stores.admin.close().await {
                Ok(()) => tracing::info!("store closed: {}", stores.admin.describe()),
                Err(error) => tracing::warn!("closing the store: {error}"),
            }
        }
        result
    })
}

/// The listening addresses of `instances` instances: `first`'s port and the ones after it, or port 0 for each.
fn instance_addresses(first: SocketAddr, instances: u16) -> Result<Vec<SocketAddr>, String> {
    (0..instances)
        .map(|index| {
            if first.port() == 0 {
                return Ok(first);
            }
            let port = first.port().checked_add(index).ok_or_else(|| {
                format!("--instances {instances} from port {} runs past port 65535; start lower, or use port 0", first.port())
            })?;
            Ok(SocketAddr::new(first.ip(), port))
        })
        .collect()
}

fn conformance_fixture(state_ttl_secs: Option<u64>) -> Served {
    let fixture = Arc::new(real_conformance_fixture(state_ttl_secs));
    Served {
        service: fixture.clone(),
        legacy_service: Some(Arc::new(LegacySuiteFixture { fixture })),
        authentication: Authentication::Anonymous { principal: FIXTURE_PRINCIPAL.to_string() },
        stdio_principal: FIXTURE_PRINCIPAL.to_string(),
        summary: format!(
            "conformance fixture, no authentication (principal {FIXTURE_PRINCIPAL:?}), a random key of this process signs; requestState lives {} s",
            state_ttl_secs.unwrap_or(DEFAULT_STATE_TTL_MS / 1000)
        ),
        stores: None,
        page: None,
    }
}

/// Checks the notes server's arguments and files: deployment, principal, keys, store.
fn plan_notes_server(args: &ServeArgs) -> Result<NotesPlan, Failure> {
    let deployment = load_deployment(args.config.as_ref())?;
    let stdio_principal = args.principal.clone().unwrap_or_else(|| DEFAULT_PRINCIPAL.to_string());
    if args.http.is_none() && !deployment.principals.contains_key(&stdio_principal) {
        let known: Vec<&str> = deployment.principals.keys().map(String::as_str).collect();
        return Err(Failure::usage(format!(
            "unknown principal {stdio_principal:?}: the configuration defines {}. Pass one of them with --principal.",
            if known.is_empty() { "no principals".to_string() } else { known.join(", ") }
        )));
    }
    let configured = deployment.configured_key_ring().map_err(|error| Failure::usage(config_hint(error)))?;
    let (key_ring, keys, keys_shared) = match (&args.key_file, configured) {
        (Some(path), Some(_)) => {
            return Err(Failure::usage(format!(
                "both --key-file {} and [[keys]] in --config name signing keys; keep them in one place (remove [[keys]] from the config)",
                path.display()
            )))
        }
        (Some(path), None) => {
            let ring = load_key_file(path).map_err(|error| Failure::usage(key_file_hint(error)))?;
            warn_if_readable_by_others(path, "the key file", "holds signing keys");
            let keys = describe_ring(&ring, &format!("--key-file {}", path.display()));
            (ring, keys, true)
        }
        (None, Some(ring)) => {
            let keys = describe_ring(&ring, "--config");
            (ring, keys, true)
        }
        (None, None) => {
            let ring = deployment.key_ring_or_random().map_err(|error| Failure::usage(config_hint(error)))?;
            (ring, "a random key of this process signs (states from it fail on other processes)".to_string(), false)
        }
    };
    let store = args.store.clone().unwrap_or(StoreSpec::Memory);
    #[cfg(unix)]
    if args.durability.is_some() && matches!(store, StoreSpec::Dir { .. }) {
        return Err(Failure::usage(
            "--durability applies to a sqlite: or postgres: store; a dir: store syncs every claim before its delete",
        ));
    }
    if args.durability.is_some() && !store.is_shared() {
        return Err(Failure::usage("--durability applies to a sqlite: or postgres: store; a memory store writes nothing to disk"));
    }
    let durability = args.durability.unwrap_or_default();
    let public_url = match &args.public_url {
        Some(url) => Some(url.clone()),
        // Checked when the configuration was loaded.
        None => deployment
            .public_url
            .as_deref()
            .map(crate::policy::origin::parse_public_url)
            .transpose()
            .map_err(|error| Failure::usage(error.to_string()))?,
    };
    if let Some(address) = args.http.filter(|address| args.out_of_band && public_url.is_none() && !address.ip().is_loopback()) {
        return Err(Failure::usage(format!(
            "--out-of-band on {address} needs --public-url URL: the address browsers reach this server at (e.g. --public-url https://notes.example.com, or http://HOST:{port} with this machine's name or IP), which the page's links name and its Host and Origin checks require; {ip} is no address a browser can open. Or listen on a loopback address (--http 127.0.0.1:{port})",
            port = if address.port() == 0 { "PORT".to_string() } else { address.port().to_string() },
            ip = address.ip(),
        )));
    }
    let public_url = public_url.filter(|_| args.out_of_band);
    Ok(NotesPlan { deployment, key_ring, keys, keys_shared, store, durability, stdio_principal, public_url })
}

fn describe_ring(ring: &KeyRing, source: &str) -> String {
    let verifying = ring.key_ids().filter(|id| *id != ring.signing_key_id()).count();
    let also = if verifying == 0 { String::new() } else { format!(", {verifying} more only verify") };
    format!("key {:?} from {source} signs{also}", ring.signing_key_id())
}

/// A key file (or a configuration holding keys or tokens) that others can read lets them forge confirmations
/// for every instance of the fleet, or act as any principal.
#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path, what: &str, holding: &str) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                "{what} {} {holding} and is readable by other users (mode {mode:03o}); make it private: chmod 600 {}",
                path.display(),
                path.display()
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path, _what: &str, _holding: &str) {}

/// Opens the store and builds the notes server over it.
async fn open_notes_server(
    plan: NotesPlan,
    state_ttl_secs: Option<u64>,
    replay_limits: ReplayLimits,
    out_of_band: Option<OutOfBandLimits>,
) -> Result<Served, Failure> {
    let flow_limits = out_of_band.unwrap_or_default();
    let NotesPlan { deployment, key_ring, keys, keys_shared, store, durability, stdio_principal, public_url } = plan;
    // Derived before the ring goes into the server: the page never holds the ring's own keys.
    let page_keys = key_ring.derive(crate::transport::page::PAGE_KEY_LABEL);
    let stores = match &store {
        // This process's own store, loaded from the deployment (as every start before shared stores did).
        StoreSpec::Memory => {
            Stores::in_memory(deployment.notes(), Arc::new(SystemClock), replay_limits).with_out_of_band_limits(flow_limits)
        }
        shared => open_with_limits(shared, Arc::new(SystemClock), replay_limits, flow_limits, durability).await.map_err(|error| {
            Failure::failed(format!("cannot open the store {shared}: {error}. Check the path or URL ({STORE_SPEC_HELP})."))
        })?,
    };
    let server = real_notes_server(&deployment, key_ring, &stores, state_ttl_secs).map_err(|error| Failure::usage(config_hint(error)))?;
    let note_count = stores.admin.list().await.map_err(|error| Failure::failed(format!("cannot read the store: {error}")))?.len();
    if store.is_shared() {
        if note_count == 0 {
            tracing::warn!(
                "the store holds no notes; load the deployment's with `mcpsim seed --store {store}{}`",
                if deployment.notes.is_empty() { String::new() } else { " --config FILE".to_string() }
            );
        }
        if !keys_shared {
            tracing::warn!(
                "the store is shared, but this process signs with a random key of its own: other processes cannot finish its confirmations (state_signature). Give every process the same --key-file"
            );
        }
    } else if keys_shared {
        // Shared keys make states portable, but a memory store is this process's alone: one confirmation could
        // then be used once on each process that holds the keys.
        tracing::warn!(
            "the signing keys are shared, but this process keeps its own replay store and notes in memory: a confirmation accepted here can be used again on another process. Point every process at one --store sqlite:PATH or postgres:URL"
        );
    }
    let tokens = deployment.tokens();
    let principals: Vec<&str> = tokens.values().map(String::as_str).collect();
    let ttl_secs = state_ttl_secs.unwrap_or(deployment.state_ttl_secs);
    // What the database itself says about commits, not an echo of the flag.
    let commits = match stores.admin.commit_setting().await {
        Ok(setting) if store.is_shared() => format!(" ({durability} commits: {setting})"),
        Ok(_) => String::new(),
        Err(error) => format!(" ({durability} commits; the database did not say how: {error})"),
    };
    let summary = format!(
        "notes server; store: {}{commits}, {note_count} notes, room for {} confirmations ({} per principal; {:.0}/s sustained at this TTL + {} s grace); principals with tokens: {}; {keys}; requestState lives {} s",
        stores.admin.describe(),
        replay_limits.capacity,
        replay_limits.principal_capacity,
        sustained_claims_per_second(replay_limits.capacity, ttl_secs.saturating_mul(1000), replay_limits.retention_grace_ms),
        replay_limits.retention_grace_ms / 1000,
        if principals.is_empty() { "none".to_string() } else { principals.join(", ") },
        ttl_secs
    );
    let page = out_of_band.is_some().then(|| PagePlan {
        config: server.config.clone(),
        ports: server.ports.clone(),
        tokens: Tokens::new(tokens.clone()),
        store: stores.out_of_band.clone(),
        keys: page_keys,
        public_url: public_url.clone(),
    });
    let summary = match (out_of_band, &public_url) {
        (None, _) => summary,
        (Some(flows), None) => format!(
            "{summary}; notes_publish and its out-of-band page at /connect/ of each listener (room for {} unexpired flows, {} per principal)",
            flows.capacity, flows.principal_capacity
        ),
        (Some(flows), Some(url)) => format!(
            "{summary}; notes_publish and its out-of-band page at {url}/connect/ (room for {} unexpired flows, {} per principal)",
            flows.capacity, flows.principal_capacity
        ),
    };
    Ok(Served {
        service: Arc::new(server),
        legacy_service: None,
        authentication: Authentication::Bearer(Tokens::new(tokens)),
        stdio_principal,
        summary,
        stores: Some(stores),
        page,
    })
}

async fn run_stdio(served: &Served, legacy: Option<Arc<LegacyAdapter>>) -> Result<(), Failure> {
    let eras = if legacy.is_some() { "MCP 2026-07-28 and 2025-11-25" } else { "MCP 2026-07-28" };
    tracing::info!("serving stdio ({eras}) for principal {}; {}", served.stdio_principal, served.summary);
    serve_stdio(&*served.service, legacy.as_deref(), &served.stdio_principal)
        .await
        .map_err(|error| Failure::failed(format!("stdio failed: {error}")))?;
    tracing::info!("end of input; stopped");
    Ok(())
}

/// Serves one listener per address until SIGTERM or ctrl-c (or until one of them fails, which stops all).
async fn run_http(
    served: &Served,
    addresses: Vec<SocketAddr>,
    origins: OriginPolicy,
    mut limits: HttpLimits,
    eras: Option<ErasArg>,
    page_sign_in_interval_ms: u64,
) -> Result<(), Failure> {
    if matches!(&served.authentication, Authentication::Bearer(tokens) if tokens.is_empty()) {
        tracing::warn!("no principal has a token: every HTTP request will be refused (401). Add token = \"...\" to a principal.");
    }
    if let Some(files_max) = open_files_max() {
        let room = files_max.saturating_sub(FILES_RESERVED).max(1);
        if limits.connections_max > room {
            tracing::warn!(
                "this process may open {files_max} files (ulimit -n), too few for {} connections: allowing {room} (raise the limit to allow more)",
                limits.connections_max
            );
            limits.connections_max = room;
        }
    }
    let connections = ConnectionSlots::new(limits.connections_max, limits.client_connections_max);
    let count = addresses.len();
    let mut instances = Vec::with_capacity(count);
    for (index, address) in addresses.into_iter().enumerate() {
        let which = if count == 1 { String::new() } else { format!(" (instance {} of {count})", index + 1) };
        let listener = tokio::net::TcpListener::bind(address).await.map_err(|error| {
            Failure::failed(format!(
                "cannot listen on {address}{which}: {error}. Choose another address or port (port 0 picks a free one)."
            ))
        })?;
        let local = listener.local_addr().map_err(|error| Failure::failed(format!("cannot read the bound address: {error}")))?;
        let (service, page) = match &served.page {
            // This listener's server issues page URLs naming this listener; the flows are the store's.
            // With a public URL every listener's links name it (they are one server behind it).
            Some(plan) => {
                let base = match &plan.public_url {
                    Some(url) => PageBase::Public(url.clone()),
                    None => PageBase::Loopback(format!("http://{local}")),
                };
                let mut ports = plan.ports.clone();
                ports.out_of_band = Some(crate::servers::notes::OutOfBand { store: plan.store.clone(), page_base: base.url().to_string() });
                let service: Arc<dyn Service> = Arc::new(crate::assembly::notes_server(plan.config.clone(), ports));
                let page = crate::transport::page::page_router(
                    service.clone(),
                    plan.tokens.clone(),
                    plan.keys.clone(),
                    base,
                    page_sign_in_interval_ms,
                );
                (service, Some(page))
            }
            None => (served.service.clone(), None),
        };
        let options = HttpOptions {
            origins: origins.clone(),
            limits,
            legacy: legacy_adapter(served.legacy_service.as_ref().unwrap_or(&service), eras, false),
            public_url: served.page.as_ref().and_then(|plan| plan.public_url.clone()),
        };
        let mut router =
            http::router(service, served.authentication.clone(), options, local).map_err(|error| Failure::usage(error.to_string()))?;
        if let Some(page) = page {
            router = router.merge(page);
        }
        instances.push((listener, router, local));
    }
    if instances.iter().any(|(_, _, local)| !local.ip().is_loopback()) {
        tracing::warn!("listening on a non-loopback address: bearer tokens travel in clear text; put TLS and network policy in front");
    }
    tracing::info!("{}{}", if count == 1 { String::new() } else { format!("{count} instances; ") }, served.summary);
    tracing::info!("HTTP limits: {limits}");
    if eras == Some(ErasArg::Both) {
        tracing::info!(
            "eras: MCP 2026-07-28 and 2025-11-25 (legacy sessions: at most {LEGACY_SESSIONS_MAX} per instance, idle {} min, at most {} h; at most {} KiB each, {} KiB per principal, {} KiB per instance)",
            LEGACY_SESSION_IDLE_MS / 60_000,
            LEGACY_SESSION_LIFETIME_MS / 3_600_000,
            LEGACY_SESSION_BYTES_MAX / 1024,
            LEGACY_PRINCIPAL_SESSION_BYTES_MAX / 1024,
            LEGACY_SESSIONS_BYTES_MAX / 1024
        );
    }
    let shutdown =
        http::shutdown_signal().map_err(|error| Failure::failed(format!("cannot install the SIGTERM/ctrl-c handlers: {error}")))?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut running = tokio::task::JoinSet::new();
    for (listener, router, local) in instances {
        // Printed once per instance, exactly so: tests and scripts read the addresses from these lines.
        eprintln!("listening on http://{local}{MCP_PATH}");
        let mut stopped = stopped.clone();
        let until_stopped = async move {
            let _ = stopped.wait_for(|stopping| *stopping).await;
        };
        let connections = connections.clone();
        running.spawn(async move { (local, http::serve_http(listener, router, connections, limits, until_stopped).await) });
    }
    let mut failure = None;
    tokio::select! {
        () = shutdown => {}
        Some(ended) = running.join_next() => failure = instance_failure(ended),
    }
    // Every instance stops accepting and finishes its requests in flight (each bounded by the shutdown grace).
    let _ = stop.send(true);
    while let Some(ended) = running.join_next().await {
        failure = failure.or(instance_failure(ended));
    }
    match failure {
        Some(failure) => Err(failure),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// The soft limit on open files (`ulimit -n`), when the system says.
#[cfg(unix)]
fn open_files_max() -> Option<usize> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct it is given, which lives for the whole call.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (status == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

#[cfg(not(unix))]
fn open_files_max() -> Option<usize> {
    None
}

/// How an instance that ended is reported: only a clean end after the stop signal is no failure.
fn instance_failure(ended: Result<(SocketAddr, std::io::Result<()>), tokio::task::JoinError>) -> Option<Failure> {
    match ended {
        Ok((_, Ok(()))) => None,
        Ok((local, Err(error))) => Some(Failure::failed(format!("the HTTP server on {local} failed: {error}"))),
        Err(error) => Some(Failure::failed(format!("an HTTP instance stopped unexpectedly: {error}"))),
    }
}

/// The security gateway, decided before anything is opened: every argument and file is checked first.
struct GatewayPlan {
    deployment: Deployment,
    file: GatewayFile,
    pins: PinFile,
    /// `--pins`: the file SIGHUP re-reads (the embedded demo pins have none).
    pins_path: Option<PathBuf>,
    audit: Arc<dyn AuditSink>,
    /// What the startup log says of the pins and the audit log.
    pins_shown: String,
    audit_shown: String,
    store: StoreSpec,
    durability: Durability,
    stdio_principal: String,
    /// A mutant of the zoo instead of the real gateway (test-only, consented to).
    mutant: Option<GatewayVariant>,
}

/// Checks the gateway's arguments and files: deployment, gateway file, pins, audit log, store.
fn plan_gateway(args: &ServeArgs) -> Result<GatewayPlan, Failure> {
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
    let stdio_principal = args.principal.clone().unwrap_or_else(|| DEFAULT_PRINCIPAL.to_string());
    if args.http.is_none() && !deployment.principals.contains_key(&stdio_principal) {
        return Err(Failure::usage(format!(
            "unknown principal {stdio_principal:?}: pass one of the configuration's principals with --principal"
        )));
    }
    if args.key_file.is_some() {
        return Err(Failure::usage("--key-file serves the notes server; give a gateway its keys as [[keys]] in --config"));
    }
    let store = args.store.clone().unwrap_or(StoreSpec::Memory);
    if args.durability.is_some() && !store.is_shared() {
        return Err(Failure::usage("--durability applies to a sqlite: or postgres: store; a memory store writes nothing to disk"));
    }
    let mutant = match &args.gateway_mutant {
        None => None,
        Some(name) => {
            let known: Vec<&str> = GatewayVariant::REAL_PROCESS.iter().map(|v| v.name()).collect();
            let variant = GatewayVariant::real_process(name)
                .ok_or_else(|| Failure::usage(format!("unknown gateway mutant {name:?}: one of {}", known.join(", "))))?;
            if !args.i_know_this_gateway_is_broken {
                return Err(Failure::usage(
                    "--gateway-mutant serves a deliberately broken gateway (for gateway-lab's tests); add --i-know-this-gateway-is-broken",
                ));
            }
            Some(variant)
        }
    };
    Ok(GatewayPlan {
        mutant,
        deployment,
        file,
        pins,
        pins_path: args.pins.clone(),
        audit,
        pins_shown: args.pins.as_ref().map_or("embedded demo pins".to_string(), |p| p.display().to_string()),
        audit_shown: args.audit_log.as_ref().map_or("stderr".to_string(), |p| p.display().to_string()),
        store,
        durability: args.durability.unwrap_or_default(),
        stdio_principal,
    })
}

/// The security gateway of the configured (or embedded demo) gateway file, over the deployment's principals,
/// keeping its replay ledger, rate counters and export ledgers in the store (shared with every gateway process
/// pointed at a `sqlite:` or `postgres:` store; this process's own in `memory`).
async fn open_gateway(plan: GatewayPlan, state_ttl_secs: Option<u64>, replay_limits: ReplayLimits) -> Result<Served, Failure> {
    let GatewayPlan { deployment, file, pins, pins_path, audit, pins_shown, audit_shown, store, durability, stdio_principal, mutant } =
        plan;
    let keys_shared = deployment.configured_key_ring().map_err(|error| Failure::usage(config_hint(error)))?.is_some();
    let opened = open_for_gateway(&store, Arc::new(SystemClock), replay_limits, durability)
        .await
        .map_err(|error| Failure::failed(format!("cannot open the store {store}: {error}. Check the path or URL ({STORE_SPEC_HELP}).")))?;
    let (stores, shared) = opened.unzip();
    let pinned = Arc::new(pins.clone());
    let remote = file
        .remote
        .iter()
        .map(|(id, config)| {
            let mut port: Arc<dyn Backend> = Arc::new(RemoteBackend::new(id, config));
            if mutant == Some(GatewayVariant::DescriptionOnlyPins) {
                port = Arc::new(DescriptionOnlyBackend { id: id.clone(), inner: port, pins: pinned.clone() });
            }
            BackendHandle { id: id.clone(), endpoint: config.endpoint(), port }
        })
        .collect();
    let in_force = Arc::new(SharedPins::new(pins));
    let gateway = real_gateway(&file, &deployment, in_force.clone(), audit, state_ttl_secs, replay_limits, shared.as_ref(), remote)
        .map_err(|error| Failure::usage(config_hint(error)))?;
    let reloads = match &pins_path {
        Some(path) => reload_pins_on_hangup(path.clone(), in_force)
            .map_err(|error| Failure::failed(format!("cannot install the SIGHUP handler: {error}")))?,
        None => "",
    };
    let state = match &stores {
        Some(stores) => {
            let note_count = stores.admin.list().await.map_err(|error| Failure::failed(format!("cannot read the store: {error}")))?.len();
            if note_count == 0 {
                tracing::warn!(
                    "the store holds no notes; load the deployment's with `mcpsim seed --store {store}{}`",
                    if deployment.notes.is_empty() { String::new() } else { " --config FILE".to_string() }
                );
            }
            if !keys_shared {
                tracing::warn!(
                    "the store is shared, but this gateway signs with a random key of its own: other gateway processes cannot finish its confirmations (state_signature). Give every process the same [[keys]] in --config"
                );
            }
            format!(
                "confirmations, rate counters and exports in {} (shared with every gateway process using it), {note_count} notes",
                stores.admin.describe()
            )
        }
        None => {
            if keys_shared {
                // Shared keys make states portable, but this process's ledgers are its own: one confirmation
                // could export once on each process, a decline here be accepted there, each quota be spent anew.
                tracing::warn!(
                    "the signing keys are shared, but this gateway keeps its replay ledger, rate counters and exports in memory: a confirmation declined or used here can be accepted again on another gateway process, and each process has its own quota. Point every gateway process at one --store sqlite:PATH or postgres:URL"
                );
            }
            "confirmations, rate counters and exports in this process's memory".to_string()
        }
    };
    let backends: Vec<String> = gateway.backends().iter().map(|b| b.id.clone()).collect();
    let marked = match mutant {
        Some(variant) => {
            tracing::warn!("MUTANT gateway {}: deliberately broken, for gateway-lab's tests only", variant.name());
            format!("MUTANT gateway {} (deliberately broken) — ", variant.name())
        }
        None => String::new(),
    };
    let summary = format!(
        "{marked}security gateway; backends: {}; policy {}; pins: {pins_shown}{reloads}; audit log: {audit_shown}; {state}; room for {} confirmations ({} per principal)",
        backends.join(", "),
        file.policy.version,
        replay_limits.capacity,
        replay_limits.principal_capacity,
    );
    let tokens = deployment.tokens();
    let service: Arc<dyn Service> = match mutant {
        Some(variant) if variant != GatewayVariant::DescriptionOnlyPins => {
            // The revoke-ignoring mutant calls its backends under the pins it started with, whatever is reloaded.
            let started_with = (variant == GatewayVariant::RevokeIgnoringBackend).then(|| {
                let mut frozen = gateway.clone();
                frozen.ports.pins = Arc::new(SharedPins::new(pinned.as_ref().clone()));
                frozen
            });
            Arc::new(RealMutant { variant, gateway, started_with })
        }
        _ => Arc::new(gateway),
    };
    Ok(Served {
        service,
        legacy_service: None,
        authentication: Authentication::Bearer(Tokens::new(tokens)),
        stdio_principal,
        summary,
        stores,
        page: None,
    })
}

/// SIGHUP re-reads the pin file and replaces the pins in force: how an operator withdraws (or grants) an
/// approval on a running gateway, each process on its own signal. A file that cannot be read or parsed
/// changes nothing and is logged. Returns what the startup line says of it.
#[cfg(unix)]
fn reload_pins_on_hangup(path: PathBuf, in_force: Arc<SharedPins>) -> std::io::Result<&'static str> {
    use crate::servers::gateway::ports::PinSource;
    use tokio::signal::unix::{signal, SignalKind};
    // Installed before the process listens, so a SIGHUP never meets the default action (ending the process).
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let before = in_force.pins();
            match load_pins(Some(&path)) {
                Ok(pins) => {
                    let withdrawn = before.pins.keys().filter(|name| !pins.pins.contains_key(*name)).count();
                    let (count, shown) = (pins.pins.len(), path.display());
                    in_force.replace(pins);
                    tracing::info!("SIGHUP: pins reloaded from {shown}: {count} pinned, {withdrawn} withdrawn");
                }
                Err(error) => tracing::error!(
                    "SIGHUP: the pins in force stay ({} pinned): {}. Fix the file, then send SIGHUP again",
                    before.pins.len(),
                    config_hint(error)
                ),
            }
        }
    });
    Ok(" (SIGHUP reloads it)")
}

#[cfg(not(unix))]
fn reload_pins_on_hangup(_path: PathBuf, _in_force: Arc<SharedPins>) -> std::io::Result<&'static str> {
    Ok(" (restart to reload it)")
}

fn load_deployment(path: Option<&PathBuf>) -> Result<Deployment, Failure> {
    match path {
        None => Ok(Deployment::demo()),
        Some(path) => {
            let deployment = Deployment::load(path).map_err(|error| Failure::usage(config_hint(error)))?;
            if !deployment.keys.is_empty() || !deployment.tokens().is_empty() {
                warn_if_readable_by_others(path, "the configuration", "holds signing keys or bearer tokens");
            }
            Ok(deployment)
        }
    }
}

fn key_file_hint(error: ConfigError) -> String {
    format!("--key-file: {error}. `mcpsim serve --help` shows the format.")
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
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    // `MCPSIM_LOG=warn` or `MCPSIM_LOG=info,mcpsim::request=off`: a default level and per-target levels.
    let default = || Targets::new().with_default(tracing::Level::INFO);
    let filter = match std::env::var("MCPSIM_LOG") {
        Err(_) => default(),
        Ok(text) => text.parse::<Targets>().unwrap_or_else(|error| {
            eprintln!("warning: MCPSIM_LOG={text:?} is not a log filter ({error}); logging at info. Write e.g. MCPSIM_LOG=warn or MCPSIM_LOG=info,mcpsim::request=off");
            default()
        }),
    };
    // Stdout belongs to JSON-RPC on stdio: logs only ever go to stderr.
    // The builder's own ceiling is INFO; lift it so that `filter` alone decides (`mcpsim::request=debug`).
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .finish()
        .with(filter);
    let _ = tracing::subscriber::set_global_default(subscriber);
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

    #[test]
    fn instances_take_consecutive_ports_or_each_a_free_one() {
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        assert_eq!(
            instance_addresses(at("127.0.0.1:8080"), 3).unwrap(),
            [at("127.0.0.1:8080"), at("127.0.0.1:8081"), at("127.0.0.1:8082")]
        );
        assert_eq!(instance_addresses(at("[::1]:0"), 2).unwrap(), [at("[::1]:0"), at("[::1]:0")]);
        assert_eq!(instance_addresses(at("127.0.0.1:65535"), 1).unwrap(), [at("127.0.0.1:65535")]);
        let error = instance_addresses(at("127.0.0.1:65534"), 3).unwrap_err();
        assert!(error.contains("65535") && error.contains("port 0"), "{error}");
    }
}
