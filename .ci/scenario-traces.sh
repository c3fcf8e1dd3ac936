#!/usr/bin/env bash
# Every scenario of the library, exported with `mcpsim run FILE --format mcp-trace`, judged by the independent
# mcp-trace-validator: any server-side failure fails the run. (Client-side findings are printed: several
# scenarios play a misbehaving client on purpose, e.g. a tampered or replayed requestState.)
#
#   .ci/scenario-traces.sh                       # every scenarios/*.sim
#   .ci/scenario-traces.sh scenarios/11-*.sim    # only these
#
# The trace tools come from crates.io into the cache directory of .ci/common.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/common.sh

files=("$@")
if ((${#files[@]} == 0)); then files=(scenarios/*.sim); fi
tools="$(trace_tools)"
MCPSIM="$(mcpsim_binary)"
out="$(mktemp -d)"
echo "== ${#files[@]} scenarios exported as mcp-trace and judged, traces in $out"

passed=0
failed=0
not_judged=0
for file in "${files[@]}"; do
  name="$(basename "$file" .sim)"
  status=0
  judged=0
  "$MCPSIM" run "$file" --format mcp-trace > "$out/$name.jsonl" 2> "$out/$name.log" || status=$?
  if ((status == 0)); then
    python3 .ci/judge-trace.py --validator "$tools/bin/mcp-trace-validator" "$out/$name.jsonl" > "$out/$name.verdict" || judged=$?
  else
    echo "mcpsim run $file failed (exit $status):" > "$out/$name.verdict"; cat "$out/$name.log" >> "$out/$name.verdict"
  fi
  if ((status == 0 && judged != 0 && judged != 3)); then status=$judged; fi
  if ((status == 0 && judged == 3)); then
    not_judged=$((not_judged + 1))
    echo "--    $name: $(tail -n 1 "$out/$name.verdict" | sed 's/^ *//')"
  elif ((status == 0)); then
    passed=$((passed + 1))
    echo "ok    $name: $(tail -n 1 "$out/$name.verdict" | sed 's/^ *//')"
  else
    failed=$((failed + 1))
    echo "FAIL  $name:"; sed 's/^/      /' "$out/$name.verdict"
  fi
done
echo "scenario traces: $passed passed, $failed failed, $not_judged not judged (several sessions of two eras in one trace)"
((failed == 0))
