//! The gateway target file: how to start N replicas of a gateway under test in front of the lab's backends,
//! the principals' credentials and grants, and which of the seed's defences the gateway claims.
//!
//! TOML, every table closed (an unknown key is refused with the file, the line and the keys that exist).
//! Commands, environment values and the `[files]` templates take `{placeholders}`; the format and every
//! placeholder are documented in `docs/gateways.md`; `targets/gateways/` holds examples.

use crate::target::file::fill_delimited;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Most replicas a gateway target file may ask for.
pub const REPLICAS_MAX: usize = 8;
/// Longest a replica may take to start.
pub const START_TIMEOUT_MS_MAX: u64 = 120_000;

/// The seed's seven defences, the cross-replica rate limit and an operator's revocation, in the order reports
/// list them.
pub const DEFENCES: [&str; 9] =
    ["poisoning", "rug_pull", "shadowing", "header_body", "capabilities", "confirmation", "identity", "rate_limits", "revocation"];

/// The revisions the lab's clients can speak to a gateway.
pub const PROTOCOLS: [&str; 2] = [crate::wire::PROTOCOL_VERSION, LEGACY_PROTOCOL];
/// The legacy revision (a session opened with `initialize`): the one `eras` serves.
pub const LEGACY_PROTOCOL: &str = crate::eras::LEGACY_PROTOCOL_VERSION;
/// The defences a 2025-11-25 client cannot exercise, and why: reported "not claimed" with the reason.
pub const LEGACY_NOT_APPLICABLE: [(&str, &str); 1] =
    [("header_body", "2025-11-25 has no Mcp-Name or Mcp-Method headers, so there is nothing to disagree with the body")];
/// What the confirmation check is over 2025-11-25, where the gateway asks inside the open call.
pub const LEGACY_CONFIRMATION: &str = "the confirmation is judged within one call over 2025-11-25: the gateway asks inside the open \
     call, the lab accepts for an allowed call and declines for a forbidden one, and nothing crosses replicas (the MRTR steps, \
     another replica's answer and other arguments, are 2026-07-28's)";

/// A gateway target file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayTargetFile {
    /// What is under test, in a few words.
    pub name: String,
    /// How many replicas (1 to [`REPLICAS_MAX`]); the cross-replica checks need 2.
    pub replicas: usize,
    /// Commands run once, in order, after the files are written and before any replica starts.
    #[serde(default)]
    pub setup: Vec<Vec<String>>,
    /// The command that starts one replica, listening on `{port}` (loopback).
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A replica's MCP endpoint [default: `http://127.0.0.1:{port}/mcp`].
    pub url: Option<String>,
    /// How long a replica may take to accept connections [default: 20000].
    pub start_timeout_ms: Option<u64>,
    /// The public name of a backend's tool [default: `{backend}.{tool}`]; `{tool_slug}` is the tool's name
    /// lowercased with every run of other characters than a-z 0-9 made one `-` (IBM ContextForge's slugs).
    pub tool_name: Option<String>,
    /// The MCP revision the lab's clients speak to the gateway: `2026-07-28` [default] or `2025-11-25` (a
    /// session opened with `initialize`, no `_meta`, no routing headers; the backends serve both eras).
    pub protocol: Option<String>,
    /// Files written to the run's work directory before setup, by name (templates with placeholders).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The principals the lab acts as: a bearer token and the public tools the gateway grants each.
    pub principals: BTreeMap<String, PrincipalFile>,
    /// Which defences the gateway claims.
    pub claims: Claims,
    /// The quota the gateway claims on one principal and tool (for `rate_limits`).
    pub rate_limit: Option<RateLimitFile>,
    /// The public name of the destructive tool the gateway confirms (`notes.export` of the lab).
    pub confirm: Option<ConfirmFile>,
    /// How an operator's withdrawal of a reviewed backend reaches a running replica (for `revocation`).
    pub revocation: Option<RevocationFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalFile {
    pub token: String,
    /// The public tool names the gateway's policy grants this principal.
    #[serde(default)]
    pub tools: Vec<String>,
}

/// One flag per defence: a claimed defence that does not hold is a finding; an unclaimed one is reported as
/// "not claimed", never as a failure.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    #[serde(default)]
    pub poisoning: bool,
    #[serde(default)]
    pub rug_pull: bool,
    #[serde(default)]
    pub shadowing: bool,
    #[serde(default)]
    pub header_body: bool,
    #[serde(default)]
    pub capabilities: bool,
    #[serde(default)]
    pub confirmation: bool,
    #[serde(default)]
    pub identity: bool,
    #[serde(default)]
    pub rate_limits: bool,
    #[serde(default)]
    pub revocation: bool,
}

impl Claims {
    pub fn claims(&self, defence: &str) -> bool {
        match defence {
            "poisoning" => self.poisoning,
            "rug_pull" => self.rug_pull,
            "shadowing" => self.shadowing,
            "header_body" => self.header_body,
            "capabilities" => self.capabilities,
            "confirmation" => self.confirmation,
            "identity" => self.identity,
            "rate_limits" => self.rate_limits,
            "revocation" => self.revocation,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitFile {
    pub principal: String,
    /// A public tool name.
    pub tool: String,
    /// Calls allowed in one window (the lab makes them all within one).
    pub calls: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmFile {
    /// The principal granted the tool.
    pub principal: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevocationFile {
    /// Run once per replica after the lab rewrote `{pins}` and `{review}` without the revoked backend: makes
    /// that replica apply them (`{pid}`, `{port}`, `{replica}`: the replica's); must end with status 0.
    pub command: Vec<String>,
}

/// What is wrong with a gateway target file.
#[derive(Debug, thiserror::Error)]
pub enum GatewayTargetError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl GatewayTargetFile {
    pub fn load(path: &Path) -> Result<GatewayTargetFile, GatewayTargetError> {
        let text = std::fs::read_to_string(path).map_err(|source| GatewayTargetError::Read { path: path.display().to_string(), source })?;
        GatewayTargetFile::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<GatewayTargetFile, GatewayTargetError> {
        let shown = path.display().to_string();
        // Its principals' tokens are credentials: the position and the problem, never a value from the file.
        let file: GatewayTargetFile = toml::from_str(text)
            .map_err(|e| GatewayTargetError::Parse { path: shown.clone(), message: crate::config::toml_problem(text, &e) })?;
        let invalid = |message: String| GatewayTargetError::Invalid { path: shown.clone(), message };
        if file.replicas == 0 || file.replicas > REPLICAS_MAX {
            return Err(invalid(format!("replicas must be 1 to {REPLICAS_MAX}, not {}", file.replicas)));
        }
        if file.command.is_empty() || file.command[0].is_empty() {
            return Err(invalid("command must name a program: command = [\"program\", \"arg\", …]".into()));
        }
        if file.start_timeout_ms.is_some_and(|ms| ms == 0 || ms > START_TIMEOUT_MS_MAX) {
            return Err(invalid(format!("start_timeout_ms must be 1 to {START_TIMEOUT_MS_MAX}")));
        }
        if file.principals.is_empty() {
            return Err(invalid("give at least one [principals.NAME] with its token".into()));
        }
        for name in file.files.keys() {
            if name.is_empty()
                || name.starts_with('.')
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            {
                return Err(invalid(format!(
                    "[files] name {name:?}: a plain file name of A-Z a-z 0-9 . _ - (it is written in the work directory)"
                )));
            }
        }
        if let Some(rate) = &file.rate_limit {
            if !file.principals.contains_key(&rate.principal) || rate.calls == 0 {
                return Err(invalid(format!("[rate_limit]: principal {:?} must be one of [principals], calls at least 1", rate.principal)));
            }
        }
        if let Some(confirm) = &file.confirm {
            if !file.principals.contains_key(&confirm.principal) {
                return Err(invalid(format!("[confirm]: principal {:?} must be one of [principals]", confirm.principal)));
            }
        }
        if let Some(protocol) = &file.protocol {
            if !PROTOCOLS.contains(&protocol.as_str()) {
                return Err(invalid(format!("protocol must be one of {}, not {protocol:?}", PROTOCOLS.join(", "))));
            }
        }
        if file.is_legacy() {
            // These defences are made of 2026-07-28 mechanisms a 2025-11-25 client cannot carry.
            for (defence, why) in LEGACY_NOT_APPLICABLE {
                if file.claims.claims(defence) {
                    return Err(invalid(format!("claims.{defence} cannot be judged over 2025-11-25: {why}")));
                }
            }
        }
        if file.claims.rate_limits && file.rate_limit.is_none() {
            return Err(invalid("claims.rate_limits needs [rate_limit] (principal, tool, calls): the quota the lab checks".into()));
        }
        if file.revocation.as_ref().is_some_and(|r| r.command.first().is_none_or(String::is_empty)) {
            return Err(invalid("[revocation] command must name a program: command = [\"kill\", \"-HUP\", \"{pid}\"]".into()));
        }
        if file.claims.revocation && file.revocation.is_none() {
            return Err(invalid("claims.revocation needs [revocation] (command): how a replica applies a revoked review".into()));
        }
        if file.claims.confirmation && file.confirm.is_none() {
            return Err(invalid("claims.confirmation needs [confirm] (principal): who may run the destructive tool".into()));
        }
        Ok(file)
    }

    /// Whether the lab's clients speak 2025-11-25 to this gateway.
    pub fn is_legacy(&self) -> bool {
        self.protocol.as_deref() == Some(LEGACY_PROTOCOL)
    }

    pub fn start_timeout_ms(&self) -> u64 {
        self.start_timeout_ms.unwrap_or(20_000)
    }

    /// The public name of `backend`'s `tool`.
    pub fn public_name(&self, backend: &str, tool: &str) -> String {
        let template = self.tool_name.as_deref().unwrap_or("{backend}.{tool}");
        let values = BTreeMap::from([
            ("backend".to_string(), backend.to_string()),
            ("tool".to_string(), tool.to_string()),
            ("tool_slug".to_string(), slug(tool)),
        ]);
        fill(template, &values).unwrap_or_else(|_| format!("{backend}.{tool}"))
    }
}

/// `text` lowercased, each run of characters other than a-z and 0-9 made one `-`, none at either end.
pub fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// `text` with every `{name}` of `values` filled in; an unknown one is an error naming the ones that exist.
/// Only a name of `a-z 0-9 _ .` (starting with a letter) is a placeholder: anything else in braces (a TOML
/// inline table `{ calls = 3 }`, an empty `{}`) is kept as written.
pub fn fill(text: &str, values: &BTreeMap<String, String>) -> Result<String, String> {
    let is_name = |name: &str| {
        name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.'))
    };
    fill_delimited(text, ("{", "}"), None, |name| {
        if !is_name(name) {
            return Ok(format!("{{{name}}}"));
        }
        values.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = values.keys().map(String::as_str).collect();
            format!("unknown placeholder {{{name}}}; the placeholders are {}", known.join(", "))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "g"
replicas = 2
command = ["{mcpsim}", "serve", "--gateway", "--http", "127.0.0.1:{port}"]
[principals.alice]
token = "t"
tools = ["notes.search"]
[claims]
poisoning = true
"#;

    fn error(text: &str) -> String {
        GatewayTargetFile::parse(Path::new("targets/gateways/g.toml"), text).expect_err("refused").to_string()
    }

    #[test]
    fn a_good_file_parses_and_names_tools() {
        let file = GatewayTargetFile::parse(Path::new("g.toml"), GOOD).unwrap();
        assert_eq!(file.public_name("notes", "search"), "notes.search");
        assert!(file.claims.claims("poisoning") && !file.claims.claims("rug_pull"));
    }

    #[test]
    fn legacy_files_name_tools_by_slug_and_claim_nothing_they_cannot_carry() {
        let legacy = GOOD.replace("replicas = 2", "replicas = 2\nprotocol = \"2025-11-25\"\ntool_name = \"{backend}-{tool_slug}\"");
        let file = GatewayTargetFile::parse(Path::new("g.toml"), &legacy).unwrap();
        assert!(file.is_legacy());
        assert_eq!(file.public_name("notes", "export_all"), "notes-export-all");
        assert_eq!(slug("__A b__c--"), "a-b-c");
        assert!(error(&legacy.replace("poisoning = true", "header_body = true"))
            .contains("claims.header_body cannot be judged over 2025-11-25"));
        assert!(error(&GOOD.replace("replicas = 2", "replicas = 2\nprotocol = \"2024-11-05\"")).contains("protocol must be one of"));
    }

    #[test]
    fn bad_files_say_where_and_what() {
        let unknown = error(&GOOD.replace("replicas = 2", "replicas = 2\nreplica = 3"));
        assert!(unknown.contains("targets/gateways/g.toml") && unknown.contains("line 4") && unknown.contains("replica"), "{unknown}");
        assert!(error(&GOOD.replace("replicas = 2", "replicas = 0")).contains("replicas must be"));
        assert!(error(&GOOD.replace("poisoning = true", "rate_limits = true")).contains("[rate_limit]"));
        assert!(error(&format!("{GOOD}\n[files]\n\"../x\" = \"\"\n")).contains("plain file name"));
        assert!(error(&GOOD.replace("poisoning = true", "revocation = true")).contains("[revocation]"));
        assert!(error(&format!("{GOOD}\n[revocation]\ncommand = []\n")).contains("[revocation] command must name a program"));
        assert!(fill("{nope}", &BTreeMap::new()).unwrap_err().contains("unknown placeholder {nope}"));
        let values = BTreeMap::from([("port".to_string(), "80".to_string())]);
        assert_eq!(fill("a = { b = 1 } c = {} {port}", &values).unwrap(), "a = { b = 1 } c = {} 80");
    }
}
