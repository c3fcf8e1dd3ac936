"""Checks, without mcpsim, that the three mistakes of the notes server that only a fault exposes are live
(NOTES_BUG = ledger-after-effect, own-clock-expiry, release-on-store-error; docs/targets.md, "Broken servers only
faults expose"), and that the correct server survives the same fault. Each check runs alice's processes on a fresh
SQLite file, applies its fault by hand, and reads what the retry or replay elsewhere answers:

    ledger-after-effect     the accept written to A, A SIGKILLed halfway through NOTES_EFFECT_MS, the same accept
                            retried on B
    own-clock-expiry        the accept answered on A, round 1 sent to C (whose clock runs 10 minutes ahead,
                            under faketime), the same accept replayed on B
    release-on-store-error  the accept written to A, a write lock held on the SQLite file across the moment A
                            writes the outcome, the same accept retried on B

The correct server answers the retry "deleted" (the killed transaction rolled back) or "spent" (used); a broken
one answers "isError gone" about a note its confirmation deleted. Exit 0 when every check saw what it expects,
1 otherwise; a check that needs `faketime` says SKIP when it is not installed.

    python3 tests/peers/nosdk/faults_live.py
"""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes_server.py")
KEY = "mcpsim-test-key-0123456789abcdef0123456789"
ARGS = {"workspaceUri": "file:///work/notes", "title": "TPS report"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "user", "version": "1.0.0"}}
ACCEPT = {"action": "accept", "content": {"note_id": "note-7", "confirm": True}}
EFFECT_MS = 1000


class Process:
    def __init__(self, db, bug, wrapper=()):
        env = dict(os.environ, NOTES_STATE_KEY=KEY, NOTES_PRINCIPAL="alice", NOTES_EFFECT_MS=str(EFFECT_MS))
        env.pop("NOTES_BUG", None)
        if bug:
            env["NOTES_BUG"] = bug
        self.process = subprocess.Popen(list(wrapper) + [sys.executable, SERVER, "stdio", db], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, text=True)
        self.id = 0

    def write(self, params):
        self.id += 1
        message = {"jsonrpc": "2.0", "id": self.id, "method": "tools/call", "params": {"_meta": META, **params}}
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def read(self):
        line = self.process.stdout.readline()
        if not line:
            sys.exit("a server exited without answering")
        return json.loads(line)

    def call(self, params):
        self.write(params)
        return self.read()

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(30)


def accept(state):
    return {"name": "notes_delete", "arguments": ARGS, "requestState": state, "inputResponses": {"delete_choice": ACCEPT}}


def kind(answer):
    """What an answer amounts to: deleted, spent (refused as used), isError gone, error CODE, or other."""
    if "error" in answer:
        return f"error {answer['error']['code']}"
    result = answer["result"]
    outcome = (result.get("structuredContent") or {}).get("outcome")
    if result.get("isError"):
        return {"used": "spent"}.get(outcome, f"isError {outcome or ''}".strip())
    return {"deleted": "deleted"}.get(outcome, f"complete {outcome}")


def notes(db):
    return [row[0] for row in sqlite3.connect(db).execute("SELECT id FROM notes ORDER BY id")]


def fleet(folder, bug, wrappers):
    db = os.path.join(folder, "notes.db")
    subprocess.run([sys.executable, SERVER, "seed", db], check=True)
    return db, [Process(db, bug, wrapper) for wrapper in wrappers]


def crash_between(folder, bug):
    db, (a, b) = fleet(folder, bug, [(), ()])
    try:
        state = a.call({"name": "notes_delete", "arguments": ARGS})["result"]["requestState"]
        a.write(accept(state))
        time.sleep(EFFECT_MS / 2000)
        a.kill()
        return kind(b.call(accept(state))), notes(db)
    finally:
        a.close()
        b.close()


def clock_ahead(folder, bug):
    db, (a, b, c) = fleet(folder, bug, [(), (), ("faketime", "-f", "+600s")])
    try:
        state = a.call({"name": "notes_delete", "arguments": ARGS})["result"]["requestState"]
        first = kind(a.call(accept(state)))
        if first != "deleted":
            return f"the first accept: {first}", notes(db)
        c.call({"name": "notes_delete", "arguments": ARGS})
        return kind(b.call(accept(state))), notes(db)
    finally:
        for p in (a, b, c):
            p.close()


def store_locked(folder, bug):
    db, (a, b) = fleet(folder, bug, [(), ()])
    try:
        state = a.call({"name": "notes_delete", "arguments": ARGS})["result"]["requestState"]
        a.write(accept(state))
        time.sleep(EFFECT_MS / 2000)
        # The lock waits for a transaction A may still hold (the correct server deletes inside one), then is
        # held past the moment the broken server writes the outcome (EFFECT_MS after its delete).
        lock = sqlite3.connect(db, timeout=10, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        time.sleep(EFFECT_MS / 1000)
        lock.execute("ROLLBACK")
        lock.close()
        first = kind(a.read())
        return f"{kind(b.call(accept(state)))} (first: {first})", notes(db)
    finally:
        a.close()
        b.close()


# (fault, bug, what the retry or replay must amount to), the broken server and the correct one under each.
CHECKS = [
    (crash_between, "ledger-after-effect", "isError gone"),
    (crash_between, None, "deleted"),
    (clock_ahead, "own-clock-expiry", "isError gone"),
    (clock_ahead, None, "spent"),
    (store_locked, "release-on-store-error", "isError gone (first: error -32603)"),
    (store_locked, None, "spent (first: deleted)"),
]

if __name__ == "__main__":
    failed = 0
    for fault, bug, expected in CHECKS:
        name = f"{bug or 'correct'} under {fault.__name__}"
        if fault is clock_ahead and shutil.which("faketime") is None:
            print(f"SKIP {name}: faketime is not installed (Debian package faketime)")
            continue
        with tempfile.TemporaryDirectory(prefix="faults-live-") as folder:
            got, left = fault(folder, bug)
        ok = got == expected and left == ["note-14", "note-3"]
        failed += not ok
        print(f"{'ok ' if ok else 'BAD'} {name}: the retry elsewhere: {got}; notes left: {', '.join(left)} "
              f"(expected {expected}; note-7 deleted once)")
    sys.exit(1 if failed else 0)
