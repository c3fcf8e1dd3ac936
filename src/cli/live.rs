//! `mcpsim run --live`: the scenarios against a running fleet, each followed by its parity report, then a
//! summary table. The player itself is [`crate::live`].

use super::run::RunArgs;
use crate::live::{self, ExpectationResult, LiveFleet, LiveReport, LiveStore, Verdict};
use crate::scenario::Scenario;
use crate::stores::memory::ReplayLimits;
use crate::stores::open;
use crate::stores::system::SystemClock;
use crate::transport::http::MCP_PATH;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

/// `--live` values: an `http://` URL; a bare `http://HOST:PORT` gets the MCP path.
pub(crate) fn parse_url(text: &str) -> Result<String, String> {
    let uri: hyper::Uri = text.trim().parse().map_err(|e| format!("{text:?} is not a URL ({e}); write e.g. http://127.0.0.1:8080/mcp"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{text:?}: only http:// URLs are supported (put a TLS-terminating proxy's plain side here)"));
    }
    let Some(authority) = uri.authority() else {
        return Err(format!("{text:?} names no host; write e.g. http://127.0.0.1:8080/mcp"));
    };
    let path = match uri.path_and_query().map(|p| p.as_str()) {
        None | Some("" | "/") => MCP_PATH,
        Some(path) => path,
    };
    Ok(format!("http://{authority}{path}"))
}

/// `--token` values: `PRINCIPAL=TOKEN`.
pub(crate) fn parse_token(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((principal, token)) if !principal.trim().is_empty() && !token.is_empty() => {
            Ok((principal.trim().to_string(), token.to_string()))
        }
        _ => Err("write PRINCIPAL=TOKEN, e.g. --token alice=demo-alice".into()),
    }
}

pub fn run(args: &RunArgs, scenarios: Vec<(Scenario, String)>, unreadable: &[String]) -> ExitCode {
    let fleet = LiveFleet::with_demo_tokens(args.live.clone(), args.token.iter().cloned().collect());
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let store = match &args.reseed {
        None => None,
        Some(spec) if !spec.is_shared() => {
            eprintln!("error: --reseed memory: a memory store lives inside its `mcpsim serve` process; name the fleet's sqlite:PATH or postgres:URL");
            return ExitCode::from(2);
        }
        Some(spec) => match runtime.block_on(open(spec, Arc::new(SystemClock), ReplayLimits::default())) {
            Ok(stores) => Some(LiveStore { spec: spec.clone(), stores }),
            Err(error) => {
                eprintln!("error: --reseed {spec}: cannot open the store: {error}");
                return ExitCode::from(1);
            }
        },
    };
    let mut stdout = std::io::stdout().lock();
    let mut results: Vec<(String, String, Result<LiveReport, String>)> = Vec::new();
    for (scenario, path) in &scenarios {
        let result = live::run_live(scenario, &fleet, args.seed, store.as_ref(), &runtime).map_err(|e| e.to_string());
        if let Ok(report) = &result {
            let _ = writeln!(stdout, "{}", live::render(report));
        }
        results.push((scenario.name.clone(), path.clone(), result));
    }
    let _ = write!(stdout, "{}", table(&results, unreadable));
    let _ = stdout.flush();
    if let Some(store) = &store {
        if let Err(error) = runtime.block_on(store.stores.admin.close()) {
            eprintln!("warning: closing the store {}: {error}", store.spec);
        }
    }
    let refused = results.iter().any(|(_, _, r)| r.is_err());
    if !unreadable.is_empty() || refused {
        ExitCode::from(2)
    } else if results.iter().any(|(_, _, r)| r.as_ref().is_ok_and(|report| !report.passed())) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn table(results: &[(String, String, Result<LiveReport, String>)], unreadable: &[String]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let width = results.iter().map(|(name, _, _)| name.len()).max().unwrap_or(8).max(8);
    let _ = writeln!(
        out,
        "{:<width$}  {:>5}  {:>6}  {:>11}  {:>7}  {:>5}  {:>6}  {:>13}  result",
        "scenario", "match", "differ", "not compared", "skipped", "held", "failed", "not evaluated"
    );
    for (name, _, result) in results {
        match result {
            Ok(report) => {
                let of = |wanted: fn(&ExpectationResult) -> bool| report.expectations.iter().filter(|(_, _, r)| wanted(r)).count();
                let _ = writeln!(
                    out,
                    "{:<width$}  {:>5}  {:>6}  {:>11}  {:>7}  {:>5}  {:>6}  {:>13}  {}",
                    name,
                    report.count(|v| *v == Verdict::Match),
                    report.count(|v| *v == Verdict::Mismatch),
                    report.count(|v| matches!(v, Verdict::NotCompared(_))),
                    report.count(|v| matches!(v, Verdict::Skipped(_))),
                    of(|r| r.held()),
                    of(|r| matches!(r, ExpectationResult::Failed(_))),
                    of(|r| matches!(r, ExpectationResult::NotEvaluated(_))),
                    if report.passed() { "ok" } else { "FAIL" }
                );
            }
            Err(_) => {
                let _ = writeln!(
                    out,
                    "{name:<width$}  {:>5}  {:>6}  {:>11}  {:>7}  {:>5}  {:>6}  {:>13}  not run",
                    "-", "-", "-", "-", "-", "-", "-"
                );
            }
        }
    }
    for (_, _, result) in results {
        if let Err(error) = result {
            let _ = writeln!(out, "\nerror: {error}");
        }
    }
    for (_, path, result) in results {
        if result.as_ref().is_ok_and(|r| !r.passed()) {
            let _ = writeln!(out, "\nFAIL {path}: see its parity report above (`NO` rows, FAIL expectations, ERROR lines)");
        }
    }
    for problem in unreadable {
        let _ = writeln!(out, "\nerror: {problem}");
    }
    let passed = results.iter().filter(|(_, _, r)| r.as_ref().is_ok_and(LiveReport::passed)).count();
    let skipped: usize =
        results.iter().filter_map(|(_, _, r)| r.as_ref().ok()).map(|r| r.count(|v| matches!(v, Verdict::Skipped(_)))).sum();
    let _ = writeln!(out, "\n{passed} of {} scenario(s) matched the simulator live; {skipped} step(s) skipped", results.len());
    out
}
