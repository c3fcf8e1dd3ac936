//! The directory note store (`dir:PATH`): the notes are the `.md` files under one folder on the real file
//! system, and its replay ledger lives beside them in `PATH/.mcpsim/`, so every `mcpsim serve` pointed at the
//! folder (processes on one machine) shares both. GUARANTEES.md §1.4 states the rules; this is how they hold.
//!
//! **What a note is.** A regular file named `*.md` (no leading dot, no percent-escape, no control character,
//! at most 255 bytes a name, 32 folders deep, 4096 bytes a path), with one link, on the root's device, at most
//! 1 MiB of UTF-8. Its id is its path relative to the root without `.md` (`plans/q3.md` is `plans/q3`: stable
//! for as long as the file stays where it is), its title the first Markdown heading or else the file name,
//! its URI the root's URI joined with the path, and its revision the file's identity: device, inode, size and
//! modification time. Anything else under the root is not a note and is never listed; [`DirStore::inspect`]
//! says why with a [`Refusal`].
//!
//! **Containment on the real file system.** Every open resolves beneath a descriptor of the root, never
//! through a symbolic link and never across a mount: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` where the kernel has it, else a walk of directory descriptors,
//! each opened with `O_NOFOLLOW | O_DIRECTORY` relative to the last and checked to be on the root's device
//! ([`Resolver`]). Files are opened `O_NOFOLLOW | O_NONBLOCK` (a FIFO cannot stall a listing) and checked with
//! `fstat` on the opened descriptor: a file with more than one link (a hard link, possibly to a file outside)
//! is refused.
//!
//! **Deleting the copy the form showed.** A delete re-reads the file through a descriptor of its folder,
//! compares its identity with the revision the form bound, and then moves it by folder descriptor and name
//! (`renameat2(RENAME_NOREPLACE)`) into `.mcpsim/trash/`; the moved file is checked again (it is the same
//! inode, still one link) before it is unlinked. A file swapped in between the check and the rename is put
//! back and the delete is `note_gone`; nothing is removed that was not the file shown.
//!
//! **At most once across processes.** `claim_and_delete` first records the claim in `.mcpsim/claims/` (one
//! file per nonce, created by `linkat` of a fully written temporary file, so exactly one process creates it and
//! no reader sees half a record), marked pending with the note, path and revision it means to delete; then it
//! moves the note into the trash under the claim's name, writes the final record over the pending one
//! (`renameat`, atomic), and unlinks the trash entry. A process killed at any point leaves a state the next
//! [`DirStore::open`] finishes: a trash entry whose claim is pending and whose identity matches is deleted and
//! its claim recorded; a mismatching one is put back and its claim released; a pending claim with no trash entry
//! (killed before the rename) refuses every retry as `in_progress` until its state's retention ends, as in
//! every other store.
//!
//! **Each principal's share.** A claim file names its principal (written into the temporary file before
//! the link makes it visible, so no claim is ever seen without it), and the ledger refuses a principal
//! holding its share ([`ReplayLimits::principal_capacity`]) as it refuses a full ledger: `Full`, never
//! evicting, while every other principal keeps claiming. Claims written before the shares name nobody and
//! count against the unnamed principal `""` (no live one) and the whole. Both bounds are counted by listing
//! the claims (each file read once per inode, then kept in an index), so two processes claiming at the same
//! instant may exceed one by one each. A writer killed between writing its temporary file and linking it
//! leaves `tmp-PID-N`; opening the store and pruning sweep those whose pid is gone or that are older than
//! [`TEMP_STALE_MS`].

use crate::framework::ports::{
    fold_title, is_candidate, ClaimAndDelete, ClaimOutcome, ClaimRecord, Clock, GuardedDelete, NonceClaim, Note, NoteStore, ReplayStore,
    StoreError,
};
use crate::policy::containment::FileUri;
use crate::stores::admin::{SeedReport, StoreAdmin};
use crate::stores::memory::{past_retention, ReplayLimits};
use crate::wire::canonical::digest_hex;
use async_trait::async_trait;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The largest note read; a bigger `.md` file is not a note ([`Refusal::TooLarge`]).
pub const NOTE_BYTES_MAX: u64 = 1 << 20;
/// The longest file or folder name (Linux's `NAME_MAX`).
pub const NAME_BYTES_MAX: usize = 255;
/// The longest relative path of a note (Linux's `PATH_MAX`).
pub const PATH_BYTES_MAX: usize = 4096;
/// The deepest a note may lie below the root.
pub const DEPTH_MAX: usize = 32;
/// Most notes one listing returns (the rest are not listed: a bound, not a truncation of one note).
pub const NOTES_MAX: usize = 100_000;
/// The store's own folder under the root: the replay ledger and the trash. Never listed.
pub const STATE_DIR: &str = ".mcpsim";
const SUFFIX: &str = ".md";
const TITLE_CHARS_MAX: usize = 200;

/// Why something under the root is not a note, or a note cannot be taken: the documented reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// An empty, `.` or `..` path segment.
    DotSegment,
    /// A name starting with `.` (hidden files, and the store's own `.mcpsim`).
    Hidden,
    /// A name holding a percent-escape such as `%2e`: its URI would not read back as itself.
    PercentEncoded,
    /// A NUL, slash, backslash or control character in a name.
    ForbiddenCharacter,
    /// A name longer than `NAME_BYTES_MAX` bytes.
    NameTooLong,
    /// A path longer than `PATH_BYTES_MAX` bytes or deeper than `DEPTH_MAX` folders.
    PathTooLong,
    /// Not named `*.md`.
    NotMarkdown,
    /// The file, or a folder on the way to it, is a symbolic link.
    Symlink,
    /// The file has more than one link: the same inode is reachable elsewhere, perhaps outside the root.
    HardLink,
    /// Not a regular file (a FIFO, socket, device) where a note was expected, or not a folder on the way.
    NotRegular,
    /// On another device than the root (a mount inside the folder).
    OtherDevice,
    /// Larger than [`NOTE_BYTES_MAX`].
    TooLarge,
    /// The content or the name is not UTF-8.
    NotUtf8,
    /// Nothing is there.
    Missing,
    /// Another file than the one the form showed (another inode, size or modification time).
    Swapped,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::DotSegment => "dot_segment",
            Refusal::Hidden => "hidden",
            Refusal::PercentEncoded => "percent_encoded",
            Refusal::ForbiddenCharacter => "forbidden_character",
            Refusal::NameTooLong => "name_too_long",
            Refusal::PathTooLong => "path_too_long",
            Refusal::NotMarkdown => "not_markdown",
            Refusal::Symlink => "symlink",
            Refusal::HardLink => "hard_link",
            Refusal::NotRegular => "not_regular",
            Refusal::OtherDevice => "other_device",
            Refusal::TooLarge => "too_large",
            Refusal::NotUtf8 => "not_utf8",
            Refusal::Missing => "missing",
            Refusal::Swapped => "swapped",
        }
    }

    /// What a delete meeting this refusal answers: containment failures (the file, or the way to it, reaches
    /// outside the folder) are `note_outside_workspace`; everything else means the note shown is not there.
    fn delete_outcome(self) -> GuardedDelete {
        match self {
            Refusal::Symlink | Refusal::HardLink | Refusal::OtherDevice => GuardedDelete::OutsideWorkspace,
            _ => GuardedDelete::Gone,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How paths are resolved beneath the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// One `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`.
    Openat2,
    /// Directory descriptors opened one segment at a time with `O_NOFOLLOW | O_DIRECTORY`.
    Walk,
}

/// A point inside a delete, for tests that kill a process or swap a file exactly there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seam {
    /// The claim is recorded as pending; nothing is moved yet.
    Claimed,
    /// The file was checked against the form's revision; it is not moved yet.
    Checked,
    /// The file is in the trash; its claim is still pending.
    Moved,
    /// The final record is written; the trash entry is not unlinked yet.
    Recorded,
}

type SeamHook = Arc<dyn Fn(Seam) + Send + Sync>;

/// A file's identity: what a form binds as the note's revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_s: i64,
    mtime_ns: u64,
}

impl Identity {
    #[allow(clippy::unnecessary_cast)] // the field types differ between architectures
    fn of(stat: &rfs::Stat) -> Identity {
        Identity {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
            size: stat.st_size as u64,
            mtime_s: stat.st_mtime as i64,
            mtime_ns: stat.st_mtime_nsec as u64,
        }
    }

    fn revision(&self) -> String {
        format!("{:x}:{:x}:{}:{}.{:09}", self.dev, self.ino, self.size, self.mtime_s, self.mtime_ns)
    }
}

#[allow(clippy::unnecessary_cast)]
fn links(stat: &rfs::Stat) -> u64 {
    stat.st_nlink as u64
}

/// Checks one path segment (a folder or file name) against the naming rules.
pub fn check_segment(name: &str) -> Result<(), Refusal> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(Refusal::DotSegment);
    }
    if name.chars().any(|c| c == '/' || c == '\\' || c.is_control()) {
        return Err(Refusal::ForbiddenCharacter);
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(Refusal::NameTooLong);
    }
    if name.starts_with('.') {
        return Err(Refusal::Hidden);
    }
    let bytes = name.as_bytes();
    if bytes.windows(3).any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit()) {
        return Err(Refusal::PercentEncoded);
    }
    Ok(())
}

/// The relative path (segments, the last with `.md`) of the note with this id.
pub fn note_path(id: &str) -> Result<Vec<String>, Refusal> {
    if id.len() + SUFFIX.len() > PATH_BYTES_MAX {
        return Err(Refusal::PathTooLong);
    }
    let mut segments: Vec<String> = id.split('/').map(str::to_string).collect();
    if segments.len() > DEPTH_MAX + 1 {
        return Err(Refusal::PathTooLong);
    }
    if let Some(last) = segments.last_mut() {
        last.push_str(SUFFIX);
    }
    for segment in &segments {
        check_segment(segment)?;
    }
    Ok(segments)
}

/// The id of the note at this relative path (segments, the last ending in `.md`).
fn note_id(segments: &[String]) -> String {
    let joined = segments.join("/");
    joined[..joined.len() - SUFFIX.len()].to_string()
}

/// The first Markdown heading (`#` to `######`), else the file name without `.md`.
pub fn derive_title(body: &str, file_name: &str) -> String {
    let heading = body.lines().find_map(|line| {
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        let rest = &line[hashes..];
        ((1..=6).contains(&hashes) && rest.starts_with([' ', '\t'])).then(|| rest.trim().trim_end_matches('#').trim().to_string())
    });
    let title = heading.filter(|title| !title.is_empty()).unwrap_or_else(|| file_name.trim_end_matches(SUFFIX).to_string());
    title.chars().take(TITLE_CHARS_MAX).collect()
}

/// A failure on the way to a file: a documented refusal, or the file system's own error.
#[derive(Debug)]
enum Failure {
    Refused(Refusal),
    Io(String),
}

impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Failure {
        Failure::Refused(refusal)
    }
}

fn io(what: &str, errno: Errno) -> Failure {
    Failure::Io(format!("{what}: {errno}"))
}

fn unavailable(what: &str, errno: Errno) -> StoreError {
    StoreError::Unavailable(format!("directory store: {what}: {errno}"))
}

fn failure_error(failure: Failure) -> StoreError {
    match failure {
        Failure::Io(message) => StoreError::Unavailable(format!("directory store: {message}")),
        Failure::Refused(refusal) => StoreError::Unavailable(format!("directory store: refused: {refusal}")),
    }
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY.union(OFlags::RDONLY).union(OFlags::CLOEXEC).union(OFlags::NOFOLLOW);
const FILE_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::CLOEXEC).union(OFlags::NOFOLLOW).union(OFlags::NONBLOCK).union(OFlags::NOCTTY);

/// What a claim file holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimFile {
    #[serde(rename = "expiresAtMs")]
    expires_at_ms: u64,
    /// Whose confirmation it is: the principal's share of the ledger is counted from these. Absent in a claim
    /// written by a version before the shares (counted in the whole ledger and in the unnamed principal `""`'s
    /// share, as the SQLite store counts its nonces from before the shares: against no live principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<String>,
    record: Value,
    /// Set while the delete is in flight: what it means to delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending: Option<Pending>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pending {
    #[serde(rename = "noteId")]
    note_id: String,
    revision: String,
}

impl ClaimFile {
    fn record(&self) -> ClaimRecord {
        if self.pending.is_some() {
            return ClaimRecord::InProgress;
        }
        // A record we cannot read is reported as in progress: refused, never taken as unclaimed.
        ClaimRecord::from_json(&self.record).unwrap_or(ClaimRecord::InProgress)
    }
}

/// What the ledger's capacity bounds read of one claim file: whose it is and when it expires. Kept per claim
/// name with the file's inode, so a claim is read once while it stays the same file (a settled claim is a new
/// file: another inode, read again).
#[derive(Debug, Clone)]
struct Indexed {
    ino: u64,
    principal: String,
    expires_at_ms: u64,
}

/// Temporary files of a writer that may still be running are kept this long (by their modification time and
/// the store's clock) before a sweep removes them; a dead writer's (its pid gone) go at the next sweep.
pub const TEMP_STALE_MS: u64 = 10 * 60 * 1000;

/// The directory store: notes, replay ledger and admin in one folder.
pub struct DirStore {
    root: PathBuf,
    base: FileUri,
    root_fd: OwnedFd,
    root_dev: u64,
    claims: OwnedFd,
    trash: OwnedFd,
    pruned: OwnedFd,
    openat2: AtomicBool,
    clock: Arc<dyn Clock>,
    limits: ReplayLimits,
    seam: Mutex<Option<SeamHook>>,
    recovered: RecoveryReport,
    /// The claims as last listed, by name (see [`Indexed`]): each principal's count without reading every file.
    index: Mutex<std::collections::BTreeMap<String, Indexed>>,
}

/// What [`DirStore::open`] found and finished from an earlier process that stopped mid-delete.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Trash entries whose claim was pending and whose file was the one shown: deleted, claim recorded.
    pub completed: usize,
    /// Trash entries whose final record was already written: unlinked.
    pub cleaned: usize,
    /// Trash entries that were another file than the one shown: put back, claim released.
    pub restored: usize,
    /// Trash entries left for an operator (no claim names them, or their place is taken again).
    pub left: usize,
    /// Temporary claim files a killed writer left in `.mcpsim/claims` (its pid gone, or older than
    /// [`TEMP_STALE_MS`]): removed. Never a claim: claims are named by their nonce's digest, not `tmp-`.
    pub swept: usize,
}

impl DirStore {
    /// Opens the folder `root` (creating `.mcpsim/` in it), its notes' URIs below `base` (by default the
    /// folder's own `file://` URI), and finishes any delete an earlier process left half done.
    pub fn open(root: &Path, base: Option<FileUri>, clock: Arc<dyn Clock>, limits: ReplayLimits) -> Result<DirStore, StoreError> {
        let root = std::fs::canonicalize(root).map_err(|e| {
            StoreError::Unavailable(format!("directory store: {} cannot be opened ({e}); create the folder first", root.display()))
        })?;
        let base = match base {
            Some(base) => base,
            None => FileUri::from_local_path(&root).ok_or_else(|| {
                StoreError::Unavailable(format!("directory store: {} has no file:// URI (a name that is not UTF-8?)", root.display()))
            })?,
        };
        let root_fd = rfs::open(&root, DIR_FLAGS.difference(OFlags::NOFOLLOW), Mode::empty())
            .map_err(|e| unavailable(&format!("open {}", root.display()), e))?;
        let root_dev = Identity::of(&rfs::fstat(&root_fd).map_err(|e| unavailable("fstat the root", e))?).dev;
        let state = ensure_dir(root_fd.as_fd(), STATE_DIR)?;
        let claims = ensure_dir(state.as_fd(), "claims")?;
        let trash = ensure_dir(state.as_fd(), "trash")?;
        let pruned = ensure_dir(state.as_fd(), "pruned")?;
        let mut store = DirStore {
            root,
            base,
            root_fd,
            root_dev,
            claims,
            trash,
            pruned,
            openat2: AtomicBool::new(cfg!(target_os = "linux")),
            clock,
            limits,
            seam: Mutex::new(None),
            recovered: RecoveryReport::default(),
            index: Mutex::new(std::collections::BTreeMap::new()),
        };
        store.recovered = store.recover()?;
        store.recovered.swept = store.sweep_temps(store.clock.now_ms())?;
        Ok(store)
    }

    /// The folder, as opened (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The URI the root's notes are below.
    pub fn base(&self) -> &FileUri {
        &self.base
    }

    /// What opening the store finished from an earlier process.
    pub fn recovered(&self) -> RecoveryReport {
        self.recovered
    }

    /// How paths are resolved now: `openat2` until the kernel refuses it, then the descriptor walk for good.
    pub fn resolver(&self) -> Resolver {
        if self.openat2.load(Ordering::Relaxed) {
            Resolver::Openat2
        } else {
            Resolver::Walk
        }
    }

    /// Uses the descriptor walk from now on, as on a kernel without `openat2` (for tests of the fallback).
    pub fn force_walk(&self) {
        self.openat2.store(false, Ordering::Relaxed);
    }

    /// Calls `hook` at each [`Seam`] of a delete: a test kills its process or swaps a file there.
    #[doc(hidden)]
    pub fn set_seam(&self, hook: impl Fn(Seam) + Send + Sync + 'static) {
        *self.seam.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(hook));
    }

    fn at_seam(&self, seam: Seam) {
        let hook = self.seam.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(hook) = hook {
            hook(seam);
        }
    }

    /// Whether the file at `relative` (a path below the root, `/`-separated) is a note, and if not, why not.
    /// Returns the note's revision.
    pub fn inspect(&self, relative: &str) -> Result<String, Refusal> {
        let segments: Vec<String> = relative.split('/').map(str::to_string).collect();
        for segment in &segments {
            check_segment(segment)?;
        }
        if relative.len() > PATH_BYTES_MAX || segments.len() > DEPTH_MAX + 1 {
            return Err(Refusal::PathTooLong);
        }
        let (name, folders) = segments.split_last().ok_or(Refusal::DotSegment)?;
        if !name.ends_with(SUFFIX) {
            return Err(Refusal::NotMarkdown);
        }
        let parent = self.open_dir(folders).map_err(|failure| match failure {
            Failure::Refused(refusal) => refusal,
            Failure::Io(_) => Refusal::Missing,
        })?;
        self.read_note(parent.as_fd(), folders, name).map(|note| note.revision)
    }

    // ----- resolution -----

    /// A descriptor of the folder at `segments` below the root, never through a symlink or across a mount.
    fn open_dir(&self, segments: &[String]) -> Result<OwnedFd, Failure> {
        for segment in segments {
            check_segment(segment)?;
        }
        if segments.is_empty() {
            return rfs::openat(&self.root_fd, ".", DIR_FLAGS, Mode::empty()).map_err(|e| io("reopen the root", e));
        }
        #[cfg(target_os = "linux")]
        if self.openat2.load(Ordering::Relaxed) {
            let how =
                rfs::ResolveFlags::BENEATH | rfs::ResolveFlags::NO_SYMLINKS | rfs::ResolveFlags::NO_MAGICLINKS | rfs::ResolveFlags::NO_XDEV;
            let path = segments.join("/");
            for _ in 0..4 {
                match rfs::openat2(&self.root_fd, path.as_str(), DIR_FLAGS, Mode::empty(), how) {
                    Ok(fd) => return Ok(fd),
                    // The kernel has no openat2, or a sandbox (seccomp) forbids it: walk from now on.
                    Err(Errno::NOSYS) | Err(Errno::PERM) | Err(Errno::INVAL) => {
                        self.openat2.store(false, Ordering::Relaxed);
                        break;
                    }
                    // A rename or mount raced with the lookup: try again.
                    Err(Errno::AGAIN) => continue,
                    Err(Errno::LOOP) => return Err(Refusal::Symlink.into()),
                    Err(Errno::XDEV) => return Err(Refusal::OtherDevice.into()),
                    Err(Errno::NOENT) => return Err(Refusal::Missing.into()),
                    Err(Errno::NOTDIR) => return Err(self.classify(segments)),
                    Err(errno) => return Err(io(&format!("open {path}"), errno)),
                }
            }
        }
        self.walk(segments)
    }

    /// The `O_NOFOLLOW` descriptor walk: one folder at a time, each checked to be on the root's device.
    fn walk(&self, segments: &[String]) -> Result<OwnedFd, Failure> {
        let mut current = rfs::openat(&self.root_fd, ".", DIR_FLAGS, Mode::empty()).map_err(|e| io("reopen the root", e))?;
        for segment in segments {
            let next = match rfs::openat(&current, segment.as_str(), DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Err(Refusal::Missing.into()),
                Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                    return Err(match rfs::statat(&current, segment.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => Refusal::Symlink,
                        Ok(_) => Refusal::NotRegular,
                        Err(_) => Refusal::Missing,
                    }
                    .into())
                }
                Err(errno) => return Err(io(&format!("open {segment}"), errno)),
            };
            let stat = rfs::fstat(&next).map_err(|e| io("fstat a folder", e))?;
            if Identity::of(&stat).dev != self.root_dev {
                return Err(Refusal::OtherDevice.into());
            }
            current = next;
        }
        Ok(current)
    }

    /// Why a folder path failed with ENOTDIR under openat2: a symlink or another kind of file on the way.
    fn classify(&self, segments: &[String]) -> Failure {
        match self.walk(segments) {
            Err(failure) => failure,
            Ok(_) => Refusal::NotRegular.into(),
        }
    }

    /// Reads the note `name` in the folder `dir` (at `folders` below the root), checking it is one.
    fn read_note(&self, dir: BorrowedFd<'_>, folders: &[String], name: &str) -> Result<Note, Refusal> {
        check_segment(name)?;
        if !name.ends_with(SUFFIX) || name.len() == SUFFIX.len() {
            return Err(Refusal::NotMarkdown);
        }
        let fd = match rfs::openat(dir, name, FILE_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return Err(Refusal::Symlink),
            Err(Errno::NOENT) => return Err(Refusal::Missing),
            Err(Errno::NXIO) | Err(Errno::ISDIR) => return Err(Refusal::NotRegular),
            Err(_) => return Err(Refusal::Missing),
        };
        let before = rfs::fstat(&fd).map_err(|_| Refusal::Missing)?;
        if FileType::from_raw_mode(before.st_mode) != FileType::RegularFile {
            return Err(Refusal::NotRegular);
        }
        if links(&before) != 1 {
            return Err(Refusal::HardLink);
        }
        let identity = Identity::of(&before);
        if identity.dev != self.root_dev {
            return Err(Refusal::OtherDevice);
        }
        if identity.size > NOTE_BYTES_MAX {
            return Err(Refusal::TooLarge);
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd.try_clone().map_err(|_| Refusal::Missing)?)
            .take(NOTE_BYTES_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(|_| Refusal::Missing)?;
        if bytes.len() as u64 > NOTE_BYTES_MAX {
            return Err(Refusal::TooLarge);
        }
        // Written while we read: not a stable copy to show.
        let after = rfs::fstat(&fd).map_err(|_| Refusal::Missing)?;
        if Identity::of(&after) != identity {
            return Err(Refusal::Swapped);
        }
        let body = String::from_utf8(bytes).map_err(|_| Refusal::NotUtf8)?;
        let mut segments = folders.to_vec();
        segments.push(name.to_string());
        let uri = self.base.join(&segments).ok_or(Refusal::PercentEncoded)?;
        Ok(Note { id: note_id(&segments), title: derive_title(&body, name), uri: uri.to_string(), body, revision: identity.revision() })
    }

    // ----- listing -----

    fn list(&self) -> Result<Vec<Note>, StoreError> {
        let mut notes = Vec::new();
        let root = rfs::openat(&self.root_fd, ".", DIR_FLAGS, Mode::empty()).map_err(|e| unavailable("reopen the root", e))?;
        self.list_in(root, &mut Vec::new(), &mut notes)?;
        notes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(notes)
    }

    /// The notes of the folder `workspace` names (below the base), and of its subfolders: round 1's search
    /// opens the workspace's files only, never the rest of the folder. (A note's title is its file's first
    /// heading, so the files inside the workspace are read; a folder index kept beside them could go stale
    /// behind an editor's back, and the file itself is the truth.) A workspace above the base is the whole
    /// folder; one beside it holds nothing; one that is missing, a symlink or a file holds nothing.
    fn list_workspace(&self, workspace: &FileUri) -> Result<Vec<Note>, StoreError> {
        let folders: Vec<String> = if workspace.contains(&self.base) {
            Vec::new()
        } else if self.base.contains(workspace) {
            workspace.segments().skip(self.base.segment_count()).map(str::to_string).collect()
        } else {
            return Ok(Vec::new());
        };
        let dir = match self.open_dir(&folders) {
            Ok(dir) => dir,
            Err(Failure::Refused(_)) => return Ok(Vec::new()),
            Err(failure) => return Err(failure_error(failure)),
        };
        let mut notes = Vec::new();
        let mut walked = folders;
        self.list_in(dir, &mut walked, &mut notes)?;
        notes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(notes)
    }

    fn list_in(&self, dir: OwnedFd, folders: &mut Vec<String>, notes: &mut Vec<Note>) -> Result<(), StoreError> {
        for name in names_in(dir.as_fd())? {
            if notes.len() >= NOTES_MAX {
                break;
            }
            let Ok(name) = name.into_string() else { continue };
            if check_segment(&name).is_err() {
                continue;
            }
            let Ok(stat) = rfs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else { continue };
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::Directory if folders.len() < DEPTH_MAX && Identity::of(&stat).dev == self.root_dev => {
                    let Ok(sub) = rfs::openat(&dir, name.as_str(), DIR_FLAGS, Mode::empty()) else { continue };
                    // The folder we stat'ed is the one we opened (not swapped for another in between).
                    match rfs::fstat(&sub) {
                        Ok(opened)
                            if Identity::of(&opened).ino == Identity::of(&stat).ino && Identity::of(&opened).dev == self.root_dev => {}
                        _ => continue,
                    }
                    folders.push(name);
                    self.list_in(sub, folders, notes)?;
                    folders.pop();
                }
                FileType::RegularFile => {
                    if let Ok(note) = self.read_note(dir.as_fd(), folders, &name) {
                        if note.id.len() + SUFFIX.len() <= PATH_BYTES_MAX {
                            notes.push(note);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    // ----- deleting -----

    /// Checks the note `id` is the copy `revision` inside `workspace`, and moves it into the trash as
    /// `trash_name`. On `Deleted` the caller unlinks the trash entry (after recording, for a claim).
    fn take(&self, id: &str, revision: &str, workspace: &FileUri, trash_name: &str) -> Result<GuardedDelete, StoreError> {
        let segments = match note_path(id) {
            Ok(segments) => segments,
            // No file can have this id: there is no such note.
            Err(_) => return Ok(GuardedDelete::Gone),
        };
        let Some(uri) = self.base.join(&segments) else { return Ok(GuardedDelete::Gone) };
        if !workspace.contains(&uri) {
            return Ok(GuardedDelete::OutsideWorkspace);
        }
        let (name, folders) = segments.split_last().expect("a note path has a file name");
        let parent = match self.open_dir(folders) {
            Ok(parent) => parent,
            Err(Failure::Refused(refusal)) => return Ok(refused(id, refusal)),
            Err(failure) => return Err(failure_error(failure)),
        };
        let note = match self.read_note(parent.as_fd(), folders, name) {
            Ok(note) => note,
            Err(refusal) => return Ok(refused(id, refusal)),
        };
        if note.revision != revision {
            return Ok(refused(id, Refusal::Swapped));
        }
        self.at_seam(Seam::Checked);
        match rfs::renameat_with(&parent, name.as_str(), &self.trash, trash_name, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            // Taken by another delete (or removed) since the check.
            Err(Errno::NOENT) => return Ok(GuardedDelete::Gone),
            Err(errno) => return Err(unavailable("move the note into the trash", errno)),
        }
        self.at_seam(Seam::Moved);
        // What was moved must be what was checked: a file renamed over the note in between goes back.
        if !self.trash_entry_is(trash_name, revision) {
            self.put_back(trash_name, &parent, name);
            return Ok(refused(id, Refusal::Swapped));
        }
        Ok(GuardedDelete::Deleted(note))
    }

    fn trash_entry_is(&self, trash_name: &str, revision: &str) -> bool {
        matches!(rfs::statat(&self.trash, trash_name, AtFlags::SYMLINK_NOFOLLOW),
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile && links(&stat) == 1 && Identity::of(&stat).revision() == revision)
    }

    fn put_back(&self, trash_name: &str, parent: &OwnedFd, name: &str) -> bool {
        match rfs::renameat_with(&self.trash, trash_name, parent, name, RenameFlags::NOREPLACE) {
            Ok(()) => true,
            Err(errno) => {
                tracing::warn!(
                    "directory store: a file swapped in during a delete could not be put back as {name} ({errno}); it is kept as {}/{STATE_DIR}/trash/{trash_name}",
                    self.root.display()
                );
                false
            }
        }
    }

    fn unlink_trash(&self, trash_name: &str) {
        if let Err(errno) = rfs::unlinkat(&self.trash, trash_name, AtFlags::empty()) {
            if errno != Errno::NOENT {
                tracing::warn!("directory store: cannot remove {STATE_DIR}/trash/{trash_name}: {errno}");
            }
        }
    }

    fn temp_name(&self) -> String {
        // Unique across processes (the pid) and across this process's handles on one folder (one counter).
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        format!("tmp-{}-{}", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed))
    }

    // ----- the replay ledger -----

    fn read_claim(&self, name: &str) -> Result<Option<ClaimFile>, StoreError> {
        let fd = match rfs::openat(&self.claims, name, FILE_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(unavailable("read a claim", errno)),
        };
        let mut text = String::new();
        std::fs::File::from(fd)
            .take(64 * 1024)
            .read_to_string(&mut text)
            .map_err(|e| StoreError::Unavailable(format!("directory store: read a claim: {e}")))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StoreError::Unavailable(format!("directory store: claim {name} is unreadable: {e}")))
    }

    /// Writes `content` to a fresh temporary file in the claims folder and returns its name.
    fn write_temp(&self, content: &ClaimFile) -> Result<String, StoreError> {
        let name = self.temp_name();
        let fd = rfs::openat(
            &self.claims,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| unavailable("create a claim", e))?;
        let bytes = serde_json::to_vec(content).expect("a claim serializes");
        let mut file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut file, &bytes)
            .map_err(|e| StoreError::Unavailable(format!("directory store: write a claim: {e}")))?;
        file.sync_all().map_err(|e| StoreError::Unavailable(format!("directory store: sync a claim: {e}")))?;
        Ok(name)
    }

    fn claim_names(&self) -> Result<Vec<String>, StoreError> {
        Ok(names_in(self.claims.as_fd())?
            .into_iter()
            .filter_map(|name| name.into_string().ok())
            .filter(|name| !name.starts_with("tmp-"))
            .collect())
    }

    fn pruned_through(&self) -> Result<u64, StoreError> {
        Ok(names_in(self.pruned.as_fd())?.into_iter().filter_map(|name| name.to_str().ok()?.parse::<u64>().ok()).max().unwrap_or(0))
    }

    /// Drops every claim whose retention has ended (never an unexpired one) and remembers the latest expiry
    /// dropped, as a file named by it, so a lagging clock cannot get a pruned nonce accepted again. Sweeps
    /// the temporary files killed writers left, too.
    fn prune(&self, now_ms: u64) -> Result<(), StoreError> {
        let mut through = 0;
        for (name, claim) in self.indexed_claims()? {
            if claim.expires_at_ms.saturating_add(self.limits.retention_grace_ms) <= now_ms {
                through = through.max(claim.expires_at_ms);
                // The horizon first: a nonce is never unclaimed without its expiry being refused from then on.
                self.raise_pruned_through(through)?;
                let _ = rfs::unlinkat(&self.claims, name.as_str(), AtFlags::empty());
                let _ = rfs::unlinkat(&self.trash, name.as_str(), AtFlags::empty());
            }
        }
        self.sweep_temps(now_ms)?;
        Ok(())
    }

    /// Every claim now in the folder with whose it is and its expiry, by name: listed (names and inodes), and
    /// only the files not seen before (or replaced since) read. A claim removed meanwhile is left out; one
    /// that cannot be read is an error, as everywhere in the ledger.
    fn indexed_claims(&self) -> Result<Vec<(String, Indexed)>, StoreError> {
        let listed = entries_in(self.claims.as_fd())?;
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        let mut fresh = std::collections::BTreeMap::new();
        for (name, ino) in listed {
            let Ok(name) = name.into_string() else { continue };
            if name.starts_with("tmp-") {
                continue;
            }
            if let Some(known) = index.remove(&name).filter(|known| known.ino == ino) {
                fresh.insert(name, known);
                continue;
            }
            let Some(claim) = self.read_claim(&name)? else { continue };
            let principal = claim.principal.unwrap_or_default();
            fresh.insert(name, Indexed { ino, principal, expires_at_ms: claim.expires_at_ms });
        }
        *index = fresh;
        Ok(index.iter().map(|(name, indexed)| (name.clone(), indexed.clone())).collect())
    }

    /// Whether recording one more claim of `principal` would pass its share or the whole ledger's bound.
    fn is_full_for(&self, principal: &str) -> Result<bool, StoreError> {
        let claims = self.indexed_claims()?;
        let held = claims.iter().filter(|(_, claim)| claim.principal == principal).count();
        Ok(held >= self.limits.principal_capacity || claims.len() >= self.limits.capacity)
    }

    /// Removes the temporary files of claims a killed writer left (`tmp-PID-N`): those whose writer's pid is
    /// gone, and any older than [`TEMP_STALE_MS`] by the store's clock (a pid reused since, or a writer in
    /// another pid namespace). A live writer's temporary file lives for one write, sync and link, so neither
    /// rule meets it in practice; if one did, its link would fail and the claim be refused as unavailable
    /// (nothing consumed), never a claim lost. Claims themselves are never `tmp-` names. Returns how many.
    fn sweep_temps(&self, now_ms: u64) -> Result<usize, StoreError> {
        let mut swept = 0;
        for (name, _) in entries_in(self.claims.as_fd())? {
            let Ok(name) = name.into_string() else { continue };
            let Some(rest) = name.strip_prefix("tmp-") else { continue };
            let writer = rest.split('-').next().and_then(|pid| pid.parse::<i32>().ok()).filter(|pid| *pid > 0);
            let stale = match rfs::statat(&self.claims, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => {
                    #[allow(clippy::unnecessary_cast)] // the field type differs between architectures
                    let modified_ms = u64::try_from(stat.st_mtime as i64).unwrap_or(0).saturating_mul(1000);
                    writer.is_some_and(|pid| !process_alive(pid)) || modified_ms.saturating_add(TEMP_STALE_MS) <= now_ms
                }
                Err(_) => false,
            };
            if stale && rfs::unlinkat(&self.claims, name.as_str(), AtFlags::empty()).is_ok() {
                swept += 1;
            }
        }
        if swept > 0 {
            tracing::info!("directory store: removed {swept} temporary claim file(s) a killed writer left in {STATE_DIR}/claims");
        }
        Ok(swept)
    }

    fn raise_pruned_through(&self, through: u64) -> Result<(), StoreError> {
        let name = format!("{through:020}");
        match rfs::openat(
            &self.pruned,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(_) => {}
            Err(errno) => return Err(unavailable("record the prune horizon", errno)),
        }
        // Smaller horizons are implied by this one.
        for other in names_in(self.pruned.as_fd())?.into_iter().filter_map(|n| n.into_string().ok()) {
            if other.parse::<u64>().is_ok_and(|value| value < through) {
                let _ = rfs::unlinkat(&self.pruned, other.as_str(), AtFlags::empty());
            }
        }
        Ok(())
    }

    /// Records `claim` (with `pending`, for a delete in flight) unless it is held, too late, or the ledger is
    /// full. Returns the claim file's name.
    fn reserve(&self, claim: &NonceClaim, pending: Option<Pending>) -> Result<Result<String, ClaimOutcome>, StoreError> {
        let name = digest_hex(&Value::String(claim.nonce.clone()));
        if let Some(held) = self.read_claim(&name)? {
            return Ok(Err(ClaimOutcome::AlreadyClaimed { record: held.record() }));
        }
        let now_ms = self.clock.now_ms();
        if past_retention(claim.expires_at_ms, now_ms, self.limits.retention_grace_ms, self.pruned_through()?) {
            return Ok(Err(ClaimOutcome::Expired));
        }
        // The principal's share, then the whole: pruned only when needed, never evicting (as the memory store).
        if self.is_full_for(&claim.principal)? {
            self.prune(now_ms)?;
            if self.is_full_for(&claim.principal)? {
                return Ok(Err(ClaimOutcome::Full));
            }
        }
        let content = ClaimFile {
            expires_at_ms: claim.expires_at_ms,
            principal: Some(claim.principal.clone()),
            record: claim.record.to_json(),
            pending,
        };
        let temp = self.write_temp(&content)?;
        let linked = rfs::linkat(&self.claims, temp.as_str(), &self.claims, name.as_str(), AtFlags::empty());
        let _ = rfs::unlinkat(&self.claims, temp.as_str(), AtFlags::empty());
        match linked {
            Ok(()) => Ok(Ok(name)),
            // Another process claimed it first.
            Err(Errno::EXIST) => match self.read_claim(&name)? {
                Some(held) => Ok(Err(ClaimOutcome::AlreadyClaimed { record: held.record() })),
                None => Ok(Err(ClaimOutcome::AlreadyClaimed { record: ClaimRecord::InProgress })),
            },
            Err(errno) => Err(unavailable("record a claim", errno)),
        }
    }

    /// Replaces a pending claim by its final record (whose it is stays).
    fn settle(&self, name: &str, expires_at_ms: u64, principal: Option<String>, record: &ClaimRecord) -> Result<(), StoreError> {
        let temp = self.write_temp(&ClaimFile { expires_at_ms, principal, record: record.to_json(), pending: None })?;
        rfs::renameat(&self.claims, temp.as_str(), &self.claims, name).map_err(|e| unavailable("record a deletion", e))
    }

    fn release(&self, name: &str) {
        if let Err(errno) = rfs::unlinkat(&self.claims, name, AtFlags::empty()) {
            tracing::warn!("directory store: cannot release claim {name}: {errno}");
        }
    }

    /// Finishes what an earlier process left in the trash (see the module docs).
    fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let mut report = RecoveryReport::default();
        for entry in names_in(self.trash.as_fd())?.into_iter().filter_map(|name| name.into_string().ok()) {
            let Some(claim) = self.read_claim(&entry)? else {
                report.left += 1;
                continue;
            };
            match &claim.pending {
                None => {
                    self.unlink_trash(&entry);
                    report.cleaned += 1;
                }
                Some(pending) if self.trash_entry_is(&entry, &pending.revision) => {
                    let record = ClaimRecord::Deleted { note_id: pending.note_id.clone() };
                    self.settle(&entry, claim.expires_at_ms, claim.principal.clone(), &record)?;
                    self.unlink_trash(&entry);
                    report.completed += 1;
                }
                Some(pending) => {
                    let put_back = note_path(&pending.note_id).ok().and_then(|segments| {
                        let (name, folders) = segments.split_last()?;
                        let parent = self.open_dir(folders).ok()?;
                        self.put_back(&entry, &parent, name).then_some(())
                    });
                    if put_back.is_some() {
                        self.release(&entry);
                        report.restored += 1;
                    } else {
                        report.left += 1;
                    }
                }
            }
        }
        Ok(report)
    }

    // ----- admin -----

    /// The relative path of a URI below the base, checked against the naming rules.
    fn path_of_uri(&self, uri: &str) -> Result<Vec<String>, StoreError> {
        let refuse = |why: String| StoreError::Unavailable(format!("directory store: {uri}: {why}"));
        let parsed = FileUri::parse(uri).map_err(|e| refuse(e.to_string()))?;
        if !self.base.contains(&parsed) || parsed == self.base {
            return Err(refuse(format!("not below {}; a directory store holds only files inside its folder", self.base)));
        }
        let segments: Vec<String> = parsed.segments().skip(self.base.segment_count()).map(str::to_string).collect();
        let id = note_id_checked(&segments).map_err(|refusal| refuse(format!("not a note path ({refusal})")))?;
        note_path(&id).map_err(|refusal| refuse(format!("not a note path ({refusal})")))
    }

    fn write_note(&self, segments: &[String], body: &str) -> Result<(), StoreError> {
        let (name, folders) = segments.split_last().expect("a note path has a file name");
        let parent = self.make_dirs(folders)?;
        let temp = format!(".{}", self.temp_name());
        let fd = rfs::openat(
            &parent,
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| unavailable("write a note", e))?;
        let mut file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut file, body.as_bytes())
            .map_err(|e| StoreError::Unavailable(format!("directory store: write a note: {e}")))?;
        drop(file);
        rfs::renameat(&parent, temp.as_str(), &parent, name.as_str()).map_err(|e| unavailable("write a note", e))
    }

    fn make_dirs(&self, folders: &[String]) -> Result<OwnedFd, StoreError> {
        for depth in 1..=folders.len() {
            match self.open_dir(&folders[..depth]) {
                Ok(_) => {}
                Err(Failure::Refused(Refusal::Missing)) => {
                    let parent = self.open_dir(&folders[..depth - 1]).map_err(failure_error)?;
                    match rfs::mkdirat(&parent, folders[depth - 1].as_str(), Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(unavailable("create a folder", errno)),
                    }
                }
                Err(failure) => return Err(failure_error(failure)),
            }
        }
        self.open_dir(folders).map_err(failure_error)
    }

    fn checked_upsert(&self, note: &Note) -> Result<bool, StoreError> {
        let segments = self.path_of_uri(&note.uri)?;
        let (id, title) = (note_id(&segments), derive_title(&note.body, segments.last().expect("a file name")));
        if note.id != id || note.title != title {
            return Err(StoreError::Unavailable(format!(
                "directory store: a note's id and title come from its file: {} would be id {id:?}, title {title:?} (got {:?}, {:?})",
                note.uri, note.id, note.title
            )));
        }
        let current = self.list()?.into_iter().find(|n| n.id == id);
        if current.as_ref().is_some_and(|current| current.body == note.body && current.uri == note.uri) {
            return Ok(false);
        }
        self.write_note(&segments, &note.body)?;
        Ok(true)
    }
}

fn note_id_checked(segments: &[String]) -> Result<String, Refusal> {
    let last = segments.last().ok_or(Refusal::DotSegment)?;
    if !last.ends_with(SUFFIX) || last.len() == SUFFIX.len() {
        return Err(Refusal::NotMarkdown);
    }
    Ok(note_id(segments))
}

fn refused(id: &str, refusal: Refusal) -> GuardedDelete {
    tracing::info!("directory store: delete of {id} refused: {refusal}");
    refusal.delete_outcome()
}

fn ensure_dir(parent: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, StoreError> {
    match rfs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(errno) => return Err(unavailable(&format!("create {name}"), errno)),
    }
    rfs::openat(parent, name, DIR_FLAGS, Mode::empty()).map_err(|errno| match errno {
        Errno::LOOP | Errno::NOTDIR => StoreError::Unavailable(format!(
            "directory store: {name} in the folder is not a plain folder (a symbolic link?); move it away and start again"
        )),
        errno => unavailable(&format!("open {name}"), errno),
    })
}

/// Whether a process with this pid exists (signal 0 checks without sending). Only "no such process" counts
/// as gone: a process we may not signal (another user's, or outside a Landlock signal scope) is alive.
fn process_alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 sends nothing and touches no memory of ours.
    let answer = unsafe { libc::kill(pid, 0) };
    answer == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The entries of a folder (without `.` and `..`) with their inode numbers, sorted by name.
fn entries_in(dir: BorrowedFd<'_>) -> Result<Vec<(std::ffi::CString, u64)>, StoreError> {
    let mut listing = rfs::Dir::read_from(dir).map_err(|e| unavailable("read a folder", e))?;
    let mut entries = Vec::new();
    while let Some(entry) = listing.read() {
        let entry = entry.map_err(|e| unavailable("read a folder", e))?;
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            entries.push((name.to_owned(), entry.ino()));
        }
    }
    entries.sort();
    Ok(entries)
}

/// The entry names of a folder (without `.` and `..`), sorted.
fn names_in(dir: BorrowedFd<'_>) -> Result<Vec<std::ffi::CString>, StoreError> {
    let mut listing = rfs::Dir::read_from(dir).map_err(|e| unavailable("read a folder", e))?;
    let mut names = Vec::new();
    while let Some(entry) = listing.read() {
        let entry = entry.map_err(|e| unavailable("read a folder", e))?;
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

#[async_trait]
impl NoteStore for DirStore {
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
        self.list()
    }

    async fn find_candidates(&self, workspace: &FileUri, query: &str) -> Result<Vec<Note>, StoreError> {
        let notes = self.list_workspace(workspace)?;
        let query = fold_title(query);
        Ok(notes.into_iter().filter(|note| is_candidate(note, workspace, &query)).collect())
    }

    async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError> {
        // Not joined to a claim: a process killed after the move leaves the file in the trash, for an operator.
        let trash_name = format!("del-{}", self.temp_name());
        let taken = self.take(id, revision, workspace, &trash_name)?;
        if matches!(taken, GuardedDelete::Deleted(_)) {
            self.unlink_trash(&trash_name);
        }
        Ok(taken)
    }
}

#[async_trait]
impl ReplayStore for DirStore {
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError> {
        Ok(match self.reserve(&claim, None)? {
            Ok(_) => ClaimOutcome::Claimed,
            Err(refused) => refused,
        })
    }

    async fn claim_and_delete(
        &self,
        claim: NonceClaim,
        note_id: &str,
        revision: &str,
        workspace: &FileUri,
    ) -> Result<ClaimAndDelete, StoreError> {
        let pending = Pending { note_id: note_id.to_string(), revision: revision.to_string() };
        let name = match self.reserve(&claim, Some(pending))? {
            Ok(name) => name,
            Err(ClaimOutcome::AlreadyClaimed { record }) => return Ok(ClaimAndDelete::AlreadyClaimed { record }),
            Err(ClaimOutcome::Full) => return Ok(ClaimAndDelete::Full),
            Err(ClaimOutcome::Expired) => return Ok(ClaimAndDelete::Expired),
            Err(ClaimOutcome::Claimed) => unreachable!("reserve refuses only with AlreadyClaimed, Expired or Full"),
        };
        self.at_seam(Seam::Claimed);
        let taken = match self.take(note_id, revision, workspace, &name) {
            Ok(taken) => taken,
            Err(error) => {
                // Nothing was moved (take fails only before the move): release.
                self.release(&name);
                return Err(error);
            }
        };
        match taken {
            GuardedDelete::Deleted(note) => {
                self.settle(&name, claim.expires_at_ms, Some(claim.principal.clone()), &claim.record)?;
                self.at_seam(Seam::Recorded);
                self.unlink_trash(&name);
                Ok(ClaimAndDelete::Deleted(note))
            }
            GuardedDelete::Gone => {
                self.release(&name);
                Ok(ClaimAndDelete::NoteGone)
            }
            GuardedDelete::OutsideWorkspace => {
                self.release(&name);
                Ok(ClaimAndDelete::NoteOutsideWorkspace)
            }
        }
    }
}

#[async_trait]
impl StoreAdmin for DirStore {
    /// Writes each note's file (its id and title must be the ones its path and body give). Listing order is
    /// the paths' order, so nothing is ever reordered.
    async fn seed(&self, notes: &[Note]) -> Result<SeedReport, StoreError> {
        let before: Vec<String> = self.list()?.into_iter().map(|n| n.id).collect();
        let mut report = SeedReport::default();
        for note in notes {
            let existed = before.contains(&note.id);
            match (self.checked_upsert(note)?, existed) {
                (false, _) => report.unchanged += 1,
                (true, true) => report.updated += 1,
                (true, false) => report.inserted += 1,
            }
        }
        report.others_kept = before.iter().filter(|id| !notes.iter().any(|n| &n.id == *id)).count();
        Ok(report)
    }

    async fn list(&self) -> Result<Vec<Note>, StoreError> {
        DirStore::list(self)
    }

    async fn upsert(&self, note: Note) -> Result<(), StoreError> {
        self.checked_upsert(&note).map(|_| ())
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let Some(note) = self.list()?.into_iter().find(|n| n.id == id) else { return Ok(false) };
        let base = self.base.clone();
        Ok(matches!(self.delete_if_inside(id, &note.revision, &base).await?, GuardedDelete::Deleted(_)))
    }

    async fn move_to(&self, id: &str, uri: &str) -> Result<bool, StoreError> {
        let Ok(from) = note_path(id) else { return Ok(false) };
        if !self.list()?.iter().any(|n| n.id == id) {
            return Ok(false);
        }
        let to = self.path_of_uri(uri)?;
        let (from_name, from_folders) = from.split_last().expect("a file name");
        let (to_name, to_folders) = to.split_last().expect("a file name");
        let from_dir = self.open_dir(from_folders).map_err(failure_error)?;
        let to_dir = self.make_dirs(to_folders)?;
        rfs::renameat_with(&from_dir, from_name.as_str(), &to_dir, to_name.as_str(), RenameFlags::NOREPLACE)
            .map_err(|e| unavailable("move a note", e))?;
        Ok(true)
    }

    /// Rewrites the note's first heading (or adds one).
    async fn rename(&self, id: &str, title: &str) -> Result<bool, StoreError> {
        let Some(note) = self.list()?.into_iter().find(|n| n.id == id) else { return Ok(false) };
        let mut replaced = false;
        let mut body: Vec<String> = Vec::new();
        for line in note.body.lines() {
            let hashes = line.bytes().take_while(|b| *b == b'#').count();
            if !replaced && (1..=6).contains(&hashes) && line[hashes..].starts_with([' ', '\t']) {
                body.push(format!("{} {title}", &line[..hashes]));
                replaced = true;
            } else {
                body.push(line.to_string());
            }
        }
        let mut text = body.join("\n");
        if note.body.ends_with('\n') {
            text.push('\n');
        }
        if !replaced {
            text = format!("# {title}\n\n{}", note.body);
        }
        self.write_note(&note_path(id).map_err(|r| StoreError::Unavailable(format!("directory store: {r}")))?, &text)?;
        Ok(true)
    }

    /// Writes the same content to a new file and renames it over the note: another inode, another revision.
    async fn swap(&self, id: &str) -> Result<bool, StoreError> {
        let Some(note) = self.list()?.into_iter().find(|n| n.id == id) else { return Ok(false) };
        self.write_note(&note_path(id).map_err(|r| StoreError::Unavailable(format!("directory store: {r}")))?, &note.body)?;
        Ok(true)
    }

    fn keeps_revisions(&self) -> bool {
        true
    }

    async fn nonce_count(&self) -> Result<u64, StoreError> {
        Ok(self.claim_names()?.len() as u64)
    }

    async fn nonce_record(&self, nonce: &str) -> Result<Option<ClaimRecord>, StoreError> {
        let name = digest_hex(&Value::String(nonce.to_string()));
        Ok(self.read_claim(&name)?.filter(|claim| claim.pending.is_none()).map(|claim| claim.record()))
    }

    fn describe(&self) -> String {
        format!("dir:{} (notes below {})", self.root.display(), self.base)
    }

    async fn commit_setting(&self) -> Result<String, StoreError> {
        Ok("files: each claim is written, synced and linked into place before its delete".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        assert_eq!(check_segment("plan.md"), Ok(()));
        assert_eq!(check_segment("100% done.md"), Ok(()));
        assert_eq!(check_segment(".."), Err(Refusal::DotSegment));
        assert_eq!(check_segment(""), Err(Refusal::DotSegment));
        assert_eq!(check_segment("%2e%2e"), Err(Refusal::PercentEncoded));
        assert_eq!(check_segment("a\0b.md"), Err(Refusal::ForbiddenCharacter));
        assert_eq!(check_segment("a/b"), Err(Refusal::ForbiddenCharacter));
        assert_eq!(check_segment(".mcpsim"), Err(Refusal::Hidden));
        assert_eq!(check_segment(&"x".repeat(256)), Err(Refusal::NameTooLong));
        assert_eq!(note_path("plans/q3"), Ok(vec!["plans".to_string(), "q3.md".to_string()]));
        assert_eq!(note_path("../etc/passwd"), Err(Refusal::DotSegment));
        assert_eq!(note_path(&"a/".repeat(40)), Err(Refusal::PathTooLong));
    }

    #[test]
    fn titles_come_from_the_first_heading_or_the_file_name() {
        assert_eq!(derive_title("intro\n## Q3 plan ##\n# later", "x.md"), "Q3 plan");
        assert_eq!(derive_title("#hashtag\nno heading", "groceries.md"), "groceries");
        assert_eq!(derive_title("#   \n", "empty.md"), "empty");
    }
}
