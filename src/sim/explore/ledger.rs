//! The seed ledger (`mcpsim merge --ledger DIR`, `mcpsim explore --ledger DIR`): failing seeds kept across
//! runs, one file per finding, so that a regression is caught first by the seeds that found it before.
//!
//! A finding lives in `DIR/<scenario>/<server>/<verdict>-<property or ->-seed<N>.json` (names made safe for
//! any file system: `mutant:NAME` is `mutant-NAME`): the pretty JSON (keys sorted) of its results record
//! (`results::Record`) with what the ledger adds: `firstSeen` and `lastSeen` (the builds, `{commit, dirty,
//! version}`), `count` (builds that found it), `passedSince` (builds in a row on which it passed since it last
//! failed), `lastPassed` (the last of those) and `freshness` (its place in its folder's order of recordings: the
//! folder's highest plus one whenever it is recorded or fails again). No clock and no machine name goes in, so
//! the same runs give the same files and a ledger kept under git merges file by file.
//!
//! Rules: a seed is kept until it has passed on `keep` builds in a row (then retired: its file removed); a
//! folder (scenario and server) keeps at most `max` seeds, the least fresh dropped first (among equals the
//! higher seed). The same build recording or failing a seed again changes nothing (no churn under git).

use super::results::{Body, BuildIdentity, Finding, Record};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Builds in a row a recorded seed must pass on before it is retired (`--ledger-keep`).
pub const KEEP_DEFAULT: u64 = 20;
/// Most seeds kept per scenario and server (`--ledger-max`).
pub const MAX_DEFAULT: usize = 50;
/// Most files one ledger folder is read from (a ledger is a few hundred files).
const FILES_MAX: usize = 100_000;
/// Largest ledger file read (one finding: a few kilobytes).
const FILE_BYTES_MAX: u64 = 16 << 20;

/// A build, as the ledger names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub commit: Option<String>,
    pub dirty: Option<bool>,
    pub version: String,
}

impl Seen {
    pub fn of(build: &BuildIdentity) -> Seen {
        Seen { commit: build.commit.clone(), dirty: build.dirty, version: build.version.clone() }
    }

    /// A few words: the short commit, or the version.
    pub fn short(&self) -> String {
        match &self.commit {
            Some(commit) => format!("{}{}", &commit[..commit.len().min(7)], if self.dirty == Some(true) { "+dirty" } else { "" }),
            None => format!("version {}", self.version),
        }
    }
}

/// One recorded failing seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The finding's results record, as the merge read it.
    pub record: Record,
    pub first_seen: Seen,
    pub last_seen: Seen,
    pub count: u64,
    pub passed_since: u64,
    pub last_passed: Option<Seen>,
    pub freshness: u64,
}

/// The ledger's own keys in an entry's file.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kept {
    first_seen: Seen,
    last_seen: Seen,
    count: u64,
    passed_since: u64,
    last_passed: Option<Seen>,
    freshness: u64,
}

impl Entry {
    pub fn finding(&self) -> &Finding {
        match &self.record.body {
            Body::Finding(finding) => finding,
            Body::Summary(_) => unreachable!("an entry is made of a finding record only"),
        }
    }

    /// Its path under the ledger's folder.
    pub fn path(&self) -> PathBuf {
        path_of(self.finding())
    }

    /// The file's text: pretty JSON, keys sorted, a final newline.
    pub fn to_json(&self) -> String {
        let mut value = serde_json::to_value(&self.record).expect("a record serializes");
        let kept = Kept {
            first_seen: self.first_seen.clone(),
            last_seen: self.last_seen.clone(),
            count: self.count,
            passed_since: self.passed_since,
            last_passed: self.last_passed.clone(),
            freshness: self.freshness,
        };
        if let (Some(object), Value::Object(extra)) = (value.as_object_mut(), serde_json::to_value(kept).expect("serializes")) {
            object.extend(extra);
        }
        serde_json::to_string_pretty(&value).expect("JSON serializes") + "\n"
    }

    pub fn from_json(text: &str) -> Result<Entry, String> {
        let mut value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let object = value.as_object_mut().ok_or("not a JSON object")?;
        let mut kept = serde_json::Map::new();
        for key in ["firstSeen", "lastSeen", "count", "passedSince", "lastPassed", "freshness"] {
            if let Some(field) = object.remove(key) {
                kept.insert(key.into(), field);
            }
        }
        let kept: Kept = serde_json::from_value(Value::Object(kept)).map_err(|e| format!("the ledger's fields: {e}"))?;
        let record: Record = serde_json::from_value(value).map_err(|e| format!("the finding record: {e}"))?;
        if !matches!(record.body, Body::Finding(_)) {
            return Err("a summary record, not a finding".into());
        }
        Ok(Entry {
            record,
            first_seen: kept.first_seen,
            last_seen: kept.last_seen,
            count: kept.count,
            passed_since: kept.passed_since,
            last_passed: kept.last_passed,
            freshness: kept.freshness,
        })
    }
}

/// A name part safe in any file system: letters, digits, `.`, `_` and `-` kept, anything else `-`.
fn safe(part: &str) -> String {
    let name: String = part.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }).collect();
    match name.trim_start_matches('.') {
        "" => "-".into(),
        trimmed => trimmed.to_string(),
    }
}

/// `<scenario>/<server>/<verdict>-<first property or ->-seed<N>.json`.
pub fn path_of(finding: &Finding) -> PathBuf {
    let property = finding.properties.first().map_or("-", String::as_str);
    PathBuf::from(safe(&finding.scenario)).join(safe(&finding.server)).join(format!(
        "{}-{}-seed{}.json",
        finding.verdict.as_str(),
        safe(property),
        finding.seed
    ))
}

/// The first failing run per (scenario, server, verdict, first property): the smallest seed, then the fewest
/// deliveries. Summary records are passed over.
pub fn firsts(records: &[Record]) -> Vec<&Record> {
    let mut firsts: BTreeMap<(String, String, &'static str, String), &Record> = BTreeMap::new();
    for record in records {
        let Body::Finding(finding) = &record.body else { continue };
        let key = (
            finding.scenario.clone(),
            finding.server.clone(),
            finding.verdict.as_str(),
            finding.properties.first().cloned().unwrap_or_default(),
        );
        let better = |kept: &&Record| match &kept.body {
            Body::Finding(old) => (finding.seed, finding.deliveries) < (old.seed, old.deliveries),
            Body::Summary(_) => true,
        };
        match firsts.get(&key) {
            Some(kept) if !better(kept) => {}
            _ => {
                firsts.insert(key, record);
            }
        }
    }
    firsts.into_values().collect()
}

/// What a recording or a replay changed, file by file (paths relative to the ledger's folder).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<PathBuf>,
    pub updated: Vec<PathBuf>,
    /// Dropped for a fresher one (more than `max` in a folder).
    pub dropped: Vec<PathBuf>,
    /// Passed on `keep` builds in a row.
    pub retired: Vec<PathBuf>,
}

/// The entries of one folder (scenario and server) after recording `found` (first failing runs, each seen by
/// the build its record names), keeping at most `max`: the entries to write, and what changed.
pub fn record_in(existing: Vec<Entry>, found: &[&Record], max: usize) -> (Vec<Entry>, Changes) {
    let mut entries: BTreeMap<PathBuf, Entry> = existing.into_iter().map(|e| (e.path(), e)).collect();
    let mut changes = Changes::default();
    let freshness = entries.values().map(|e| e.freshness).max().unwrap_or(0) + 1;
    for record in found {
        let Body::Finding(finding) = &record.body else { continue };
        // Seen by the build that ran it (its record says which), not by the one merging.
        let seen = Seen::of(&record.build);
        let path = path_of(finding);
        match entries.get_mut(&path) {
            // Seen again by another build: counted and freshened (the same build again changes nothing).
            Some(entry) if entry.last_seen != seen || entry.passed_since > 0 => {
                if entry.last_seen != seen {
                    entry.count += 1;
                }
                entry.last_seen = seen.clone();
                entry.passed_since = 0;
                entry.last_passed = None;
                entry.freshness = freshness;
                changes.updated.push(path);
            }
            Some(_) => {}
            None => {
                let entry = Entry {
                    record: (*record).clone(),
                    first_seen: seen.clone(),
                    last_seen: seen.clone(),
                    count: 1,
                    passed_since: 0,
                    last_passed: None,
                    freshness,
                };
                entries.insert(path.clone(), entry);
                changes.added.push(path);
            }
        }
    }
    let mut kept: Vec<Entry> = entries.into_values().collect();
    if kept.len() > max {
        // The least fresh first, and among equals the higher seed (a smaller seed is the simpler run).
        kept.sort_by_key(|e| (e.freshness, std::cmp::Reverse(e.finding().seed)));
        for entry in kept.drain(..kept.len() - max) {
            let path = entry.path();
            changes.added.retain(|p| *p != path);
            changes.updated.retain(|p| *p != path);
            changes.dropped.push(path);
        }
        kept.sort_by_key(Entry::path);
    }
    (kept, changes)
}

/// What a replay of `entry` by `build` makes of it: it failed again (freshened, its pass count back to 0), or
/// it passed (counted once per build); `None` when it has now passed on `keep` builds in a row (retire it).
pub fn replayed(mut entry: Entry, failed: bool, build: &BuildIdentity, keep: u64, freshness: u64) -> Option<Entry> {
    let seen = Seen::of(build);
    if failed {
        if entry.last_seen != seen || entry.passed_since > 0 {
            if entry.last_seen != seen {
                entry.count += 1;
            }
            entry.last_seen = seen;
            entry.passed_since = 0;
            entry.last_passed = None;
            entry.freshness = freshness;
        }
        return Some(entry);
    }
    if entry.last_passed.as_ref() != Some(&seen) {
        entry.passed_since += 1;
        entry.last_passed = Some(seen);
    }
    (entry.passed_since < keep).then_some(entry)
}

/// Every entry under `dir` (sorted by path), and every file that is not one (`path: what is wrong`). A
/// missing folder is an empty ledger.
pub fn load(dir: &Path) -> std::io::Result<(Vec<Entry>, Vec<String>)> {
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    if !dir.exists() {
        return Ok((entries, errors));
    }
    let mut files = Vec::new();
    for scenario in sorted_dir(dir)? {
        if !scenario.is_dir() || scenario.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
            continue;
        }
        for server in sorted_dir(&scenario)? {
            if !server.is_dir() {
                continue;
            }
            files.extend(sorted_dir(&server)?.into_iter().filter(|p| p.extension().is_some_and(|e| e == "json")));
            if files.len() > FILES_MAX {
                return Err(std::io::Error::other(format!("more than {FILES_MAX} files in the ledger {}", dir.display())));
            }
        }
    }
    for file in files {
        let read = std::fs::metadata(&file).and_then(|m| {
            if m.len() > FILE_BYTES_MAX {
                Err(std::io::Error::other(format!("larger than {FILE_BYTES_MAX} bytes")))
            } else {
                std::fs::read_to_string(&file)
            }
        });
        let parsed = read.map_err(|e| e.to_string()).and_then(|text| Entry::from_json(&text));
        match parsed {
            Ok(entry) if dir.join(entry.path()) == file => entries.push(entry),
            Ok(entry) => errors.push(format!("{}: its finding belongs in {}", file.display(), dir.join(entry.path()).display())),
            Err(what) => errors.push(format!("{}: {what}", file.display())),
        }
    }
    Ok((entries, errors))
}

fn sorted_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths = std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<Vec<_>, _>>()?;
    paths.sort();
    Ok(paths)
}

/// Records the first failing runs of `records` (a merge's) in the ledger under `dir`, keeping at
/// most `max` per scenario and server; files are written whole (a temporary file renamed) and only when
/// their text changes.
pub fn record(dir: &Path, records: &[Record], max: usize) -> std::io::Result<(Changes, Vec<String>)> {
    let (entries, errors) = load(dir)?;
    let found = firsts(records);
    let mut by_folder: BTreeMap<PathBuf, (Vec<Entry>, Vec<&Record>)> = BTreeMap::new();
    for entry in entries {
        let folder = entry.path().parent().map(Path::to_path_buf).unwrap_or_default();
        by_folder.entry(folder).or_default().0.push(entry);
    }
    for record in found {
        let Body::Finding(finding) = &record.body else { continue };
        let folder = path_of(finding).parent().map(Path::to_path_buf).unwrap_or_default();
        by_folder.entry(folder).or_default().1.push(record);
    }
    let mut changes = Changes::default();
    for (_, (existing, found)) in by_folder {
        if found.is_empty() {
            continue;
        }
        let before: BTreeMap<PathBuf, String> = existing.iter().map(|e| (e.path(), e.to_json())).collect();
        let (kept, folder) = record_in(existing, &found, max);
        for entry in &kept {
            let text = entry.to_json();
            if before.get(&entry.path()) != Some(&text) {
                write_file(&dir.join(entry.path()), &text)?;
            }
        }
        for path in &folder.dropped {
            if before.contains_key(path) {
                std::fs::remove_file(dir.join(path))?;
            }
        }
        changes.added.extend(folder.added);
        changes.updated.extend(folder.updated);
        changes.dropped.extend(folder.dropped);
    }
    Ok((changes, errors))
}

/// Writes `entry` back (when it changed), or removes its file when `None` retired it.
pub fn store(dir: &Path, path: &Path, entry: Option<&Entry>) -> std::io::Result<()> {
    match entry {
        Some(entry) => {
            let text = entry.to_json();
            match std::fs::read_to_string(dir.join(path)) {
                Ok(old) if old == text => Ok(()),
                _ => write_file(&dir.join(path), &text),
            }
        }
        None => std::fs::remove_file(dir.join(path)),
    }
}

/// `text` into `path` whole: a temporary file beside it, renamed over it.
fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    match std::fs::write(&temporary, text).and_then(|()| std::fs::rename(&temporary, path)) {
        Ok(()) => Ok(()),
        Err(error) => {
            let _ = std::fs::remove_file(&temporary);
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::results::{RunIdentity, Seeds, Verdict};
    use super::*;

    fn build(commit: &str) -> BuildIdentity {
        BuildIdentity {
            version: "0.1.0".into(),
            commit: Some(commit.repeat(40 / commit.len())),
            dirty: Some(false),
            rustc: None,
            lockfile: "sha256:00".into(),
        }
    }

    fn finding(seed: u64, deliveries: u64, property: &str) -> Record {
        let run = RunIdentity::new("04-race", "text", "04-race", "mutant:m", &[], "simulator", Seeds { first: 1, last: 100 }, "seeds");
        let mut record = Record::new(
            &run,
            Body::Finding(Finding {
                scenario: "04-race".into(),
                server: "mutant:m".into(),
                seed,
                verdict: Verdict::Unsafe,
                properties: vec![property.into()],
                deliveries,
                fault_plan: None,
                failures: vec!["broke".into()],
                reproduce: format!("mcpsim explore 04-race --seed-range {seed}..{seed} --mutant m"),
            }),
        );
        record.build = build("a");
        record
    }

    /// `record` as the build `commit` wrote it.
    fn by(commit: &str, mut record: Record) -> Record {
        record.build = build(commit);
        record
    }

    #[test]
    fn names_are_deterministic_and_safe() {
        let record = finding(7, 10, "at_most_once");
        let Body::Finding(f) = &record.body else { unreachable!() };
        assert_eq!(path_of(f), PathBuf::from("04-race/mutant-m/unsafe-at_most_once-seed7.json"));
        assert_eq!(safe("../x/y"), "-x-y");
        assert_eq!(safe(""), "-");
    }

    #[test]
    fn the_first_failing_run_is_the_smallest_seed_then_the_fewest_deliveries() {
        let records =
            [finding(9, 5, "at_most_once"), finding(3, 50, "at_most_once"), finding(3, 40, "at_most_once"), finding(12, 1, "consent")];
        let firsts = firsts(&records);
        let seeds: Vec<(u64, u64)> = firsts
            .iter()
            .map(|r| match &r.body {
                Body::Finding(f) => (f.seed, f.deliveries),
                Body::Summary(_) => unreachable!(),
            })
            .collect();
        assert_eq!(seeds, [(3, 40), (12, 1)]);
    }

    #[test]
    fn an_entry_round_trips_through_its_file_text() {
        let record = finding(7, 10, "at_most_once");
        let (kept, _) = record_in(Vec::new(), &[&by("b", record.clone())], MAX_DEFAULT);
        let text = kept[0].to_json();
        assert_eq!(Entry::from_json(&text).unwrap(), kept[0]);
        assert!(text.contains("\"firstSeen\"") && text.contains("\"passedSince\": 0") && text.ends_with("}\n"), "{text}");
        assert!(Entry::from_json("{\"record\":\"finding\"}").is_err());
    }

    #[test]
    fn recording_again_counts_builds_not_merges() {
        let record = finding(7, 10, "at_most_once");
        let (kept, changes) = record_in(Vec::new(), &[&by("b", record.clone())], MAX_DEFAULT);
        assert_eq!(changes.added.len(), 1);
        let before = kept[0].to_json();
        let (kept, changes) = record_in(kept, &[&by("b", record.clone())], MAX_DEFAULT);
        assert_eq!((kept[0].count, changes.updated.len()), (1, 0));
        assert_eq!(kept[0].to_json(), before, "the same build again changes no byte");
        let (kept, _) = record_in(kept, &[&by("c", record.clone())], MAX_DEFAULT);
        assert_eq!(
            (kept[0].count, kept[0].first_seen.clone(), kept[0].last_seen.clone()),
            (2, Seen::of(&build("b")), Seen::of(&build("c")))
        );
    }

    #[test]
    fn a_full_folder_drops_the_least_fresh_and_keeps_the_new() {
        let (mut kept, _) = record_in(Vec::new(), &[&by("b", finding(1, 1, "a")), &by("b", finding(2, 1, "b"))], 3);
        let (next, _) = record_in(kept, &[&by("c", finding(3, 1, "c"))], 3);
        kept = next;
        // A fourth seed: of the first recording (freshness 1) the higher seed goes.
        let (kept, changes) = record_in(kept, &[&by("d", finding(4, 1, "d"))], 3);
        let seeds: Vec<u64> = kept.iter().map(|e| e.finding().seed).collect();
        assert_eq!(seeds, [1, 3, 4]);
        assert_eq!(changes.dropped, [PathBuf::from("04-race/mutant-m/unsafe-b-seed2.json")]);
        // Seen again, seed 1 is the freshest: the next drop is seed 3.
        let (kept, _) = record_in(kept, &[&by("e", finding(1, 1, "a"))], 3);
        let (kept, changes) = record_in(kept, &[&by("e", finding(5, 1, "e"))], 3);
        assert_eq!(kept.iter().map(|e| e.finding().seed).collect::<Vec<_>>(), [1, 4, 5]);
        assert_eq!(changes.dropped, [PathBuf::from("04-race/mutant-m/unsafe-c-seed3.json")]);
    }

    #[test]
    fn a_seed_is_kept_until_it_passes_on_keep_builds_in_a_row() {
        let (kept, _) = record_in(Vec::new(), &[&by("b", finding(7, 10, "a"))], MAX_DEFAULT);
        let entry = kept.into_iter().next().unwrap();
        let entry = replayed(entry, false, &build("c"), 3, 2).expect("kept");
        assert_eq!(entry.passed_since, 1);
        // The same build passing it again is not another build in a row.
        let entry = replayed(entry, false, &build("c"), 3, 2).expect("kept");
        assert_eq!(entry.passed_since, 1);
        let entry = replayed(entry, false, &build("d"), 3, 2).expect("kept");
        assert_eq!(entry.passed_since, 2);
        // Failing again starts the count over.
        let entry = replayed(entry, true, &build("e"), 3, 5).expect("kept");
        assert_eq!((entry.passed_since, entry.count, entry.freshness), (0, 2, 5));
        let entry = replayed(entry, false, &build("f"), 3, 5).expect("kept");
        let entry = replayed(entry, false, &build("g"), 3, 5).expect("kept");
        assert_eq!(replayed(entry, false, &build("h"), 3, 5), None, "the third build in a row retires it");
    }
}
