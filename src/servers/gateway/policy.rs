//! The gateway's access policy: which principal may call which qualified tool (and which destinations it may
//! name), which tools need the user's confirmation, and the quotas. Closed by default: a principal with no
//! grant for a tool cannot call it, and a tool without a rule needs confirmation.
//!
//! Client capabilities never appear here: they are compatibility declarations, not permissions.

use crate::policy::pinning::split_qualified;
use crate::servers::gateway::ports::RateLimit;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

pub(crate) const POLICY_VERSION_CHARS_MAX: usize = 64;
pub(crate) const DEFAULT_RATE_LIMIT: RateLimit = RateLimit { calls: 60, window_ms: 60_000 };

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessPolicy {
    /// Names this policy in every audit record (bump it whenever the policy changes).
    pub version: String,
    /// The quota of every tool without its own.
    #[serde(default = "default_rate_limit")]
    pub default_rate_limit: RateLimit,
    /// Rules by qualified tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolRule>,
    /// Grants by authenticated principal.
    #[serde(default)]
    pub principals: BTreeMap<String, PrincipalGrants>,
}

fn default_rate_limit() -> RateLimit {
    DEFAULT_RATE_LIMIT
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// Ask the user (MRTR form `{confirm: boolean}`) before every call. Never inferred from the descriptor's
    /// annotations, which are the backend's untrusted claims.
    #[serde(default = "yes")]
    pub confirm: bool,
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// The argument naming the resource the call acts on (e.g. `destination`), authorized per principal.
    #[serde(default)]
    pub destination_argument: Option<String>,
}

impl Default for ToolRule {
    fn default() -> Self {
        ToolRule { confirm: true, rate_limit: None, destination_argument: None }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalGrants {
    /// Tools this principal may call, by qualified name.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolGrant>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolGrant {
    /// Destinations this principal may name (for tools with a `destination_argument`).
    #[serde(default)]
    pub destinations: BTreeSet<String>,
}

/// What is wrong with an access policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("policy version must be 1 to {POLICY_VERSION_CHARS_MAX} characters")]
    Version,
    /// `what`: `default_rate_limit` or the tool whose rule has it.
    #[error("{what}: a rate limit needs calls >= 1 and window_ms >= 1")]
    RateLimit { what: String },
    #[error("tool rule {0:?}: not a qualified tool name backend.tool")]
    UnqualifiedRule(String),
    #[error("principal {principal}: {tool:?} is not a qualified tool name backend.tool")]
    UnqualifiedGrant { principal: String, tool: String },
    #[error("principal {principal}: {tool} grants destinations, but its tool rule names no destination_argument")]
    DestinationsWithoutArgument { principal: String, tool: String },
}

impl AccessPolicy {
    /// Checks names and bounds; says what is wrong.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.version.is_empty() || self.version.chars().count() > POLICY_VERSION_CHARS_MAX {
            return Err(PolicyError::Version);
        }
        let check_limit = |what: &str, limit: &RateLimit| {
            if limit.calls == 0 || limit.window_ms == 0 {
                Err(PolicyError::RateLimit { what: what.to_string() })
            } else {
                Ok(())
            }
        };
        check_limit("default_rate_limit", &self.default_rate_limit)?;
        for (name, rule) in &self.tools {
            if split_qualified(name).is_none() {
                return Err(PolicyError::UnqualifiedRule(name.clone()));
            }
            if let Some(limit) = &rule.rate_limit {
                check_limit(name, limit)?;
            }
        }
        for (principal, grants) in &self.principals {
            for (name, grant) in &grants.tools {
                if split_qualified(name).is_none() {
                    return Err(PolicyError::UnqualifiedGrant { principal: principal.clone(), tool: name.clone() });
                }
                let takes_destination = self.rule(name).destination_argument.is_some();
                if !grant.destinations.is_empty() && !takes_destination {
                    return Err(PolicyError::DestinationsWithoutArgument { principal: principal.clone(), tool: name.clone() });
                }
            }
        }
        Ok(())
    }

    /// The rule for a tool; a tool without one needs confirmation and has the default quota.
    pub fn rule(&self, tool: &str) -> ToolRule {
        self.tools.get(tool).cloned().unwrap_or_default()
    }

    pub fn rate_limit(&self, tool: &str) -> RateLimit {
        self.tools.get(tool).and_then(|rule| rule.rate_limit).unwrap_or(self.default_rate_limit)
    }

    pub fn grant(&self, principal: &str, tool: &str) -> Option<&ToolGrant> {
        self.principals.get(principal)?.tools.get(tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> AccessPolicy {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn closed_by_default() {
        let p = policy("version = \"v1\"\n[principals.alice.tools]\n\"notes.search\" = {}\n");
        p.validate().unwrap();
        assert!(p.grant("alice", "notes.search").is_some());
        assert!(p.grant("alice", "notes.export").is_none());
        assert!(p.grant("mallory", "notes.search").is_none());
        assert!(p.rule("notes.export").confirm, "a tool without a rule asks the user");
        assert_eq!(p.rate_limit("notes.search"), DEFAULT_RATE_LIMIT);
    }

    #[test]
    fn bad_policies_say_what_is_wrong() {
        let error = policy("version = \"v1\"\n[tools.search]\nconfirm = false\n").validate().unwrap_err();
        assert_eq!(error, PolicyError::UnqualifiedRule("search".into()));
        assert!(error.to_string().contains("qualified"), "{error}");
        let error = policy("version = \"v1\"\n[tools.\"a.b\"]\nrate_limit = { calls = 0, window_ms = 5 }\n").validate().unwrap_err();
        assert_eq!(error, PolicyError::RateLimit { what: "a.b".into() });
        assert!(error.to_string().contains("calls >= 1"), "{error}");
        let error =
            policy("version = \"v1\"\n[principals.a.tools]\n\"notes.search\" = { destinations = [\"x\"] }\n").validate().unwrap_err();
        assert_eq!(error, PolicyError::DestinationsWithoutArgument { principal: "a".into(), tool: "notes.search".into() });
        assert!(error.to_string().contains("destination_argument"), "{error}");
        assert!(toml::from_str::<AccessPolicy>("version = \"v1\"\nsessions = true\n").is_err(), "unknown keys are refused");
    }
}
