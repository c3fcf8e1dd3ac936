#!/usr/bin/env bash
# mcpsim's "release" for the deploy lessons (issue 38): the server built at a pinned earlier commit, so a target
# file can run two versions in one fleet (targets/mcpsim-http.toml's [stages.release], program_env =
# "MCPSIM_RELEASE", beside [stages.current], this tree's build). Prints the binary's path on stdout:
#   export MCPSIM_RELEASE="$(bash .ci/mcpsim-release.sh)"
# The commit is 5055bfa by default (the last landing whose CI passed before issue 38's stages); another one
# may be named as the first argument. Its tracked files (`git archive`) are built in a temporary directory
# with `cargo build --locked` (a debug build, as the tests build the current tree) into
# $MCPSIM_RELEASE_CACHE/<commit>/ (default ${XDG_CACHE_HOME:-$HOME/.cache}/mcpsim-release): minutes the first
# time, seconds when cached. Exits 1 with a message when the commit is not in this clone (a shallow clone:
# `git fetch --unshallow`) or the build fails.
set -euo pipefail
cd "$(dirname "$0")/.."

commit_name="${1:-5055bfa}"
if ! commit="$(git rev-parse --verify --quiet "$commit_name^{commit}")"; then
  echo "mcpsim-release: commit $commit_name is not in this clone ($(pwd)); fetch it (git fetch --unshallow) or name another" >&2
  exit 1
fi
cache="${MCPSIM_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpsim-release}/$commit"
binary="$cache/mcpsim"
if [[ -x "$binary" ]]; then echo "$binary"; exit 0; fi

mkdir -p "$cache"
source_dir="$(mktemp -d)"
trap 'rm -rf "$source_dir"' EXIT
git archive --format=tar "$commit" | tar -x -C "$source_dir"
echo "== mcpsim-release: cargo build --locked at ${commit:0:7} into $cache (minutes the first time)" >&2
if ! (cd "$source_dir" && CARGO_TARGET_DIR="$cache/target" cargo build --quiet --locked --bin mcpsim >&2); then
  echo "mcpsim-release: the build of ${commit:0:7} failed (above)" >&2
  exit 1
fi
# Only the binary is kept: the build directory is gigabytes, and a cached binary is all a later run needs.
cp "$cache/target/debug/mcpsim" "$binary.tmp"
mv "$binary.tmp" "$binary"
rm -rf "$cache/target"
echo "$binary"
