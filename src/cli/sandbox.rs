//! The third layer of the seed's rule (authorization, containment, an OS sandbox): before `mcpsim serve`
//! starts its runtime it restricts itself with Landlock (Linux 5.13+) to the files its store needs, so even
//! a path the code never meant to build cannot be opened. Threads started afterwards (the runtime's) inherit
//! the restriction.
//!
//! What a store is allowed (`SandboxPlan::for_store`):
//! - `dir:FOLDER`: read, remove and rename (no writing) in the folder, where the notes are and the trash
//!   (`.mcpsim/trash`) is; everything in `.mcpsim/claims` and `.mcpsim/pruned`, the replay ledger. The trash
//!   has exactly the folder's rights because Landlock refuses (EXDEV) to move a file somewhere it would gain
//!   rights. Creating a file in the folder is allowed only because a delete that met a racing file renames
//!   it back into place.
//! - `sqlite:PATH`: everything in the database file's folder (SQLite creates `-wal`, `-shm`, journals).
//! - `postgres:URL`: read `/etc` and read/execute the system libraries (name resolution loads NSS modules).
//! - `memory`: nothing.
//!
//! A gateway served with `--pins FILE` may also read that file's folder: SIGHUP re-reads the file, which
//! `mcpsim pins approve` replaces by a rename (a rule on the file alone would still name the old one).
//!
//! Every process may read `/dev/urandom`. Files opened before (the deployment, key file, audit log) stay
//! usable through their descriptors; stderr is the log. The network is not restricted.

use crate::stores::StoreSpec;
use std::fmt;
use std::path::{Path, PathBuf};

/// `--sandbox`: whether to restrict the process with Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SandboxMode {
    /// Refuse to serve unless the Landlock restriction is in force.
    Required,
    /// Restrict where the kernel can, and say so at start-up; serve either way.
    #[default]
    BestEffort,
    /// Do not restrict.
    Off,
}

/// Which paths get which access.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPlan {
    /// Read, list, remove and rename, create by rename; no writing into files.
    pub read_remove: Vec<PathBuf>,
    /// Every file access.
    pub full: Vec<PathBuf>,
    /// Read and list.
    pub read: Vec<PathBuf>,
    /// Read, list and execute (shared libraries).
    pub read_execute: Vec<PathBuf>,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxOutcome {
    /// In force, at this Landlock ABI level of the kernel; `partially` when the kernel lacks rights we ask for.
    Active { abi: i32, partially: bool, plan: SandboxPlan },
    /// Not in force, and why.
    Inactive { why: String },
}

impl fmt::Display for SandboxOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxOutcome::Active { abi, partially, plan } => {
                write!(f, "sandbox: active (Landlock ABI {abi}{})", if *partially { ", partially enforced by this kernel" } else { "" })?;
                let show = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
                let mut parts = Vec::new();
                if !plan.read_remove.is_empty() {
                    parts.push(format!("read/remove {}", show(&plan.read_remove)));
                }
                if !plan.full.is_empty() {
                    parts.push(format!("read/write {}", show(&plan.full)));
                }
                if !plan.read.is_empty() || !plan.read_execute.is_empty() {
                    parts.push(format!("read {}", show(&[plan.read.clone(), plan.read_execute.clone()].concat())));
                }
                if parts.is_empty() {
                    write!(f, ", no file access")
                } else {
                    write!(f, ", files: {}", parts.join("; "))
                }
            }
            SandboxOutcome::Inactive { why } => write!(f, "sandbox: not active: {why}"),
        }
    }
}

/// Why the sandbox could not be planned or put in force.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A folder the store needs could not be resolved (`path`, as given).
    #[error("{}: {source}", .path.display())]
    Canonical { path: PathBuf, source: std::io::Error },
    /// The `dir:` store could not be opened before the sandbox forbids creating its folders.
    #[error(transparent)]
    Store(#[from] crate::framework::ports::StoreError),
    /// `--sandbox required` where the restriction is not in force (`why`, the reason).
    #[error("--sandbox required, but {why}. Run on Linux 5.13+ with Landlock enabled (lsm=landlock), or pass --sandbox best-effort")]
    Required { why: String },
    #[cfg(all(target_os = "linux", feature = "sandbox"))]
    #[error("Landlock refused the ruleset: {0}")]
    Refused(#[from] landlock::RulesetError),
    /// The store's folder is a link or not a folder (`errno`, what opening it said).
    #[error("{} is not a plain folder ({errno}); move it away and start again", .path.display())]
    NotAPlainFolder { path: PathBuf, errno: String },
}

impl SandboxPlan {
    /// What serving from `store` needs.
    pub fn for_store(store: &StoreSpec) -> Result<SandboxPlan, SandboxError> {
        let mut plan = SandboxPlan { read: vec![PathBuf::from("/dev/urandom")], ..SandboxPlan::default() };
        match store {
            StoreSpec::Memory => {}
            #[cfg(feature = "sqlite")]
            StoreSpec::Sqlite(path) => {
                let folder = match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                plan.full.push(canonical(&folder)?);
            }
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres(_) => {
                plan.read.push(PathBuf::from("/etc"));
                plan.read_execute
                    .extend(["/lib", "/lib64", "/usr/lib", "/usr/lib64"].into_iter().map(PathBuf::from).filter(|p| p.exists()));
            }
            #[cfg(unix)]
            StoreSpec::Dir { path, uri } => {
                // Opening the store once creates its folders (refusing planted links) and finishes any delete
                // an earlier process left half done, before the sandbox forbids creating folders.
                let store = crate::stores::dir::DirStore::open(
                    path,
                    uri.clone(),
                    std::sync::Arc::new(crate::stores::system::SystemClock),
                    crate::stores::memory::ReplayLimits::default(),
                )?;
                let root = store.root().to_path_buf();
                let state = root.join(crate::stores::dir::STATE_DIR);
                plan.full.extend([state.join("claims"), state.join("pruned")]);
                plan.read_remove.push(root);
            }
        }
        Ok(plan)
    }
}

fn canonical(path: &Path) -> Result<PathBuf, SandboxError> {
    std::fs::canonicalize(path).map_err(|source| SandboxError::Canonical { path: path.to_path_buf(), source })
}

/// The kernel's Landlock ABI version, or `None` when it has no Landlock (or it is disabled).
pub fn kernel_abi() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
        // SAFETY: with a null attribute and size 0 the call only returns the ABI version; no memory is touched.
        let version = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
        (version > 0).then_some(version as i32)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Restricts this process (and the threads it starts afterwards) as `plan` says, unless `mode` is off.
/// `required` fails unless the restriction is in force.
pub fn apply(mode: SandboxMode, plan: &SandboxPlan) -> Result<SandboxOutcome, SandboxError> {
    let outcome = match mode {
        SandboxMode::Off => SandboxOutcome::Inactive { why: "--sandbox off".into() },
        _ => restrict(plan)?,
    };
    match (&outcome, mode) {
        (SandboxOutcome::Inactive { why }, SandboxMode::Required) => Err(SandboxError::Required { why: why.clone() }),
        _ => Ok(outcome),
    }
}

#[cfg(all(target_os = "linux", feature = "sandbox"))]
fn restrict(plan: &SandboxPlan) -> Result<SandboxOutcome, SandboxError> {
    use landlock::{
        path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, ABI,
    };
    let Some(abi) = kernel_abi() else {
        return Ok(SandboxOutcome::Inactive { why: "this kernel has no Landlock (Linux 5.13+, enabled with lsm=landlock)".into() });
    };
    // File rights up to ABI 5 (refer, truncate, ioctl on devices); network and scopes are not restricted.
    let known = ABI::V5;
    let all = AccessFs::from_all(known);
    let read = AccessFs::from_read(known) & !AccessFs::Execute;
    let read_execute = AccessFs::from_read(known);
    let read_remove = read | AccessFs::RemoveFile | AccessFs::Refer | AccessFs::MakeReg;
    let failed = SandboxError::Refused;
    let mut ruleset =
        Ruleset::default().set_compatibility(CompatLevel::BestEffort).handle_access(all).map_err(failed)?.create().map_err(failed)?;
    for (paths, access) in [(&plan.read_remove, read_remove), (&plan.read, read), (&plan.read_execute, read_execute)] {
        ruleset = ruleset.add_rules(path_beneath_rules(paths, access)).map_err(failed)?;
    }
    for path in &plan.full {
        // The store's own folder is opened without following a symbolic link: a planted link must not widen
        // the sandbox to wherever it points.
        let fd = open_folder_nofollow(path)?;
        ruleset = ruleset.add_rule(PathBeneath::new(fd, all)).map_err(failed)?;
    }
    let status = ruleset.restrict_self().map_err(failed)?;
    Ok(match status.ruleset {
        RulesetStatus::NotEnforced => SandboxOutcome::Inactive { why: format!("Landlock (ABI {abi}) did not enforce the ruleset") },
        RulesetStatus::PartiallyEnforced => SandboxOutcome::Active { abi, partially: true, plan: plan.clone() },
        RulesetStatus::FullyEnforced => SandboxOutcome::Active { abi, partially: false, plan: plan.clone() },
    })
}

/// Opens a folder (a canonical path) as `O_PATH`, through no symbolic link at all (`openat2` with
/// `RESOLVE_NO_SYMLINKS`; the last component `O_NOFOLLOW` where the kernel lacks `openat2`).
#[cfg(all(target_os = "linux", feature = "sandbox"))]
fn open_folder_nofollow(path: &Path) -> Result<std::os::fd::OwnedFd, SandboxError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let opened = match rustix::fs::openat2(CWD, path, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
        Err(rustix::io::Errno::NOSYS) | Err(rustix::io::Errno::PERM) => rustix::fs::open(path, flags, Mode::empty()),
        other => other,
    };
    opened.map_err(|errno| SandboxError::NotAPlainFolder { path: path.to_path_buf(), errno: errno.to_string() })
}

#[cfg(not(all(target_os = "linux", feature = "sandbox")))]
fn restrict(_plan: &SandboxPlan) -> Result<SandboxOutcome, SandboxError> {
    Ok(SandboxOutcome::Inactive {
        why: if cfg!(target_os = "linux") {
            "this mcpsim was built without the `sandbox` feature".into()
        } else {
            "Landlock exists only on Linux".into()
        },
    })
}
