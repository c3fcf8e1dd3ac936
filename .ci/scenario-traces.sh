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
  # The validator judges a trace as one session: a scenario with several clients is judged on each client's
  # own session (interleaved, one client's request ids and era would be judged against another's traffic).
  clients=($(awk '$1 == "client" { print $2 }' "$file"))
  if ((${#clients[@]} <= 1)); then
    "$MCPSIM" run "$file" --format mcp-trace > "$out/$name.jsonl" 2> "$out/$name.log" || status=$?
    if ((status == 0)); then
      python3 .ci/judge-trace.py --validator "$tools/bin/mcp-trace-validator" "$out/$name.jsonl" > "$out/$name.verdict" || judged=$?
    else
      echo "mcpsim run $file failed (exit $status):" > "$out/$name.verdict"; cat "$out/$name.log" >> "$out/$name.verdict"
    fi
  else
    : > "$out/$name.verdict"
    per_client=""
    for client in "${clients[@]}"; do
      "$MCPSIM" run "$file" --format mcp-trace --trace-client "$client" > "$out/$name.$client.jsonl" 2> "$out/$name.log" || status=$?
      if ((status != 0)); then
        echo "mcpsim run $file --trace-client $client failed (exit $status):" >> "$out/$name.verdict"; cat "$out/$name.log" >> "$out/$name.verdict"
        break
      fi
      python3 .ci/judge-trace.py --validator "$tools/bin/mcp-trace-validator" "$out/$name.$client.jsonl" > "$out/$name.$client.verdict" || judged=$?
      { echo "client $client:"; cat "$out/$name.$client.verdict"; } >> "$out/$name.verdict"
      per_client+="${per_client:+; }$client: $(tail -n 1 "$out/$name.$client.verdict" | sed 's/^ *//')"
      if ((judged != 0)); then break; fi
    done
    if ((status == 0)); then echo "  one trace per client: $per_client" >> "$out/$name.verdict"; fi
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
echo "scenario traces: $passed passed, $failed failed, $not_judged not judged (a client's own trace holding several sessions)"
((failed == 0))
