//! Deployment configuration: principals (with HTTP tokens), their workspaces, the notes, signing keys and
//! the state TTL — from a TOML file, or the embedded demo when no file is given.
//!
//! Sits above the stores (it seeds them) and below the simulator and transports (which consume it).

use crate::handlers::notes::{NotesConfig, DEFAULT_STATE_TTL_MS};
use crate::handlers::ports::Note;
use crate::policy::authorization::Authorizations;
use crate::policy::state::KeyRing;
use crate::stores::system::random_key;
use crate::wire::result::ServerInfo;
use base64::Engine;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

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

impl Deployment {
    pub fn demo() -> Deployment {
        Deployment::from_toml(DEMO_TOML, "<embedded demo>").expect("the embedded demo is valid")
    }

    pub fn load(path: &Path) -> Result<Deployment, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Deployment::from_toml(&text, &path.display().to_string())
    }

    pub fn from_toml(text: &str, origin: &str) -> Result<Deployment, ConfigError> {
        let deployment: Deployment =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: origin.to_string(), message: e.to_string() })?;
        deployment.authorizations()?;
        deployment.configured_key_ring()?;
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
    pub fn configured_key_ring(&self) -> Result<Option<KeyRing>, ConfigError> {
        let mut keys = self.keys.iter();
        let Some(first) = keys.next() else { return Ok(None) };
        let decode = |k: &KeyConfig| {
            base64::engine::general_purpose::STANDARD
                .decode(&k.secret_base64)
                .map_err(|e| ConfigError::Invalid(format!("key {}: {e}", k.id)))
        };
        let mut ring = KeyRing::new(&first.id, decode(first)?).map_err(|e| ConfigError::Invalid(format!("key {}: {e}", first.id)))?;
        for key in keys {
            ring.add_verify_only(&key.id, decode(key)?).map_err(|e| ConfigError::Invalid(format!("key {}: {e}", key.id)))?;
        }
        Ok(Some(ring))
    }

    /// The configured ring, or a fresh random one (so states of one unconfigured process fail elsewhere).
    pub fn key_ring_or_random(&self) -> Result<KeyRing, ConfigError> {
        match self.configured_key_ring()? {
            Some(ring) => Ok(ring),
            None => Ok(KeyRing::new("local", random_key()).expect("a random 32-byte key is valid")),
        }
    }

    pub fn notes(&self) -> Vec<Note> {
        self.notes.iter().map(|n| Note { id: n.id.clone(), title: n.title.clone(), uri: n.uri.clone(), body: n.body.clone() }).collect()
    }

    /// Token → principal, for the HTTP transport.
    pub fn tokens(&self) -> BTreeMap<String, String> {
        self.principals.iter().filter_map(|(name, p)| p.token.clone().map(|t| (t, name.clone()))).collect()
    }

    pub fn notes_config(&self, key_ring: KeyRing, state_ttl_secs: Option<u64>) -> Result<NotesConfig, ConfigError> {
        Ok(NotesConfig {
            server_info: server_info(),
            authorizations: self.authorizations()?,
            key_ring,
            state_ttl_ms: state_ttl_secs.unwrap_or(self.state_ttl_secs).saturating_mul(1000),
        })
    }
}

pub fn server_info() -> ServerInfo {
    ServerInfo { name: "mcpsim-notes".into(), version: env!("CARGO_PKG_VERSION").into() }
}

#[cfg(test)]
mod tests {
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
    }
}
