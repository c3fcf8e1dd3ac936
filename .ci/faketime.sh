#!/usr/bin/env bash
# Debian's faketime (libfaketime) for the skewed-clock tests and lesson (tests/target_process_faults.rs,
# targets/scenarios/11-expiry-on-a-skewed-clock.sim): installed from Debian's packages when libfaketime is
# missing, as .ci/chromium.sh installs Chromium. Without it the clock test is ignored and the lesson skipped.
set -euo pipefail

say() { echo "faketime.sh: $*" >&2; }

if compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null || [[ -f /usr/lib/faketime/libfaketime.so.1 ]]; then
  say "libfaketime present"
  exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
  say "libfaketime is not installed and this is not root: run 'apt-get install -y faketime' first"
  exit 1
fi
say "installing faketime from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq faketime >&2
say "installed"
