"""Checks that the notes server on the Python SDK (notes_fleet_server.py) really rotates its requestState keys as
configured, without mcpsim: one process per stage of targets/matrix/python.toml (the SDK's recipe: `[k1]`,
`[k1, k2]`, `[k2, k1]`, `[k2]`, through NOTES_STATE_KEYS), one on the old single NOTES_STATE_KEY, and two on the
SDK's per-process default key, all on one SQLite file. Each mints a state (round 1); each state is then answered
with a cancel (which spends nothing) on every process: it must open exactly where the ring holds the key that
sealed it (keys[0] of the minting stage; a per-process key only in its own process), and be refused with the
SDK's -32602 elsewhere. Then a state sealed under k1 is accepted on `[k2]` (refused, nothing deleted) and on
`[k2, k1]` (deleted), and a malformed configuration is refused at start without echoing a key. So a matrix cell
cannot pass because the server ignores its keys. Exit 0 when all held, 1 (naming each miss) otherwise.

    python3 tests/peers/python/rotation_live.py PYTHON   # an interpreter with the pinned SDK (.ci/peers.sh --venv)
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from stdio_peer import META, StdioServer  # noqa: E402  (tests/peers/stdio_peer.py)

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes_fleet_server.py")
K1 = "mcpsim-rotation-test-key-one-0123456789abcdef"
K2 = "mcpsim-rotation-test-key-two-0123456789abcdef"
ARGS = {"workspaceUri": "file:///work/notes", "title": "TPS report"}
ACCEPT = {"action": "accept", "content": {"note_id": "note-7", "confirm": True}}
# Each process: its environment, the key it seals with, the keys it opens.
STAGES = {
    "k1": ({"NOTES_STATE_KEYS": K1}, K1, {K1}),
    "k1-k2": ({"NOTES_STATE_KEYS": f"{K1},{K2}"}, K1, {K1, K2}),
    "k2-k1": ({"NOTES_STATE_KEYS": f"{K2},{K1}"}, K2, {K1, K2}),
    "k2": ({"NOTES_STATE_KEYS": K2}, K2, {K2}),
    "single-k1": ({"NOTES_STATE_KEY": K1}, K1, {K1}),
    "ephemeral-a": ({}, "a", {"a"}),
    "ephemeral-b": ({}, "b", {"b"}),
}


def environment(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOTES_")}
    return dict(env, NOTES_PRINCIPAL="alice", **extra)


class Process(StdioServer):
    def __init__(self, python, db, extra):
        # The SDK logs every refusal's reason on stderr: kept in a file, shown if the process dies.
        super().__init__([python, SERVER, "stdio", db], environment(extra))

    def answer(self, state, response):
        return kind(self.call({"name": "notes_delete", "arguments": ARGS, "requestState": state,
                               "inputResponses": {"delete_choice": response}}))


def kind(answer):
    """opened (the cancel was answered by the tool), refused (the SDK's -32602), deleted, spent, or other."""
    error = answer.get("error")
    if error is not None:
        return "refused" if error.get("code") == -32602 else f"error {error.get('code')}"
    outcome = (answer["result"].get("structuredContent") or {}).get("outcome")
    return {"cancel": "opened", "deleted": "deleted", "used": "spent"}.get(outcome, f"other {outcome}")


def notes(process):
    return len(process.call({"name": "notes_list", "arguments": {}})["result"]["structuredContent"]["notes"])


def refused_at_start(python, db, extra, words):
    """A malformed configuration: the process exits non-zero at start, naming the problem, echoing no key."""
    run = subprocess.run([python, SERVER, "stdio", db], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         env=environment(extra), timeout=120)
    secrets = [part for value in extra.values() for part in value.split(",") if part]
    ok = run.returncode != 0 and words in run.stderr and not any(s in run.stderr for s in secrets)
    print(f"{'ok ' if ok else 'BAD'} refused at start {sorted(extra)}: exit {run.returncode}, "
          f"{run.stderr.strip().splitlines()[-1] if run.stderr.strip() else 'nothing said'}")
    return ok


def check(python, db):
    subprocess.run([python, SERVER, "seed", db], check=True)
    processes = {name: Process(python, db, extra) for name, (extra, _, _) in STAGES.items()}
    ok = True
    try:
        states = {name: p.call({"name": "notes_delete", "arguments": ARGS})["result"]["requestState"]
                  for name, p in processes.items()}
        for minted, (_, seals, _) in STAGES.items():
            got, misses = [], []
            for opener, (_, _, opens) in STAGES.items():
                want = "opened" if seals in opens else "refused"
                have = processes[opener].answer(states[minted], {"action": "cancel"})
                got.append(f"{opener} {have}")
                if have != want:
                    misses.append(f"{opener}: {have}, expected {want}")
            print(f"{'ok ' if not misses else 'BAD'} sealed on {minted:11} -> {'; '.join(misses or got)}")
            ok = ok and not misses
        # Retirement, then the accept that the ring still allows: nothing deleted, then the note deleted once.
        retired = processes["k2"].answer(states["k1"], ACCEPT)
        left = notes(processes["k2"])
        rolled = processes["k2-k1"].answer(states["k1"], ACCEPT)
        replay = processes["k1-k2"].answer(states["k1"], ACCEPT)
        flow = (retired, left, rolled, replay, notes(processes["k1"]))
        held = flow == ("refused", 3, "deleted", "spent", 2)
        print(f"{'ok ' if held else 'BAD'} sealed on k1: accept on k2 {retired} ({left} notes left), on k2-k1 "
              f"{rolled}, again on k1-k2 {replay} ({flow[4]} notes left)")
        ok = ok and held
    finally:
        for p in processes.values():
            p.close()
    ok = refused_at_start(python, db, {"NOTES_STATE_KEYS": f"{K1},,{K2}"}, "empty entry") and ok
    ok = refused_at_start(python, db, {"NOTES_STATE_KEYS": f"{K2},short-secret-value"}, "at least 32 bytes") and ok
    ok = refused_at_start(python, db, {"NOTES_STATE_KEYS": f"{K1},{K1}"}, "duplicates") and ok
    ok = refused_at_start(python, db, {"NOTES_STATE_KEY": K1, "NOTES_STATE_KEYS": K2}, "not both") and ok
    return ok


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory(prefix="rotation-") as folder:
        sys.exit(0 if check(sys.argv[1], os.path.join(folder, "notes.db")) else 1)
