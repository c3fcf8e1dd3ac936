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

/// The widest line a command prints for a terminal (tables, lists, help): wider cells wrap.
pub(crate) const COLUMNS_MAX: usize = 100;

/// `text` broken into lines of at most `width` characters, at spaces where it can (a word longer than the
/// width is split after a `-` or `/` if it has one that fits, else cut). Never empty: `""` gives one empty line.
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(10);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word = word.to_string();
        loop {
            let (used, needed) = (line.chars().count(), word.chars().count());
            let gap = usize::from(!line.is_empty());
            if used + gap + needed <= width {
                if gap == 1 {
                    line.push(' ');
                }
                line.push_str(&word);
                break;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            // A word wider than the whole width: split it.
            let cut: Vec<char> = word.chars().collect();
            let at = (1..=width).rev().find(|&i| matches!(cut[i - 1], '-' | '/')).unwrap_or(width);
            lines.push(cut[..at].iter().collect());
            word = cut[at..].iter().collect();
        }
    }
    lines.push(line);
    lines
}

/// `first` and then `text` wrapped to the columns after it, the following lines indented under the text.
pub(crate) fn hanging(first: &str, text: &str) -> String {
    let indent = first.chars().count();
    let lines = wrap(text, COLUMNS_MAX.saturating_sub(indent));
    let mut out = String::new();
    for (number, line) in lines.iter().enumerate() {
        if number == 0 {
            out.push_str(first);
        } else {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(line);
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_at_spaces_and_splits_only_words_wider_than_the_width() {
        assert_eq!(wrap("the retry lands on another instance", 16), ["the retry lands", "on another", "instance"]);
        assert_eq!(wrap("05-accepts-race-for-different-candidates", 20), ["05-accepts-race-for-", "different-candidates"]);
        assert_eq!(wrap("abcdefghijklmnopqrstuvwxyz", 10), ["abcdefghij", "klmnopqrst", "uvwxyz"]);
        assert_eq!(wrap("", 10), [""]);
        let text = hanging("name  ", &"word ".repeat(40));
        assert!(text.lines().all(|line| line.chars().count() <= COLUMNS_MAX), "{text}");
        assert!(text.lines().skip(1).all(|line| line.starts_with("      word")), "{text}");
    }

    #[test]
    fn the_table_names_every_status_once_in_order() {
        let statuses: Vec<u8> = EXIT_TABLE.lines().filter_map(|line| line.split_whitespace().next()?.parse().ok()).collect();
        assert_eq!(statuses, [EXIT_HELD, EXIT_FAILED, EXIT_USAGE, EXIT_UNJUDGED, EXIT_NOT_LIVE]);
    }
}
