//! HTML reports (feature `html`): one self-contained page per run ([`run_page`]), an index over several runs
//! ([`index_page`]), and an exploration's summary with its coverage ([`exploration_page`]).
//!
//! Every page is generated from the data the other renderings print: a run's [`Transcript`] (its entries,
//! in order), its history (to group each confirmation's messages) and its decision log, never a model of
//! its own. The templates are in `templates/` beside this file (askama: compiled with the crate, and every
//! value interpolated into them HTML-escaped, so a note body, a description or any other string from a
//! message is shown as text). A page loads nothing: its one stylesheet and one script are inline, and a
//! Content-Security-Policy of `default-src 'none'` admits exactly those two by their SHA-256 hashes, so
//! the page makes no request even if a string were ever to escape its escaping. Pages are byte-for-byte the
//! same for the same run.
//!
//! [`Transcript`]: crate::sim::render::transcript::Transcript

mod conversations;
mod exploration;
mod run;
mod state;

pub use exploration::{exploration_page, CounterexampleLink, ExampleRun, ExplorationInput};
pub use run::{run_page, RunInput};
pub(crate) use state::{decode_state, RunKeys};

use askama::Template;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// The stylesheet every page inlines.
const CSS: &str = include_str!("templates/report.css");
/// The script of a run page: selecting a message, the inspector, keyboard stepping.
const RUN_JS: &str = include_str!("templates/run.js");

/// The `<head>` every page shares: its title, its policy, its stylesheet and (run pages) its script.
pub(crate) struct Shell {
    pub title: String,
    pub csp: String,
    pub css: &'static str,
    pub js: Option<&'static str>,
}

impl Shell {
    fn new(title: String, js: Option<&'static str>) -> Shell {
        let script = match js {
            Some(js) => format!("'{}'", source_hash(js)),
            None => "'none'".into(),
        };
        let csp = format!(
            "default-src 'none'; style-src '{}'; script-src {script}; img-src 'none'; font-src 'none'; connect-src 'none'; \
             base-uri 'none'; form-action 'none'",
            source_hash(CSS)
        );
        Shell { title, csp, css: CSS, js }
    }
}

/// The CSP source expression of an inline element's exact contents.
fn source_hash(contents: &str) -> String {
    format!("sha256-{}", STANDARD.encode(Sha256::digest(contents.as_bytes())))
}

/// One row of an index of runs (`mcpsim run --html-out DIR`).
pub struct IndexRow {
    pub scenario: String,
    /// The page of its run, relative to the index.
    pub href: String,
    /// What the scenario teaches, in one line ([`crate::scenario::Scenario::lesson_line`]).
    pub lesson: String,
    pub seeds: u64,
    pub messages: usize,
    pub interleavings: usize,
    /// `ok`, or `FAIL (seed N)`.
    pub result: String,
    pub failed: bool,
}

#[derive(Template)]
#[template(path = "index.html")]
struct IndexTemplate<'a> {
    shell: Shell,
    heading: &'a str,
    rows: &'a [IndexRow],
    passed: usize,
    unreadable: &'a [String],
}

/// The index of a folder of run pages.
pub fn index_page(heading: &str, rows: &[IndexRow], unreadable: &[String]) -> String {
    let passed = rows.iter().filter(|row| !row.failed).count();
    let page = IndexTemplate { shell: Shell::new(format!("mcpsim: {heading}"), None), heading, rows, passed, unreadable };
    page.render().expect("the index renders")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_admits_exactly_the_inline_stylesheet_and_script() {
        let shell = Shell::new("t".into(), Some(RUN_JS));
        assert!(shell.csp.starts_with("default-src 'none'; "), "{}", shell.csp);
        assert!(shell.csp.contains(&format!("style-src '{}'", source_hash(CSS))));
        assert!(shell.csp.contains(&format!("script-src '{}'", source_hash(RUN_JS))));
        assert!(!shell.csp.contains("unsafe"), "{}", shell.csp);
        assert!(Shell::new("t".into(), None).csp.contains("script-src 'none'"));
        // The known vector of the hash format browsers compare with.
        assert_eq!(source_hash(""), "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
    }
}
