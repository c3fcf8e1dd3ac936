#!/usr/bin/env bash
# The official MCP SDK clients as real peers of `mcpsim serve --http` (the embedded demo, token demo-alice):
# each completes the notes_delete flow (discover, list, round 1, its elicitation handler accepting note-7, the
# SDK's own retry on a fresh id, the note gone) through mcp-trace-capture, and mcp-trace-validator judges the
# recorded exchange: any server-side failure fails the run.
#
#   .ci/peers.sh                # every peer: typescript python python_url_mode
#   .ci/peers.sh python         # only the named ones
#   .ci/peers.sh --venv         # install the Python peer's pinned SDK only; print its virtualenv's path
#   .ci/peers.sh --typescript-server  # install Node 22 and the TypeScript server SDK the targets/sdk/typescript-*
#                                     # servers import (linked as tests/peers/typescript-server/node_modules);
#                                     # print the directory of that node, to put first on PATH
#
# Peers: tests/peers/typescript (@modelcontextprotocol/client, pinned with a lockfile) and tests/peers/python
# (mcp, pinned in requirements.txt). The Rust SDK (rmcp) runs in `cargo test` (tests/peer_rmcp.rs).
# python_url_mode is the same Python SDK completing notes_publish's URL-mode elicitation against
# `serve --http --out-of-band` (tests/peers/python/notes_publish_url_mode.py; the browser step is plain HTTP).
# Node 22, the npm and PyPI packages and the trace tools (cargo install, from crates.io) go into the cache
# directory of .ci/common.sh; each is installed again only when its pins change.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/common.sh

PEER_SECONDS_MAX=120
ALL_PEERS=(typescript python python_url_mode)

venv_only=false
typescript_server_only=false
if [[ "${1:-}" == "--venv" ]]; then venv_only=true; shift; fi
if [[ "${1:-}" == "--typescript-server" ]]; then typescript_server_only=true; shift; fi
peers=("$@")
if ((${#peers[@]} == 0)); then peers=("${ALL_PEERS[@]}"); fi
for peer in "${peers[@]}"; do
  if [[ ! " ${ALL_PEERS[*]} " == *" $peer "* ]]; then echo "unknown peer $peer; peers: ${ALL_PEERS[*]}" >&2; exit 2; fi
done

# A stamp file holding the digest of what an install was made from: reinstall only when the pins change.
up_to_date() { [[ -f "$1/.installed-from" && "$(cat "$1/.installed-from")" == "$2" ]]; }
stamp() { echo "$2" > "$1/.installed-from"; }

install_typescript() {
  local node dir="$CACHE/peer-typescript" digest
  node="$(node22)"
  digest="$(cat tests/peers/typescript/package.json tests/peers/typescript/package-lock.json | sha256sum)"
  mkdir -p "$dir"
  # The script runs from the install directory, where Node resolves the pinned packages.
  cp tests/peers/typescript/package.json tests/peers/typescript/package-lock.json tests/peers/typescript/notes_delete.mjs "$dir/"
  if ! up_to_date "$dir" "$digest"; then
    echo "== installing the TypeScript peer's packages (npm ci) into $dir"
    (cd "$dir" && PATH="$(dirname "$node"):$PATH" npm ci --silent --no-audit --no-fund)
    stamp "$dir" "$digest"
  fi
  PEER_COMMAND=("$node" "$dir/notes_delete.mjs")
}

install_python() {
  local venv="$CACHE/peer-python" digest
  digest="$(sha256sum < tests/peers/python/requirements.txt)"
  if ! up_to_date "$venv" "$digest"; then
    echo "== installing the Python peer's packages (pip) into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/peers/python/requirements.txt
    stamp "$venv" "$digest"
  fi
  PEER_COMMAND=("$venv/bin/python" tests/peers/python/notes_delete.py)
}

install_python_url_mode() {
  install_python
  PEER_COMMAND=("$CACHE/peer-python/bin/python" tests/peers/python/notes_publish_url_mode.py)
  PEER_SERVER_ARGS=(--out-of-band)
}

# The notes server on the TypeScript server SDK (tests/peers/typescript-server, pinned with a lockfile) runs
# from the checkout, where Node resolves its imports through a node_modules link to the cache.
install_typescript_server() {
  local node dir="$CACHE/peer-typescript-server" digest link=tests/peers/typescript-server/node_modules
  node="$(node22)"
  digest="$(cat tests/peers/typescript-server/package.json tests/peers/typescript-server/package-lock.json | sha256sum)"
  mkdir -p "$dir"
  cp tests/peers/typescript-server/package.json tests/peers/typescript-server/package-lock.json "$dir/"
  if ! up_to_date "$dir" "$digest"; then
    echo "== installing the TypeScript server SDK (npm ci) into $dir"
    (cd "$dir" && PATH="$(dirname "$node"):$PATH" npm ci --silent --no-audit --no-fund)
    stamp "$dir" "$digest"
  fi
  if [[ "$(readlink "$link" 2>/dev/null)" != "$dir/node_modules" ]]; then
    rm -rf "$link"
    ln -s "$dir/node_modules" "$link"
  fi
  TYPESCRIPT_SERVER_NODE_DIR="$(dirname "$node")"
}

if $typescript_server_only; then
  install_typescript_server >&2
  echo "$TYPESCRIPT_SERVER_NODE_DIR"
  exit 0
fi

if $venv_only; then
  install_python >&2
  echo "$CACHE/peer-python"
  exit 0
fi

tools="$(trace_tools)"

MCPSIM="$(mcpsim_binary)"
MCPSIM_PID=""
capture_pid=""
trap 'stop_process "$capture_pid"; stop_process "$MCPSIM_PID"' EXIT
out="$(mktemp -d)"
echo "== SDK peers against mcpsim serve --http, traces in $out"

passed=0
failed=0
for peer in "${peers[@]}"; do
  PEER_SERVER_ARGS=()
  "install_$peer"
  # A fresh server per peer: the flow deletes note-7 from the demo's notes.
  start_mcpsim "$out/$peer-server.log" "${PEER_SERVER_ARGS[@]}"
  "$tools/bin/mcp-trace-capture" --output "$out/$peer.jsonl" http --upstream "${MCPSIM_URL%/mcp}" \
    --listen 127.0.0.1:0 --preserve-host 2> "$out/$peer-capture.log" &
  capture_pid=$!
  proxy="$(wait_for_announcement "$out/$peer-capture.log" "$capture_pid" 's/.*listening on \(http:[^ ,]*\).*/\1/p' "mcp-trace-capture")"
  status=0
  MCPSIM_URL="$proxy/mcp" MCPSIM_TOKEN=demo-alice timeout "$PEER_SECONDS_MAX" "${PEER_COMMAND[@]}" || status=$?
  # The capture writes each event as it happens; stopping it closes the trace.
  stop_process "$capture_pid"
  capture_pid=""
  stop_process "$MCPSIM_PID"
  MCPSIM_PID=""
  if ((status == 0)); then
    python3 .ci/judge-trace.py --validator "$tools/bin/mcp-trace-validator" "$out/$peer.jsonl" || status=$?
  fi
  if ((status == 0)); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $peer (exit $status); server log (last 20 lines):" >&2
    tail -n 20 "$out/$peer-server.log" >&2
  fi
done
echo "peers: $passed passed, $failed failed"
((failed == 0))
