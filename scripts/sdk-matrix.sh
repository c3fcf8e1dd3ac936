#!/usr/bin/env bash
# The SDK matrix (issue 38; docs/sdk-matrix.md): what each fleet holds and breaks, one `mcpsim run` per cell.
#
#   scripts/sdk-matrix.sh                          # every cell of every row; the Markdown table on stdout
#   scripts/sdk-matrix.sh --out docs/sdk-matrix.md # the same table written into that page's table section
#   scripts/sdk-matrix.sh python rust:15           # only these rows / cells (ROW or ROW:LESSON)
#   scripts/sdk-matrix.sh --check [ROW:LESSON ...] # compare the cells (all without names) with the expected
#                                                  # verdicts; exit 1 naming every change, old and new
#   scripts/sdk-matrix.sh --update [ROW:LESSON ...]# write the verdicts of the cells run as the expected ones
#
# Rows: "mcpsim" is mcpsim's own HTTP fleet, targets/mcpsim-http.toml itself (its rotation recipe and its two
# versions are stages of that file; no copy under targets/matrix/); python, typescript and rust are
# targets/matrix/ROW.toml. Cells (columns): lessons 01 02 03 04 06 14 15 16 17, and the deploy lessons 18 19 20 on
# a row whose target file has a [deploy] table. A LESSON is its number (14) or its name. Each cell is exactly
#   mcpsim run --target FILE LESSON --reruns 1
# and its verdict is read from that run's summary rows: PASS, FAIL (properties), SKIPPED (the run says why),
# NOT JUDGED or ERROR. A lesson played once per step of a rotation recipe has one verdict per step
# (`14-rotation-mid-confirmation [k1 → k1-k2]`): the table joins them (`PASS ×3`, or the failing steps named).
# Expected verdicts: targets/matrix/ROW.expected.tsv, `lesson<TAB>verdict` (mcpsim's too).
#
# The peers' runtimes are put first on PATH as .ci/sdk-target.sh does (the Python SDK's virtualenv, Node 22
# with the TypeScript server SDK, the Rust SDK's server built into the cache), installed by .ci/peers.sh on
# first use, only for the rows run. MCPSIM_RELEASE (the release build the deploy lessons need) is exported
# from .ci/mcpsim-release.sh unless already set; without it those cells are SKIPPED, naming the variable.
# The mcpsim that runs the cells: $MCPSIM, else this checkout's debug build (built as `cargo test` builds it).
# Progress (which cell) goes to stderr. Exit status: 0; 1 when --check found a change; 2 on a usage error, a
# missing target file or a page without the table's markers.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/common.sh

ROWS=(mcpsim python typescript rust)
CELLS=(01 02 03 04 06 14 15 16 17)
DEPLOY_CELLS=(18 19 20)
# The page's table section lies between these two lines (kept; everything between them is replaced).
BEGIN_MARK="<!-- sdk-matrix table: scripts/sdk-matrix.sh --out docs/sdk-matrix.md writes what follows -->"
END_MARK="<!-- end of the sdk-matrix table -->"

usage() { sed -n '3,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

out="" check=false update=false
selected=()
while (($#)); do
  case "$1" in
    --out) [[ $# -ge 2 ]] || usage; out="$2"; shift 2 ;;
    --check) check=true; shift ;;
    --update) update=true; shift ;;
    -h | --help) usage ;;
    -*) echo "sdk-matrix: unknown option $1" >&2; usage ;;
    *) selected+=("$1"); shift ;;
  esac
done

row_file() { if [[ "$1" == mcpsim ]]; then echo targets/mcpsim-http.toml; else echo "targets/matrix/$1.toml"; fi; }
expected_file() { echo "targets/matrix/$1.expected.tsv"; }
# The row's cells: the lessons every row plays, and the deploy lessons where the file names two versions.
row_cells() {
  echo "${CELLS[@]}"
  if grep -q '^\[deploy\]' "$(row_file "$1")"; then echo "${DEPLOY_CELLS[@]}"; fi
}
# A lesson's full name (targets/scenarios/NAME.sim) from its number or name.
lesson_name() {
  local found
  found="$(cd targets/scenarios && for f in "$1"*.sim; do [[ -f "$f" ]] && echo "${f%.sim}"; done)"
  if [[ -z "$found" || "$(echo "$found" | wc -l)" -ne 1 ]]; then
    echo "sdk-matrix: no single lesson named $1 in targets/scenarios/" >&2; exit 2
  fi
  echo "$found"
}
known_row() { [[ " ${ROWS[*]} " == *" $1 "* ]] || { echo "sdk-matrix: unknown row $1 (rows: ${ROWS[*]})" >&2; exit 2; }; }

# The cells to run, as "ROW LESSON-NAME" lines, in row then lesson order.
cells=()
if ((${#selected[@]} == 0)); then selected=("${ROWS[@]}"); fi
for item in "${selected[@]}"; do
  row="${item%%:*}"
  known_row "$row"
  [[ -f "$(row_file "$row")" ]] || { echo "sdk-matrix: row $row: $(row_file "$row") does not exist" >&2; exit 2; }
  if [[ "$item" == *:* ]]; then
    cells+=("$row $(lesson_name "${item#*:}")")
  else
    for lesson in $(row_cells "$row"); do cells+=("$row $(lesson_name "$lesson")"); done
  fi
done
rows_run="$(printf '%s\n' "${cells[@]}" | cut -d' ' -f1 | awk '!seen[$0]++')"

# The runtimes of the rows run.
MCPSIM="${MCPSIM:-$(mcpsim_binary)}"
for row in $rows_run; do
  case "$row" in
    python) PATH="$(bash .ci/peers.sh --venv)/bin:$PATH" ;;
    typescript) PATH="$(bash .ci/peers.sh --typescript-server):$PATH" ;;
    rust)
      # As .ci/sdk-target.sh: the server built in release into the cache, linked where the target files run it.
      rust_target="$CACHE/rust-server-target"
      echo "== cargo build --release --manifest-path tests/peers/rust-server/Cargo.toml --target-dir $rust_target" >&2
      cargo build --quiet --release --locked --manifest-path tests/peers/rust-server/Cargo.toml --target-dir "$rust_target" >&2
      mkdir -p tests/peers/rust-server/target/release
      ln -sfn "$rust_target/release/notes-server" tests/peers/rust-server/target/release/notes-server
      ;;
  esac
done
export PATH
if [[ -z "${MCPSIM_RELEASE:-}" ]] && printf '%s\n' "${cells[@]}" | grep -q ' \(18\|19\|20\)-'; then
  if release="$(bash .ci/mcpsim-release.sh)"; then
    export MCPSIM_RELEASE="$release"
  else
    echo "sdk-matrix: no release build (above): the deploy cells will be SKIPPED" >&2
  fi
fi

# The verdict rows of one `mcpsim run --target` output: "NAME<TAB>VERDICT", the seed left out of the name and the
# reproduction count out of a failure (one rerun: whether it reproduced is not part of the verdict).
summary_rows() {
  awk '
    /^target .* instance\(s\) over [a-z]+:$/ { table = 1; next }
    table && /^  / && !/^  masked as differing by design:/ && !/^  every scenario was skipped/ {
      line = substr($0, 3); at = 0
      n = split(" PASS| FAIL (| SKIPPED| NOT JUDGED| ERROR: ", words, "|")
      for (i = 1; i <= n; i++) {
        j = index(line, words[i])
        if (j > 0 && (at == 0 || j < at)) at = j
      }
      if (at == 0) next
      name = substr(line, 1, at - 1); verdict = substr(line, at + 1)
      sub(/ +$/, "", name); sub(/ seed [0-9]+$/, "", name)
      sub(/, reproduced [0-9]+\/[0-9]+\)$/, ")", verdict)
      if (verdict ~ /^SKIPPED/) verdict = "SKIPPED"
      if (verdict ~ /^ERROR/) verdict = "ERROR"
      if (verdict ~ /^NOT JUDGED/) verdict = "NOT JUDGED"
      printf "%s\t%s\n", name, verdict
    }
    /^reproduce: / { table = 0 }'
}

results="$(mktemp)"
log="$(mktemp)"
trap 'rm -f "$results" "$log"' EXIT
total=${#cells[@]} done_cells=0
for cell in "${cells[@]}"; do
  read -r row lesson <<< "$cell"
  done_cells=$((done_cells + 1))
  file="$(row_file "$row")"
  echo "== [$done_cells/$total] $row $lesson: mcpsim run --target $file $lesson --reruns 1" >&2
  status=0 started=$SECONDS
  timeout 600 "$MCPSIM" run --target "$file" "$lesson" --reruns 1 > "$log" 2>&1 || status=$?
  echo "   ($((SECONDS - started)) s)" >&2
  rows="$(summary_rows < "$log")"
  if [[ -z "$rows" ]]; then
    echo "   no verdict (exit $status):" >&2; tail -20 "$log" >&2
    rows="$(printf '%s\tERROR' "$lesson")"
  fi
  while IFS=$'\t' read -r name verdict; do
    echo "   $name: $verdict" >&2
    printf '%s\t%s\t%s\n' "$row" "$name" "$verdict" >> "$results"
  done <<< "$rows"
done

# The verdict lines of cell LESSON in a "NAME<TAB>VERDICT" file: the lesson itself and its steps.
cell_lines() { awk -F'\t' -v l="$1" '$1 == l || index($1, l " [") == 1' "$2"; }
row_results() { awk -F'\t' -v r="$1" 'BEGIN { OFS = "\t" } $1 == r { print $2, $3 }' "$results"; }

status=0
if $check; then
  changed=0
  for cell in "${cells[@]}"; do
    read -r row lesson <<< "$cell"
    expected="$(expected_file "$row")"
    old="$(if [[ -f "$expected" ]]; then cell_lines "$lesson" "$expected"; fi)"
    new="$(row_results "$row" > "$log"; cell_lines "$lesson" "$log")"
    if [[ "$old" == "$new" ]]; then
      echo "held     $row $lesson"
    else
      changed=$((changed + 1))
      echo "CHANGED  $row $lesson (expected in $expected):"
      echo "${old:-(no line)}" | sed 's/^/  was: /'
      echo "${new:-(no verdict)}" | sed 's/^/  now: /'
    fi
  done
  if ((changed > 0)); then
    echo "sdk-matrix: $changed cell(s) changed; if the change is right, record it: scripts/sdk-matrix.sh --update CELL ..."
    status=1
  else
    echo "sdk-matrix: all ${#cells[@]} cell(s) as expected"
  fi
fi

if $update; then
  mkdir -p targets/matrix
  for row in $rows_run; do
    expected="$(expected_file "$row")"
    row_results "$row" > "$log"
    old="$(if [[ -f "$expected" ]]; then grep -v '^#' "$expected" || true; fi)"
    {
      # The file's comment lines are kept; then the lessons in number order: those run take their new lines,
      # the others keep theirs.
      if [[ -f "$expected" ]]; then grep '^#' "$expected" || true; fi
      for lesson in $( (row_cells "$row" | tr ' ' '\n'; cut -f1 <<< "$old" | cut -c1-2) | LC_ALL=C sort -u); do
        name="$(lesson_name "$lesson")"
        if printf '%s\n' "${cells[@]}" | grep -qx "$row $name"; then cell_lines "$name" "$log"; else cell_lines "$name" <(echo "$old"); fi
      done
    } > "$expected.tmp"
    mv "$expected.tmp" "$expected"
    echo "sdk-matrix: wrote $expected" >&2
  done
fi

# The Markdown table: one row per SDK, one column per lesson run.
label() {
  case "$1" in
    mcpsim) echo "mcpsim (this tree)" ;;
    python) echo "Python \`mcp\`" ;;
    typescript) echo "TypeScript SDK v2" ;;
    rust) echo "Rust \`rmcp\`" ;;
  esac
}
title() {
  case "$1" in
    01*) echo "retry elsewhere (01)" ;;
    02*) echo "race (02)" ;;
    03*) echo "decline (03)" ;;
    04*) echo "cancel (04)" ;;
    06*) echo "another principal (06)" ;;
    14*) echo "rotation mid-confirmation (14)" ;;
    15*) echo "two stages at once (15)" ;;
    16*) echo "retirement (16)" ;;
    17*) echo "ephemeral restart (17)" ;;
    18*) echo "deploy: old mints, new finishes (18)" ;;
    19*) echo "deploy: new mints, old finishes (19)" ;;
    20*) echo "deploy during a race (20)" ;;
    *) echo "$1" ;;
  esac
}
# One cell's text: its verdict, or its steps' joined (`PASS ×3`; a step that differs named with its verdict).
cell_text() {
  awk -F'\t' -v l="$1" '
    $1 == l { print $2; exit }
    index($1, l " [") == 1 {
      step = substr($1, length(l) + 3); sub(/\]$/, "", step)
      n++; steps[n] = step; verdicts[n] = $2; count[$2]++
      if ($2 == "PASS") passed = step
    }
    END {
      if (n == 0) exit
      if (n == 1) { print step_text(steps[1], verdicts[1]); exit }
      text = ""
      for (i = 1; i <= n; i++) if (verdicts[i] != "PASS") text = text (text == "" ? "" : "<br>") step_text(steps[i], verdicts[i])
      if (count["PASS"] == 1 && n > 1) text = text (text == "" ? "" : "<br>") step_text(passed, "PASS")
      else if (count["PASS"] > 0) text = text (text == "" ? "" : "<br>") "PASS ×" count["PASS"]
      print text
    }
    function step_text(s, v) { return v " at " s }' "$2"
}
lessons_run="$(printf '%s\n' "${cells[@]}" | cut -d' ' -f2 | LC_ALL=C sort -u)"
table() {
  local header="| SDK (target file) |" rule="|---|" line lesson missing=false
  for lesson in $lessons_run; do header="$header $(title "$lesson") |"; rule="$rule---|"; done
  echo "$header"; echo "$rule"
  for row in $rows_run; do
    row_results "$row" > "$log"
    line="| $(label "$row") (\`$(row_file "$row")\`) |"
    for lesson in $lessons_run; do
      if printf '%s\n' "${cells[@]}" | grep -qx "$row $lesson"; then line="$line $(cell_text "$lesson" "$log") |"; else line="$line — |"; missing=true; fi
    done
    echo "$line"
  done
  echo
  echo "Each cell: \`mcpsim run --target FILE LESSON --reruns 1\` (FILE as in its row, LESSON as in its column);"
  if $missing; then echo "— is a cell not played (not asked for, or a deploy lesson on a file without [deploy]);"; fi
  echo "the whole table: \`scripts/sdk-matrix.sh --out docs/sdk-matrix.md\`."
}

if [[ -n "$out" ]]; then
  if [[ ! -f "$out" ]]; then
    printf '%s\n\n%s\n' "$BEGIN_MARK" "$END_MARK" > "$out"
  fi
  if ! grep -qxF "$BEGIN_MARK" "$out" || ! grep -qxF "$END_MARK" "$out"; then
    echo "sdk-matrix: $out has no table section: put these two lines where the table goes:" >&2
    printf '  %s\n' "$BEGIN_MARK" "$END_MARK" >&2
    exit 2
  fi
  table > "$log.table"
  awk -v begin="$BEGIN_MARK" -v end="$END_MARK" -v table="$log.table" '
    $0 == end { skipping = 0 }
    !skipping { print }
    $0 == begin { print ""; while ((getline l < table) > 0) print l; print ""; skipping = 1 }' "$out" > "$out.tmp"
  rm -f "$log.table"
  mv "$out.tmp" "$out"
  echo "sdk-matrix: wrote the table into $out" >&2
elif ! $check && ! $update; then
  table
fi
exit "$status"
