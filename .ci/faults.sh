#!/usr/bin/env bash
# Faults against real fleets (issue 37; docs/targets.md, "Faults against the fleet"): mcpsim's own fleets over
# stdio and HTTP on SQLite, and over HTTP on PostgreSQL behind mcpsim's store proxy, must pass every target
# lesson (08-13 are the fault lessons) and an exploration of the accepts race under every fault kind, 50 seeds.
# `cargo test` plays the lessons on the SQLite fleets; this stage adds the PostgreSQL fleet (it needs the
# private server .ci/run starts: MCPSIM_TEST_POSTGRES_URL) and the 50-seed explorations (70-150 s each here).
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/common.sh

MCPSIM="$(mcpsim_binary)"
failed=0

# `expect_ok ARGS...`: mcpsim exits 0; otherwise the end of its output is shown and the stage fails.
expect_ok() {
  local status=0 log
  log="$(mktemp)"
  echo "== mcpsim $*"
  timeout 900 "$MCPSIM" "$@" > "$log" 2>&1 || status=$?
  if [[ "$status" -ne 0 ]]; then
    echo "   UNEXPECTED: exit $status"; grep -E "FAIL|ERROR|never fired:" "$log" | head -20; tail -30 "$log"; failed=$((failed + 1))
  else
    tail -1 "$log" | sed 's/^/   /'
  fi
  rm -f "$log"
}

if [[ -z "${MCPSIM_TEST_POSTGRES_URL:-}" ]]; then
  echo "faults.sh: MCPSIM_TEST_POSTGRES_URL is not set: run eval \"\$(bash .ci/postgres.sh start)\" first" >&2
  exit 1
fi

expect_ok run --target targets/mcpsim-postgres.toml
for target in targets/mcpsim-stdio.toml targets/mcpsim-http.toml targets/mcpsim-postgres.toml; do
  expect_ok explore --target "$target" 02-accepts-race --faults all --seeds 50
done

if [[ "$failed" -ne 0 ]]; then
  echo "faults.sh: $failed run(s) did not hold"; exit 1
fi
echo "faults.sh: every lesson and every explored seed held on the stdio, HTTP and PostgreSQL fleets"
