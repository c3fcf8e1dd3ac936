//! Results as data (`mcpsim explore --results FILE.jsonl`, read back by `mcpsim merge`): one JSON object per
//! line, a summary per shard (and scenario and server) and a record per failing seed kept, each keyed by the
//! build that ran it ([`BuildIdentity`]) and by what was explored ([`RunIdentity`]: the same for every shard of
//! one swarm, so shards can be told apart from runs that must not be merged).
//!
//! A line is `serde_json` of a [`Record`] turned into a `Value` first, so its keys are sorted (no
//! `preserve_order`): the same exploration writes the same bytes. The file is written whole, to a temporary file
//! beside it renamed over it, so a reader never sees half a run. Reading goes line by line: a line that is not a
//! record of this format is a [`ResultsError`] naming `path:line` and what is wrong, and the lines after it are
//! still read (nothing else is lost). Unknown fields of a known record are ignored (a later writer may add some);
//! blank lines are skipped.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// The schema version every record carries (`"format": 1`); a reader refuses any other.
pub const FORMAT: u64 = 1;

/// Failing seeds kept per (scenario, server, verdict, first property) by default (`--results-max-findings`).
pub const MAX_FINDINGS_DEFAULT: usize = 100;

/// The build that ran an exploration: the crate version, and what build.rs learnt when it was compiled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildIdentity {
    pub version: String,
    /// The git commit (40 hex digits) the binary was built from, when it was built in a git work tree.
    pub commit: Option<String>,
    /// Whether tracked files differed from that commit when it was built.
    pub dirty: Option<bool>,
    /// `rustc -V` of the compiler that built it.
    pub rustc: Option<String>,
    /// `sha256:<hex>` of Cargo.lock as built (the dependencies' versions).
    pub lockfile: String,
}

impl BuildIdentity {
    /// This binary's identity.
    pub fn current() -> BuildIdentity {
        let known = |value: &str| (!value.is_empty()).then(|| value.to_string());
        BuildIdentity {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: known(env!("MCPSIM_BUILD_COMMIT")),
            dirty: match env!("MCPSIM_BUILD_DIRTY") {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            },
            rustc: known(env!("MCPSIM_BUILD_RUSTC")),
            lockfile: env!("MCPSIM_BUILD_LOCKFILE").to_string(),
        }
    }

    /// A few words for a message: `3101490` (`+dirty`), or the version when the commit is unknown.
    pub fn short(&self) -> String {
        match &self.commit {
            Some(commit) => {
                format!("{}{}", &commit[..commit.len().min(7)], if self.dirty == Some(true) { "+dirty" } else { "" })
            }
            None => format!("version {} (commit unknown)", self.version),
        }
    }
}

/// An inclusive range of seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seeds {
    pub first: u64,
    pub last: u64,
}

/// What was explored, the same for every shard of one swarm (the shard is not part of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunIdentity {
    /// The scenario's name (`*` for `--all-mutants`, whose rows each name theirs).
    pub scenario: String,
    /// `sha256:<hex>` of the scenario's text (for `--all-mutants`: of every row's mutant name and scenario text,
    /// in zoo order).
    pub scenario_digest: String,
    /// The SCENARIO argument as given: a library name or a path (`*` for `--all-mutants`).
    pub argument: String,
    /// `real`, `mutant:NAME`, or `zoo` for `--all-mutants`.
    pub server: String,
    /// The fault kinds turned on, sorted.
    pub faults: Vec<String>,
    /// `simulator`, or `target:<file name>`.
    pub world: String,
    /// The whole run's seeds (every shard's together).
    pub seeds: Seeds,
    /// `sha256:<hex>` of the canonical JSON of `{faults, mode, scenarioDigest, seeds, server, world}`.
    pub options_digest: String,
    /// `seeds` or `all-mutants`.
    pub mode: String,
}

impl RunIdentity {
    /// The identity, its options digest computed from the other fields.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scenario: &str,
        scenario_text: &str,
        argument: &str,
        server: &str,
        faults: &[&str],
        world: &str,
        seeds: Seeds,
        mode: &str,
    ) -> RunIdentity {
        let mut faults: Vec<String> = faults.iter().map(|f| f.to_string()).collect();
        faults.sort();
        faults.dedup();
        let mut identity = RunIdentity {
            scenario: scenario.to_string(),
            scenario_digest: digest(scenario_text.as_bytes()),
            argument: argument.to_string(),
            server: server.to_string(),
            faults,
            world: world.to_string(),
            seeds,
            options_digest: String::new(),
            mode: mode.to_string(),
        };
        identity.options_digest = identity.options_digest();
        identity
    }

    /// The digest of the options that decide what a run explores (not the argument's spelling).
    pub fn options_digest(&self) -> String {
        let options = serde_json::json!({
            "server": self.server,
            "faults": self.faults,
            "world": self.world,
            "seeds": self.seeds,
            "scenarioDigest": self.scenario_digest,
            "mode": self.mode,
        });
        digest(options.to_string().as_bytes())
    }
}

/// `sha256:<hex>` of some bytes.
pub fn digest(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Which of N shards (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

/// What one shard explored of one scenario against one server: the counts count every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub shard: Shard,
    /// The seeds this shard ran (null: its slice was empty).
    pub seeds_run: Option<Seeds>,
    pub scenario: String,
    /// `real` or `mutant:NAME`.
    pub server: String,
    pub schedules: u64,
    pub deliveries: u64,
    pub unsafe_runs: u64,
    pub not_live_runs: u64,
    pub expectation_runs: u64,
    pub crashed_runs: u64,
    /// Every property broken in some run, in the oracle's order (as the terminal prints them).
    pub properties_broken: Vec<String>,
    /// Runs that broke each property (a run breaking two counts for both).
    pub failing_runs_by_property: BTreeMap<String, u64>,
    /// `Coverage::to_mergeable_json`, or null when coverage was not collected.
    pub coverage: Option<Value>,
}

/// How a failing seed failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A safety property broke.
    Unsafe,
    /// Under faults, liveness broke (and no safety property).
    NotLive,
    /// Without faults, an expectation of the scenario failed (and no property).
    Expectations,
    /// The simulator itself crashed.
    Crashed,
    /// The seed's transcript differed between two processes (`--check-determinism`).
    Nondeterministic,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Unsafe => "unsafe",
            Verdict::NotLive => "not_live",
            Verdict::Expectations => "expectations",
            Verdict::Crashed => "crashed",
            Verdict::Nondeterministic => "nondeterministic",
        }
    }
}

/// One failing seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub scenario: String,
    pub server: String,
    pub seed: u64,
    pub verdict: Verdict,
    /// The properties broken, in the oracle's order (empty for expectations and crashes).
    pub properties: Vec<String>,
    pub deliveries: u64,
    /// The seed's fault plan, when faults were on.
    pub fault_plan: Option<Value>,
    /// The failures as the terminal prints them.
    pub failures: Vec<String>,
    /// The one command that runs this seed again.
    pub reproduce: String,
}

/// What a record is: the line's `"record"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "lowercase")]
pub enum Body {
    Summary(Summary),
    Finding(Finding),
}

/// One line of a results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub format: u64,
    pub build: BuildIdentity,
    pub run: RunIdentity,
    #[serde(flatten)]
    pub body: Body,
}

impl Record {
    /// A record of this build and format.
    pub fn new(run: &RunIdentity, body: Body) -> Record {
        Record { format: FORMAT, build: BuildIdentity::current(), run: run.clone(), body }
    }

    /// The record as one line (no newline), keys sorted.
    pub fn to_line(&self) -> String {
        serde_json::to_value(self).expect("a record serializes").to_string()
    }
}

/// A line of a results file that is not a record: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultsError {
    pub path: String,
    pub line: usize,
    pub what: String,
}

impl std::fmt::Display for ResultsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.what)
    }
}

/// Writes `records` to `path`, one per line, replacing it whole: to a temporary file in the same folder first,
/// then renamed over `path` (a reader sees the old file or the new one, never a part).
pub fn write(path: &Path, records: &[Record]) -> std::io::Result<()> {
    let mut text = String::new();
    for record in records {
        text.push_str(&record.to_line());
        text.push('\n');
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "results".into());
    let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::File::create(&temporary).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        file.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&temporary, path)) {
        Ok(()) => Ok(()),
        Err(error) => {
            let _ = std::fs::remove_file(&temporary);
            Err(error)
        }
    }
}

/// Reads a results file: its records, and every line that is not one. Err only when the file cannot be read.
pub fn read(path: &Path) -> std::io::Result<(Vec<Record>, Vec<ResultsError>)> {
    let bytes = std::fs::read(path)?;
    Ok(parse(&path.display().to_string(), &bytes))
}

/// Lines longer than this are refused unread (a results line is a few kilobytes; a coverage of many distinct
/// orders some megabytes).
pub const LINE_BYTES_MAX: usize = 256 << 20;

/// The records of a results file's bytes (`name` is how errors name the file).
pub fn parse(name: &str, bytes: &[u8]) -> (Vec<Record>, Vec<ResultsError>) {
    let mut records = Vec::new();
    let mut errors = Vec::new();
    for (index, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_line(line) {
            Ok(record) => records.push(record),
            Err(what) => errors.push(ResultsError { path: name.to_string(), line: index + 1, what }),
        }
    }
    (records, errors)
}

fn parse_line(line: &[u8]) -> Result<Record, String> {
    if line.len() > LINE_BYTES_MAX {
        return Err(format!("a line of {} bytes (at most {LINE_BYTES_MAX})", line.len()));
    }
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("not a JSON object")?;
    match object.get("format") {
        Some(format) if format.as_u64() == Some(FORMAT) => {}
        Some(other) => return Err(format!("format {other} (this mcpsim reads format {FORMAT})")),
        None => return Err("no \"format\"".into()),
    }
    match object.get("record").and_then(Value::as_str) {
        Some("summary" | "finding") => {}
        Some(other) => return Err(format!("unknown record {other:?} (summary or finding)")),
        None => return Err("no \"record\" (summary or finding)".into()),
    }
    let kind = object["record"].as_str().unwrap_or_default().to_string();
    serde_json::from_value(value).map_err(|e| format!("a {kind} record: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunIdentity {
        RunIdentity::new(
            "04-accepts-race-for-one-note",
            "scenario text",
            "04-accepts-race-for-one-note",
            "real",
            &["drop", "crash"],
            "simulator",
            Seeds { first: 1, last: 9 },
            "seeds",
        )
    }

    fn summary() -> Record {
        Record::new(
            &run(),
            Body::Summary(Summary {
                shard: Shard { index: 2, count: 3 },
                seeds_run: Some(Seeds { first: 4, last: 6 }),
                scenario: "04-accepts-race-for-one-note".into(),
                server: "real".into(),
                schedules: 3,
                deliveries: 120,
                unsafe_runs: 1,
                not_live_runs: 0,
                expectation_runs: 0,
                crashed_runs: 0,
                properties_broken: vec!["at_most_once".into()],
                failing_runs_by_property: [("at_most_once".to_string(), 1)].into(),
                coverage: Some(serde_json::json!({"runs": 3})),
            }),
        )
    }

    fn finding() -> Record {
        Record::new(
            &run(),
            Body::Finding(Finding {
                scenario: "04-accepts-race-for-one-note".into(),
                server: "real".into(),
                seed: 5,
                verdict: Verdict::Unsafe,
                properties: vec!["at_most_once".into()],
                deliveries: 40,
                fault_plan: Some(serde_json::json!([{"crash": {"instance": 1}}])),
                failures: vec!["at_most_once broke: \"x\"\nsecond line".into()],
                reproduce: "mcpsim explore 04-accepts-race-for-one-note --seed-range 5..5 --faults crash,drop".into(),
            }),
        )
    }

    #[test]
    fn records_round_trip_through_a_file_with_sorted_keys() {
        let dir = std::env::temp_dir().join(format!("mcpsim-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shard-2.jsonl");
        let records = vec![summary(), finding()];
        write(&path, &records).unwrap();
        let (read_back, errors) = read(&path).unwrap();
        assert_eq!(errors, vec![]);
        assert_eq!(read_back, records);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("{\"build\":{"), "{first}");
        assert!(first.contains("\"record\":\"summary\""), "{first}");
        assert!(first.contains("\"faults\":[\"crash\",\"drop\"]"), "faults sorted: {first}");
        // Written again: the same bytes, and no temporary file left beside it.
        write(&path, &records).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("shard-2.jsonl")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_build_identity_names_this_build() {
        let build = BuildIdentity::current();
        assert_eq!(build.version, env!("CARGO_PKG_VERSION"));
        assert!(build.lockfile.starts_with("sha256:") && build.lockfile.len() == 7 + 64, "{}", build.lockfile);
        if let Some(commit) = &build.commit {
            assert!(commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()), "{commit}");
            assert!(build.dirty.is_some());
        }
        assert!(build.rustc.as_deref().is_none_or(|r| r.starts_with("rustc ")), "{:?}", build.rustc);
    }

    #[test]
    fn the_options_digest_follows_what_is_explored_not_the_spelling() {
        let a = run();
        let mut b = run();
        b.argument = "scenarios/04-accepts-race-for-one-note.sim".into();
        assert_eq!(
            a.options_digest,
            RunIdentity::new(&a.scenario, "scenario text", &b.argument, "real", &["crash", "drop"], "simulator", a.seeds, "seeds")
                .options_digest
        );
        let other_seeds = RunIdentity::new(
            &a.scenario,
            "scenario text",
            &a.argument,
            "real",
            &["crash", "drop"],
            "simulator",
            Seeds { first: 1, last: 10 },
            "seeds",
        );
        let other_text =
            RunIdentity::new(&a.scenario, "scenario text!", &a.argument, "real", &["crash", "drop"], "simulator", a.seeds, "seeds");
        let other_server =
            RunIdentity::new(&a.scenario, "scenario text", &a.argument, "mutant:x", &["crash", "drop"], "simulator", a.seeds, "seeds");
        for other in [other_seeds, other_text, other_server] {
            assert_ne!(other.options_digest, a.options_digest, "{other:?}");
        }
    }

    #[test]
    fn every_malformed_line_is_named_with_its_line_and_the_rest_is_read() {
        let good = finding().to_line();
        let mut wrong_format: Value = serde_json::from_str(&good).unwrap();
        wrong_format["format"] = 2.into();
        let mut unknown: Value = serde_json::from_str(&good).unwrap();
        unknown["record"] = "verdict".into();
        let mut no_record = unknown.clone();
        no_record.as_object_mut().unwrap().remove("record");
        let mut no_format = unknown.clone();
        no_format.as_object_mut().unwrap().remove("format");
        let mut missing_field: Value = serde_json::from_str(&good).unwrap();
        missing_field.as_object_mut().unwrap().remove("seed");
        let mut wrong_type: Value = serde_json::from_str(&good).unwrap();
        wrong_type["seed"] = "five".into();
        let mut bad_verdict: Value = serde_json::from_str(&good).unwrap();
        bad_verdict["verdict"] = "odd".into();
        let truncated = &good[..good.len() / 2];
        let lines: Vec<Vec<u8>> = vec![
            good.clone().into_bytes(),              // 1
            b"not json".to_vec(),                   // 2
            b"[1,2]".to_vec(),                      // 3
            wrong_format.to_string().into_bytes(),  // 4
            unknown.to_string().into_bytes(),       // 5
            no_record.to_string().into_bytes(),     // 6
            no_format.to_string().into_bytes(),     // 7
            missing_field.to_string().into_bytes(), // 8
            wrong_type.to_string().into_bytes(),    // 9
            bad_verdict.to_string().into_bytes(),   // 10
            vec![b'{', 0xff, b'}'],                 // 11
            b"   ".to_vec(),                        // 12, blank: skipped
            summary().to_line().into_bytes(),       // 13
            truncated.as_bytes().to_vec(),          // 14
        ];
        let bytes = lines.join(&b'\n');
        let (records, errors) = parse("shard-1.jsonl", &bytes);
        assert_eq!(records, vec![finding(), summary()]);
        let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let expected = [
            (2, "not JSON"),
            (3, "not a JSON object"),
            (4, "format 2 (this mcpsim reads format 1)"),
            (5, "unknown record \"verdict\""),
            (6, "no \"record\""),
            (7, "no \"format\""),
            (8, "a finding record: missing field `seed`"),
            (9, "a finding record: invalid type"),
            (10, "a finding record: unknown variant `odd`"),
            (11, "not UTF-8"),
            (14, "not JSON"),
        ];
        assert_eq!(errors.len(), expected.len(), "{said:#?}");
        for ((line, what), error) in expected.iter().zip(&said) {
            assert!(error.starts_with(&format!("shard-1.jsonl:{line}: {what}")), "line {line}: {error}");
        }
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_of_its_own() {
        assert!(read(Path::new("/nonexistent/mcpsim/results.jsonl")).is_err());
    }
}
