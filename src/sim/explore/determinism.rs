//! Determinism across processes (`mcpsim explore --check-determinism`): which seeds of a range are re-run in
//! another process, and where two transcripts of one seed first differ. Spawning the other process is the
//! command line's (`cli::determinism`); this module only chooses and compares bytes.

use std::ops::RangeInclusive;

/// Most seeds one check re-runs (each one a process).
pub const CHECK_SEEDS_MAX: u64 = 1000;
/// Most characters of a differing line shown (a transcript line may hold a whole message).
const LINE_SHOWN_MAX: usize = 240;

/// `k` seeds of `seeds`, evenly spaced from its first to its last, and `failing` (the exploration's first
/// failing seed) among them when there is one: sorted, each once. The same range and `k` give the same seeds.
pub fn sample(seeds: &RangeInclusive<u64>, k: u64, failing: Option<u64>) -> Vec<u64> {
    let (first, last) = (*seeds.start(), *seeds.end());
    let mut chosen = Vec::new();
    if first <= last && k > 0 {
        let span = u128::from(last - first);
        let k = u128::from(k).min(span + 1);
        for i in 0..k {
            // i * span / (k - 1) spreads the picks from the first seed to the last (one pick: the first).
            let offset = if k == 1 { 0 } else { i * span / (k - 1) };
            chosen.push(first + u64::try_from(offset).expect("an offset within the range"));
        }
    }
    if let Some(seed) = failing.filter(|seed| seeds.contains(seed)) {
        chosen.push(seed);
    }
    chosen.sort_unstable();
    chosen.dedup();
    chosen
}

/// Where two transcripts of one seed first differ: the line (1-based) and that line on each side, or
/// `None` on a side whose output had ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub line: usize,
    pub ours: Option<String>,
    pub theirs: Option<String>,
}

impl Difference {
    /// The two sides as the finding prints them.
    pub fn describe(&self, ours_name: &str, theirs_name: &str) -> String {
        let side = |line: &Option<String>| line.clone().unwrap_or_else(|| "(its output had ended)".to_string());
        format!(
            "the transcripts first differ at line {}:\n  {ours_name}: {}\n  {theirs_name}: {}",
            self.line,
            side(&self.ours),
            side(&self.theirs)
        )
    }
}

/// The first line where `ours` and `theirs` differ (byte for byte, line ends included), or `None` when
/// they are the same bytes.
pub fn first_difference(ours: &[u8], theirs: &[u8]) -> Option<Difference> {
    if ours == theirs {
        return None;
    }
    let mut left = ours.split_inclusive(|b| *b == b'\n');
    let mut right = theirs.split_inclusive(|b| *b == b'\n');
    let mut line = 0;
    loop {
        line += 1;
        let (a, b) = (left.next(), right.next());
        if a != b {
            return Some(Difference { line, ours: a.map(shown), theirs: b.map(shown) });
        }
        if a.is_none() {
            // Unreachable when the bytes differ; said plainly rather than looping.
            return Some(Difference { line, ours: None, theirs: None });
        }
    }
}

/// A line as printed: lossy UTF-8, its line end kept visible only when it is not the usual `\n`, cut short.
fn shown(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    // Control characters escaped: another program's output must not drive the terminal.
    let mut out: String =
        text.chars().take(LINE_SHOWN_MAX).map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect();
    if text.chars().count() > LINE_SHOWN_MAX {
        out.push('…');
    }
    if !line.ends_with(b"\n") {
        out.push_str(" (no line end)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_evenly_spaced_include_both_ends_and_the_failing_seed() {
        assert_eq!(sample(&(1..=1000), 4, None), [1, 334, 667, 1000]);
        assert_eq!(sample(&(1..=1000), 4, Some(7)), [1, 7, 334, 667, 1000]);
        assert_eq!(sample(&(1..=1000), 4, Some(334)), [1, 334, 667, 1000]);
        // A failing seed outside the range is not run.
        assert_eq!(sample(&(10..=20), 1, Some(5)), [10]);
        // More asked than there are seeds: each seed once.
        assert_eq!(sample(&(5..=7), 8, None), [5, 6, 7]);
        assert_eq!(sample(&(u64::MAX - 1..=u64::MAX), 8, None), [u64::MAX - 1, u64::MAX]);
        assert!(sample(&(1..=10), 0, None).is_empty());
    }

    #[test]
    fn the_same_bytes_have_no_difference() {
        assert_eq!(first_difference(b"a\nb\n", b"a\nb\n"), None);
        assert_eq!(first_difference(b"", b""), None);
    }

    #[test]
    fn a_planted_byte_is_found_on_its_line() {
        let ours = b"{\"seq\":1}\n{\"seq\":2,\"to\":\"a\"}\n{\"seq\":3}\n";
        let theirs = b"{\"seq\":1}\n{\"seq\":2,\"to\":\"b\"}\n{\"seq\":3}\n";
        let difference = first_difference(ours, theirs).expect("one byte differs");
        assert_eq!(difference.line, 2);
        assert_eq!(difference.ours.as_deref(), Some("{\"seq\":2,\"to\":\"a\"}"));
        assert_eq!(difference.theirs.as_deref(), Some("{\"seq\":2,\"to\":\"b\"}"));
        let text = difference.describe("this process", "the other");
        assert!(text.contains("line 2") && text.contains("this process: {\"seq\":2,\"to\":\"a\"}"), "{text}");
    }

    #[test]
    fn a_shorter_side_and_a_missing_line_end_are_differences() {
        let difference = first_difference(b"a\nb\n", b"a\n").expect("one more line");
        assert_eq!((difference.line, difference.ours.as_deref(), difference.theirs), (2, Some("b"), None));
        let difference = first_difference(b"a\nb\n", b"a\nb").expect("the last line end is missing");
        assert_eq!((difference.line, difference.theirs.as_deref()), (2, Some("b (no line end)")));
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        let difference = first_difference(b"a\n", b"\x1b[2J\r\n").expect("differs");
        assert_eq!(difference.theirs.as_deref(), Some("\\u{1b}[2J\\r"));
    }

    #[test]
    fn a_long_line_is_cut_short() {
        let long = "x".repeat(1000) + "\n";
        let difference = first_difference(long.as_bytes(), b"y\n").expect("differs");
        assert_eq!(difference.ours.map(|l| l.chars().count()), Some(LINE_SHOWN_MAX + 1));
    }
}
