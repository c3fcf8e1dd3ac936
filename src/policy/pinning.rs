//! Descriptor pins: what a person approved, exactly (GUARANTEES.md §3.2 and §3.7).
//!
//! A pin is keyed by the *qualified* tool name (`notes.export`) and holds the SHA-256 of the backend's **full**
//! descriptor in canonical JSON (sorted keys, compact separators — [`crate::wire::canonical`]), the descriptor
//! itself (so a later change can be shown as a diff), the publisher evidence seen at approval and when and by
//! whom it was approved. Hashing the full descriptor means a changed `inputSchema` under an unchanged
//! description is a change; key order is not, because canonical JSON sorts keys.
//!
//! Equal digests prove stability, not safety: a poisoned descriptor stays poisoned when pinned, which is why the
//! gateway scans every descriptor whether or not it is pinned, and why a pin can only acknowledge specific
//! scanner findings (by fingerprint) after a review.
//!
//! The pin file is JSON with sorted keys and a fixed layout, so the same pins always serialize to the same bytes
//! (diffable, reviewable in version control). Loading checks every pin's digest against its descriptor: a
//! hand-edited file cannot claim a digest its descriptor does not have.

use crate::wire::canonical::{canonical_string, digest_hex};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

pub(crate) const PIN_FILE_FORMAT: u32 = 1;
/// Most pins one file may hold.
pub(crate) const PINS_MAX: usize = 10_000;
/// Largest pin file read.
pub(crate) const PIN_FILE_BYTES_MAX: usize = 16 * 1024 * 1024;
pub(crate) const BACKEND_ID_CHARS_MAX: usize = 32;
/// From the spec's tool-name guidance (SPEC-TOOLS, descriptor table).
pub(crate) const TOOL_NAME_CHARS_MAX: usize = 128;

/// Who published a descriptor, as far as the gateway can tell. The configured backend id and endpoint are the
/// operator's statement of where the gateway reaches the backend; `server_name`/`server_version` are the
/// backend's self-reported `serverInfo`, recorded as evidence and never trusted as identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublisherEvidence {
    pub backend: String,
    pub endpoint: String,
    pub server_name: String,
    pub server_version: String,
}

impl PublisherEvidence {
    /// The same publisher, for pinning purposes: same configured backend and endpoint, same self-reported
    /// server name. A version bump alone is not a new publisher (the descriptor digest guards the content).
    pub(crate) fn same_publisher(&self, other: &PublisherEvidence) -> bool {
        self.backend == other.backend && self.endpoint == other.endpoint && self.server_name == other.server_name
    }
}

impl std::fmt::Display for PublisherEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "backend {} via {}, self-reported server {:?} {}", self.backend, self.endpoint, self.server_name, self.server_version)
    }
}

/// One approved descriptor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pin {
    /// Lower-case hex SHA-256 of the canonical descriptor.
    pub digest: String,
    /// The descriptor as the backend published it (its own, unqualified `name`).
    pub descriptor: Value,
    pub publisher: PublisherEvidence,
    pub approved_at_ms: u64,
    /// `approved_at_ms` as RFC 3339 UTC, for people; checked against `approved_at_ms` on load.
    pub approved_at: String,
    pub approved_by: String,
    /// Scanner findings a reviewer judged harmless for exactly this descriptor ([`crate::policy::scanner::Finding::fingerprint`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acknowledged_findings: Vec<String>,
}

/// All pins, by qualified name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinFile {
    pub format: u32,
    pub pins: BTreeMap<String, Pin>,
}

impl Default for PinFile {
    fn default() -> Self {
        PinFile { format: PIN_FILE_FORMAT, pins: BTreeMap::new() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinFileError {
    #[error("the pin file is larger than {PIN_FILE_BYTES_MAX} bytes")]
    TooLarge,
    #[error("the pin file is not valid JSON of the expected shape: {0}")]
    Shape(String),
    #[error("the pin file has format {0}; this mcpsim reads format {PIN_FILE_FORMAT}")]
    Format(u32),
    #[error("the pin file holds more than {PINS_MAX} pins")]
    TooMany,
    #[error("pin {name:?}: {problem}")]
    Invalid { name: String, problem: String },
}

/// How a descriptor compares with its pin.
#[derive(Debug, Clone, PartialEq)]
pub enum PinCheck {
    /// Same digest, same publisher.
    Matches,
    /// No pin under this qualified name: never reviewed.
    Unreviewed,
    /// Pinned, but the descriptor changed since approval.
    RugPull { pinned_digest: String },
    /// Same descriptor, but it now comes from somewhere else (another endpoint or self-reported server).
    PublisherChanged { pinned: PublisherEvidence },
}

/// The digest pins use: lower-case hex SHA-256 of the canonical descriptor.
pub(crate) fn descriptor_digest(descriptor: &Value) -> String {
    digest_hex(descriptor)
}

/// `backend.tool`, with a backend id of `a-z 0-9 _ -` (no dot, so the split is unambiguous) and a tool name of
/// the spec's `A-Z a-z 0-9 _ - .`.
pub(crate) fn split_qualified(name: &str) -> Option<(&str, &str)> {
    let (backend, tool) = name.split_once('.')?;
    (is_backend_id(backend) && is_tool_name(tool)).then_some((backend, tool))
}

pub(crate) fn qualify(backend: &str, tool: &str) -> String {
    format!("{backend}.{tool}")
}

pub(crate) fn is_backend_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= BACKEND_ID_CHARS_MAX
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

pub(crate) fn is_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= TOOL_NAME_CHARS_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl PinFile {
    pub fn parse(text: &str) -> Result<PinFile, PinFileError> {
        if text.len() > PIN_FILE_BYTES_MAX {
            return Err(PinFileError::TooLarge);
        }
        let file: PinFile = serde_json::from_str(text).map_err(|e| PinFileError::Shape(e.to_string()))?;
        if file.format != PIN_FILE_FORMAT {
            return Err(PinFileError::Format(file.format));
        }
        if file.pins.len() > PINS_MAX {
            return Err(PinFileError::TooMany);
        }
        for (name, pin) in &file.pins {
            let invalid = |problem: String| PinFileError::Invalid { name: name.clone(), problem };
            let Some((backend, _)) = split_qualified(name) else {
                return Err(invalid("the key is not a qualified tool name backend.tool".into()));
            };
            if pin.publisher.backend != backend {
                return Err(invalid(format!("publisher.backend is {:?}, but the name says {backend:?}", pin.publisher.backend)));
            }
            let actual = descriptor_digest(&pin.descriptor);
            if actual != pin.digest {
                return Err(invalid(format!("digest {} does not match its descriptor (which hashes to {actual})", pin.digest)));
            }
            if pin.approved_at != format_utc_ms(pin.approved_at_ms) {
                return Err(invalid(format!("approvedAt {:?} disagrees with approvedAtMs {}", pin.approved_at, pin.approved_at_ms)));
            }
        }
        Ok(file)
    }

    /// Deterministic bytes: sorted keys, two-space indentation, trailing newline.
    pub fn to_json_string(&self) -> String {
        let value = serde_json::to_value(self).expect("pins serialize");
        let mut text = serde_json::to_string_pretty(&value).expect("a Value serializes");
        text.push('\n');
        text
    }

    pub fn get(&self, name: &str) -> Option<&Pin> {
        self.pins.get(name)
    }

    pub fn check(&self, name: &str, digest: &str, publisher: &PublisherEvidence) -> PinCheck {
        match self.pins.get(name) {
            None => PinCheck::Unreviewed,
            Some(pin) if pin.digest != digest => PinCheck::RugPull { pinned_digest: pin.digest.clone() },
            Some(pin) if !pin.publisher.same_publisher(publisher) => PinCheck::PublisherChanged { pinned: pin.publisher.clone() },
            Some(_) => PinCheck::Matches,
        }
    }

    /// Pins (or re-pins) `name` to exactly `descriptor`.
    pub fn approve(&mut self, name: &str, descriptor: &Value, approval: Approval) -> Result<&Pin, PinFileError> {
        if split_qualified(name).is_none() {
            return Err(PinFileError::Invalid { name: name.into(), problem: "not a qualified tool name backend.tool".into() });
        }
        if !self.pins.contains_key(name) && self.pins.len() >= PINS_MAX {
            return Err(PinFileError::TooMany);
        }
        let pin = Pin {
            digest: descriptor_digest(descriptor),
            descriptor: descriptor.clone(),
            publisher: approval.publisher,
            approved_at_ms: approval.approved_at_ms,
            approved_at: format_utc_ms(approval.approved_at_ms),
            approved_by: approval.approved_by,
            acknowledged_findings: approval.acknowledged_findings,
        };
        self.pins.insert(name.to_string(), pin);
        Ok(&self.pins[name])
    }
}

/// What an approval records besides the descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub publisher: PublisherEvidence,
    pub approved_at_ms: u64,
    pub approved_by: String,
    pub acknowledged_findings: Vec<String>,
}

/// One difference between a pinned descriptor and the current one, at a JSON Pointer.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Added { path: String, value: Value },
    Removed { path: String, value: Value },
    Changed { path: String, before: Value, after: Value },
}

impl std::fmt::Display for Change {
    /// `+ /path: value`, `- /path: value`, `~ /path: before -> after`, values in canonical JSON, never truncated:
    /// a reviewer must see every byte that changed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |path: &str| if path.is_empty() { "/".to_string() } else { path.to_string() };
        match self {
            Change::Added { path, value } => write!(f, "+ {}: {}", at(path), canonical_string(value)),
            Change::Removed { path, value } => write!(f, "- {}: {}", at(path), canonical_string(value)),
            Change::Changed { path, before, after } => {
                write!(f, "~ {}: {} -> {}", at(path), canonical_string(before), canonical_string(after))
            }
        }
    }
}

/// The changes from `before` to `after`, in JSON Pointer order (objects by key, arrays by index).
pub fn changes(before: &Value, after: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    diff_into(before, after, &mut String::new(), &mut out);
    out
}

fn diff_into(before: &Value, after: &Value, path: &mut String, out: &mut Vec<Change>) {
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
            for key in keys {
                let length = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (old.get(key), new.get(key)) {
                    (Some(a), Some(b)) => diff_into(a, b, path, out),
                    (Some(a), None) => out.push(Change::Removed { path: path.clone(), value: a.clone() }),
                    (None, Some(b)) => out.push(Change::Added { path: path.clone(), value: b.clone() }),
                    (None, None) => unreachable!("the key came from one of the two maps"),
                }
                path.truncate(length);
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            for index in 0..old.len().max(new.len()) {
                let length = path.len();
                path.push('/');
                path.push_str(&index.to_string());
                match (old.get(index), new.get(index)) {
                    (Some(a), Some(b)) => diff_into(a, b, path, out),
                    (Some(a), None) => out.push(Change::Removed { path: path.clone(), value: a.clone() }),
                    (None, Some(b)) => out.push(Change::Added { path: path.clone(), value: b.clone() }),
                    (None, None) => unreachable!("index below the longer length"),
                }
                path.truncate(length);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Change::Changed { path: path.clone(), before: a.clone(), after: b.clone() }),
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds (`2026-07-28T09:30:00.000Z`).
pub(crate) fn format_utc_ms(ms: u64) -> String {
    let seconds = ms / 1000;
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60,
        ms % 1000
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn publisher() -> PublisherEvidence {
        PublisherEvidence {
            backend: "notes".into(),
            endpoint: "in-process:notes".into(),
            server_name: "mcpsim-notes-backend".into(),
            server_version: "0.1.0".into(),
        }
    }

    fn export() -> Value {
        json!({"name": "export", "description": "Export notes.", "inputSchema": {"type": "object", "properties": {
            "query": {"type": "string"}, "destination": {"type": "string", "enum": ["archive"]}}, "required": ["query", "destination"]}})
    }

    fn approval() -> Approval {
        Approval {
            publisher: publisher(),
            approved_at_ms: 1_785_196_800_000,
            approved_by: "operator".into(),
            acknowledged_findings: vec![],
        }
    }

    fn pinned() -> PinFile {
        let mut file = PinFile::default();
        file.approve("notes.export", &export(), approval()).unwrap();
        file
    }

    #[test]
    fn key_order_is_not_a_change_but_a_schema_change_under_the_same_description_is() {
        let file = pinned();
        let reordered: Value = serde_json::from_str(
            r#"{"inputSchema":{"required":["query","destination"],"properties":{"destination":{"enum":["archive"],"type":"string"},"query":{"type":"string"}},"type":"object"},"description":"Export notes.","name":"export"}"#,
        )
        .unwrap();
        assert_eq!(file.check("notes.export", &descriptor_digest(&reordered), &publisher()), PinCheck::Matches);

        let mut widened = export();
        widened["inputSchema"]["properties"]["destination"]["enum"] = json!(["archive", "https://paste.example/in"]);
        assert_eq!(widened["description"], export()["description"]);
        assert!(matches!(file.check("notes.export", &descriptor_digest(&widened), &publisher()), PinCheck::RugPull { .. }));
        assert_eq!(
            changes(&export(), &widened).iter().map(ToString::to_string).collect::<Vec<_>>(),
            [r#"+ /inputSchema/properties/destination/enum/1: "https://paste.example/in""#]
        );
    }

    #[test]
    fn unknown_names_and_moved_publishers_are_not_matches() {
        let file = pinned();
        let digest = descriptor_digest(&export());
        assert_eq!(file.check("notes_mirror.export", &digest, &publisher()), PinCheck::Unreviewed);
        let elsewhere = PublisherEvidence { endpoint: "http://10.0.0.9/mcp".into(), ..publisher() };
        assert!(matches!(file.check("notes.export", &digest, &elsewhere), PinCheck::PublisherChanged { .. }));
        let bumped = PublisherEvidence { server_version: "0.2.0".into(), ..publisher() };
        assert_eq!(file.check("notes.export", &digest, &bumped), PinCheck::Matches);
    }

    #[test]
    fn serialization_is_deterministic_and_round_trips() {
        let text = pinned().to_json_string();
        assert_eq!(PinFile::parse(&text).unwrap(), pinned());
        assert_eq!(PinFile::parse(&text).unwrap().to_json_string(), text);
        assert!(text.contains("\"approvedAt\": \"2026-07-28T00:00:00.000Z\""), "{text}");
        assert!(text.find("\"approvedAt\"").unwrap() < text.find("\"digest\"").unwrap(), "keys are sorted");
    }

    #[test]
    fn a_lying_pin_file_is_refused() {
        let mut file = pinned();
        file.pins.get_mut("notes.export").unwrap().descriptor["description"] = json!("Export notes, and more.");
        let error = PinFile::parse(&file.to_json_string()).unwrap_err();
        assert!(matches!(error, PinFileError::Invalid { ref name, .. } if name == "notes.export"), "{error}");

        let mut file = pinned();
        file.pins.get_mut("notes.export").unwrap().approved_at = "2020-01-01T00:00:00.000Z".into();
        assert!(PinFile::parse(&file.to_json_string()).is_err());

        let mut file = pinned();
        let pin = file.pins.remove("notes.export").unwrap();
        file.pins.insert("issues.export".into(), pin);
        assert!(PinFile::parse(&file.to_json_string()).unwrap_err().to_string().contains("publisher.backend"));

        assert!(matches!(PinFile::parse(r#"{"format":2,"pins":{}}"#), Err(PinFileError::Format(2))));
        assert!(matches!(PinFile::parse(r#"{"format":1,"pins":{},"extra":1}"#), Err(PinFileError::Shape(_))));
        assert!(matches!(PinFile::parse("[]"), Err(PinFileError::Shape(_))));
    }

    #[test]
    fn qualified_names() {
        assert_eq!(split_qualified("notes.export"), Some(("notes", "export")));
        assert_eq!(split_qualified("notes.v2.export"), Some(("notes", "v2.export")));
        assert_eq!(split_qualified("export"), None);
        assert_eq!(split_qualified("Notes.export"), None);
        assert_eq!(split_qualified("notes."), None);
        assert_eq!(split_qualified(".export"), None);
        assert_eq!(split_qualified("notes.exp ort"), None);
    }

    #[test]
    fn diffs_cover_added_removed_and_changed_members() {
        let before = json!({"a": 1, "b": [1, 2], "c": {"d": true}});
        let after = json!({"a": 2, "b": [1], "c": {"d": true, "e/f": null}});
        let lines: Vec<String> = changes(&before, &after).iter().map(ToString::to_string).collect();
        assert_eq!(lines, ["~ /a: 1 -> 2", "- /b/1: 2", "+ /c/e~1f: null"]);
        assert!(changes(&before, &before).is_empty());
        assert_eq!(changes(&json!(1), &json!("1"))[0].to_string(), "~ /: 1 -> \"1\"");
    }

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(format_utc_ms(1_785_196_800_000), "2026-07-28T00:00:00.000Z");
        assert_eq!(format_utc_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }
}
