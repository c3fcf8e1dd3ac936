//! The directory store (`dir:FOLDER`) on a real temporary folder: the shared contract, then the attacks a
//! folder of real files invites, each from the attacker's side, under both resolvers (`openat2` and the
//! `O_NOFOLLOW` descriptor walk). Every attack keeps a tree *outside* the notes folder and checks it is
//! byte-for-byte unchanged afterwards (a digest of every path, kind, link target and content).
//! Then processes: children racing on one folder, and children killed at each step of a delete.

use crate::contract::{self, claim, contract_tests, deleted_record, persistent_contract_tests, StoreKind, FAR_FUTURE_MS};
use crate::race::{processes_race_with, Losers, SPEC_VARIABLE};
use crate::support::{unique_name, TempDir, TestClock};
use async_trait::async_trait;
use mcpsim::testing::dir::{DirStore, Refusal, Resolver, Seam, STATE_DIR};
use mcpsim::testing::FileUri;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::{open, StoreAdmin, StoreSpec};
use mcpsim::testing::{ClaimAndDelete, ClaimRecord, GuardedDelete, Note, NoteStore, ReplayStore};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

struct DirKind {
    directory: TempDir,
}

impl DirKind {
    fn new() -> DirKind {
        DirKind { directory: TempDir::new() }
    }
}

#[async_trait]
impl StoreKind for DirKind {
    async fn fresh(&self) -> StoreSpec {
        let folder = self.directory.path().join(unique_name("notes"));
        std::fs::create_dir_all(&folder).unwrap();
        // The contract's notes live below file:///w.
        format!("dir:{}=file:///w", folder.display()).parse().unwrap()
    }
}

contract_tests!(files, DirKind::new());
persistent_contract_tests!(DirKind::new());

/// A notes folder `notes/` with a workspace `notes/w/`, beside an outside tree `outside/` holding a secret.
struct Scene {
    _directory: TempDir,
    notes: PathBuf,
    outside: PathBuf,
    store: DirStore,
    before: String,
}

impl Scene {
    fn new(resolver: Resolver) -> Scene {
        let directory = TempDir::new();
        let notes = directory.path().join("notes");
        let outside = directory.path().join("outside");
        std::fs::create_dir_all(notes.join("w/sub")).unwrap();
        std::fs::create_dir_all(outside.join("deep")).unwrap();
        std::fs::write(outside.join("secret.md"), "# Secret\n\nnot yours\n").unwrap();
        std::fs::write(outside.join("deep/plans.md"), "# Plans\n").unwrap();
        std::fs::write(notes.join("w/plan.md"), "# Q3 plan\n\nship it\n").unwrap();
        std::fs::write(notes.join("w/sub/todo.md"), "buy milk\n").unwrap();
        let store = DirStore::open(&notes, None, Arc::new(TestClock::at(1_000)), ReplayLimits::default()).unwrap();
        if resolver == Resolver::Walk {
            store.force_walk();
        }
        let before = tree_digest(&outside);
        Scene { _directory: directory, notes, outside, store, before }
    }

    fn workspace(&self) -> FileUri {
        self.store.base().join(&["w".to_string()]).unwrap()
    }

    async fn ids(&self) -> Vec<String> {
        self.store.list_notes().await.unwrap().into_iter().map(|note| note.id).collect()
    }

    /// The revision the outside secret would have, as an attacker who can stat it would forge.
    fn outside_revision(&self) -> String {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(self.outside.join("secret.md")).unwrap();
        format!("{:x}:{:x}:{}:{}.{:09}", meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
    }

    fn assert_outside_untouched(&self, attack: &str) {
        assert_eq!(tree_digest(&self.outside), self.before, "{attack}: the outside tree changed");
    }

    fn trash_is_empty(&self) -> bool {
        std::fs::read_dir(self.notes.join(STATE_DIR).join("trash")).unwrap().next().is_none()
    }
}

/// A digest of a tree: every path, its kind, a symlink's target and a file's bytes, in path order.
fn tree_digest(root: &Path) -> String {
    fn walk(dir: &Path, root: &Path, hasher: &mut Sha256) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            hasher.update(path.strip_prefix(root).unwrap().as_os_str().as_encoded_bytes());
            if meta.file_type().is_symlink() {
                hasher.update(b"link:");
                hasher.update(std::fs::read_link(&path).unwrap().as_os_str().as_encoded_bytes());
            } else if meta.is_dir() {
                hasher.update(b"dir");
                walk(&path, root, hasher);
            } else if meta.file_type().is_fifo() {
                hasher.update(b"fifo");
            } else {
                use std::os::unix::fs::MetadataExt;
                hasher.update(format!("file:{}:", meta.nlink()).as_bytes());
                hasher.update(std::fs::read(&path).unwrap());
            }
        }
    }
    let mut hasher = Sha256::new();
    walk(root, root, &mut hasher);
    format!("{:x}", hasher.finalize())
}

const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::Walk];

#[tokio::test]
async fn notes_are_the_markdown_files_with_ids_from_paths_and_titles_from_headings() {
    let scene = Scene::new(Resolver::Openat2);
    let notes = scene.store.list_notes().await.unwrap();
    let summary: Vec<(&str, &str)> = notes.iter().map(|n| (n.id.as_str(), n.title.as_str())).collect();
    assert_eq!(summary, [("w/plan", "Q3 plan"), ("w/sub/todo", "todo")]);
    let base = scene.store.base().to_string();
    assert_eq!(notes[0].uri, format!("{base}/w/plan.md"));
    assert_eq!(notes[0].body, "# Q3 plan\n\nship it\n");
    assert!(!notes[0].revision.is_empty(), "a file's identity is its revision");
    assert_eq!(scene.store.list_notes().await.unwrap(), notes, "the same files list the same, ids included");
    assert!(scene.store.inspect("w/sub/todo.md").is_ok());
    assert_eq!(scene.store.resolver(), Resolver::Openat2, "this kernel has openat2 (Linux 5.6+) and it resolved w/sub");
}

/// Round 1's search opens the asked workspace's folder only: its files and subfolders, never a sibling
/// folder, never through a symlinked folder (planted as the workspace itself or inside it).
#[tokio::test]
async fn the_search_walks_the_workspace_folder_only() {
    for resolver in RESOLVERS {
        let scene = Scene::new(resolver);
        let base = scene.store.base().clone();
        let at = |path: &str| base.join(&path.split('/').map(String::from).collect::<Vec<_>>()).unwrap();
        let find = |workspace: FileUri, query: &'static str| {
            let store = &scene.store;
            async move { store.find_candidates(&workspace, query).await.unwrap().into_iter().map(|n| n.id).collect::<Vec<_>>() }
        };
        assert_eq!(find(scene.workspace(), "PLAN").await, ["w/plan"], "{resolver:?}");
        assert_eq!(find(at("w/sub"), "plan").await, Vec::<String>::new(), "{resolver:?}");
        assert_eq!(find(at("w/sub"), "todo").await, ["w/sub/todo"], "{resolver:?}");
        assert_eq!(find(FileUri::parse("file:///").unwrap(), "plan").await, ["w/plan"], "a workspace above the base is the folder");
        assert_eq!(find(FileUri::parse("file:///elsewhere").unwrap(), "plan").await, Vec::<String>::new());
        symlink(&scene.outside, scene.notes.join("w/linked")).unwrap();
        assert_eq!(find(at("w/linked"), "plan").await, Vec::<String>::new(), "{resolver:?}: a symlinked workspace holds nothing");
        assert_eq!(find(scene.workspace(), "plan").await, ["w/plan"], "{resolver:?}: nothing through the link");
        assert_eq!(find(at("w/missing"), "plan").await, Vec::<String>::new());
        scene.assert_outside_untouched("search");
    }
}

#[tokio::test]
async fn a_symlink_to_a_file_outside_is_not_a_note_and_cannot_be_deleted() {
    for resolver in RESOLVERS {
        let scene = Scene::new(resolver);
        symlink(scene.outside.join("secret.md"), scene.notes.join("w/evil.md")).unwrap();
        assert!(!scene.ids().await.contains(&"w/evil".to_string()), "{resolver:?}: a symlink is never listed");
        assert_eq!(scene.store.inspect("w/evil.md"), Err(Refusal::Symlink));
        let outcome = scene.store.delete_if_inside("w/evil", &scene.outside_revision(), &scene.workspace()).await.unwrap();
        assert_eq!(outcome, GuardedDelete::OutsideWorkspace, "{resolver:?}");
        assert!(scene.notes.join("w/evil.md").symlink_metadata().is_ok(), "the link itself is left too");
        scene.assert_outside_untouched("symlinked file");
    }
}

#[tokio::test]
async fn a_symlinked_folder_is_not_walked_into() {
    for resolver in RESOLVERS {
        let scene = Scene::new(resolver);
        symlink(&scene.outside, scene.notes.join("w/linked")).unwrap();
        assert_eq!(scene.ids().await, ["w/plan", "w/sub/todo"], "{resolver:?}: nothing through the link");
        assert_eq!(scene.store.inspect("w/linked/secret.md"), Err(Refusal::Symlink), "{resolver:?}");
        for id in ["w/linked/secret", "w/linked/deep/plans"] {
            let outcome = scene.store.delete_if_inside(id, &scene.outside_revision(), &scene.workspace()).await.unwrap();
            assert_eq!(outcome, GuardedDelete::OutsideWorkspace, "{resolver:?}: {id}");
        }
        // The workspace folder itself replaced by a link: the claim path refuses the same way.
        std::fs::rename(scene.notes.join("w"), scene.notes.join("w-old")).unwrap();
        symlink(&scene.outside, scene.notes.join("w")).unwrap();
        let claimed = scene
            .store
            .claim_and_delete(
                claim("n", FAR_FUTURE_MS, deleted_record("w/secret")),
                "w/secret",
                &scene.outside_revision(),
                &scene.workspace(),
            )
            .await
            .unwrap();
        assert_eq!(claimed, ClaimAndDelete::NoteOutsideWorkspace, "{resolver:?}");
        assert_eq!(scene.store.nonce_count().await.unwrap(), 0, "a refusal consumes nothing");
        scene.assert_outside_untouched("symlinked folder");
    }
}

#[tokio::test]
async fn a_hard_link_to_an_outside_file_is_refused() {
    for resolver in RESOLVERS {
        let mut scene = Scene::new(resolver);
        std::fs::hard_link(scene.outside.join("secret.md"), scene.notes.join("w/linked.md")).unwrap();
        // The link count is part of the digest: it is taken with the attacker's link in place.
        scene.before = tree_digest(&scene.outside);
        assert!(!scene.ids().await.contains(&"w/linked".to_string()), "{resolver:?}: a file with two links is never listed");
        assert_eq!(scene.store.inspect("w/linked.md"), Err(Refusal::HardLink));
        let outcome = scene.store.delete_if_inside("w/linked", &scene.outside_revision(), &scene.workspace()).await.unwrap();
        assert_eq!(outcome, GuardedDelete::OutsideWorkspace, "{resolver:?}");
        assert!(scene.notes.join("w/linked.md").exists());
        scene.assert_outside_untouched("hard link");
    }
}

#[tokio::test]
async fn a_hard_link_made_after_the_form_was_shown_stops_the_delete() {
    let mut scene = Scene::new(Resolver::Openat2);
    let shown = scene.store.list_notes().await.unwrap().remove(0);
    std::fs::hard_link(scene.notes.join("w/plan.md"), scene.outside.join("keep.md")).unwrap();
    scene.before = tree_digest(&scene.outside);
    let outcome = scene.store.delete_if_inside(&shown.id, &shown.revision, &scene.workspace()).await.unwrap();
    assert_eq!(outcome, GuardedDelete::OutsideWorkspace);
    assert!(scene.notes.join("w/plan.md").exists());
    scene.assert_outside_untouched("hard link after the form");
}

#[tokio::test]
async fn a_file_swapped_between_the_form_and_the_answer_is_gone_not_deleted() {
    for resolver in RESOLVERS {
        let scene = Scene::new(resolver);
        let shown = scene.store.list_notes().await.unwrap().remove(0);
        // An editor saving the file: a new file renamed over the old one (another inode, same path).
        std::fs::write(scene.notes.join("w/.plan.md.swp"), "# Q3 plan\n\nrewritten\n").unwrap();
        std::fs::rename(scene.notes.join("w/.plan.md.swp"), scene.notes.join("w/plan.md")).unwrap();
        let nonce = unique_name("swap");
        let outcome = scene
            .store
            .claim_and_delete(claim(&nonce, FAR_FUTURE_MS, deleted_record(&shown.id)), &shown.id, &shown.revision, &scene.workspace())
            .await
            .unwrap();
        assert_eq!(outcome, ClaimAndDelete::NoteGone, "{resolver:?}");
        assert_eq!(std::fs::read_to_string(scene.notes.join("w/plan.md")).unwrap(), "# Q3 plan\n\nrewritten\n");
        assert_eq!(scene.store.nonce_record(&nonce).await.unwrap(), None, "nothing consumed");
        assert_eq!(scene.store.inspect("w/plan.md").map(|r| r == shown.revision), Ok(false), "another copy, another revision");
        // The same answer with the fresh form's revision deletes it.
        let fresh = scene.store.list_notes().await.unwrap().remove(0);
        let outcome = scene.store.delete_if_inside(&fresh.id, &fresh.revision, &scene.workspace()).await.unwrap();
        assert!(matches!(outcome, GuardedDelete::Deleted(ref note) if note.body.contains("rewritten")), "{resolver:?}: {outcome:?}");
        assert!(scene.trash_is_empty());
        scene.assert_outside_untouched("swap");
    }
}

#[tokio::test]
async fn a_rename_racing_the_delete_is_put_back_and_the_delete_is_gone() {
    for (resolver, replacement) in [(Resolver::Openat2, "file"), (Resolver::Walk, "file"), (Resolver::Openat2, "symlink")] {
        let scene = Scene::new(resolver);
        let shown = scene.store.list_notes().await.unwrap().remove(0);
        let (notes, outside) = (scene.notes.clone(), scene.outside.clone());
        // Between the check and the move, the attacker renames another file (or a symlink out) over the note.
        scene.store.set_seam(move |seam| {
            if seam == Seam::Checked {
                let staged = notes.join("w/staged");
                match replacement {
                    "file" => std::fs::write(&staged, "# Q3 plan\n\nthe attacker's\n").unwrap(),
                    _ => symlink(outside.join("secret.md"), &staged).unwrap(),
                }
                std::fs::rename(&staged, notes.join("w/plan.md")).unwrap();
            }
        });
        let nonce = unique_name("race");
        let outcome = scene
            .store
            .claim_and_delete(claim(&nonce, FAR_FUTURE_MS, deleted_record(&shown.id)), &shown.id, &shown.revision, &scene.workspace())
            .await
            .unwrap();
        assert_eq!(outcome, ClaimAndDelete::NoteGone, "{resolver:?} {replacement}");
        let put_back = std::fs::symlink_metadata(scene.notes.join("w/plan.md")).unwrap();
        assert_eq!(put_back.file_type().is_symlink(), replacement == "symlink", "the racing file is back in place, as it was");
        assert!(scene.trash_is_empty(), "nothing left in the trash");
        assert_eq!(scene.store.nonce_count().await.unwrap(), 0, "the claim was released");
        scene.assert_outside_untouched("rename race");
    }
}

#[tokio::test]
async fn traversal_and_malformed_names_are_refused_with_their_reason() {
    for resolver in RESOLVERS {
        let scene = Scene::new(resolver);
        let revision = scene.outside_revision();
        let long = "x".repeat(300);
        let deep = vec!["d"; 40].join("/");
        let cases: [(&str, String, Refusal); 7] = [
            ("dot-dot", "../outside/secret".into(), Refusal::DotSegment),
            ("dot-dot inside", "w/../../outside/secret".into(), Refusal::DotSegment),
            ("%2e", "%2e%2e/outside/secret".into(), Refusal::PercentEncoded),
            ("NUL", "w/plan\0/../../outside/secret".into(), Refusal::ForbiddenCharacter),
            ("long name", format!("w/{long}"), Refusal::NameTooLong),
            ("deep path", format!("w/{deep}/x"), Refusal::PathTooLong),
            ("hidden", ".mcpsim/claims/x".into(), Refusal::Hidden),
        ];
        for (what, id, reason) in &cases {
            assert_eq!(mcpsim::testing::dir::note_path(id).err(), Some(*reason), "{what}");
            assert_eq!(scene.store.inspect(&format!("{id}.md")).err(), Some(*reason), "{resolver:?} {what}");
            let outcome = scene.store.delete_if_inside(id, &revision, &scene.store.base().clone()).await.unwrap();
            assert_eq!(outcome, GuardedDelete::Gone, "{resolver:?} {what}: no file can have that id");
            let claimed = scene
                .store
                .claim_and_delete(claim(what, FAR_FUTURE_MS, deleted_record(id)), id, &revision, scene.store.base())
                .await
                .unwrap();
            assert_eq!(claimed, ClaimAndDelete::NoteGone, "{resolver:?} {what}");
        }
        let very_long = "y/".repeat(3000);
        assert_eq!(mcpsim::testing::dir::note_path(&very_long).err(), Some(Refusal::PathTooLong));
        assert_eq!(scene.store.nonce_count().await.unwrap(), 0);
        assert_eq!(scene.ids().await, ["w/plan", "w/sub/todo"]);
        scene.assert_outside_untouched("names");
    }
}

#[tokio::test]
async fn odd_files_on_disk_are_skipped_with_their_reason_and_never_block() {
    let scene = Scene::new(Resolver::Openat2);
    let w = scene.notes.join("w");
    std::fs::write(w.join("%2e%2e.md"), "# escaped\n").unwrap();
    std::fs::write(w.join(".hidden.md"), "# hidden\n").unwrap();
    std::fs::write(w.join("big.md"), vec![b'a'; (mcpsim::testing::dir::NOTE_BYTES_MAX + 1) as usize]).unwrap();
    std::fs::write(w.join("latin1.md"), [0xe9u8, 0x0a]).unwrap();
    std::fs::write(w.join("notes.txt"), "not markdown").unwrap();
    let fifo = w.join("pipe.md");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let mut deep = w.clone();
    for _ in 0..33 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom.md"), "# too deep\n").unwrap();
    // Listing never opens the FIFO for long: O_NONBLOCK, and it is not a regular file.
    assert_eq!(scene.ids().await, ["w/plan", "w/sub/todo"]);
    for (name, reason) in [
        ("w/%2e%2e.md", Refusal::PercentEncoded),
        ("w/.hidden.md", Refusal::Hidden),
        ("w/big.md", Refusal::TooLarge),
        ("w/latin1.md", Refusal::NotUtf8),
        ("w/notes.txt", Refusal::NotMarkdown),
        ("w/pipe.md", Refusal::NotRegular),
        (&format!("w/{}/bottom.md", vec!["d"; 33].join("/")), Refusal::PathTooLong),
    ] {
        assert_eq!(scene.store.inspect(name), Err(reason), "{name}");
    }
}

#[tokio::test]
async fn a_planted_state_folder_link_stops_the_store_from_opening() {
    let directory = TempDir::new();
    let notes = directory.path().join("notes");
    let outside = directory.path().join("outside");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    symlink(&outside, notes.join(STATE_DIR)).unwrap();
    let before = tree_digest(&outside);
    let Err(error) = DirStore::open(&notes, None, Arc::new(TestClock::at(0)), ReplayLimits::default()) else {
        panic!("a store whose .mcpsim is a symbolic link opened");
    };
    assert!(error.to_string().contains("not a plain folder"), "{error}");
    assert_eq!(tree_digest(&outside), before, "nothing was created through the link");
}

#[tokio::test]
async fn the_store_spec_names_a_folder() {
    let spec: StoreSpec = "dir:/srv/notes=file:///w".parse().unwrap();
    assert_eq!(spec.to_string(), "dir:/srv/notes=file:///w");
    let plain: StoreSpec = "dir:/srv/notes".parse().unwrap();
    assert_eq!(plain.to_string(), "dir:/srv/notes");
    assert!("dir:".parse::<StoreSpec>().unwrap_err().to_string().contains("needs a folder"));
    assert!("dir:/x=file:///a/../..".parse::<StoreSpec>().unwrap_err().to_string().contains("not acceptable"));
    let missing = open(&"dir:/nonexistent/mcpsim-notes".parse().unwrap(), Arc::new(TestClock::at(0)), ReplayLimits::default()).await;
    assert!(missing.err().unwrap().to_string().contains("create the folder first"));
}

/// Processes on one folder: the replay guarantee and the note guarantee hold across them (`race.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_processes_on_one_folder_delete_each_note_once() {
    let directory = TempDir::new();
    let spec = format!("dir:{}=file:///w", directory.path().display());
    let parent = contract::open_fresh(&Fixed(spec.parse().unwrap()), 100_000).await;
    processes_race_with(&parent, &[(SPEC_VARIABLE, spec)], 3, 6, Losers::MaySeeInProgress).await;
    assert!(std::fs::read_dir(directory.path().join(STATE_DIR).join("trash")).unwrap().next().is_none());
}

struct Fixed(StoreSpec);

#[async_trait]
impl StoreKind for Fixed {
    async fn fresh(&self) -> StoreSpec {
        self.0.clone()
    }
}

const CRASH_FOLDER: &str = "MCPSIM_CRASH_FOLDER";
const CRASH_SEAM: &str = "MCPSIM_CRASH_SEAM";

#[tokio::test]
#[ignore = "not a test: a child the kill-mid-delete test starts, with the folder and the seam in its environment"]
async fn crash_child() {
    let (Ok(folder), Ok(seam)) = (std::env::var(CRASH_FOLDER), std::env::var(CRASH_SEAM)) else {
        panic!("dir::crash_child runs only as a child of processes_killed_mid_delete_leave_a_state_the_next_open_finishes");
    };
    let store =
        DirStore::open(Path::new(&folder), FileUri::parse("file:///w").ok(), Arc::new(TestClock::at(1_000)), ReplayLimits::default())
            .unwrap();
    let die_at = match seam.as_str() {
        "claimed" => Seam::Claimed,
        "checked" => Seam::Checked,
        "moved" => Seam::Moved,
        _ => Seam::Recorded,
    };
    // Killed where the seam says: SIGKILL to itself, as the OOM killer or a power cut would.
    store.set_seam(move |at| {
        if at == die_at {
            // SAFETY: kill(2) on our own pid has no memory effects.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    });
    let revision = store.list_notes().await.unwrap().into_iter().find(|n| n.id == "doomed").unwrap().revision;
    let outcome = store
        .claim_and_delete(
            claim("crash", FAR_FUTURE_MS, deleted_record("doomed")),
            "doomed",
            &revision,
            &FileUri::parse("file:///w").unwrap(),
        )
        .await;
    panic!("the child outlived its seam: {outcome:?}");
}

#[tokio::test]
async fn processes_killed_mid_delete_leave_a_state_the_next_open_finishes() {
    let executable = std::env::current_exe().unwrap();
    // (seam, the note survives, what a retry of the same confirmation hears, what the next open finished)
    let cases = [
        ("claimed", true, ClaimRecord::InProgress, 0),
        ("checked", true, ClaimRecord::InProgress, 0),
        ("moved", false, deleted_record("doomed"), 1),
        ("recorded", false, deleted_record("doomed"), 1),
    ];
    for (seam, survives, retry_hears, finished) in cases {
        let directory = TempDir::new();
        std::fs::write(directory.path().join("doomed.md"), "# Doomed\n").unwrap();
        std::fs::write(directory.path().join("kept.md"), "# Kept\n").unwrap();
        let status = std::process::Command::new(&executable)
            .args(["dir::crash_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CRASH_FOLDER, directory.path())
            .env(CRASH_SEAM, seam)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{seam}: the child was killed at its seam ({status})");
        let store =
            DirStore::open(directory.path(), FileUri::parse("file:///w").ok(), Arc::new(TestClock::at(2_000)), ReplayLimits::default())
                .unwrap();
        let recovered = store.recovered();
        assert_eq!(recovered.completed + recovered.cleaned, finished, "{seam}: {recovered:?}");
        assert_eq!(recovered.left + recovered.restored, 0, "{seam}: {recovered:?}");
        let ids: Vec<String> = store.list_notes().await.unwrap().into_iter().map(|n: Note| n.id).collect();
        assert_eq!(ids.contains(&"doomed".to_string()), survives, "{seam}: {ids:?}");
        assert!(ids.contains(&"kept".to_string()));
        let workspace = FileUri::parse("file:///w").unwrap();
        let retry =
            store.claim_and_delete(claim("crash", FAR_FUTURE_MS, deleted_record("doomed")), "doomed", "any", &workspace).await.unwrap();
        assert_eq!(retry, ClaimAndDelete::AlreadyClaimed { record: retry_hears }, "{seam}: the retry never deletes twice");
        assert!(std::fs::read_dir(directory.path().join(STATE_DIR).join("trash")).unwrap().next().is_none(), "{seam}: trash emptied");
        if survives {
            // The stranded claim blocks only its own confirmation: a new one still deletes the note, once.
            let revision = store.inspect("doomed.md").unwrap();
            let fresh =
                store.claim_and_delete(claim("fresh", FAR_FUTURE_MS, deleted_record("doomed")), "doomed", &revision, &workspace).await;
            assert!(matches!(fresh, Ok(ClaimAndDelete::Deleted(_))), "{seam}: {fresh:?}");
        }
    }
}

/// Each principal holds only its share of the folder's ledger, counted across handles (processes) from the
/// principal each claim file records; claims a version before the shares wrote (no principal) are still
/// honoured as claims and count in the whole ledger, against no live principal's share.
#[tokio::test]
async fn each_principal_holds_only_its_share_and_old_claims_count_against_none() {
    use mcpsim::testing::{ClaimOutcome, NonceClaim};
    let directory = TempDir::new();
    let clock = Arc::new(TestClock::at(1_000));
    let limits = ReplayLimits { capacity: 6, principal_capacity: 2, retention_grace_ms: 100 };
    let open = || DirStore::open(directory.path(), FileUri::parse("file:///w").ok(), clock.clone(), limits).unwrap();
    let first = open();
    // Two claims as the previous version wrote them: no principal.
    let claims = directory.path().join(STATE_DIR).join("claims");
    for nonce in ["old-1", "old-2"] {
        let name = mcpsim::testing::digest_hex(&serde_json::Value::String(nonce.into()));
        std::fs::write(claims.join(name), format!(r#"{{"expiresAtMs":{FAR_FUTURE_MS},"record":{{"outcome":"declined"}}}}"#)).unwrap();
    }
    let second = open();
    let of = |principal: &str, nonce: &str| NonceClaim {
        principal: principal.into(),
        ..claim(nonce, FAR_FUTURE_MS, ClaimRecord::Declined { tool: None })
    };
    assert_eq!(
        second.claim(of("alice", "old-1")).await,
        Ok(ClaimOutcome::AlreadyClaimed { record: ClaimRecord::Declined { tool: None } }),
        "an old claim is still a claim"
    );
    assert_eq!(first.claim(of("bob", "b1")).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(second.claim(of("bob", "b2")).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(first.claim(of("bob", "b3")).await, Ok(ClaimOutcome::Full), "bob's share is full, on every handle");
    assert_eq!(second.claim(of("bob", "b3")).await, Ok(ClaimOutcome::Full));
    assert_eq!(first.claim(of("alice", "a1")).await, Ok(ClaimOutcome::Claimed), "the old claims are not alice's");
    assert_eq!(second.claim(of("alice", "a2")).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(first.claim(of("carol", "c1")).await, Ok(ClaimOutcome::Full), "the whole ledger's bound counts the old claims");
    let written = std::fs::read_to_string(claims.join(mcpsim::testing::digest_hex(&serde_json::Value::String("b1".into())))).unwrap();
    assert!(written.contains(r#""principal":"bob""#), "the claim file records its principal: {written}");
    // bob's claims expire (plus the grace): his places come back; the others' stay.
    clock.set(FAR_FUTURE_MS + 100);
    let later = |principal: &str, nonce: &str| NonceClaim { expires_at_ms: FAR_FUTURE_MS + 10_000, ..of(principal, nonce) };
    assert_eq!(first.claim(later("bob", "b4")).await, Ok(ClaimOutcome::Claimed), "expired claims give places back");
}
