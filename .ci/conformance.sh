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
# Node 22 and the suite come from the npm registry into a cache directory (see .ci/common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/common.sh

SUITE_PACKAGE="@modelcontextprotocol/conformance@0.2.0-alpha.12"
REQUIREMENTS="2026-07-28"
REQUIRED_SCENARIOS=37
SUITE_SECONDS_MAX=900

url=""
if [[ "${1:-}" == "--url" ]]; then
  url="${2:?--url needs a URL such as http://127.0.0.1:3000/mcp}"
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--url URL]" >&2
  exit 2
fi

node="$(node22)"
suite="$CACHE/suite/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [[ ! -f "$suite" ]]; then
  echo "== installing $SUITE_PACKAGE into $CACHE/suite"
  PATH="$(dirname "$node"):$PATH" npm install --silent --no-audit --no-fund --prefix "$CACHE/suite" "$SUITE_PACKAGE"
fi
echo "== node $("$node" --version), suite $SUITE_PACKAGE"

MCPSIM_PID=""
trap 'stop_process "$MCPSIM_PID"' EXIT
server_log="$(mktemp)"
if [[ -z "$url" ]]; then
  echo "== building mcpsim"
  MCPSIM="$(mcpsim_binary)"
  start_mcpsim "$server_log" --fixture conformance
  url="$MCPSIM_URL"
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
  if [[ -n "$MCPSIM_PID" ]]; then echo "-- fixture server log (last 30 lines):" >&2; tail -n 30 "$server_log" >&2; fi
  echo "conformance: FAILED (suite exit $status); the suite's log and every check are in $out" >&2
  exit 1
fi
