#!/usr/bin/env bash
# The part of an MSRV check that needs no old toolchain (docs/ci.md, "MSRV"): every package the build compiles
# (normal and build dependencies for this host, default features; dev-dependencies left out) declares a
# `rust-version` no newer than ours, and an edition our `rust-version` knows; Cargo.lock's format is one its
# cargo reads. Clippy's `incompatible_msrv` (std APIs newer than `rust-version`) is the clippy stage's, denied in
# Cargo.toml's [lints.clippy]. Arguments go to `cargo metadata` (`--locked` in CI). Exit 1 naming each offender.
set -euo pipefail
cd "$(dirname "$0")/.."
host="$(rustc -vV | sed -n 's/^host: //p')"
metadata="$(mktemp)"
trap 'rm -f "$metadata"' EXIT
cargo metadata --format-version 1 --filter-platform "$host" "$@" > "$metadata"
python3 - "$metadata" <<'PY'
import json, re, sys

# The editions each Rust release knows, from the release that stabilized them.
EDITIONS = {"2015": (1, 0), "2018": (1, 31), "2021": (1, 56), "2024": (1, 85)}
# Cargo.lock formats, from the cargo release that reads them.
LOCK_FORMATS = {1: (1, 0), 2: (1, 41), 3: (1, 53), 4: (1, 78)}

def version(text):
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))[:3]

def shown(v):
    return ".".join(map(str, v))

metadata = json.load(open(sys.argv[1]))
packages = {p["id"]: p for p in metadata["packages"]}
nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
root = packages[metadata["resolve"]["root"]]
if not root.get("rust_version"):
    sys.exit(f"{root['name']} declares no rust-version in Cargo.toml")
ours = version(root["rust_version"])

# What the build compiles: from the root through normal and build edges, never dev ones.
built, pending = set(), [root["id"]]
while pending:
    node = nodes[pending.pop()]
    for dep in node["deps"]:
        if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"]) and dep["pkg"] not in built:
            built.add(dep["pkg"])
            pending.append(dep["pkg"])

offenders, undeclared = [], []
for id in sorted(built, key=lambda i: (packages[i]["name"], packages[i]["version"])):
    package = packages[id]
    label = f"{package['name']} {package['version']}"
    if package.get("rust_version"):
        if version(package["rust_version"]) > ours:
            offenders.append(f"{label} needs rust {package['rust_version']}")
    else:
        undeclared.append(label)
    edition = EDITIONS.get(package["edition"])
    if edition is None or edition > ours:
        offenders.append(f"{label} is edition {package['edition']}, which rust {shown(ours)} does not know")
edition = EDITIONS.get(root["edition"])
if edition is None or edition > ours:
    offenders.append(f"{root['name']} is edition {root['edition']}, which its rust-version {shown(ours)} does not know")

lock = open(metadata["workspace_root"] + "/Cargo.lock").read()
format = re.search(r"^version = (\d+)$", lock, re.M)
format = int(format.group(1)) if format else 1
if LOCK_FORMATS.get(format, (99, 0)) > ours:
    offenders.append(f"Cargo.lock is format {format}, which the cargo of rust {shown(ours)} does not read")

print(f"rust-version {shown(ours)}, edition {root['edition']}: {len(built)} packages built; "
      f"{len(built) - len(undeclared)} declare a rust-version, {len(undeclared)} declare none (not checkable here)")
if offenders:
    print("newer than our rust-version:")
    for offender in offenders:
        print(f"  {offender}")
    sys.exit(1)
PY
