//! `mcpsim run --live`: the scenarios against a running fleet, each followed by its parity report, then a
//! summary table. The player itself is [`crate::live`].

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_USAGE};
use super::run::RunArgs;
use crate::live::{self, ExpectationResult, LiveFleet, LiveReport, LiveStore, Verdict};
use crate::scenario::Scenario;
use crate::stores::memory::ReplayLimits;
use crate::stores::open;
use crate::stores::system::SystemClock;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

/// `mcpsim run --live URL…`: the scenarios `args` names, against the fleet.
pub fn run(args: &RunArgs) -> ExitCode {
    let mut unreadable = Vec::new();
    let scenarios: Vec<(Scenario, String)> =
        super::run::load(&args.paths, &mut unreadable).into_iter().map(|item| (item.scenario, item.path)).collect();
    let unreadable = &unreadable;
    let fleet = LiveFleet::with_demo_tokens(args.live.clone(), args.token.iter().cloned().collect());
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let store = match &args.reseed {
        None => None,
        Some(spec) if !spec.is_shared() => {
            eprintln!("error: --reseed memory: a memory store lives inside its `mcpsim serve` process; name the fleet's sqlite:PATH or postgres:URL");
            return ExitCode::from(EXIT_USAGE);
        }
        Some(spec) => match runtime.block_on(open(spec, Arc::new(SystemClock), ReplayLimits::default())) {
            Ok(stores) => Some(LiveStore { spec: spec.clone(), stores }),
            Err(error) => {
                eprintln!("error: --reseed {spec}: cannot open the store: {error}");
                return ExitCode::from(EXIT_FAILED);
            }
        },
    };
    // Nothing listening at a URL is one error, said once, with what to start: not one per request.
    let unreachable = runtime.block_on(unreachable_urls(&fleet.urls));
    if !unreachable.is_empty() {
        eprintln!("{}", not_running(&fleet.urls, &unreachable));
        return ExitCode::from(EXIT_USAGE);
    }
    let mut stdout = std::io::stdout().lock();
    let mut results: Vec<(String, String, Result<LiveReport, String>)> = Vec::new();
    for (index, (scenario, path)) in scenarios.iter().enumerate() {
        let result = live::run_live(scenario, &fleet, args.seed, store.as_ref(), &runtime).map_err(|e| e.to_string());
        if let Ok(report) = &result {
            let _ = writeln!(stdout, "{}", live::render(report));
        }
        let stopped = result.as_ref().ok().and_then(|report| report.fleet_unreachable.clone());
        results.push((scenario.name.clone(), path.clone(), result));
        if let Some(why) = stopped {
            // The fleet went away: every later scenario would fail the same way.
            for (scenario, path) in &scenarios[index + 1..] {
                results.push((
                    scenario.name.clone(),
                    path.clone(),
                    Err(format!("{}: not run: the fleet stopped answering ({why})", scenario.name)),
                ));
            }
            break;
        }
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
        ExitCode::from(EXIT_USAGE)
    } else if results.iter().any(|(_, _, r)| r.as_ref().is_ok_and(|report| !report.passed())) {
        ExitCode::from(EXIT_FAILED)
    } else {
        ExitCode::from(EXIT_HELD)
    }
}

/// How long live mode waits for a fleet's port to accept a connection before calling it not running.
const CONNECT_TIMEOUT_MS: u64 = 2_000;

/// The URLs (each once) at which nothing accepts a TCP connection, with why.
async fn unreachable_urls(urls: &[String]) -> Vec<(String, String)> {
    let mut unreachable = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for url in urls {
        if !seen.insert(url.clone()) {
            continue;
        }
        let Some(authority) = url.parse::<hyper::Uri>().ok().and_then(|uri| uri.authority().cloned()) else { continue };
        let address = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80));
        let connect = tokio::net::TcpStream::connect(address);
        match tokio::time::timeout(std::time::Duration::from_millis(CONNECT_TIMEOUT_MS), connect).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => unreachable.push((url.clone(), error.to_string())),
            Err(_) => unreachable.push((url.clone(), format!("no answer within {CONNECT_TIMEOUT_MS} ms"))),
        }
    }
    unreachable
}

/// The one error for a fleet that is not running: which URLs, and the command that starts such a fleet.
fn not_running(urls: &[String], unreachable: &[(String, String)]) -> String {
    let listed: Vec<String> = unreachable.iter().map(|(url, why)| format!("  {url}: {why}")).collect();
    let first = urls.first().and_then(|url| url.parse::<hyper::Uri>().ok()).and_then(|uri| uri.authority().map(|a| a.to_string()));
    let start = format!(
        "mcpsim serve --http {} --instances {} --store sqlite:./fleet.db --key-file keys.toml",
        first.as_deref().unwrap_or("127.0.0.1:8080"),
        urls.len()
    );
    format!(
        "error: nothing answers at {} of the --live URL(s); no scenario was run:\n{}\n\
         Start the fleet first, in another terminal (its instances listen on consecutive ports; keys.toml from `mcpsim keygen --out keys.toml`):\n  {start}\n\
         then run this again. Give one URL per scenario instance, in declaration order.",
        unreachable.len(),
        listed.join("\n")
    )
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
                    match (report.passed(), report.not_comparable()) {
                        (true, None) => "ok",
                        (true, Some(_)) => "not comparable",
                        (false, _) => "FAIL",
                    }
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
        let Ok(report) = result else { continue };
        if report.passed() {
            continue;
        }
        // Every failure of the scenario, not only the last: differing steps, failed expectations, errors.
        let _ = writeln!(out, "\nFAIL {path} (its parity report is above):");
        for row in report.rows.iter().filter(|r| r.verdict == Verdict::Mismatch) {
            let _ = writeln!(out, "  line {}: {} differs: simulator {}; live {}", row.line, row.statement, row.simulator, row.live);
        }
        for (line, text, result) in &report.expectations {
            if let ExpectationResult::Failed(why) = result {
                let _ = writeln!(out, "  line {line}: {text}: {why}");
            }
        }
        for error in &report.errors {
            let _ = writeln!(out, "  error: {error}");
        }
    }
    for problem in unreadable {
        let _ = writeln!(out, "\nerror: {problem}");
    }
    let reports: Vec<&LiveReport> = results.iter().filter_map(|(_, _, r)| r.as_ref().ok()).collect();
    // "Matched" only where a request was compared; a scenario that compared none is counted apart, with why.
    let matched = reports.iter().filter(|r| r.passed() && r.not_comparable().is_none()).count();
    let not_comparable: Vec<(&str, String)> =
        reports.iter().filter_map(|r| r.not_comparable().map(|why| (r.scenario.as_str(), why))).collect();
    let failed = reports.iter().filter(|r| !r.passed()).count();
    let not_run = results.len() - reports.len();
    let skipped: usize = reports.iter().map(|r| r.count(|v| matches!(v, Verdict::Skipped(_)))).sum();
    if !not_comparable.is_empty() {
        let _ = writeln!(out, "\nnot comparable (they passed, but no request of theirs was compared with the simulator):");
        for (scenario, why) in &not_comparable {
            let _ = writeln!(out, "  {scenario}: {why}");
        }
    }
    let mut line = format!("\n{matched} of {} scenario(s) matched the simulator live", results.len());
    if !not_comparable.is_empty() {
        line.push_str(&format!("; {} not comparable", not_comparable.len()));
    }
    if failed > 0 {
        line.push_str(&format!("; {failed} failed"));
    }
    if not_run > 0 {
        line.push_str(&format!("; {not_run} not run"));
    }
    let _ = writeln!(out, "{line}; {skipped} step(s) skipped");
    out
}
