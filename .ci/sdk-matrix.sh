#!/usr/bin/env bash
# The SDK matrix in CI (issue 38; docs/sdk-matrix.md): one representative cell per row, each compared with its
# expected verdicts (targets/matrix/ROW.expected.tsv) by scripts/sdk-matrix.sh --check, which exits 1 naming
# the old and the new verdict of every cell that changed. The whole matrix is `scripts/sdk-matrix.sh`.
#   - mcpsim (targets/mcpsim-http.toml): the deploy (18, a state minted by the release build, 5055bfa, is
#     finished by this tree's) and the retirement of the old key mid-confirmation (16);
#   - python, typescript, rust (targets/matrix/{python,typescript,rust}.toml): the rotation mid-confirmation (14),
#     once per step of each SDK's own recipe: what a rotation does to a confirmation in flight (rmcp's ring
#     holds every step; the TypeScript codec's one key switched drops it: FAIL).
# The release build comes from .ci/mcpsim-release.sh (cached: seconds; from scratch: minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
MCPSIM_RELEASE="${MCPSIM_RELEASE:-$(bash .ci/mcpsim-release.sh)}"
export MCPSIM_RELEASE
exec bash scripts/sdk-matrix.sh --check mcpsim:18 mcpsim:16 python:14 typescript:14 rust:14
