#!/usr/bin/env bash
# A swarm on this machine (docs/swarm.md): the Kubernetes manifest's pod command
# (examples/swarm/kubernetes-indexed-job.yaml, the lines between "pod command begins" and "ends", read from
# the file itself) run as N local processes with JOB_COMPLETION_INDEX=0..N-1, then `mcpsim merge`.
#
#   scripts/swarm-local.sh N SCENARIO SEEDS [explore args…]
#   scripts/swarm-local.sh 2 04-accepts-race-for-one-note 20000
#   scripts/swarm-local.sh 4 04-accepts-race-for-one-note 100000 --faults all
#
# Environment: MCPSIM, the mcpsim to run (default: this checkout's target/release/mcpsim, else target/debug/mcpsim,
# else the one on PATH); OUT, where results/, logs/ and report/ go (default: ./swarm-out, emptied first);
# LEDGER, a seed ledger folder the merge records into (merge --ledger). OUT is emptied first only if this script
# made it (a marker file); any other non-empty folder is refused.
# Prints each shard's exit status (a shard that wrote no results file is a failure, reported and counted),
# the merge's output, and the figures: schedules, the shards' wall and CPU (user+sys) time, schedules per
# CPU-second and per core, and the merge's wall and CPU time.
# Exit status: the merge's; 2 on a usage error; 3 when a shard failed (whatever the merge said).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
manifest="$root/examples/swarm/kubernetes-indexed-job.yaml"

if [ $# -lt 3 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]] || ! [[ "$3" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/swarm-local.sh N SCENARIO SEEDS [explore args…]" >&2
    exit 2
fi
shards=$1 scenario=$2 seeds=$3
shift 3
explore_args="$*"

mcpsim="${MCPSIM:-}"
if [ -z "$mcpsim" ]; then
    for candidate in "$root/target/release/mcpsim" "$root/target/debug/mcpsim" "$(command -v mcpsim || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then mcpsim=$candidate; break; fi
    done
fi
if [ -z "$mcpsim" ] || [ ! -x "$mcpsim" ]; then
    echo "swarm-local: no mcpsim found (cargo build --release, or set MCPSIM)" >&2
    exit 2
fi

# The pod command, exactly as the manifest holds it (its YAML block's indentation removed).
pod_command="$(sed -n '/# pod command begins/,/# pod command ends/p' "$manifest" | sed 's/^ *//')"
if [ -z "$pod_command" ]; then
    echo "swarm-local: no pod command between the markers in $manifest" >&2
    exit 2
fi

out="${OUT:-swarm-out}"
# Emptied first, but only a folder this script made (it leaves a marker there): never anything else OUT names.
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -e "$out/.swarm-local" ]; then
    echo "swarm-local: $out exists and was not made by this script; name another OUT" >&2
    exit 2
fi
rm -rf "$out"
mkdir -p "$out/results" "$out/logs" "$out/bin"
touch "$out/.swarm-local"
out="$(cd "$out" && pwd)"
# The pod calls `mcpsim` by name, as in the image.
ln -s "$mcpsim" "$out/bin/mcpsim"

echo "pod command (from examples/swarm/kubernetes-indexed-job.yaml):"
printf '%s\n' "$pod_command" | sed 's/^/  /'
echo "running $shards shard(s) of $scenario, seeds 1..$seeds${explore_args:+, $explore_args}, with $mcpsim"

# CPU seconds (user + system) of this shell's waited-for children so far, into the variable named $1: bash's
# `times` (second line), run in this shell (in a $(…) subshell it would count that subshell's children).
children_cpu() {
    times >"$out/times"
    printf -v "$1" '%s' "$(sed -n 2p "$out/times" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); t += p[1] * 60 + p[2] }; printf "%.3f", t }')"
}
now() { date +%s.%N; }

children_cpu cpu0
start=$(now)
pids=()
for ((index = 0; index < shards; index++)); do
    JOB_COMPLETION_INDEX=$index SCENARIO=$scenario SEEDS=$seeds SHARDS=$shards RESULTS="$out/results" \
        EXPLORE_ARGS=$explore_args PATH="$out/bin:$PATH" \
        sh -c "$pod_command" >"$out/logs/shard-$index.log" 2>&1 &
    pids+=($!)
done
failed=0
for ((index = 0; index < shards; index++)); do
    wait "${pids[$index]}"
    status=$?
    line=$(grep -m1 "mcpsim explore exited" "$out/logs/shard-$index.log" || true)
    if [ "$status" -ne 0 ]; then
        echo "shard $((index + 1))/$shards FAILED: the pod command exited $status (${line:-no exit line}); its log: $out/logs/shard-$index.log"
        tail -n 5 "$out/logs/shard-$index.log" | sed 's/^/  | /'
        failed=$((failed + 1))
    else
        echo "${line:-shard $((index + 1))/$shards: done}"
    fi
done
wall=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
children_cpu cpu1
schedules=$(cat "$out"/logs/shard-*.log | awk '$1 == "schedules" { s += $2 } END { print s + 0 }')

echo
merge=("$mcpsim" merge "$out"/results/shard-*.jsonl --report "$out/report")
if [ -n "${LEDGER:-}" ]; then merge+=(--ledger "$LEDGER"); fi
echo "merge: ${merge[*]}"
merge_start=$(now)
"${merge[@]}"
merge_status=$?
merge_wall=$(awk -v a="$merge_start" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
children_cpu cpu2

cores=$(nproc 2>/dev/null || echo 1)
used=$((shards < cores ? shards : cores))
echo
awk -v s="$schedules" -v w="$wall" -v c0="$cpu0" -v c1="$cpu1" -v c2="$cpu2" -v mw="$merge_wall" -v n="$shards" -v k="$cores" -v u="$used" 'BEGIN {
    cpu = c1 - c0
    printf "swarm: %d shard(s) on %d core(s): %d schedules in %.2f s wall, %.2f CPU-s (user+sys)\n", n, k, s, w, cpu
    printf "  throughput: %.0f schedules per CPU-second; %.0f per core of wall time (%.0f/s over %d busy core(s))\n", (cpu > 0 ? s / cpu : 0), (w > 0 ? s / w / u : 0), (w > 0 ? s / w : 0), u
    printf "  merge: %.2f s wall, %.2f CPU-s\n", mw, c2 - c1
}'
if [ "$failed" -gt 0 ]; then
    echo "$failed of $shards shard(s) FAILED (see above): the merge is incomplete"
    exit 3
fi
exit "$merge_status"
