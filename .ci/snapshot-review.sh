#!/usr/bin/env bash
# Prints how to review and accept snapshot changes when the `cargo test` output in LOG (a file) shows a failed
# insta snapshot assertion; prints nothing otherwise. .ci/run calls it when `cargo test` fails; README.md,
# "When a snapshot test fails", is the same recipe.
set -euo pipefail
log="${1:?usage: .ci/snapshot-review.sh LOG (the output of cargo test)}"
failed="$(grep -o "snapshot assertion for '[^']*'" "$log" | sed "s/snapshot assertion for //" | sort -u || true)"
[[ -z "$failed" ]] && exit 0
count="$(printf '%s\n' "$failed" | wc -l | tr -d ' ')"
cat <<RECIPE

== $count snapshot(s) changed: $(printf '%s' "$failed" | tr '\n' ' ')
One changed byte in a message every scenario prints changes every snapshot that shows it. To review them
(README.md, "When a snapshot test fails"):
  cargo test --no-fail-fast                      # every failing test binary, not only the first
  INSTA_UPDATE=always cargo test --test scenarios --test demo
  git diff snapshots/                            # read every hunk: accept only what you meant to change
  (or: cargo install cargo-insta --locked; cargo insta review)
then commit the snapshots with the change, saying in the message why they changed.
RECIPE
