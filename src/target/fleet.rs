//! A target's instances as running processes: set up, started, reached, killed and restarted. Every
//! process is a [`Process`], so nothing started here outlives mcpsim.

use super::file::{PlaceholderError, Placeholders, StoreKind, Target, Transport, UrlError};
use super::process::{PauseHow, Process, ProcessError};
use super::redact_argv;
use super::store_proxy::{Outage, ProxyCounts, ProxyError, StoreProxy};
use crate::live::http_client::HttpClient;
use crate::live::post;
use crate::play::world::Outgoing;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long [`Fleet::let_writes_land`] drives the HTTP requests' tasks so they are written before the caller goes on.
pub const WRITE_WAIT: Duration = Duration::from_millis(50);
/// Largest response body read from an HTTP instance.
const RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Most lines a stdio process may send that answer nothing asked (logs on stdout, stray notifications) before
/// the exchange fails.
const STRAY_LINES_MAX: usize = 64;

/// Why a fleet could not be set up, started or restarted. `argv` is always redacted by [`redact_argv`].
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("cannot start the HTTP runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Placeholder(#[from] PlaceholderError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The URL an HTTP instance was given, once filled.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// A setup command exited otherwise than with 0 (`stderr`, what it wrote there).
    #[error("setup command `{argv}` failed ({status}): {stderr}")]
    SetupFailed { argv: String, status: String, stderr: String },
    #[error("setup command `{argv}` did not finish within start_timeout_ms = {timeout_ms}")]
    SetupTimeout { argv: String, timeout_ms: u64 },
    /// An instance exited before it accepted a connection (`stderr`, what it wrote there).
    #[error("{instance} exited at start ({status}): {stderr}")]
    ExitedAtStart { instance: String, status: String, stderr: String },
    #[error("{instance} ({argv}) accepted no connection on port {port} within start_timeout_ms = {timeout_ms}")]
    NoConnection { instance: String, argv: String, port: u16, timeout_ms: u64 },
    #[error("cannot find a free port on 127.0.0.1: {0}")]
    NoFreePort(std::io::Error),
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    /// `[store] upstream_env` names a variable the environment does not hold.
    #[error("[store] upstream_env = {name:?}: the environment has no such variable (for the local PostgreSQL: eval \"$(bash .ci/postgres.sh start)\")")]
    NoUpstream { name: String },
    /// An admin command (`key`, the `[admin]` key) that did not exit 0 within start_timeout_ms.
    #[error("[admin] {key} `{argv}` {why}")]
    AdminFailed { key: &'static str, argv: String, why: String },
    /// A skewed clock was asked for and libfaketime is not installed.
    #[error(
        "{instance} must run with its clock {offset_ms:+} ms off, which needs libfaketime (Debian/Ubuntu: apt-get install \
         faketime; or set {FAKETIME_LIBRARY_ENV} to the path of libfaketime.so.1); looked in {looked}"
    )]
    NoFaketime { instance: String, offset_ms: i64, looked: String },
    /// A stage the target file does not have (a lesson's `roll` or `instance I stage`).
    #[error("{instance}: the target file has no [stages.{stage}] ({known})")]
    NoSuchStage { instance: String, stage: String, known: String },
    /// A stage whose program comes from an environment variable that is unset.
    #[error("[stages.{stage}] program_env = {variable:?}: the environment has no such variable (the build it names; for mcpsim's release: export {variable}=\"$(bash .ci/mcpsim-release.sh)\")")]
    NoStageProgram { stage: String, variable: String },
}

/// Overrides where libfaketime is looked for (the path of `libfaketime.so.1`).
pub const FAKETIME_LIBRARY_ENV: &str = "MCPSIM_LIBFAKETIME";

/// Where Debian, Ubuntu, Fedora and a source install put libfaketime (the multiarch directories are listed).
fn faketime_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(path) = std::env::var(FAKETIME_LIBRARY_ENV) {
        candidates.push(PathBuf::from(path));
    }
    for lib in ["/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib"] {
        candidates.push(Path::new(lib).join("faketime/libfaketime.so.1"));
        // Multiarch: /usr/lib/x86_64-linux-gnu/faketime, /usr/lib/aarch64-linux-gnu/faketime, …
        if let Ok(entries) = std::fs::read_dir(lib) {
            let mut arches: Vec<PathBuf> =
                entries.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with("-linux-gnu")).collect();
            arches.sort();
            candidates.extend(arches.into_iter().map(|a| a.join("faketime/libfaketime.so.1")));
        }
    }
    candidates
}

/// The libfaketime library to preload, or every place looked.
pub fn libfaketime() -> Result<PathBuf, String> {
    let candidates = faketime_candidates();
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        looked.join(", ")
    })
}

/// The `FAKETIME` value for an offset: seconds, signed, with milliseconds (libfaketime's relative form).
pub fn faketime_value(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let ms = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}", ms / 1000, ms % 1000)
}

/// The store the fleet's instances share, as mcpsim reaches it for store faults.
enum Store {
    /// PostgreSQL behind mcpsim's proxy: `upstream` is the real database (as the file gives it).
    Postgres { proxy: StoreProxy, upstream: String },
    Sqlite {
        path: String,
        /// The write lock `store lock` holds, until its window ends or the fleet is dropped.
        #[cfg(feature = "sqlite")]
        lock: Option<super::store_proxy::SqliteLock>,
    },
}

/// Why an exchange got no answer.
#[derive(Debug, Clone)]
pub struct Lost {
    pub message: String,
}

enum Running {
    /// One process per principal (a stdio server acts for whoever started it).
    Stdio(BTreeMap<String, Process>),
    Http {
        process: Process,
        url: String,
    },
    /// Killed by a crash step, not yet restarted.
    Down,
}

/// The fleet of one play.
pub struct Fleet<'t> {
    target: &'t Target,
    data_dir: PathBuf,
    mcpsim: String,
    instances: Vec<Running>,
    /// The setup commands, exited: kept so that what they left running (a database they started, a daemon)
    /// lives as long as the fleet and is killed with it (their containment leaves).
    setups: Vec<Process>,
    http: HttpClient,
    runtime: tokio::runtime::Runtime,
    /// With `[store]`: the proxy (PostgreSQL) or the file (SQLite) store faults act on.
    store: Option<Store>,
    /// Processes started so far, as "i2 alice pid 4711": the report's identity of each answer.
    pub events: Vec<String>,
    /// Instances that run under a skewed clock (libfaketime), by index: the offset in ms, kept on restarts.
    clocks: BTreeMap<usize, i64>,
    /// Instances paused and not yet resumed, and how.
    paused: BTreeMap<usize, PauseHow>,
    /// Instances that run in a stage of the target file (`[stages.NAME]`), by index: kept on restarts.
    stages: BTreeMap<usize, String>,
    /// Ids of requests whose client stopped waiting, by stdio process (instance, principal): their answers
    /// are discarded when they come.
    abandoned: BTreeMap<(usize, String), Vec<Value>>,
}

/// A request on the wire whose answer is not read yet ([`Fleet::write`]).
pub enum Flight {
    Stdio {
        index: usize,
        principal: String,
        outgoing: Box<Outgoing>,
        written: Result<(), Lost>,
    },
    Http(tokio::task::JoinHandle<Result<Option<Value>, crate::live::http_client::PostError>>),
    /// The instance was down: nothing was written.
    Down,
}

/// The JSON-RPC id of a request (`None` when its bytes are no JSON or it has none).
fn request_id(outgoing: &Outgoing) -> Option<Value> {
    outgoing.value.clone().or_else(|| serde_json::from_slice::<Value>(&outgoing.bytes()).ok()).and_then(|v| v.get("id").cloned())
}

impl<'t> Fleet<'t> {
    /// Runs the target's setup commands in `data_dir` (fresh, owned by the caller), then starts every instance.
    pub fn start(target: &'t Target, data_dir: &Path, mcpsim: &str) -> Result<Fleet<'t>, FleetError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(FleetError::Runtime)?;
        let mut fleet = Fleet {
            target,
            data_dir: data_dir.to_path_buf(),
            mcpsim: mcpsim.to_string(),
            instances: Vec::new(),
            setups: Vec::new(),
            http: HttpClient::new(Duration::from_millis(target.request_timeout_ms()), RESPONSE_BYTES_MAX),
            runtime,
            store: None,
            events: Vec::new(),
            clocks: BTreeMap::new(),
            paused: BTreeMap::new(),
            stages: BTreeMap::new(),
            abandoned: BTreeMap::new(),
        };
        fleet.store = fleet.open_store()?;
        for (index, command) in target.file.setup.iter().enumerate() {
            fleet.setup(index, command)?;
        }
        for index in 0..target.file.instances {
            let running = fleet.start_instance(index)?;
            fleet.instances.push(running);
        }
        Ok(fleet)
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn instance_name(index: usize) -> String {
        format!("t{}", index + 1)
    }

    /// The `[store]` table made real: the proxy started in front of the upstream database, or the SQLite
    /// file's path filled.
    fn open_store(&mut self) -> Result<Option<Store>, FleetError> {
        let Some(file) = &self.target.file.store else { return Ok(None) };
        let p = self.placeholders(None, None, None);
        match file.kind {
            StoreKind::Postgres => {
                let upstream = match (&file.upstream, &file.upstream_env) {
                    (Some(upstream), _) => p.fill(upstream)?,
                    (None, Some(name)) => std::env::var(name).map_err(|_| FleetError::NoUpstream { name: name.clone() })?,
                    (None, None) => unreachable!("the target file's check wants one"),
                };
                let proxy = StoreProxy::start(&upstream)?;
                self.events.push(format!(
                    "store proxy on 127.0.0.1:{} in front of {}",
                    proxy.port(),
                    redact_argv(std::slice::from_ref(&upstream))
                ));
                Ok(Some(Store::Postgres { proxy, upstream }))
            }
            StoreKind::Sqlite => {
                let path = p.fill(file.path.as_deref().unwrap_or_default())?;
                Ok(Some(Store::Sqlite {
                    path,
                    #[cfg(feature = "sqlite")]
                    lock: None,
                }))
            }
        }
    }

    fn placeholders(&self, instance: Option<usize>, principal: Option<&str>, port: Option<u16>) -> Placeholders {
        let mut p = Placeholders::default();
        p.values.insert("mcpsim", self.mcpsim.clone());
        p.values.insert("data_dir", self.data_dir.display().to_string());
        match &self.store {
            Some(Store::Postgres { proxy, upstream }) => {
                p.values.insert("store_port", proxy.port().to_string());
                p.values.insert("store_url", super::store_proxy::proxied_url(upstream, proxy.port()));
                p.values.insert("store_upstream", upstream.clone());
            }
            Some(Store::Sqlite { path, .. }) => {
                p.values.insert("store_path", path.clone());
            }
            None => {}
        }
        if let Some(instance) = instance {
            p.values.insert("instance", Fleet::instance_name(instance));
            // An instance's own directory, for deployments where nothing is shared.
            p.values.insert("instance_dir", self.data_dir.join(Fleet::instance_name(instance)).display().to_string());
        }
        if let Some(principal) = principal {
            p.values.insert("principal", principal.to_string());
        }
        if let Some(port) = port {
            p.values.insert("port", port.to_string());
        }
        p
    }

    fn fill_all(&self, argv: &[String], p: &Placeholders) -> Result<Vec<String>, PlaceholderError> {
        argv.iter().map(|a| p.fill(a)).collect()
    }

    fn env(&self, p: &Placeholders, extra: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, PlaceholderError> {
        let mut env = Vec::new();
        for (key, value) in self.target.file.env.iter().chain(extra) {
            env.push((key.clone(), p.fill(value)?));
        }
        Ok(env)
    }

    /// `extra` alone, its values filled.
    fn env_only(&self, p: &Placeholders, extra: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, PlaceholderError> {
        extra.iter().map(|(key, value)| Ok((key.clone(), p.fill(value)?))).collect()
    }

    /// One setup command, bounded by the start timeout; it must exit 0.
    fn setup(&mut self, index: usize, command: &[String]) -> Result<(), FleetError> {
        let p = self.placeholders(None, None, None);
        let argv = self.fill_all(command, &p)?;
        let log = self.data_dir.join(format!("setup-{index}.stderr"));
        match self.run_to_exit(&argv, &p, log)? {
            (process, Ok(())) => {
                self.events.push(format!("setup {}: {}", index + 1, redact_argv(&argv)));
                self.setups.push(process);
                Ok(())
            }
            (_, Err(Some((status, stderr)))) => Err(FleetError::SetupFailed { argv: redact_argv(&argv), status, stderr }),
            (_, Err(None)) => Err(FleetError::SetupTimeout { argv: redact_argv(&argv), timeout_ms: self.target.start_timeout_ms() }),
        }
    }

    /// Runs `argv` (filled) until it exits, bounded by the start timeout (contained like every process).
    /// `Err(Some((status, stderr)))`: it exited otherwise than with 0; `Err(None)`: it did not exit in time.
    #[allow(clippy::type_complexity)]
    fn run_to_exit(
        &self,
        argv: &[String],
        p: &Placeholders,
        log: PathBuf,
    ) -> Result<(Process, Result<(), Option<(String, String)>>), FleetError> {
        let env = self.env(p, &BTreeMap::new())?;
        let mut process = Process::start(argv, &env, log.clone(), false)?;
        let deadline = self.target.start_timeout_ms() / 10;
        for _ in 0..deadline.max(1) {
            if let Some(status) = process.exited() {
                if status == "exit status: 0" {
                    return Ok((process, Ok(())));
                }
                let stderr = std::fs::read_to_string(&log).unwrap_or_default();
                return Ok((process, Err(Some((status, stderr.trim().to_string())))));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok((process, Err(None)))
    }

    /// Runs the `[admin]` command `key` (`delete`, `move`, `rename`) with `{id}`, `{uri}`, `{title}` filled:
    /// the command as shown (redacted). `Ok(None)`: the file has no such command.
    pub fn admin(&mut self, key: &'static str, values: &[(&'static str, &str)]) -> Result<Option<String>, FleetError> {
        let Some(admin) = &self.target.file.admin else { return Ok(None) };
        let command = match key {
            "delete" => &admin.delete,
            "move" => &admin.move_to,
            _ => &admin.rename,
        };
        let Some(command) = command else { return Ok(None) };
        let mut p = self.placeholders(None, None, None);
        for (name, value) in values {
            p.values.insert(name, value.to_string());
        }
        let argv = self.fill_all(command, &p)?;
        let shown = redact_argv(&argv);
        let log = self.data_dir.join(format!("admin-{key}.stderr"));
        match self.run_to_exit(&argv, &p, log)?.1 {
            Ok(()) => {
                self.events.push(format!("admin {key}: {shown}"));
                Ok(Some(shown))
            }
            Err(Some((status, stderr))) => {
                Err(FleetError::AdminFailed { key, argv: shown, why: format!("failed ({status}): {}", super::shown(&stderr)) })
            }
            Err(None) => Err(FleetError::AdminFailed {
                key,
                argv: shown,
                why: format!("did not finish within start_timeout_ms = {}", self.target.start_timeout_ms()),
            }),
        }
    }

    /// What the target file says about its store, for a store fault: `Err` names the key to add.
    pub fn store_kind(&self) -> Result<StoreKind, String> {
        match &self.store {
            Some(Store::Postgres { .. }) => Ok(StoreKind::Postgres),
            Some(Store::Sqlite { .. }) => Ok(StoreKind::Sqlite),
            None => Err("the target file has no [store] table (kind = \"postgres\" with upstream, or \"sqlite\" with path)".into()),
        }
    }

    /// Arms the proxy: `after_statements` more statements reach the database, then every connection is cut
    /// and new ones refused for `outage`. `Err`: the target's store is not PostgreSQL behind the proxy.
    pub fn store_cut(&mut self, after_statements: u32, outage: Outage) -> Result<(), String> {
        match &self.store {
            Some(Store::Postgres { proxy, .. }) => {
                proxy.arm_cut(after_statements, outage);
                Ok(())
            }
            Some(Store::Sqlite { .. }) => {
                Err("a SQLite store has no connection to cut: `store lock for DURATION` holds its write lock instead".into())
            }
            None => Err(self.store_kind().unwrap_err()),
        }
    }

    /// Ends an outage the proxy is in now (and disarms a cut not carried out), or releases a SQLite lock.
    pub fn store_heal(&mut self) {
        match &mut self.store {
            Some(Store::Postgres { proxy, .. }) => proxy.heal(),
            #[cfg(feature = "sqlite")]
            Some(Store::Sqlite { lock, .. }) => drop(lock.take()),
            _ => {}
        }
    }

    /// The proxy's counts, with a PostgreSQL store.
    pub fn store_counts(&self) -> Option<ProxyCounts> {
        match &self.store {
            Some(Store::Postgres { proxy, .. }) => Some(proxy.counts()),
            _ => None,
        }
    }

    /// Holds the SQLite file's write lock (`BEGIN IMMEDIATE`) for `window`, from now. `Err`: no SQLite store,
    /// or the lock could not be taken.
    pub fn store_lock(&mut self, window: Duration) -> Result<(), String> {
        match &mut self.store {
            #[cfg(feature = "sqlite")]
            Some(Store::Sqlite { path, lock }) => {
                // A lock still held ends first (its window is replaced by this one).
                lock.take();
                *lock = Some(super::store_proxy::SqliteLock::hold(Path::new(path), window)?);
                Ok(())
            }
            #[cfg(not(feature = "sqlite"))]
            Some(Store::Sqlite { .. }) => Err("this mcpsim was built without SQLite (the `sqlite` feature)".into()),
            Some(Store::Postgres { .. }) => {
                Err("a PostgreSQL store is cut through the proxy: `store cut after N statements [for DURATION]`".into())
            }
            None => Err(self.store_kind().unwrap_err()),
        }
    }

    /// The environment that skews instance `index`'s clock, if it runs skewed: libfaketime preloaded with a
    /// fixed offset (`FAKETIME`), the monotonic clock left true so timeouts and sleeps keep their length.
    fn clock_env(&self, index: usize) -> Result<BTreeMap<String, String>, FleetError> {
        let mut env = BTreeMap::new();
        let Some(&offset_ms) = self.clocks.get(&index) else { return Ok(env) };
        let library =
            libfaketime().map_err(|looked| FleetError::NoFaketime { instance: Fleet::instance_name(index), offset_ms, looked })?;
        env.insert("LD_PRELOAD".to_string(), library.display().to_string());
        env.insert("FAKETIME".to_string(), faketime_value(offset_ms));
        env.insert("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string());
        env.insert("FAKETIME_DONT_RESET".to_string(), "1".to_string());
        Ok(env)
    }

    /// Restarts instance `index` (and every later restart of it) with its clock `offset_ms` off the true time,
    /// under libfaketime. Returns the decision-log line.
    pub fn start_with_clock(&mut self, index: usize, offset_ms: i64) -> Result<String, FleetError> {
        self.clocks.insert(index, offset_ms);
        if let Err(error) = self.clock_env(index) {
            self.clocks.remove(&index);
            return Err(error);
        }
        self.restart(index)?;
        let line = format!("restarted {} under libfaketime, FAKETIME={}", Fleet::instance_name(index), faketime_value(offset_ms));
        self.events.push(line.clone());
        Ok(line)
    }

    pub fn has_stage(&self, stage: &str) -> bool {
        self.target.file.stages.contains_key(stage)
    }

    /// The stage instance `index` runs in (`None`: the file's own command).
    pub fn stage_of(&self, index: usize) -> Option<&str> {
        self.stages.get(&index).map(String::as_str)
    }

    /// Puts instance `index` in stage `stage` for its next start (a process killed now starts in it). `Err`:
    /// the file has no such stage.
    pub fn set_stage(&mut self, index: usize, stage: &str) -> Result<(), FleetError> {
        if !self.target.file.stages.contains_key(stage) {
            let known: Vec<&str> = self.target.file.stages.keys().map(String::as_str).collect();
            return Err(FleetError::NoSuchStage {
                instance: Fleet::instance_name(index),
                stage: stage.to_string(),
                known: if known.is_empty() { "it has none".into() } else { format!("it has: {}", known.join(", ")) },
            });
        }
        self.stages.insert(index, stage.to_string());
        Ok(())
    }

    /// Restarts instance `index` in stage `stage` (its processes killed, started again with the stage's command,
    /// arguments and environment). Returns the decision-log line.
    pub fn roll(&mut self, index: usize, stage: &str) -> Result<String, FleetError> {
        let before = self.stages.get(&index).cloned();
        self.set_stage(index, stage)?;
        if let Err(error) = self.restart(index) {
            match before {
                Some(before) => self.stages.insert(index, before),
                None => self.stages.remove(&index),
            };
            return Err(error);
        }
        let line = format!("rolled {} to stage {}", Fleet::instance_name(index), self.stage_shown(stage));
        self.events.push(line.clone());
        Ok(line)
    }

    /// A stage as reports name it: `k2-k1 (k2 signs, k1 verifies)`.
    pub fn stage_shown(&self, stage: &str) -> String {
        match self.target.file.stages.get(stage).and_then(|s| s.about.as_deref()) {
            Some(about) => format!("{stage} ({})", super::shown(about)),
            None => stage.to_string(),
        }
    }

    /// The command that starts instance `index` (its stage's, or the file's), filled: the program taken from
    /// the stage's `program_env` when it names one, the stage's `args` appended.
    fn instance_command(&self, index: usize, p: &Placeholders) -> Result<Vec<String>, FleetError> {
        let Some((name, stage)) = self.stages.get(&index).and_then(|name| self.target.file.stages.get(name).map(|s| (name, s))) else {
            return Ok(self.fill_all(&self.target.file.command, p)?);
        };
        let mut argv = self.fill_all(stage.command.as_deref().unwrap_or(&self.target.file.command), p)?;
        if let Some(variable) = &stage.program_env {
            match std::env::var(variable) {
                Ok(program) if !program.is_empty() => argv[0] = program,
                _ => return Err(FleetError::NoStageProgram { stage: name.clone(), variable: variable.clone() }),
            }
        }
        argv.extend(self.fill_all(&stage.args, p)?);
        Ok(argv)
    }

    /// The stage's environment of instance `index` (over the file's `env`).
    fn stage_env(&self, index: usize) -> BTreeMap<String, String> {
        self.stages.get(&index).and_then(|name| self.target.file.stages.get(name)).map(|s| s.env.clone()).unwrap_or_default()
    }

    fn start_instance(&mut self, index: usize) -> Result<Running, FleetError> {
        let name = Fleet::instance_name(index);
        let _ = super::create_private_dir(&self.data_dir.join(&name));
        let clock = self.clock_env(index)?;
        let stage_env = self.stage_env(index);
        match self.target.file.transport {
            Transport::Stdio => {
                let mut processes = BTreeMap::new();
                for (principal, credentials) in &self.target.file.principals {
                    let p = self.placeholders(Some(index), Some(principal), None);
                    let mut argv = self.instance_command(index, &p)?;
                    argv.extend(self.fill_all(&credentials.args, &p)?);
                    let mut env = self.env(&p, &stage_env)?;
                    env.extend(self.env_only(&p, &credentials.env)?);
                    env.extend(clock.clone());
                    let stderr = self.data_dir.join(format!("{name}-{principal}.stderr"));
                    let process = Process::start(&argv, &env, stderr, true)?;
                    self.events.push(format!("started {name} for {principal}: pid {}", process.pid));
                    processes.insert(principal.clone(), process);
                }
                Ok(Running::Stdio(processes))
            }
            Transport::Http => {
                let port = free_port()?;
                let p = self.placeholders(Some(index), None, Some(port));
                let argv = self.instance_command(index, &p)?;
                let mut env = self.env(&p, &stage_env)?;
                env.extend(clock.clone());
                let url = p.fill(self.target.url_template())?;
                // Before anything is sent: the URL's host is loopback and its port the one chosen here.
                super::file::check_url(&url, Some(port))?;
                let stderr = self.data_dir.join(format!("{name}.stderr"));
                let mut process = Process::start(&argv, &env, stderr.clone(), false)?;
                // Ready once something accepts connections on the port.
                let address = SocketAddr::from(([127, 0, 0, 1], port));
                let tries = self.target.start_timeout_ms() / 20;
                let mut ready = false;
                for _ in 0..tries.max(1) {
                    if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                        ready = true;
                        break;
                    }
                    if let Some(status) = process.exited() {
                        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
                        return Err(FleetError::ExitedAtStart { instance: name, status, stderr: log.trim().to_string() });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                if !ready {
                    return Err(FleetError::NoConnection {
                        instance: name,
                        argv: redact_argv(&argv),
                        port,
                        timeout_ms: self.target.start_timeout_ms(),
                    });
                }
                self.events.push(format!("started {name} at {url}: pid {}", process.pid));
                Ok(Running::Http { process, url })
            }
        }
    }

    /// Pauses every process of instance `index` (see [`Process::pause`]); how, for the decision log. A paused
    /// instance is continued by [`Fleet::resume`], or dies with its kill (a crash, the fleet's drop, Ctrl-C, the
    /// watchdog).
    pub fn pause(&mut self, index: usize) -> Result<PauseHow, Lost> {
        let how = match &mut self.instances[index] {
            Running::Stdio(processes) => processes.values_mut().map(Process::pause).last().unwrap_or(PauseHow::Stop),
            Running::Http { process, .. } => process.pause(),
            Running::Down => return Err(Lost { message: "the instance is down (killed by the scenario)".into() }),
        };
        self.paused.insert(index, how);
        self.events.push(format!("paused {} ({})", Fleet::instance_name(index), how.describe()));
        Ok(how)
    }

    /// Continues instance `index` after [`Fleet::pause`]; false when it was not paused.
    pub fn resume(&mut self, index: usize) -> bool {
        if self.paused.remove(&index).is_none() {
            return false;
        }
        match &mut self.instances[index] {
            Running::Stdio(processes) => processes.values_mut().for_each(Process::resume),
            Running::Http { process, .. } => process.resume(),
            Running::Down => {}
        }
        self.events.push(format!("resumed {}", Fleet::instance_name(index)));
        true
    }

    pub fn is_paused(&self, index: usize) -> bool {
        self.paused.contains_key(&index)
    }

    /// Instances paused now, in order.
    pub fn paused(&self) -> Vec<usize> {
        self.paused.keys().copied().collect()
    }

    /// Lets the HTTP requests in flight progress for [`WRITE_WAIT`] without waiting for their answers: on
    /// loopback a connection is accepted by the kernel (even for a stopped server) and the request written to
    /// its socket within a few polls. Nothing to do over stdio (a write is done when [`Fleet::write`] returns).
    pub fn let_writes_land(&mut self) {
        if self.target.file.transport == Transport::Http {
            self.runtime.block_on(async { tokio::time::sleep(WRITE_WAIT).await });
        }
    }

    /// `crash I after I receives OP`: the request written, then SIGKILL to the instance before its answer is
    /// read. The answer is never read: whether the server acted on it is its own timing.
    pub fn kill_after_write(&mut self, index: usize, principal: &str, outgoing: &Outgoing) -> Lost {
        let flight = self.write(index, principal, outgoing);
        self.let_writes_land();
        self.crash(index);
        let lost = match &flight {
            Flight::Stdio { written: Err(lost), .. } => lost.clone(),
            Flight::Down => Lost { message: "the instance is down (killed by the scenario)".into() },
            _ => Lost { message: format!("{} was killed (SIGKILL) after the request was written", Fleet::instance_name(index)) },
        };
        self.abandon(flight);
        lost
    }

    /// SIGKILL to the instance's processes (a paused one too).
    pub fn crash(&mut self, index: usize) {
        self.paused.remove(&index);
        let name = Fleet::instance_name(index);
        match std::mem::replace(&mut self.instances[index], Running::Down) {
            Running::Stdio(mut processes) => processes.values_mut().for_each(Process::kill),
            Running::Http { mut process, .. } => process.kill(),
            Running::Down => {}
        }
        // A new process answers none of the old one's requests.
        self.abandoned.retain(|(at, _), _| *at != index);
        self.events.push(format!("killed {name} (SIGKILL)"));
    }

    pub fn restart(&mut self, index: usize) -> Result<(), FleetError> {
        if !matches!(self.instances[index], Running::Down) {
            self.crash(index);
        }
        let running = self.start_instance(index)?;
        self.instances[index] = running;
        Ok(())
    }

    pub fn is_down(&self, index: usize) -> bool {
        matches!(self.instances[index], Running::Down)
    }

    fn token(&self, principal: &str) -> String {
        self.target.file.principals.get(principal).and_then(|p| p.token.clone()).unwrap_or_default()
    }

    /// Sends several messages at once, in the order given (mcpsim's seeded order), then collects each answer.
    /// `Ok(None)`: a notification, answered with nothing.
    pub fn exchange_all(&mut self, sends: &[(usize, String, Outgoing)]) -> Vec<Result<Option<Value>, Lost>> {
        let flights: Vec<Flight> = sends.iter().map(|(index, principal, outgoing)| self.write(*index, principal, outgoing)).collect();
        flights.into_iter().map(|flight| self.read(flight)).collect()
    }

    /// Puts `outgoing` on the wire to instance `index` as `principal`, without reading its answer: stdio, the
    /// line written; HTTP, the POST in flight. [`Fleet::read`] collects the answer, [`Fleet::abandon`] drops it.
    pub fn write(&mut self, index: usize, principal: &str, outgoing: &Outgoing) -> Flight {
        match self.target.file.transport {
            Transport::Stdio => {
                let written = self.write_stdio(index, principal, outgoing);
                Flight::Stdio { index, principal: principal.to_string(), outgoing: Box::new(outgoing.clone()), written }
            }
            Transport::Http => {
                let Running::Http { url, .. } = &self.instances[index] else { return Flight::Down };
                let (http, token, outgoing, url) = (self.http.clone(), self.token(principal), outgoing.clone(), url.clone());
                Flight::Http(self.runtime.spawn(async move { post(&http, &url, &token, &outgoing).await }))
            }
        }
    }

    /// The answer of a request [`Fleet::write`] put on the wire (`Ok(None)`: a notification).
    pub fn read(&mut self, flight: Flight) -> Result<Option<Value>, Lost> {
        match flight {
            Flight::Stdio { index, principal, outgoing, written } => {
                written?;
                if outgoing.notification {
                    return Ok(None);
                }
                let timeout = Duration::from_millis(self.target.request_timeout_ms());
                self.read_stdio(index, &principal, &outgoing, timeout).map(Some)
            }
            Flight::Http(task) => match self.runtime.block_on(task) {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(Lost { message: error.message }),
                Err(join) => Err(Lost { message: format!("the request task failed: {join}") }),
            },
            Flight::Down => Err(Lost { message: "the instance is down (killed by the scenario)".into() }),
        }
    }

    /// The client stops waiting for a request already written: HTTP, its connection is dropped now (if no
    /// answer byte was read yet, none is); stdio, its answer is discarded whenever it comes, never taken for
    /// another request's.
    pub fn abandon(&mut self, flight: Flight) {
        match flight {
            Flight::Stdio { index, principal, outgoing, written: Ok(()) } if !outgoing.notification => {
                let Some(id) = request_id(&outgoing) else { return };
                if let Ok(process) = self.process(index, &principal) {
                    if let Some(at) = process.read_ahead.iter().position(|v| v.get("id") == Some(&id)) {
                        process.read_ahead.remove(at);
                        return;
                    }
                }
                self.abandoned.entry((index, principal)).or_default().push(id);
            }
            Flight::Http(task) => task.abort(),
            _ => {}
        }
    }

    /// Puts `outgoing` on the wire to instance `index` and stops waiting for it right after it is written:
    /// over HTTP the request's bytes are written on a fresh connection that is then closed before any byte of
    /// the answer is read; over stdio the line is written and its answer discarded whenever it comes.
    pub fn write_and_close(&mut self, index: usize, principal: &str, outgoing: &Outgoing) -> Result<(), Lost> {
        match self.target.file.transport {
            Transport::Stdio => {
                let flight = self.write(index, principal, outgoing);
                if let Flight::Stdio { written: Err(lost), .. } = flight {
                    return Err(lost);
                }
                self.abandon(flight);
                Ok(())
            }
            Transport::Http => {
                let Running::Http { url, .. } = &self.instances[index] else {
                    return Err(Lost { message: "the instance is down (killed by the scenario)".into() });
                };
                let (http, token, outgoing, url) = (self.http.clone(), self.token(principal), outgoing.clone(), url.clone());
                self.runtime
                    .block_on(async move { crate::live::post_and_close(&http, &url, &token, &outgoing).await })
                    .map_err(|error| Lost { message: error.message })
            }
        }
    }

    fn process(&mut self, index: usize, principal: &str) -> Result<&mut Process, Lost> {
        match &mut self.instances[index] {
            Running::Stdio(processes) => {
                processes.get_mut(principal).ok_or_else(|| Lost { message: format!("the target file has no principal {principal}") })
            }
            _ => Err(Lost { message: "the instance is down (killed by the scenario)".into() }),
        }
    }

    fn write_stdio(&mut self, index: usize, principal: &str, outgoing: &Outgoing) -> Result<(), Lost> {
        let process = self.process(index, principal)?;
        process.write_line(&outgoing.bytes()).map_err(|error| Lost { message: error.to_string() })
    }

    /// The response to `outgoing`: the next line whose `id` is the request's (any line, when the request had
    /// no readable id, as a parse error is answered with `id: null`).
    fn read_stdio(&mut self, index: usize, principal: &str, outgoing: &Outgoing, timeout: Duration) -> Result<Value, Lost> {
        let id = request_id(outgoing);
        let abandoned = self.abandoned.remove(&(index, principal.to_string())).unwrap_or_default();
        let result = self.read_stdio_skipping(index, principal, id, &abandoned, timeout);
        // What did not come yet is still to be discarded when it does.
        let mut abandoned = abandoned;
        if let Ok((_, seen)) = &result {
            abandoned.retain(|id| !seen.contains(id));
        }
        if !abandoned.is_empty() {
            self.abandoned.insert((index, principal.to_string()), abandoned);
        }
        result.map(|(value, _)| value)
    }

    /// [`Fleet::read_stdio`]'s loop: also returns the abandoned ids whose answers it discarded.
    fn read_stdio_skipping(
        &mut self,
        index: usize,
        principal: &str,
        id: Option<Value>,
        abandoned: &[Value],
        timeout: Duration,
    ) -> Result<(Value, Vec<Value>), Lost> {
        let mut seen = Vec::new();
        let start_ms = self.target.start_timeout_ms();
        let process = self.process(index, principal)?;
        // Answered already, while another request's answer was awaited.
        if let Some(at) = id.as_ref().and_then(|id| process.read_ahead.iter().position(|v| v.get("id") == Some(id))) {
            return Ok((process.read_ahead.remove(at), seen));
        }
        // A process's first answer may also wait for it to start (an interpreter importing its SDK).
        let timeout = if process.fresh { timeout + Duration::from_millis(start_ms) } else { timeout };
        // Each abandoned answer is discarded once: the oldest request with an id is the first to answer it.
        let mut unseen: Vec<&Value> = abandoned.iter().collect();
        for _ in 0..STRAY_LINES_MAX {
            let line = process.read_line(timeout).map_err(|error| Lost { message: error.to_string() })?;
            let Some(line) = line else {
                return Err(Lost { message: format!("process {} closed its stdout (it exited)", process.pid) });
            };
            let Ok(value) = serde_json::from_str::<Value>(&line) else {
                return Err(Lost {
                    message: format!(
                        "process {} wrote a line that is not JSON on stdout: {}",
                        process.pid,
                        line.chars().take(200).collect::<String>()
                    ),
                });
            };
            let answers = value.get("result").is_some() || value.get("error").is_some();
            if let Some(at) = unseen.iter().position(|gone| answers && value.get("id") == Some(*gone)) {
                seen.push(unseen.remove(at).clone());
                continue;
            }
            match &id {
                Some(id) if answers && value.get("id") == Some(id) => return Ok((value, seen)),
                None if answers => return Ok((value, seen)),
                // The answer to another request in flight on this process (it answers as requests finish, not
                // as they were written): kept for that request's read, never dropped as a stray line.
                Some(_)
                    if answers
                        && value.get("id").is_some_and(|v| !v.is_null())
                        && process.read_ahead.len() < super::process::READ_AHEAD_MAX =>
                {
                    process.read_ahead.push(value);
                }
                _ => continue,
            }
        }
        Err(Lost { message: format!("{STRAY_LINES_MAX} lines came back and none answered the request") })
    }
}

/// A port free on loopback now (the OS's choice; another process could take it before the instance binds it,
/// which then fails its start).
fn free_port() -> Result<u16, FleetError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(FleetError::NoFreePort)?;
    listener.local_addr().map(|a| a.port()).map_err(FleetError::NoFreePort)
}
