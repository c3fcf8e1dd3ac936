//! The build identity `mcpsim explore --results` writes into every record (`sim::explore::results`): the git
//! commit and whether the work tree differed from it, the compiler, and a digest of Cargo.lock as built.
//! Nothing here may fail the build: without git (a crate from a registry, a tarball) or without a repository
//! of this crate's own, commit and dirty are unknown (empty, read as null).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let lock = manifest.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-changed=build.rs");
    let lockfile = match std::fs::read(&lock) {
        Ok(bytes) => format!("sha256:{}", hex(&Sha256::digest(&bytes))),
        Err(_) => String::new(),
    };
    println!("cargo:rustc-env=MCPSIM_BUILD_LOCKFILE={lockfile}");
    let rustc = std::env::var_os("RUSTC").and_then(|rustc| output(Command::new(rustc).arg("-V"))).unwrap_or_default();
    println!("cargo:rustc-env=MCPSIM_BUILD_RUSTC={rustc}");
    let (commit, dirty) = git_identity(&manifest).unwrap_or_default();
    println!("cargo:rustc-env=MCPSIM_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=MCPSIM_BUILD_DIRTY={dirty}");
}

/// The commit checked out and "true"/"false" for a work tree that differs from it, when `manifest` is the top
/// of a git work tree (not a crate unpacked inside some other repository). Registers what changes them: HEAD,
/// the branch it names, the packed refs, the index, and the tracked sources (so "dirty" follows an edit).
fn git_identity(manifest: &Path) -> Option<(String, String)> {
    // --no-optional-locks: `status` must not refresh the index, whose change would make the next build run this
    // again (and again).
    let git = |args: &[&str]| output(Command::new("git").arg("--no-optional-locks").arg("-C").arg(manifest).args(args));
    let top = git(&["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != manifest.canonicalize().ok()? {
        return None;
    }
    let path_of = |name: &str| git(&["rev-parse", "--git-path", name]).map(|p| manifest.join(p));
    let mut watched = vec![path_of("HEAD"), path_of("index"), path_of("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(path_of(&branch));
    }
    // Only files that exist: cargo takes a missing one as always changed (packed-refs often is missing).
    for path in watched.into_iter().flatten().filter(|path| path.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    for tracked in ["src", "Cargo.toml", "scenarios", "targets/scenarios"] {
        println!("cargo:rerun-if-changed={}", manifest.join(tracked).display());
    }
    let commit = git(&["rev-parse", "HEAD"])?;
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|changes| !changes.is_empty());
    Some((commit, dirty.map(|d| d.to_string()).unwrap_or_default()))
}

/// A command's standard output, trimmed, when it ran and succeeded.
fn output(command: &mut Command) -> Option<String> {
    let out = command.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
