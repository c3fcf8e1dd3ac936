#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned) against one dual-era
# conformance fixture process, twice: the 2026-07-28 requirement set (0.2.0-alpha.12), then the 2025-11-25
# one (0.1.16, the `latest` tag, whose scenarios all speak 2025-11-25 through `initialize`, so they reach the
# legacy adapter). Fails if any required scenario of either fails.
#
#   .ci/conformance.sh                 # builds mcpsim, starts `serve --http 127.0.0.1:0 --fixture conformance --eras both`
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
# The 2025-11-25 run: the `latest` suite, judged by the 2025-11-25 requirement list alpha.12 ships (30 server
# scenarios: 0.1.16's active ones; json-schema-2020-12 and server-sse-polling are pending, never scored).
LEGACY_SUITE_PACKAGE="@modelcontextprotocol/conformance@0.1.16"
LEGACY_REQUIREMENTS="2025-11-25"
LEGACY_REQUIRED_SCENARIOS=30
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
legacy_suite="$CACHE/suite-$LEGACY_REQUIREMENTS/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [[ ! -f "$legacy_suite" ]]; then
  echo "== installing $LEGACY_SUITE_PACKAGE into $CACHE/suite-$LEGACY_REQUIREMENTS"
  PATH="$(dirname "$node"):$PATH" npm install --silent --no-audit --no-fund --prefix "$CACHE/suite-$LEGACY_REQUIREMENTS" "$LEGACY_SUITE_PACKAGE"
fi
echo "== node $("$node" --version), suites $SUITE_PACKAGE and $LEGACY_SUITE_PACKAGE"

MCPSIM_PID=""
trap 'stop_process "$MCPSIM_PID"' EXIT
server_log="$(mktemp)"
if [[ -z "$url" ]]; then
  echo "== building mcpsim"
  MCPSIM="$(mcpsim_binary)"
  start_mcpsim "$server_log" --fixture conformance --eras both
  url="$MCPSIM_URL"
fi

# `judge OUT REQUIREMENTS EXPECTED`: every scenario the requirement file lists for servers ran and no check of
# it failed. Counted here too, so a run that silently skipped scenarios cannot pass.
judge() {
  "$node" --input-type=module - "$suite" "$@" <<'JS'
import { readdirSync, readFileSync, existsSync } from 'fs';
import { dirname, join } from 'path';
const [suite, out, revision, expected] = process.argv.slice(2);
const yaml = readFileSync(join(dirname(suite), '..', 'requirements', `${revision}.yaml`), 'utf8');
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
console.log(`required ${revision} server scenarios (${required.length}):`);
console.log(`conformance ${revision}: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
JS
}

# `run_suite SUITE REVISION EXPECTED ARGS...`: one suite run against $url, its summary shown, then judged.
run_suite() {
  local which="$1" revision="$2" expected="$3"; shift 3
  local out; out="$(mktemp -d)"
  echo "== conformance suite against $url ($revision: $*), results in $out"
  # The suite's per-scenario chatter goes to a log; its closing summary (one line per scenario) is shown.
  timeout "$SUITE_SECONDS_MAX" "$node" "$which" server --url "$url" "$@" -o "$out" > "$out/suite.log" 2>&1 || status=$?
  sed -n '/=== SUMMARY ===/,$p' "$out/suite.log"
  if ! grep -q '=== SUMMARY ===' "$out/suite.log"; then tail -n 40 "$out/suite.log"; fi
  judge "$out" "$revision" "$expected" || summary=$?
}

status=0
summary=0
run_suite "$suite" "$REQUIREMENTS" "$REQUIRED_SCENARIOS" --requirements "$REQUIREMENTS"
# The same process, now as a 2025-11-25 server: every scenario opens with initialize.
run_suite "$legacy_suite" "$LEGACY_REQUIREMENTS" "$LEGACY_REQUIRED_SCENARIOS" --spec-version "$LEGACY_REQUIREMENTS"
if ((status != 0 || summary != 0)); then
  if [[ -n "$MCPSIM_PID" ]]; then echo "-- fixture server log (last 30 lines):" >&2; tail -n 30 "$server_log" >&2; fi
  echo "conformance: FAILED (suite exit $status); each run's log and every check are in the directory it named" >&2
  exit 1
fi
