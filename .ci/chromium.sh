#!/usr/bin/env bash
# Debian's chromium for the HTML reports' browser tests (tests/html_report.rs): installed from Debian's
# packages when /usr/bin/chromium is missing, as .ci/postgres.sh installs PostgreSQL. The tests never
# download a browser; without this they fail (they are not skipped).
set -euo pipefail

say() { echo "chromium.sh: $*" >&2; }

if [[ -x /usr/bin/chromium ]]; then
  say "$(/usr/bin/chromium --version 2>/dev/null || echo 'present')"
  exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
  say "Chromium is not installed and this is not root: run 'apt-get install -y chromium' first"
  exit 1
fi
say "installing chromium from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq chromium >&2
say "$(/usr/bin/chromium --version 2>/dev/null || echo 'installed')"
