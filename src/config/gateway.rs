//! Gateway deployments: the backends (by id), the access policy, the issue tracker's data and the pins —
//! from a TOML file, or the embedded demo (`src/config/gateway_demo.toml`, pinned by `src/config/gateway_pins.json`).
//!
//! [`crate::assembly`] builds the gateway and its backends from a file, for real processes and the simulator.

use crate::config::ConfigError;
use crate::policy::pinning::{PinFile, PublisherEvidence};
use crate::policy::state::DEFAULT_STATE_TTL_MS;
use crate::servers::gateway::backends::{issues_descriptors, notes_descriptors, Issue, LiveDescriptors, DESCRIPTORS_MAX};
use crate::servers::gateway::policy::AccessPolicy;
use crate::servers::gateway::ports::ToolListing;
use crate::wire::result::ServerInfo;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub(crate) const GATEWAY_DEMO_TOML: &str = include_str!("gateway_demo.toml");
/// Pins of the demo's `notes` and `issues` backends (not of `notes_mirror`, which stays unreviewed).
pub(crate) const DEFAULT_PINS_JSON: &str = include_str!("gateway_pins.json");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayFile {
    #[serde(default = "default_state_ttl_secs")]
    pub state_ttl_secs: u64,
    pub backends: BTreeMap<String, BackendConfig>,
    pub policy: AccessPolicy,
    #[serde(default)]
    pub issues: Vec<Issue>,
    /// Backends in other processes, by id (`serve --gateway` only; the simulator's gateway has none): reached
    /// over streamable HTTP (`url`) or by starting a stdio server (`command`). Their descriptors are whatever
    /// they publish, judged against the pins like any backend's.
    #[serde(default)]
    pub remote: BTreeMap<String, RemoteBackendConfig>,
}

/// A backend mcpsim does not run: exactly one of `url` (streamable HTTP, `http://` only) and `command` (a stdio
/// server the gateway starts, one per gateway process).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteBackendConfig {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

impl RemoteBackendConfig {
    /// Where the gateway reaches it, as recorded in pins (publisher evidence): the URL, or `stdio:` and the
    /// command's words joined by spaces.
    pub fn endpoint(&self) -> String {
        match (&self.url, &self.command) {
            (Some(url), _) => url.clone(),
            (None, Some(command)) => format!("stdio:{}", command.join(" ")),
            (None, None) => String::new(),
        }
    }
}

fn default_state_ttl_secs() -> u64 {
    DEFAULT_STATE_TTL_MS / 1000
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    Notes,
    Issues,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    pub kind: BackendKind,
    /// The backend's self-reported `serverInfo.name` (default: `mcpsim-notes-backend` / `mcpsim-issues-backend`).
    #[serde(default)]
    pub server_name: Option<String>,
    /// Export destinations (notes backends only).
    #[serde(default)]
    pub destinations: BTreeSet<String>,
    /// Descriptors to publish instead of the standard ones — to rehearse a review of a poisoned or changed
    /// backend. Only what the backend *says* changes; its tools behave as always.
    #[serde(default)]
    pub descriptors: Option<Vec<serde_json::Value>>,
}

impl BackendConfig {
    pub fn server_info(&self) -> ServerInfo {
        let default = match self.kind {
            BackendKind::Notes => "mcpsim-notes-backend",
            BackendKind::Issues => "mcpsim-issues-backend",
        };
        ServerInfo { name: self.server_name.clone().unwrap_or_else(|| default.into()), version: env!("CARGO_PKG_VERSION").into() }
    }

    /// The descriptors this backend publishes when it starts.
    pub fn descriptors(&self) -> Vec<serde_json::Value> {
        if let Some(descriptors) = &self.descriptors {
            return descriptors.clone();
        }
        match self.kind {
            BackendKind::Notes => notes_descriptors(&self.destinations),
            BackendKind::Issues => issues_descriptors(),
        }
    }
}

/// Where the gateway reaches an in-process backend (recorded in pins as publisher evidence).
pub(crate) fn in_process_endpoint(id: &str) -> String {
    format!("in-process:{id}")
}

pub(crate) fn gateway_server_info() -> ServerInfo {
    ServerInfo { name: "mcpsim-gateway".into(), version: env!("CARGO_PKG_VERSION").into() }
}

/// The embedded pins.
pub fn default_pins() -> PinFile {
    PinFile::parse(DEFAULT_PINS_JSON).expect("the embedded pins are valid")
}

// Read by `mcpsim pins` and `serve --gateway` alone (the `cli` feature).
/// Reads a pin file, or the embedded pins when no path is given.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn load_pins(path: Option<&Path>) -> Result<PinFile, ConfigError> {
    let Some(path) = path else { return Ok(default_pins()) };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    PinFile::parse(&text).map_err(|e| ConfigError::Parse { path: path.display().to_string(), message: e.to_string() })
}

impl GatewayFile {
    pub fn demo() -> GatewayFile {
        GatewayFile::from_toml(GATEWAY_DEMO_TOML, "<embedded gateway demo>").expect("the embedded gateway demo is valid")
    }

    pub fn load(path: &Path) -> Result<GatewayFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        GatewayFile::from_toml(&text, &path.display().to_string())
    }

    pub(crate) fn from_toml(text: &str, origin: &str) -> Result<GatewayFile, ConfigError> {
        let file: GatewayFile = toml::from_str(text).map_err(|e| ConfigError::parse(origin, text, &e))?;
        file.policy.validate().map_err(|e| ConfigError::Invalid(format!("{origin}: policy: {e}")))?;
        for (id, backend) in &file.backends {
            if !crate::policy::pinning::is_backend_id(id) {
                return Err(ConfigError::Invalid(format!(
                    "{origin}: backend id {id:?} must be 1 to 32 characters of a-z 0-9 _ - (no dot)"
                )));
            }
            if backend.descriptors.as_ref().is_some_and(|d| d.len() > DESCRIPTORS_MAX) {
                return Err(ConfigError::Invalid(format!("{origin}: backend {id}: at most {DESCRIPTORS_MAX} descriptors")));
            }
            if backend.kind == BackendKind::Issues && !backend.destinations.is_empty() {
                return Err(ConfigError::Invalid(format!("{origin}: backend {id}: only notes backends have destinations")));
            }
        }
        for (id, remote) in &file.remote {
            if !crate::policy::pinning::is_backend_id(id) || file.backends.contains_key(id) {
                return Err(ConfigError::Invalid(format!(
                    "{origin}: remote backend id {id:?} must be 1 to 32 characters of a-z 0-9 _ - (no dot), and not also a [backends] id"
                )));
            }
            match (&remote.url, &remote.command) {
                (Some(url), None) if url.starts_with("http://") => {}
                (None, Some(command)) if !command.is_empty() && !command[0].is_empty() => {}
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "{origin}: remote backend {id}: give exactly one of url = \"http://HOST:PORT/mcp\" or command = [\"program\", ...]"
                    )))
                }
            }
        }
        Ok(file)
    }

    /// The publisher evidence and descriptors of every backend as it starts (what `pins approve` would see).
    pub fn initial_listings(&self) -> BTreeMap<String, (PublisherEvidence, ToolListing)> {
        self.backends
            .iter()
            .map(|(id, backend)| {
                let info = backend.server_info();
                let publisher = PublisherEvidence {
                    backend: id.clone(),
                    endpoint: in_process_endpoint(id),
                    server_name: info.name.clone(),
                    server_version: info.version.clone(),
                };
                // Sorted and bounded exactly as the running backend would publish them.
                let tools = LiveDescriptors::new(backend.descriptors()).current();
                let listing = ToolListing { server_name: info.name, server_version: info.version, tools };
                (id.clone(), (publisher, listing))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::pinning::{qualify, Approval};

    /// When the embedded pins were approved: 2026-07-28T00:00:00Z.
    const DEFAULT_PINS_APPROVED_AT_MS: u64 = 1_785_196_800_000;
    const DEFAULT_PINS_APPROVED_BY: &str = "mcpsim maintainers (embedded demo pins)";

    /// Pins every tool of the given backends as they start (used to produce the embedded pins).
    fn pins_for_backends(file: &GatewayFile, backends: &[&str], approved_at_ms: u64, approved_by: &str) -> PinFile {
        let mut pins = PinFile::default();
        for (id, (publisher, listing)) in file.initial_listings() {
            if !backends.contains(&id.as_str()) {
                continue;
            }
            for descriptor in listing.tools.iter() {
                let name = qualify(&id, descriptor["name"].as_str().unwrap_or_default());
                let approval = Approval {
                    publisher: publisher.clone(),
                    approved_at_ms,
                    approved_by: approved_by.to_string(),
                    acknowledged_findings: Vec::new(),
                };
                pins.approve(&name, descriptor, approval).expect("demo tool names are qualified");
            }
        }
        pins
    }

    #[test]
    fn the_embedded_pins_pin_exactly_the_demo_notes_and_issues_tools() {
        let expected = pins_for_backends(&GatewayFile::demo(), &["notes", "issues"], DEFAULT_PINS_APPROVED_AT_MS, DEFAULT_PINS_APPROVED_BY);
        if std::env::var_os("MCPSIM_BLESS_PINS").is_some() {
            std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/src/config/gateway_pins.json"), expected.to_json_string()).unwrap();
        }
        assert_eq!(
            DEFAULT_PINS_JSON,
            expected.to_json_string(),
            "the demo descriptors changed: review them, then regenerate with MCPSIM_BLESS_PINS=1 cargo test --lib config::gateway"
        );
        assert_eq!(default_pins().pins.keys().collect::<Vec<_>>(), ["issues.search", "notes.export", "notes.search"]);
    }

    #[test]
    fn bad_gateway_files_say_what_is_wrong() {
        let error = GatewayFile::from_toml("[backends.\"No.Dots\"]\nkind = \"notes\"\n[policy]\nversion = \"v\"\n", "g.toml").unwrap_err();
        assert!(error.to_string().contains("No.Dots"), "{error}");
        let error =
            GatewayFile::from_toml("[backends.i]\nkind = \"issues\"\ndestinations = [\"x\"]\n[policy]\nversion = \"v\"\n", "g.toml")
                .unwrap_err();
        assert!(error.to_string().contains("only notes backends"), "{error}");
        let error = GatewayFile::from_toml("[backends.i]\nkind = \"ftp\"\n[policy]\nversion = \"v\"\n", "g.toml").unwrap_err();
        assert!(error.to_string().contains("g.toml"), "{error}");
    }

    #[test]
    fn remote_backends_name_exactly_one_way_to_reach_them() {
        let file = |remote: &str| GatewayFile::from_toml(&format!("[backends]\n{remote}\n[policy]\nversion = \"v\"\n"), "g.toml");
        let ok = file("[remote.a]\nurl = \"http://127.0.0.1:9/mcp\"\n[remote.b]\ncommand = [\"srv\", \"--stdio\"]").unwrap();
        assert_eq!(ok.remote["a"].endpoint(), "http://127.0.0.1:9/mcp");
        assert_eq!(ok.remote["b"].endpoint(), "stdio:srv --stdio");
        for bad in [
            "[remote.a]\nurl = \"https://x/mcp\"",
            "[remote.a]\ncommand = []",
            "[remote.a]\nurl = \"http://x/mcp\"\ncommand = [\"srv\"]",
            "[remote.a]",
            "[remote.\"A.b\"]\nurl = \"http://x/mcp\"",
        ] {
            let error = file(bad).unwrap_err().to_string();
            assert!(error.contains("g.toml") && error.contains("remote backend"), "{bad}: {error}");
        }
    }
}
