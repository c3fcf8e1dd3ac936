//! What the subcommands share: the exit statuses, one table with the same meaning in every command (printed
//! by `mcpsim --help` and in README.md), and the argument parsers more than one command uses.

use crate::transport::http::MCP_PATH;

/// Everything judged held (a command that does rather than judges: it was done).
pub(crate) const EXIT_HELD: u8 = 0;
/// A finding: a safety property, an expectation or an attack failed (a command that does: it could not).
pub(crate) const EXIT_FAILED: u8 = 1;
/// Usage or configuration: bad flags, an unknown scenario, mutant or fault, an unreadable scenario, target
/// file or configuration. Nothing was judged.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Not judged: the harness could not run the target (or counted its processes still running at the end), an
/// attack could not be judged, or the simulator crashed.
pub(crate) const EXIT_UNJUDGED: u8 = 3;
/// Nothing unsafe happened, but under faults something promised did not come about: a request never
/// answered, a confirmation never settled (the liveness property alone broke).
pub(crate) const EXIT_NOT_LIVE: u8 = 4;

/// The status `code` stands for (`ExitCode` does not give its number back): for a command that raises the
/// status an earlier part of it returned.
pub(crate) fn status_of(code: std::process::ExitCode) -> u8 {
    [EXIT_HELD, EXIT_FAILED, EXIT_USAGE, EXIT_UNJUDGED, EXIT_NOT_LIVE]
        .into_iter()
        .find(|status| std::process::ExitCode::from(*status) == code)
        .unwrap_or(EXIT_FAILED)
}

/// The table, as `mcpsim --help` prints it.
pub(crate) const EXIT_TABLE: &str = "\
Exit status, the same in every command:
  0  everything judged held (serve, seed, keygen, pins: done)
  1  a finding: a safety property, an expectation or an attack failed (serve, seed, keygen: could not;
     pins: something needs review)
  2  usage or configuration error: nothing was judged
  3  not judged: the target's harness or an attack could not judge, every scenario was skipped, or the
     simulator crashed
  4  only liveness failed: under faults a request was never answered or a confirmation never settled";

/// `--live URL`: an `http://` URL (a bare host:port means its `/mcp`).
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

/// `--token PRINCIPAL=TOKEN`.
pub(crate) fn parse_token(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((principal, token)) if !principal.trim().is_empty() && !token.is_empty() => {
            Ok((principal.trim().to_string(), token.to_string()))
        }
        _ => Err("write PRINCIPAL=TOKEN, e.g. --token alice=demo-alice".into()),
    }
}

/// Most seeds `explore --target` runs (each seed starts every instance twice).
pub(crate) const EXPLORE_TARGET_SEEDS_MAX: u64 = 500;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_status_once_in_order() {
        let statuses: Vec<u8> = EXIT_TABLE.lines().filter_map(|line| line.split_whitespace().next()?.parse().ok()).collect();
        assert_eq!(statuses, [EXIT_HELD, EXIT_FAILED, EXIT_USAGE, EXIT_UNJUDGED, EXIT_NOT_LIVE]);
    }
}
