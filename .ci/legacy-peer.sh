#!/usr/bin/env bash
# A 2025-11-25 SDK client against the real binary: the v1 TypeScript SDK (@modelcontextprotocol/sdk, pinned
# with a lockfile in tests/peers/typescript-v1) completes the legacy notes_delete confirmation (initialize,
# then elicitation/create inside the open tools/call, answered by its handler, the note gone) against
# `mcpsim serve --eras both`, over HTTP (an Mcp-Session-Id session) and over stdio (the process is the session).
#
#   .ci/legacy-peer.sh
#
# Node 22 and the npm packages go into the cache directory of .ci/common.sh; installed again only when the
# pins change.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/common.sh

PEER_SECONDS_MAX=120

node="$(node22)"
dir="$CACHE/peer-typescript-v1"
digest="$(cat tests/peers/typescript-v1/package.json tests/peers/typescript-v1/package-lock.json | sha256sum)"
mkdir -p "$dir"
# The script runs from the install directory, where Node resolves the pinned packages.
cp tests/peers/typescript-v1/package.json tests/peers/typescript-v1/package-lock.json tests/peers/typescript-v1/legacy_notes_delete.mjs "$dir/"
if [[ ! -f "$dir/.installed-from" || "$(cat "$dir/.installed-from")" != "$digest" ]]; then
  echo "== installing the v1 TypeScript peer's packages (npm ci) into $dir"
  (cd "$dir" && PATH="$(dirname "$node"):$PATH" npm ci --silent --no-audit --no-fund)
  echo "$digest" > "$dir/.installed-from"
fi

MCPSIM="$(mcpsim_binary)"
MCPSIM_PID=""
trap 'stop_process "$MCPSIM_PID"' EXIT
log="$(mktemp)"
failed=0

echo "== v1 TypeScript SDK over HTTP against mcpsim serve --http 127.0.0.1:0 --eras both"
start_mcpsim "$log" --eras both
MCPSIM_URL="$MCPSIM_URL" MCPSIM_TOKEN=demo-alice timeout "$PEER_SECONDS_MAX" "$node" "$dir/legacy_notes_delete.mjs" http || {
  failed=$((failed + 1)); echo "FAILED: http; server log (last 20 lines):" >&2; tail -n 20 "$log" >&2; }
stop_process "$MCPSIM_PID"
MCPSIM_PID=""

echo "== v1 TypeScript SDK over stdio, starting mcpsim serve --stdio --eras both itself"
MCPSIM_BIN="$(cd "$(dirname "$MCPSIM")" && pwd)/$(basename "$MCPSIM")" timeout "$PEER_SECONDS_MAX" "$node" "$dir/legacy_notes_delete.mjs" stdio 2> "$log" || {
  failed=$((failed + 1)); echo "FAILED: stdio; its stderr (last 20 lines):" >&2; tail -n 20 "$log" >&2; }

echo "legacy peer: $((2 - failed)) passed, $failed failed"
((failed == 0))
