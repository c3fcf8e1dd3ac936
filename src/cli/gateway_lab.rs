//! `mcpsim gateway-lab run FILE`: the lab's malicious backends behind N replicas of someone's gateway, judged
//! from both edges (`target::gateway`); and, hidden, `mcpsim gateway-lab backend`, one of those backends.

use super::common::{EXIT_FAILED, EXIT_UNJUDGED, EXIT_USAGE};
use crate::eras::session::SessionLimits;
use crate::eras::LegacyAdapter;
use crate::framework::Service;
use crate::stores::system::{OsNonces, SystemClock};
use crate::target::gateway::backend::{BackendSpec, Carrier, LabBackend, PHASES_MAX};
use crate::target::gateway::file::GatewayTargetFile;
use crate::target::gateway::{run_lab, LabOptions};
use crate::transport::http::{self, Authentication, ConnectionSlots, HttpLimits, HttpOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  mcpsim gateway-lab run targets/gateways/mcpsim.toml              # mcpsim's gateway, 2 replicas: exit 0
  mcpsim gateway-lab run targets/gateways/mcpsim-mutant-exports-on-decline.toml   # a finding: exit 1")]
pub struct GatewayLabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// Start the lab's backends and the gateway's replicas as FILE says, run the battery, judge it.
    #[command(after_help = "\
mcpsim serves four backends on loopback (notes and tricks and mirror over HTTP, issues over stdio, started by
the gateway from the command it is given), each recording every request it receives. The gateway target file
(docs/gateways.md) says how to start the replicas in front of them, the principals' tokens and grants, and
which defences the gateway claims. Each defence is reported held, BROKEN (a finding, with the messages that
show it) or not claimed. Everything started is contained, killed and counted at the end.

Exit status: 0 when every claimed defence held; 1 on a finding; 2 for a file that cannot be read or an unsafe
TMPDIR; 3 when the lab could not start or judge (an allowed call never reached its backend), or processes
were left at the end.

Examples:
  mcpsim gateway-lab run targets/gateways/mcpsim.toml              # mcpsim's gateway, 2 replicas: exit 0
  mcpsim gateway-lab run targets/gateways/mcpsim-mutant-exports-on-decline.toml   # a finding: exit 1
  mcpsim gateway-lab run targets/gateways/mcpsim.toml --seed 7     # other replica pairs, other tokens
  MCPSIM_CONTEXTFORGE=VENV mcpsim gateway-lab run targets/gateways/contextforge.toml  # 2025-11-25")]
    Run {
        /// The gateway target file (TOML).
        file: PathBuf,
        /// Draws which replica plays A and which B in each cross-replica step (logged in the report).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// (internal) One lab backend: serves SPEC over stdio or HTTP on loopback, recording every request.
    #[command(hide = true)]
    Backend {
        #[arg(long, value_name = "FILE")]
        spec: PathBuf,
        #[arg(long, value_name = "FILE")]
        phase_file: PathBuf,
        #[arg(long, value_name = "FILE")]
        record: PathBuf,
        /// Listen on this loopback address (else stdio).
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
    },
}

pub fn run(args: GatewayLabArgs) -> ExitCode {
    match args.command {
        LabCommand::Run { file, seed } => run_file(&file, seed),
        LabCommand::Backend { spec, phase_file, record, http, stdio } => backend(&spec, &phase_file, &record, http, stdio),
    }
}

fn run_file(path: &std::path::Path, seed: u64) -> ExitCode {
    let file = match GatewayTargetFile::load(path) {
        Ok(file) => file,
        Err(error) => {
            eprintln!("mcpsim gateway-lab: {error}\n  (docs/gateways.md describes every key; targets/gateways/ has examples)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mcpsim = match std::env::current_exe() {
        Ok(path) => path.display().to_string(),
        Err(error) => {
            eprintln!("mcpsim gateway-lab: cannot find the mcpsim binary for {{mcpsim}}: {error}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    let run = match super::target::TargetRun::begin("gateway-lab") {
        Ok(run) => run,
        Err(status) => return status,
    };
    let options = LabOptions { seed, mcpsim, work_dir: run.work_dir().to_path_buf() };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcpsim gateway-lab: cannot start the runtime: {error}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    let result = runtime.block_on(run_lab(&file, &options));
    let swept = crate::target::contain::finish();
    let left = swept.left > 0 || swept.dir_left;
    drop(run);
    match result {
        Ok(report) => {
            print!("{}", report.render());
            println!("cleanup: {}", crate::target::contain::describe(&swept));
            if !report.findings.is_empty() {
                ExitCode::from(EXIT_FAILED)
            } else if left || !report.problems.is_empty() {
                ExitCode::from(EXIT_UNJUDGED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("mcpsim gateway-lab: {}", crate::target::shown(&error.to_string()));
            eprintln!("cleanup: {}", crate::target::contain::describe(&swept));
            ExitCode::from(EXIT_UNJUDGED)
        }
    }
}

fn backend(
    spec: &std::path::Path,
    phase_file: &std::path::Path,
    record: &std::path::Path,
    address: Option<std::net::SocketAddr>,
    stdio: bool,
) -> ExitCode {
    let spec: BackendSpec =
        match std::fs::read(spec).map_err(|e| e.to_string()).and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string())) {
            Ok(spec) => spec,
            Err(error) => {
                eprintln!("mcpsim gateway-lab backend: cannot read the spec {}: {error}", spec.display());
                return ExitCode::from(EXIT_USAGE);
            }
        };
    if spec.phases.is_empty() || spec.phases.len() > PHASES_MAX {
        eprintln!("mcpsim gateway-lab backend: a spec has 1 to {PHASES_MAX} listing phases");
        return ExitCode::from(EXIT_USAGE);
    }
    let carrier = if stdio { Carrier::Stdio } else { Carrier::Http };
    if (address.is_some() && carrier != Carrier::Http) || (address.is_none() && !stdio) {
        eprintln!("mcpsim gateway-lab backend: give --http 127.0.0.1:PORT or --stdio");
        return ExitCode::from(EXIT_USAGE);
    }
    if address.is_some_and(|a| !a.ip().is_loopback()) {
        eprintln!("mcpsim gateway-lab backend: a lab backend listens on loopback only (127.0.0.1 or [::1])");
        return ExitCode::from(EXIT_USAGE);
    }
    let service: Arc<dyn Service> = match LabBackend::open(spec, phase_file, record) {
        Ok(service) => Arc::new(service),
        Err(error) => {
            eprintln!("mcpsim gateway-lab backend: cannot open the record file {}: {error}", record.display());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcpsim gateway-lab backend: cannot start the runtime: {error}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    // Every lab backend serves both eras: a modern request is answered as by a modern-only server (it never
    // reaches `eras`), and a gateway that speaks only 2025-11-25 (IBM ContextForge) opens a legacy session. A
    // stdio process is one client's, so its session lasts as long as the process.
    let limits = if stdio {
        SessionLimits { idle_ms: u64::MAX, lifetime_ms: u64::MAX, ..SessionLimits::default() }
    } else {
        SessionLimits::default()
    };
    let legacy = Arc::new(LegacyAdapter::new(service.clone(), limits, Arc::new(SystemClock), Arc::new(OsNonces)));
    let served = runtime.block_on(async move {
        match address {
            None => crate::transport::stdio::serve_stdio(service.as_ref(), Some(&legacy), "gateway").await.map_err(|e| e.to_string()),
            Some(address) => {
                let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| format!("cannot listen on {address}: {e}"))?;
                let local = listener.local_addr().map_err(|e| e.to_string())?;
                let authentication = Authentication::Anonymous { principal: "gateway".into() };
                let options = HttpOptions { legacy: Some(legacy), ..HttpOptions::default() };
                let router = http::router(service, authentication, options, local).map_err(|e| e.to_string())?;
                let limits = HttpLimits::default();
                let connections = ConnectionSlots::new(limits.connections_max, limits.client_connections_max);
                let shutdown = http::shutdown_signal().map_err(|e| e.to_string())?;
                eprintln!("lab backend listening on http://{local}{}", http::MCP_PATH);
                http::serve_http(listener, router, connections, limits, shutdown).await.map_err(|e| e.to_string())
            }
        }
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mcpsim gateway-lab backend: {error}");
            ExitCode::from(EXIT_UNJUDGED)
        }
    }
}
