//! The target file: how to start, reach, use and observe a server under test, without knowing its code.
//!
//! TOML, every table closed: an unknown key is refused with the file, the line and the keys that exist there
//! (`toml`'s own error for `deny_unknown_fields`, prefixed with the path). The format is documented in
//! `docs/targets.md`; `targets/` holds examples.

use crate::oracle::outcome::{Mask, Masks};
use crate::scenario::model::is_stage_name;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Most instances a target file may ask for.
pub const INSTANCES_MAX: usize = 16;
/// Longest a process may take to start (`start_timeout_ms`), and one request to be answered.
pub const TIMEOUT_MS_MAX: u64 = 120_000;

/// How mcpsim talks to the instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Newline-delimited JSON-RPC on each process's stdin/stdout; one process per instance and principal
    /// (a stdio server acts for whoever started it).
    Stdio,
    /// Streamable HTTP: one process per instance, each listening on the `{port}` mcpsim chose (on loopback).
    Http,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

/// A target file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetFile {
    /// What is under test, in a few words (printed at the top of every report).
    pub name: String,
    pub transport: Transport,
    /// How many instances form the fleet (1 to [`INSTANCES_MAX`]).
    pub instances: usize,
    /// Commands run once per scenario, in order, before any instance starts (make a key file, seed a store).
    #[serde(default)]
    pub setup: Vec<Vec<String>>,
    /// The command that starts one instance (for stdio: one instance acting for one principal).
    pub command: Vec<String>,
    /// Extra environment of every started process (placeholders allowed in values).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// With `transport = "http"`: the URL of an instance [default: `http://127.0.0.1:{port}/mcp`].
    pub url: Option<String>,
    /// How long an instance may take to answer its first request after it was started [default: 10000].
    pub start_timeout_ms: Option<u64>,
    /// How long one request may take [default: 10000].
    pub request_timeout_ms: Option<u64>,
    /// The principals scenarios act as, by name.
    pub principals: BTreeMap<String, PrincipalFile>,
    /// Paths of an answer whose values differ by design between instances or plays (a random audit id, a
    /// timestamp), as `result.structuredContent.audit` (`*` for any member or item): masked when two plays'
    /// answers are compared for statelessness, and named in every report.
    #[serde(default)]
    pub differ_by_design: Vec<String>,
    pub tool: ToolFile,
    pub effects: EffectsFile,
    /// The store the instances share, for the store faults (`store cut`, `store lock`); without it they are
    /// skipped naming this table.
    pub store: Option<StoreFile>,
    /// Commands that change an item behind every client's back (`admin delete|move|rename`); without them
    /// those steps are skipped naming this table.
    pub admin: Option<AdminFile>,
    /// Named configurations of an instance (`[stages.NAME]`): what `instance I stage NAME` starts it in and
    /// `roll I to NAME` restarts it in.
    #[serde(default)]
    pub stages: BTreeMap<String, StageFile>,
    /// The server's key-rotation recipe, as stages in order (the rotation lessons).
    pub rotation: Option<RotationFile>,
    /// Two versions of the server, as stages (the deploy lessons).
    pub deploy: Option<DeployFile>,
}

/// One stage: the file's `command` and `env`, changed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageFile {
    /// Instead of the file's `command` (another build or version of the server).
    pub command: Option<Vec<String>>,
    /// Appended to the command (stdio: before a principal's own `args`).
    #[serde(default)]
    pub args: Vec<String>,
    /// Over the file's `env` (placeholders allowed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The program (the command's first word) is this environment variable's value: a build kept outside the
    /// checkout. A lesson that needs the stage is skipped, naming the variable, when it is unset.
    pub program_env: Option<String>,
    /// A few words reports print beside the stage's name.
    pub about: Option<String>,
}

/// A key-rotation recipe: `stages` in order (the first where a fleet starts, the last with the old key
/// retired), and the stage whose processes make a key of their own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotationFile {
    pub stages: Vec<String>,
    pub ephemeral: Option<String>,
}

/// Two versions of the server, each a stage.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployFile {
    pub old: String,
    pub new: String,
}

impl TargetFile {
    /// The stage `name`'s program, when it comes from an environment variable that is unset: `Err` names it.
    pub fn stage_program_missing(&self, name: &str) -> Option<String> {
        let variable = self.stages.get(name)?.program_env.as_ref()?;
        match std::env::var_os(variable) {
            Some(value) if !value.is_empty() => None,
            _ => Some(variable.clone()),
        }
    }
}

/// The store the instances share.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreFile {
    pub kind: StoreKind,
    /// `postgres`: the real database, as `host:port` or a `postgres://` URL (placeholders allowed). mcpsim's
    /// proxy listens on `{store_port}` and forwards to it; the instances reach the database through the proxy
    /// (`{store_url}`: this URL with its host and port replaced by the proxy's).
    pub upstream: Option<String>,
    /// `postgres`, instead of `upstream`: the name of an environment variable holding it (a URL with a
    /// password stays out of the file; mcpsim reads no other variable).
    pub upstream_env: Option<String>,
    /// `sqlite`: the database file the instances share (placeholders allowed), which `store lock` locks.
    pub path: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    Postgres,
    Sqlite,
}

/// The commands of `admin delete|move|rename` (argv lists; placeholders `{mcpsim}`, `{data_dir}`, `{id}`,
/// `{uri}`, `{title}`, and with `[store]` `{store_upstream}`), and the item lessons name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminFile {
    pub delete: Option<Vec<String>>,
    #[serde(rename = "move")]
    pub move_to: Option<Vec<String>>,
    pub rename: Option<Vec<String>>,
    /// The id of the item the accept picks (scenarios' `{{item}}`).
    pub item: Option<String>,
}

/// One principal's credentials.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalFile {
    /// HTTP: the bearer token sent as `Authorization: Bearer TOKEN`.
    pub token: Option<String>,
    /// stdio: arguments appended to `command` for this principal's processes.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: environment of this principal's processes.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The destructive MRTR tool scenarios exercise.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFile {
    pub name: String,
    /// Round 1's `arguments`.
    pub arguments: Value,
    /// The `inputRequests` key the form comes under (checked when given: round 1 must ask exactly it).
    pub input_key: Option<String>,
    /// The `content` of an accepting answer.
    pub accept: Value,
    /// The principal who may use the tool (scenarios' `{{principal}}`).
    pub principal: String,
    /// Another principal, whose replays of the first one's state must fail (scenarios' `{{other}}`).
    pub other_principal: Option<String>,
    /// How long a `requestState` the server mints stays valid, in ms (scenarios' `{{ttl}}` and `{{past_ttl}}`:
    /// the expiry lesson runs on an instance whose clock is moved past it instead of waiting).
    #[serde(default)]
    pub state_ttl_ms: Option<u64>,
}

/// How effects are observed: an MCP call whose answer holds a list, or a command printing a number.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectsFile {
    /// An MCP request method (e.g. `resources/list`), sent as `principal`.
    pub method: Option<String>,
    #[serde(default)]
    pub params: Option<Value>,
    /// With `method`: the dotted path of the array in the response whose length is counted
    /// (e.g. `result.resources`).
    pub count: Option<String>,
    /// With `method`: who asks [default: the tool's principal].
    pub principal: Option<String>,
    /// Instead of `method`: a command whose standard output is one integer.
    pub command: Option<Vec<String>>,
    /// `shared` (every instance sees one store: probe one) or `per-instance` (each has its own: probe each and
    /// add up) [default: shared].
    #[serde(default)]
    pub scope: Scope,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    #[default]
    Shared,
    PerInstance,
}

/// A target, read and checked.
#[derive(Debug, Clone)]
pub struct Target {
    pub path: PathBuf,
    pub file: TargetFile,
}

/// Why a URL may not receive requests (and bearer tokens): mcpsim only sends to the servers it starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("url {url:?} is not a URL: {why}")]
    NotAUrl { url: String, why: String },
    #[error("url {url:?}: the scheme must be http")]
    NotHttp { url: String },
    #[error("url {url:?} has no host")]
    NoHost { url: String },
    #[error("url {url:?} has userinfo (user@ or user:password@ before the host), which is refused")]
    Userinfo { url: String },
    #[error("url {url:?}: the host {host} is not loopback (127.0.0.0/8, ::1 or localhost)")]
    NotLoopback { url: String, host: String },
    #[error("url {url:?}: the port must be the one mcpsim chose, {{port}}")]
    OtherPort { url: String },
    #[error("it must name {{port}} once, as the URL's port")]
    PortPlaceholder,
}

/// Why placeholders could not be filled: `{name}` in a command, `{{name}}` in a target scenario.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    /// A command's `{name}` that is not one of `known` (their names) here.
    #[error("{text:?} uses {{{name}}}, which is not a placeholder here; these are: {}", braced(.known, "{", "}"))]
    Unknown { text: String, name: String, known: Vec<String> },
    /// A scenario's `{{name}}` that is not one of `known`.
    #[error("{{{{{name}}}}} is not a placeholder; these are: {}", braced(.known, "{{", "}}"))]
    NotAScenarioPlaceholder { name: String, known: Vec<String> },
    /// A scenario's `{{name}}` the target file leaves empty (`key`, the file's key that would give it).
    #[error("it needs {{{{{name}}}}}, which the target file does not give ({key})")]
    NotGiven { name: String, key: &'static str },
    #[error("a `{{{{` without its `}}}}`")]
    Unclosed,
}

/// `names` each inside `open`/`close`, space-separated.
fn braced(names: &[String], open: &str, close: &str) -> String {
    names.iter().map(|name| format!("{open}{name}{close}")).collect::<Vec<_>>().join(" ")
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{path}: cannot read the target file: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl Target {
    pub fn load(path: &Path) -> Result<Target, TargetError> {
        let text = std::fs::read_to_string(path).map_err(|source| TargetError::Read { path: path.display().to_string(), source })?;
        Target::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Target, TargetError> {
        let shown = path.display().to_string();
        let file: TargetFile =
            toml::from_str(text).map_err(|e| TargetError::Parse { path: shown.clone(), message: e.to_string().trim_end().to_string() })?;
        let invalid = |message: String| TargetError::Invalid { path: shown.clone(), message };
        if !(1..=INSTANCES_MAX).contains(&file.instances) {
            return Err(invalid(format!("instances = {}: a fleet is 1 to {INSTANCES_MAX} instances", file.instances)));
        }
        if file.command.is_empty() {
            return Err(invalid(
                "command = []: name the program that starts one instance, e.g. [\"{mcpsim}\", \"serve\", \"--stdio\"]".into(),
            ));
        }
        if let Some(empty) = file.setup.iter().position(Vec::is_empty) {
            return Err(invalid(format!("setup[{empty}] is an empty command")));
        }
        for (key, value) in [("start_timeout_ms", file.start_timeout_ms), ("request_timeout_ms", file.request_timeout_ms)] {
            if value.is_some_and(|v| v == 0 || v > TIMEOUT_MS_MAX) {
                return Err(invalid(format!("{key} must be 1 to {TIMEOUT_MS_MAX}")));
            }
        }
        match file.transport {
            Transport::Http => {
                for (name, principal) in &file.principals {
                    if principal.token.is_none() {
                        return Err(invalid(format!("[principals.{name}] has no token: over HTTP each principal is a bearer token")));
                    }
                }
                let url = file.url.as_deref().unwrap_or(DEFAULT_URL);
                // Checked with two stand-in ports, so a literal port that happens to equal one of them (`:1`
                // beside a `{port}` elsewhere) is not taken for the placeholder; the URL each instance gets is
                // checked again once filled.
                let checked = if url.matches("{port}").count() == 1 {
                    check_url(&url.replace("{port}", "1"), Some(1)).and_then(|_| check_url(&url.replace("{port}", "2"), Some(2)))
                } else {
                    Err(UrlError::PortPlaceholder)
                };
                if let Err(why) = checked {
                    return Err(invalid(format!(
                        "url = {url:?}: {why}; mcpsim only sends requests to the servers it starts, on loopback \
                         (http://127.0.0.1:{{port}}/mcp)"
                    )));
                }
            }
            Transport::Stdio => {
                if file.url.is_some() {
                    return Err(invalid("url is for transport = \"http\"; a stdio instance is its process".into()));
                }
            }
        }
        if file.differ_by_design.len() > DIFFER_BY_DESIGN_MAX {
            return Err(invalid(format!("differ_by_design names {} paths; at most {DIFFER_BY_DESIGN_MAX}", file.differ_by_design.len())));
        }
        for path in &file.differ_by_design {
            let segments: Vec<&str> = path.split('.').collect();
            if segments.len() < 2 || segments.iter().any(|s| s.is_empty()) || segments[0] != "result" {
                return Err(invalid(format!(
                    "differ_by_design: {path:?} is not a path in a result: write it from the answer's root with dots, \
                     e.g. \"result.structuredContent.audit\" (`*` for any member)"
                )));
            }
        }
        let tool = &file.tool;
        for (key, principal) in [("tool.principal", Some(&tool.principal)), ("tool.other_principal", tool.other_principal.as_ref())] {
            if let Some(principal) = principal {
                if !file.principals.contains_key(principal) {
                    let known: Vec<&str> = file.principals.keys().map(String::as_str).collect();
                    return Err(invalid(format!(
                        "{key} = {principal:?} is not under [principals]; the principals are: {}",
                        if known.is_empty() { "(none)".to_string() } else { known.join(", ") }
                    )));
                }
            }
        }
        if !tool.arguments.is_object() || !tool.accept.is_object() {
            return Err(invalid("tool.arguments and tool.accept are tables (JSON objects)".into()));
        }
        let effects = &file.effects;
        match (&effects.method, &effects.command) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(invalid("[effects] needs exactly one of method (an MCP call) or command (printing a number)".into()))
            }
            (Some(_), None) if effects.count.is_none() => {
                return Err(invalid("[effects] method needs count: the path of the list to count, e.g. \"result.resources\"".into()))
            }
            (None, Some(command)) if command.is_empty() => return Err(invalid("[effects] command is empty".into())),
            _ => {}
        }
        if let Some(principal) = &effects.principal {
            if !file.principals.contains_key(principal) {
                return Err(invalid(format!("effects.principal = {principal:?} is not under [principals]")));
            }
        }
        if let Some(store) = &file.store {
            match store.kind {
                StoreKind::Postgres => {
                    if store.upstream.is_some() == store.upstream_env.is_some() {
                        return Err(invalid(
                            "[store] kind = \"postgres\" needs exactly one of upstream (host:port or a postgres:// URL) or \
                             upstream_env (the environment variable holding it)"
                                .into(),
                        ));
                    }
                    if store.path.is_some() {
                        return Err(invalid("[store] path is for kind = \"sqlite\"".into()));
                    }
                    if let Some(name) = &store.upstream_env {
                        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                            return Err(invalid(format!("[store] upstream_env = {name:?} is not an environment variable's name")));
                        }
                    }
                }
                StoreKind::Sqlite => {
                    if store.path.as_deref().is_none_or(str::is_empty) {
                        return Err(invalid("[store] kind = \"sqlite\" needs path: the database file the instances share".into()));
                    }
                    if store.upstream.is_some() || store.upstream_env.is_some() {
                        return Err(invalid("[store] upstream and upstream_env are for kind = \"postgres\"".into()));
                    }
                }
            }
        }
        if let Some(admin) = &file.admin {
            for (key, command) in [("delete", &admin.delete), ("move", &admin.move_to), ("rename", &admin.rename)] {
                if command.as_ref().is_some_and(Vec::is_empty) {
                    return Err(invalid(format!("[admin] {key} is an empty command")));
                }
            }
        }
        check_stages(&file).map_err(invalid)?;
        Ok(Target { path: path.to_path_buf(), file })
    }

    pub fn start_timeout_ms(&self) -> u64 {
        self.file.start_timeout_ms.unwrap_or(10_000)
    }

    pub fn request_timeout_ms(&self) -> u64 {
        self.file.request_timeout_ms.unwrap_or(10_000)
    }

    /// What statelessness masks when it compares two plays' answers: what differs by design in every MRTR flow
    /// (a sealed `requestState`), and the paths the file names under `differ_by_design`.
    pub fn masks(&self) -> Masks {
        self.file.differ_by_design.iter().fold(Masks::by_design(), |masks, path| {
            masks.with(Mask::Path { path: path.split('.').map(str::to_string).collect(), shown: "<differs by design>".into() })
        })
    }

    pub fn url_template(&self) -> &str {
        self.file.url.as_deref().unwrap_or(DEFAULT_URL)
    }
}

/// The `[stages.*]`, `[rotation]` and `[deploy]` tables: names that exist, commands that are not empty.
fn check_stages(file: &TargetFile) -> Result<(), String> {
    for (name, stage) in &file.stages {
        if !is_stage_name(name) {
            return Err(format!("[stages.{name}]: a stage's name is 1 to 32 of A-Z a-z 0-9 _ -"));
        }
        if stage.command.as_ref().is_some_and(Vec::is_empty) {
            return Err(format!("[stages.{name}] command = []: name the program, or leave command out to keep the file's"));
        }
        if let Some(variable) = &stage.program_env {
            if variable.is_empty() || !variable.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("[stages.{name}] program_env = {variable:?} is not an environment variable's name"));
            }
        }
    }
    let known = || {
        let names: Vec<&str> = file.stages.keys().map(String::as_str).collect();
        if names.is_empty() {
            "there is no [stages.NAME] table".to_string()
        } else {
            format!("the stages are: {}", names.join(", "))
        }
    };
    let mut named: Vec<(String, &String)> = Vec::new();
    if let Some(rotation) = &file.rotation {
        if rotation.stages.len() < 2 {
            return Err("[rotation] stages: a recipe is 2 or more stages in order (the first where a fleet starts, the last with the old key retired)".into());
        }
        named.extend(rotation.stages.iter().enumerate().map(|(k, s)| (format!("[rotation] stages[{k}]"), s)));
        named.extend(rotation.ephemeral.iter().map(|s| ("[rotation] ephemeral".to_string(), s)));
    }
    if let Some(deploy) = &file.deploy {
        named.push(("[deploy] old".into(), &deploy.old));
        named.push(("[deploy] new".into(), &deploy.new));
    }
    for (key, name) in named {
        if !file.stages.contains_key(name) {
            return Err(format!("{key} = {name:?} is not a stage ({})", known()));
        }
    }
    Ok(())
}

/// Most paths `differ_by_design` may name.
const DIFFER_BY_DESIGN_MAX: usize = 32;

const DEFAULT_URL: &str = "http://127.0.0.1:{port}/mcp";

/// Whether `url` may receive requests (and bearer tokens): parsed as a URI, `http`, no userinfo, a loopback
/// host (127.0.0.0/8, ::1, `localhost`) and, with `port`, exactly that port. `Err` says what is wrong.
pub fn check_url(url: &str, port: Option<u16>) -> Result<(), UrlError> {
    let shown = || url.to_string();
    let uri: hyper::Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| UrlError::NotAUrl { url: shown(), why: e.to_string() })?;
    if uri.scheme_str() != Some("http") {
        return Err(UrlError::NotHttp { url: shown() });
    }
    let authority = uri.authority().ok_or_else(|| UrlError::NoHost { url: shown() })?;
    if authority.as_str().contains('@') {
        return Err(UrlError::Userinfo { url: shown() });
    }
    let host = authority.host();
    let loopback = match host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    };
    if !loopback {
        return Err(UrlError::NotLoopback { url: shown(), host: host.to_string() });
    }
    if let Some(port) = port {
        if authority.port_u16() != Some(port) {
            return Err(UrlError::OtherPort { url: shown() });
        }
    }
    Ok(())
}

/// The values a command's placeholders take: `{mcpsim}`, `{data_dir}`, `{instance}`, `{port}`, `{principal}`.
#[derive(Debug, Clone, Default)]
pub struct Placeholders {
    pub values: BTreeMap<&'static str, String>,
}

impl Placeholders {
    /// `text` with every known `{name}` replaced; an unknown one is an error naming the ones that exist.
    pub fn fill(&self, text: &str) -> Result<String, PlaceholderError> {
        fill_delimited(text, ("{", "}"), None, |name| match self.values.get(name) {
            Some(value) => Ok(value.clone()),
            None => Err(PlaceholderError::Unknown {
                text: text.to_string(),
                name: name.to_string(),
                known: self.values.keys().map(|k| k.to_string()).collect(),
            }),
        })
    }
}

/// `text` with each `OPEN name CLOSE` replaced by what `value` answers for `name`: the one placeholder scanner of
/// target files (`{name}` in commands) and target scenarios (`{{name}}`). An `OPEN` without its `CLOSE` is
/// `unclosed` as an error, or, without one, kept as text.
pub(crate) fn fill_delimited<E>(
    text: &str,
    (open, close): (&str, &str),
    unclosed: Option<E>,
    value: impl Fn(&str) -> Result<String, E>,
) -> Result<String, E> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(open) {
        out.push_str(&rest[..at]);
        let after = &rest[at + open.len()..];
        let Some(end) = after.find(close) else {
            match unclosed {
                Some(error) => return Err(error),
                None => {
                    out.push_str(&rest[at..]);
                    return Ok(out);
                }
            }
        };
        out.push_str(&value(&after[..end])?);
        rest = &after[end + close.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const GOOD: &str = r#"
name = "x"
transport = "stdio"
instances = 2
command = ["{mcpsim}", "serve", "--stdio"]
[principals.alice]
args = ["--principal", "alice"]
[tool]
name = "notes_delete"
arguments = { title = "T" }
accept = { confirm = true }
principal = "alice"
[effects]
method = "resources/list"
count = "result.resources"
"#;

    fn error(text: &str) -> String {
        Target::parse(Path::new("targets/t.toml"), text).expect_err("refused").to_string()
    }

    #[test]
    fn a_complete_file_parses() {
        let target = Target::parse(Path::new("t.toml"), GOOD).unwrap();
        assert_eq!(target.file.instances, 2);
        assert_eq!(target.file.effects.scope, Scope::Shared);
    }

    #[test]
    fn an_unknown_key_names_the_file_the_line_and_the_keys_that_exist() {
        let text = GOOD.replace("instances = 2", "instances = 2\ninstance_count = 3");
        let message = error(&text);
        assert!(message.starts_with("targets/t.toml: "), "{message}");
        assert!(message.contains("line 5"), "{message}");
        assert!(message.contains("unknown field `instance_count`"), "{message}");
        assert!(message.contains("`instances`") && message.contains("`command`") && message.contains("`effects`"), "{message}");
        let message = error(&GOOD.replace("principal = \"alice\"\n[effects]", "principal = \"alice\"\nanswer = 1\n[effects]"));
        assert!(message.contains("unknown field `answer`") && message.contains("`accept`") && message.contains("`input_key`"), "{message}");
    }

    #[test]
    fn paths_that_differ_by_design_are_checked_and_become_masks() {
        let with = |paths: &str| GOOD.replace("instances = 2", &format!("instances = 2\ndiffer_by_design = [{paths}]"));
        let target = Target::parse(Path::new("t.toml"), &with(r#""result.structuredContent.audit", "result.*.at""#)).unwrap();
        let masks = target.masks();
        let answer = |audit: &str| serde_json::json!({"result": {"structuredContent": {"audit": audit, "deleted": true}}});
        assert!(masks.same(&answer("a1"), &answer("b2"), &[]), "the named path is masked");
        assert!(!Masks::by_design().same(&answer("a1"), &answer("b2"), &[]), "and only because the file names it");
        for bad in [r#""structuredContent.audit""#, r#""result""#, r#""result..audit""#, r#""""#] {
            let message = error(&with(bad));
            assert!(message.contains("differ_by_design") && message.contains("result.structuredContent.audit"), "{bad}: {message}");
        }
        let many = (0..=DIFFER_BY_DESIGN_MAX).map(|i| format!("\"result.a{i}\"")).collect::<Vec<_>>().join(", ");
        assert!(error(&with(&many)).contains("at most 32"));
    }

    #[test]
    fn a_missing_key_and_a_wrong_type_are_named() {
        assert!(error(&GOOD.replace("transport = \"stdio\"\n", "")).contains("missing field `transport`"));
        let message = error(&GOOD.replace("\"stdio\"", "\"carrier-pigeon\""));
        assert!(message.contains("line 3") && message.contains("stdio") && message.contains("http"), "{message}");
        assert!(error(&GOOD.replace("instances = 2", "instances = \"two\"")).contains("line 4"));
    }

    #[test]
    fn inconsistent_files_say_what_to_change() {
        assert!(error(&GOOD.replace("instances = 2", "instances = 0")).contains("1 to 16 instances"));
        assert!(error(&GOOD.replace("principal = \"alice\"\n[effects]", "principal = \"carol\"\n[effects]"))
            .contains("tool.principal = \"carol\" is not under [principals]; the principals are: alice"));
        assert!(error(&GOOD.replace("\"stdio\"", "\"http\"")).contains("[principals.alice] has no token"));
        let remote = GOOD.replace("\"stdio\"", "\"http\"").replace("args = [", "token = \"t\"\nargs = [") + "";
        let remote = remote.replace("instances = 2", "instances = 2\nurl = \"http://example.com:{port}/mcp\"");
        assert!(error(&remote).contains("sends requests to the servers it starts, on loopback"));
        for (url, why) in [
            ("http://127.0.0.1:{port}@127.0.0.2:9/mcp", "has userinfo"),
            ("http://alice:pw@127.0.0.1:{port}/mcp", "has userinfo"),
            ("http://127.0.0.1.evil.example:{port}/mcp", "is not loopback"),
            ("http://localhost.evil.example:{port}/mcp", "is not loopback"),
            ("http://10.0.0.1:{port}/mcp", "is not loopback"),
            ("https://127.0.0.1:{port}/mcp", "scheme must be http"),
            ("http://127.0.0.1:9/mcp?p={port}", "the port must be the one mcpsim chose"),
            // A literal port equal to a stand-in is still not the placeholder.
            ("http://127.0.0.1:1/mcp?p={port}", "the port must be the one mcpsim chose"),
            ("http://127.0.0.1/mcp", "must name {port} once"),
        ] {
            let file = remote.replace("http://example.com:{port}/mcp", url);
            assert!(error(&file).contains(why), "{url}: {}", error(&file));
        }
        for url in ["http://127.0.0.1:{port}/mcp", "http://127.0.0.9:{port}/", "http://[::1]:{port}/mcp", "http://localhost:{port}/x"] {
            let file = remote.replace("http://example.com:{port}/mcp", url);
            assert!(Target::parse(Path::new("t.toml"), &file).is_ok(), "{url}");
        }
        assert!(error(&GOOD.replace("count = \"result.resources\"", "")).contains("method needs count"));
        assert!(error(&GOOD.replace("count = \"result.resources\"", "count = \"x\"\ncommand = [\"true\"]")).contains("exactly one of"));
    }

    #[test]
    fn one_scanner_fills_both_placeholder_forms() {
        let value = |name: &str| if name.trim() == "x" { Ok("1".to_string()) } else { Err(format!("no {name}")) };
        let unclosed = || Some("unclosed".to_string());
        assert_eq!(fill_delimited("a{x}b{x}", ("{", "}"), None, value).unwrap(), "a1b1");
        assert_eq!(fill_delimited("a{x", ("{", "}"), None, value).unwrap(), "a{x", "a command's lone brace is text");
        assert_eq!(fill_delimited("{{ x }}:{{x}}", ("{{", "}}"), unclosed(), value).unwrap(), "1:1");
        assert_eq!(fill_delimited("{{x", ("{{", "}}"), unclosed(), value).unwrap_err(), "unclosed");
        assert_eq!(fill_delimited("{y}", ("{", "}"), None, value).unwrap_err(), "no y");
    }

    #[test]
    fn placeholders_fill_and_unknown_ones_are_named() {
        let mut p = Placeholders::default();
        p.values.insert("data_dir", "/tmp/d".into());
        p.values.insert("port", "8080".into());
        assert_eq!(p.fill("sqlite:{data_dir}/n.db:{port}").unwrap(), "sqlite:/tmp/d/n.db:8080");
        let error = p.fill("{dta_dir}/x").unwrap_err();
        assert!(matches!(&error, PlaceholderError::Unknown { name, known, .. } if name == "dta_dir" && known == &["data_dir", "port"]));
        let message = error.to_string();
        assert!(message.contains("{dta_dir}") && message.contains("{data_dir} {port}"), "{message}");
    }
}
