//! Deployment configuration: principals (with HTTP tokens), their workspaces, the notes, signing keys and
//! the state TTL — from a TOML file, or the embedded demo when no file is given.
//!
//! Sits above the stores (it seeds them) and below the simulator and transports (which consume it).

use crate::framework::ports::Note;
use crate::policy::authorization::Authorizations;
use crate::policy::state::KeyRing;
use crate::policy::state::DEFAULT_STATE_TTL_MS;
use crate::servers::notes::NotesConfig;
use crate::stores::system::random_key;
use crate::wire::result::ServerInfo;
use base64::Engine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

// Read by `mcpsim serve` and `demo` alone (the `cli` feature).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub const DEFAULT_PRINCIPAL: &str = "alice";

/// The embedded demo, as a config file would say it (tests and the README rely on it).
pub const DEMO_TOML: &str = include_str!("demo.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    #[serde(default = "default_ttl_secs")]
    pub state_ttl_secs: u64,
    #[serde(default)]
    pub principals: BTreeMap<String, PrincipalConfig>,
    #[serde(default)]
    pub notes: Vec<NoteConfig>,
    /// Signing keys; the first signs, the rest only verify. Absent: each process draws a random key.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// The replay store's size (`[replay]`).
    #[serde(default)]
    pub replay: ReplayConfig,
    /// The base URL browsers reach the fleet at (`https://notes.example.com`): the out-of-band page's links
    /// start with it and its Host and Origin checks require it. `serve --public-url` overrides it.
    #[serde(default)]
    pub public_url: Option<String>,
}

/// `[replay]`: how many confirmations' nonces the replay store holds at once. Each is kept for its state's
/// lifetime (`state_ttl_secs`) plus a grace period of 60 s, so a capacity sustains
/// `capacity / (state_ttl_secs + 60)` confirmations per second, all principals together, before refusing
/// with `replay_store_full` (each principal: 25% of that). Absent, `serve` sizes it per store: a memory store
/// to 64 MiB (335,544 nonces, ≈ 932/s at the default 300 s), SQLite and PostgreSQL to 5,000,000 rows
/// (≈ 13,900/s), a folder store to 100,000 files (≈ 278/s).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    pub capacity: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    /// Bearer token that authenticates this principal over HTTP.
    pub token: Option<String>,
    pub workspaces: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoteConfig {
    pub id: String,
    pub title: String,
    pub uri: String,
    #[serde(default)]
    pub body: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    pub id: String,
    /// The key, base64 (standard alphabet), at least 32 bytes once decoded.
    pub secret_base64: String,
}

fn default_ttl_secs() -> u64 {
    DEFAULT_STATE_TTL_MS / 1000
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl ConfigError {
    /// A TOML file that does not parse as what it should be, said without any value from it: the parser's own
    /// message quotes the offending line (`token = "…"`) and sometimes the value, and a configuration holds
    /// tokens and keys. What is kept: the line, the column, the table and key there, and what was wrong.
    pub(crate) fn parse(origin: &str, text: &str, error: &toml::de::Error) -> ConfigError {
        ConfigError::Parse { path: origin.to_string(), message: toml_problem(text, error) }
    }
}

/// Where a TOML file went wrong and what was wrong, without any value from it (see [`ConfigError::parse`]):
/// for every file that may hold a credential (deployments, gateway target files).
pub(crate) fn toml_problem(text: &str, error: &toml::de::Error) -> String {
    let problem = redacted_problem(error.message());
    match error.span() {
        Some(span) => format!("{}: {problem}", describe_position(text, span.start)),
        None => problem,
    }
}

/// The parser's complaint, its first line only, with any quoted value taken out ("invalid type: integer
/// `12345678`, expected a string" → "invalid type: integer, expected a string"; the same for a string in
/// double quotes). Field and key names in other messages ("unknown field `tokn`") are kept: they are the
/// file's structure, not its secrets.
fn redacted_problem(message: &str) -> String {
    let first = message.lines().next().unwrap_or("").trim();
    if !(first.starts_with("invalid type") || first.starts_with("invalid value") || first.starts_with("invalid length")) {
        return first.to_string();
    }
    // serde says "invalid type: {what was found}, expected {what}"; what was found may quote the value (and the
    // value may itself contain ", expected", so the split is at the last one).
    let (found, expected) = first.rsplit_once(", expected").map_or((first, None), |(found, expected)| (found, Some(expected)));
    let found = found.split(['`', '"', '\'']).next().unwrap_or("").trim_end();
    match expected {
        Some(expected) => format!("{found}, expected{expected}"),
        None => found.to_string(),
    }
}

/// Longest table or key name repeated from a configuration file in an error.
const CONFIG_NAME_CHARS_MAX: usize = 64;

/// "line L, column C (in [table], key K)": where `offset` falls, naming the key of that line (the text before
/// its `=`, never after) and the table it is in.
pub(crate) fn describe_position(text: &str, offset: usize) -> String {
    let offset = (0..=offset.min(text.len())).rev().find(|&at| text.is_char_boundary(at)).unwrap_or(0);
    let before = &text[..offset];
    let line_number = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |tail| tail.chars().count()) + 1;
    let line = text.lines().nth(line_number - 1).unwrap_or("");
    let name = |name: &str| -> Option<String> {
        let name = name.trim();
        (!name.is_empty() && name.chars().count() <= CONFIG_NAME_CHARS_MAX && !name.contains(['"', '\'', '='])
            || name.starts_with('"') && name.ends_with('"') && name.len() <= CONFIG_NAME_CHARS_MAX)
            .then(|| name.to_string())
    };
    let table = text
        .lines()
        .take(line_number)
        .filter_map(|line| line.trim().strip_prefix('[').and_then(|rest| rest.split(']').next()))
        .last()
        .and_then(|table| name(table.trim_start_matches('[')));
    let key = line.split_once('=').and_then(|(key, _)| name(key));
    let mut position = format!("line {line_number}, column {column}");
    match (table, key) {
        (Some(table), Some(key)) => position.push_str(&format!(" (in [{table}], key {key})")),
        (None, Some(key)) => position.push_str(&format!(" (key {key})")),
        (Some(table), None) => position.push_str(&format!(" (in [{table}])")),
        (None, None) => {}
    }
    position
}

impl Deployment {
    /// The embedded demo deployment. Parsed once per process: the simulator builds a cluster from it for
    /// every schedule it explores, and parsing the TOML each time was a quarter of that cost.
    pub fn demo() -> Deployment {
        static DEMO: std::sync::OnceLock<Deployment> = std::sync::OnceLock::new();
        DEMO.get_or_init(|| Deployment::from_toml(DEMO_TOML, "<embedded demo>").expect("the embedded demo is valid")).clone()
    }

    pub fn load(path: &Path) -> Result<Deployment, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Deployment::from_toml(&text, &path.display().to_string())
    }

    pub(crate) fn from_toml(text: &str, origin: &str) -> Result<Deployment, ConfigError> {
        let deployment: Deployment = toml::from_str(text).map_err(|e| ConfigError::parse(origin, text, &e))?;
        let in_file = |error: ConfigError| match error {
            ConfigError::Invalid(message) => ConfigError::Invalid(format!("{origin}: {message}")),
            other => other,
        };
        deployment.authorizations().map_err(in_file)?;
        deployment.configured_key_ring().map_err(in_file)?;
        if deployment.replay.capacity == Some(0) {
            return Err(ConfigError::Invalid(format!(
                "{origin}: [replay] capacity = 0 would refuse every confirmation; give at least 1, or leave it out for the store's default"
            )));
        }
        if let Some(url) = &deployment.public_url {
            crate::policy::origin::parse_public_url(url)
                .map_err(|message| ConfigError::Invalid(format!("{origin}: public_url {message}")))?;
        }
        let mut ids: Vec<&str> = deployment.notes.iter().map(|n| n.id.as_str()).collect();
        ids.sort();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(ConfigError::Invalid(format!("{origin}: note ids must be unique")));
        }
        let mut tokens: Vec<&str> = deployment.principals.values().filter_map(|p| p.token.as_deref()).collect();
        tokens.sort();
        if tokens.windows(2).any(|w| w[0] == w[1]) {
            return Err(ConfigError::Invalid(format!("{origin}: two principals share a token")));
        }
        Ok(deployment)
    }

    pub fn authorizations(&self) -> Result<Authorizations, ConfigError> {
        let mut authorizations = Authorizations::new();
        for (principal, config) in &self.principals {
            for workspace in &config.workspaces {
                authorizations
                    .grant(principal, workspace)
                    .map_err(|e| ConfigError::Invalid(format!("principal {principal}: workspace {workspace:?}: {e}")))?;
            }
        }
        Ok(authorizations)
    }

    /// The configured key ring, if any keys are configured.
    pub(crate) fn configured_key_ring(&self) -> Result<Option<KeyRing>, ConfigError> {
        key_ring_of(&self.keys)
    }

    /// The configured ring, or a fresh random one (so states of one unconfigured process fail elsewhere).
    pub fn key_ring_or_random(&self) -> Result<KeyRing, ConfigError> {
        match self.configured_key_ring()? {
            Some(ring) => Ok(ring),
            None => Ok(KeyRing::new("local", random_key()).expect("a random 32-byte key is valid")),
        }
    }

    pub fn notes(&self) -> Vec<Note> {
        self.notes
            .iter()
            .map(|n| Note { id: n.id.clone(), title: n.title.clone(), uri: n.uri.clone(), body: n.body.clone(), revision: String::new() })
            .collect()
    }

    /// Token → principal, for the HTTP transport.
    pub fn tokens(&self) -> BTreeMap<String, String> {
        self.principals.iter().filter_map(|(name, p)| p.token.clone().map(|t| (t, name.clone()))).collect()
    }

    pub fn notes_config(&self, key_ring: KeyRing, state_ttl_secs: Option<u64>) -> Result<NotesConfig, ConfigError> {
        Ok(NotesConfig {
            server_info: server_info(),
            authorizations: std::sync::Arc::new(self.authorizations()?),
            key_ring,
            state_ttl_ms: state_ttl_secs.unwrap_or(self.state_ttl_secs).saturating_mul(1000),
        })
    }
}

/// Most keys one ring (a `[[keys]]` list) holds: the signing key plus those still verifying during rotations.
pub(crate) const KEYS_MAX: usize = 16;

/// The ring of a `[[keys]]` list: the first signs, the rest only verify. `None` for an empty list.
fn key_ring_of(keys: &[KeyConfig]) -> Result<Option<KeyRing>, ConfigError> {
    if keys.len() > KEYS_MAX {
        return Err(ConfigError::Invalid(format!("{} [[keys]] given; at most {KEYS_MAX} (retire old verify-only keys)", keys.len())));
    }
    let mut seen: Vec<&str> = keys.iter().map(|key| key.id.as_str()).collect();
    seen.sort_unstable();
    if let Some(pair) = seen.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(ConfigError::Invalid(format!("key id {:?} appears twice; every key needs its own id", pair[0])));
    }
    let mut keys = keys.iter();
    let Some(first) = keys.next() else { return Ok(None) };
    let decode = |k: &KeyConfig| {
        base64::engine::general_purpose::STANDARD
            .decode(&k.secret_base64)
            .map_err(|_| ConfigError::Invalid(format!("key {}: secret_base64 is not valid base64 (make one with `mcpsim keygen`)", k.id)))
    };
    let mut ring = KeyRing::new(&first.id, decode(first)?).map_err(|e| ConfigError::Invalid(format!("key {}: {e}", first.id)))?;
    for key in keys {
        ring.add_verify_only(&key.id, decode(key)?).map_err(|e| ConfigError::Invalid(format!("key {}: {e}", key.id)))?;
    }
    Ok(Some(ring))
}

// The key file of `mcpsim keygen` and `serve --keys` (the `cli` feature).
/// A key file: only the signing keys, so the secret can be distributed and protected apart from the
/// deployment. The same `[[keys]]` tables a deployment file takes:
///
/// ```toml
/// [[keys]]
/// id = "2026-07"                  # 1 to 32 characters of A-Z a-z 0-9 _ -; sealed into every requestState
/// secret_base64 = "…"             # at least 32 random bytes, base64 (e.g. `head -c 32 /dev/urandom | base64`)
/// [[keys]]                        # optional: later keys only verify (states sealed before a rotation)
/// id = "2026-06"
/// secret_base64 = "…"
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
struct KeyFile {
    #[serde(default)]
    keys: Vec<KeyConfig>,
}

/// Reads a key file (TOML `[[keys]]` tables). It must name at least one key.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn load_key_file(path: &Path) -> Result<KeyRing, ConfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: origin.clone(), source })?;
    // The parser's message can quote the offending line, which may hold a secret: say only where it is.
    let file: KeyFile = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: origin.clone(),
        message: format!(
            "not a key file ({}; expected [[keys]] tables with id and secret_base64 only)",
            e.span().map_or("bad TOML".to_string(), |span| describe_position(&text, span.start))
        ),
    })?;
    match key_ring_of(&file.keys) {
        Ok(Some(ring)) => Ok(ring),
        Ok(None) => Err(ConfigError::Invalid(format!("{origin}: no [[keys]]; a key file names at least one key (the first signs)"))),
        Err(ConfigError::Invalid(message)) => Err(ConfigError::Invalid(format!("{origin}: {message}"))),
        Err(other) => Err(other),
    }
}

pub fn server_info() -> ServerInfo {
    ServerInfo { name: "mcpsim-notes".into(), version: env!("CARGO_PKG_VERSION").into() }
}

#[cfg(test)]
mod tests {

    #[test]
    fn replay_capacity_is_configured_in_its_own_table() {
        assert_eq!(Deployment::demo().replay.capacity, None, "the demo leaves it to the store's default");
        let sized = Deployment::from_toml("[replay]\ncapacity = 2000000\n", "f.toml").unwrap();
        assert_eq!(sized.replay.capacity, Some(2_000_000));
        let error = Deployment::from_toml("[replay]\ncapacity = 0\n", "f.toml").unwrap_err().to_string();
        assert!(error.contains("[replay] capacity = 0") && error.contains("at least 1"), "{error}");
        let error = Deployment::from_toml("[replay]\nsize = 5\n", "f.toml").unwrap_err().to_string();
        assert!(error.contains("size"), "{error}");
    }

    #[test]
    fn the_example_deployment_is_the_embedded_demo() {
        // examples/deployment.toml is what the fleet recipes of docs/serving.md pass to --config: the demo, written out.
        let example = Deployment::from_toml(include_str!("../../examples/deployment.toml"), "examples/deployment.toml").unwrap();
        assert_eq!(format!("{example:?}"), format!("{:?}", Deployment::demo()));
    }

    use super::*;

    #[test]
    fn demo_matches_the_documented_data() {
        let demo = Deployment::demo();
        let ids: Vec<String> = demo.notes().into_iter().map(|n| n.id).collect();
        assert_eq!(ids, ["note-3", "note-7", "note-14", "note-99", "note-100", "note-200", "note-300"]);
        assert_eq!(demo.tokens().get("demo-alice").map(String::as_str), Some("alice"));
        assert_eq!(demo.tokens().get("demo-bob").map(String::as_str), Some("bob"));
        assert!(demo.configured_key_ring().unwrap().is_none(), "the demo draws a random key per process");
        assert_eq!(demo.state_ttl_secs, 300);
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let error = Deployment::from_toml("[principals.a]\nworkspaces = [\"http://x\"]\n", "f.toml").unwrap_err();
        assert!(error.to_string().contains("principal a"), "{error}");
        let error = Deployment::from_toml("bogus = 1\n", "f.toml").unwrap_err();
        assert!(error.to_string().contains("f.toml"), "{error}");
        let error = Deployment::from_toml("[[keys]]\nid = \"k\"\nsecret_base64 = \"AAAA\"\n", "f.toml").unwrap_err();
        assert!(error.to_string().contains("32 bytes"), "{error}");
        let twice = format!("[[keys]]\nid = \"k\"\nsecret_base64 = \"{KEY}\"\n[[keys]]\nid = \"k\"\nsecret_base64 = \"{OTHER_KEY}\"\n");
        let error = Deployment::from_toml(&twice, "f.toml").unwrap_err();
        assert!(error.to_string().contains("appears twice"), "a second key must never silently replace the signing key: {error}");
    }

    /// 32 bytes of 0x07 and of 0x08, base64: test keys.
    const KEY: &str = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";
    const OTHER_KEY: &str = "CAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg=";

    fn key_file(contents: &str) -> (std::path::PathBuf, Result<KeyRing, ConfigError>) {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = format!("mcpsim-keys-{}-{}.toml", std::process::id(), COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, contents).unwrap();
        let loaded = load_key_file(&path);
        let _ = std::fs::remove_file(&path);
        (path, loaded)
    }

    #[test]
    fn key_files_hold_a_signing_key_and_verify_only_keys() {
        let (_, ring) = key_file(&format!(
            "[[keys]]\nid = \"new\"\nsecret_base64 = \"{KEY}\"\n[[keys]]\nid = \"old\"\nsecret_base64 = \"{OTHER_KEY}\"\n"
        ));
        let ring = ring.unwrap();
        assert_eq!(ring.signing_key_id(), "new");
        assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["new", "old"]);
    }

    #[test]
    fn bad_key_files_say_what_is_wrong_without_quoting_secrets() {
        let (path, error) = key_file("");
        let error = error.unwrap_err().to_string();
        assert!(error.contains("no [[keys]]") && error.contains(&path.display().to_string()), "{error}");
        let (_, error) = key_file("[[keys]]\nid = \"k\"\nsecret_base64 = \"not-base64-hunter2\"\n");
        let error = error.unwrap_err().to_string();
        assert!(error.contains("key k"), "{error}");
        let (_, error) = key_file("[[keys]]\nid = \"k\"\nsecret = \"hunter2hunter2\"\n");
        let error = error.unwrap_err().to_string();
        assert!(error.contains("line 3") && error.contains("secret_base64") && !error.contains("hunter2"), "{error}");
        let (_, error) = key_file("keys = \"hunter2hunter2\n");
        assert!(!error.unwrap_err().to_string().contains("hunter2"));
        let (_, error) = key_file(&format!("[[keys]]\nid = \"a b\"\nsecret_base64 = \"{KEY}\"\n"));
        assert!(error.unwrap_err().to_string().contains("key id"));
    }
}
