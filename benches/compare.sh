#!/usr/bin/env bash
# Compare this tree's simulator with another commit's, built beside it, on the same machine in the same minutes.
#
#   benches/compare.sh BASE_REV [ROUNDS]
#
# Builds BASE_REV in a git worktree and this tree, each in its own target directory under $COMPARE_DIR
# (default target/compare; the release profile of each tree, so this tree's fat LTO), then alternates the two
# ROUNDS times (default 3):
#   - sim_flows: criterion's median flows per CPU-second of the benchmark thread (two_round_delete_cpu/…);
#   - explore: user CPU seconds of `mcpsim explore 04-accepts-race-for-one-note --seeds 4000 --jobs 1`,
#     without and with `--faults all`.
#   - the floor: handlers_alone_cpu/…, the same requests through the pipeline with no simulator around them, of
#     this tree and of BASE_REV when its bench has it or benches/compare-BASE_REV.patch adds it (that patch is
#     applied to the worktree only; 1cdc87f's instances received bytes, so its floor parses each request);
# and prints each figure, then the median ratio (this tree over BASE_REV), and per flow what the handlers alone
# and the simulator take, against what five times BASE_REV's rate would allow and against BASE_REV's own split. Only ratios of one run mean anything on
# a shared machine: a figure of the same binary moves by ±10% within minutes there. BASE_REV must have the
# `sim_flows` bench and `mcpsim explore` (1cdc87f, the baseline of the scale issue, has both).
set -euo pipefail

base_rev=${1:?usage: benches/compare.sh BASE_REV [ROUNDS]}
rounds=${2:-3}
root=$(git rev-parse --show-toplevel)
dir=${COMPARE_DIR:-$root/target/compare}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
worktree=$dir/base-tree

if [ ! -d "$worktree" ]; then
    git -C "$root" worktree add --detach "$worktree" "$base_rev" >/dev/null
else
    git -C "$worktree" checkout --detach --quiet --force "$base_rev"
fi
# The floor ported to BASE_REV, when this tree carries a port for it (measurement only: never committed there).
floor_patch=$root/benches/compare-$base_rev.patch
if [ -f "$floor_patch" ] && ! git -C "$worktree" apply "$floor_patch"; then
    echo "compare.sh: $floor_patch does not apply to $base_rev in $worktree; fix the patch or move it aside to compare without the base's floor" >&2
    exit 1
fi

# Builds the tree at $1 into target directory $2 and prints the sim_flows executable's path.
build() {
    local tree=$1 target=$2
    (cd "$tree" && CARGO_TARGET_DIR=$target cargo build --release --quiet) >&2
    local exe
    exe=$( (cd "$tree" && CARGO_TARGET_DIR=$target cargo bench --no-run --bench sim_flows --message-format=json 2>/dev/null) |
        sed -n 's/.*"executable":"\([^"]*sim_flows[^"]*\)".*/\1/p' | tail -1) || exe=""
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "compare.sh: no sim_flows bench built in $tree; run \`cargo bench --no-run --bench sim_flows\` there to see why" >&2
        exit 1
    fi
    echo "$exe"
}

echo "building $base_rev and $(git -C "$root" rev-parse --short HEAD) (each release build takes minutes)" >&2
base_bench=$(build "$worktree" "$dir/base-target")
new_bench=$(build "$root" "$dir/new-target")
base_bin=$dir/base-target/release/mcpsim
new_bin=$dir/new-target/release/mcpsim
results=$dir/results.txt
: >"$results"

# One criterion run of every CPU-time shape matching $3 (default the simulated flows); each binary writes its own
# criterion folder, so no run is compared with the other tree's.
flows() {
    local which=$1 exe=$2 filter=${3:-two_round_delete_cpu/}
    CRITERION_HOME=$dir/criterion-$which "$exe" --bench "$filter" --warm-up-time 2 --measurement-time 8 --noplot 2>/dev/null |
        awk -v which="$which" '
            /^(two_round_delete_cpu|handlers_alone_cpu)\// { name = $1 }
            /thrpt:/ && name != "" {
                value = $4; unit = $5
                if (unit ~ /^Kelem/) value *= 1000; else if (unit ~ /^Melem/) value *= 1000000
                printf "%s %s %.0f\n", which, name, value; name = ""
            }'
}

explore() {
    local which=$1 bin=$2; shift 2
    local seconds
    seconds=$({ TIMEFORMAT=%U; time "$bin" explore 04-accepts-race-for-one-note --seeds 4000 --jobs 1 "$@" >/dev/null 2>&1; } 2>&1)
    echo "$which explore_04_seeds_4000${1:+_faults_all} $seconds"
}

for round in $(seq 1 "$rounds"); do
    echo "round $round of $rounds" >&2
    for which in base new; do
        if [ "$which" = base ]; then exe=$base_bench bin=$base_bin; else exe=$new_bench bin=$new_bin; fi
        flows "$which" "$exe" >>"$results"
        explore "$which" "$bin" >>"$results"
        explore "$which" "$bin" --faults all >>"$results"
    done
    # The floor (the handlers alone, no simulator around them), where the bench has it.
    flows base "$base_bench" handlers_alone_cpu/ >>"$results"
    flows new "$new_bench" handlers_alone_cpu/ >>"$results"
done

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "base $base_rev, new $(git -C "$root" rev-parse --short HEAD); flows/CPU-s for sim_flows, user CPU seconds for explore"
python3 - "$results" <<'EOF'
import collections, statistics, sys
figures = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    which, name, value = line.split()
    figures[name][which].append(float(value))
floors = {(which, name.split("/")[1]): statistics.median(values)
          for name, by in figures.items() if name.startswith("handlers_alone_cpu/") for which, values in by.items() if values}
for name, by in sorted(figures.items()):
    if name.startswith("handlers_alone_cpu/"):
        continue
    base, new = by["base"], by["new"]
    # Explore figures are seconds (lower is better), flows are rates (higher is better).
    ratio = statistics.median(base) / statistics.median(new) if name.startswith("explore") else statistics.median(new) / statistics.median(base)
    show = lambda values: ", ".join(f"{v:g}" for v in values)
    print(f"{name}\n  base: {show(base)}\n  new:  {show(new)}\n  ratio of medians: {ratio:.2f}x")
    shape = name.split("/")[1] if name.startswith("two_round_delete_cpu/") else None
    us = lambda rate: 1e6 / rate
    if ("new", shape) in floors:
        # Per flow, in µs of CPU: what the handlers alone take, what the simulator adds, what five times the base allows.
        budget, floor, total = us(5 * statistics.median(base)), us(floors[("new", shape)]), us(statistics.median(new))
        print(f"  per flow: {total:.1f} us, of which the handlers alone {floor:.1f} us and the simulator {total - floor:.1f} us;"
              f" five times the base allows {budget:.1f} us, leaving the simulator {budget - floor:.1f} us")
        if ("base", shape) in floors:
            base_total, base_floor = us(statistics.median(base)), us(floors[("base", shape)])
            print(f"  base per flow: {base_total:.1f} us, of which the handlers alone {base_floor:.1f} us and the simulator"
                  f" {base_total - base_floor:.1f} us; ratios: handlers {base_floor / floor:.2f}x,"
                  f" simulator {(base_total - base_floor) / (total - floor):.2f}x")
EOF
