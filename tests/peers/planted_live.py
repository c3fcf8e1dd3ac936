"""Checks that each planted mistake of a notes server (targets/sdk/, NOTES_BUG) is live, without mcpsim: one
process for alice and one for bob on a fresh SQLite file, round 1 as alice, then a cancel, an invalid answer,
bob's accept copying alice's _meta byte for byte, and alice's valid accept. A correct server answers the cancel
and the invalid answer without spending the state, refuses bob, and deletes for alice; each switch must change
exactly the answer it plants. Exit 0 when every switch did what it plants, 1 (naming it) otherwise.

    python3 tests/peers/planted_live.py COMMAND...      # e.g. python3 tests/peers/nosdk/notes_server.py
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stdio_peer import META, StdioServer  # noqa: E402  (tests/peers/stdio_peer.py)

KEY = "mcpsim-test-key-0123456789abcdef0123456789"
ARGS = {"workspaceUri": "file:///work/notes", "title": "TPS report"}
ACCEPT = {"action": "accept", "content": {"note_id": "note-7", "confirm": True}}
INVALID = {"action": "accept", "content": {"note_id": 12345, "confirm": "yes"}}
# What bob's copied accept and alice's valid accept must get, per switch (the cancel and the invalid answer
# never delete anything, on any switch).
EXPECTED = {
    None: ("refused", "deleted"),
    "burn-on-cancel": ("refused", "spent"),
    "burn-on-invalid": ("refused", "spent"),
    "bind-client-info": ("deleted", "spent"),
    "error-on-retry": ("refused", "isError after deleting"),
}


class Process(StdioServer):
    def __init__(self, command, db, bug, principal):
        env = dict(os.environ, NOTES_STATE_KEY=KEY, NOTES_PRINCIPAL=principal, NODE_NO_WARNINGS="1")
        env.pop("NOTES_BUG", None)
        if bug:
            env["NOTES_BUG"] = bug
        super().__init__(command + ["stdio", db], env)


def kind(answer):
    """What an answer amounts to: refused, deleted, spent (refused as used), isError after deleting, or other."""
    if "error" in answer:
        return "refused"
    result = answer["result"]
    outcome = (result.get("structuredContent") or {}).get("outcome")
    if result.get("isError"):
        return {"used": "spent", "error": "isError after deleting"}.get(outcome, f"isError {outcome or ''}".strip())
    return {"deleted": "deleted"}.get(outcome, f"complete {outcome}")


def check(command, bug):
    with tempfile.TemporaryDirectory(prefix="planted-") as folder:
        return check_in(command, bug, os.path.join(folder, "notes.db"))


def check_in(command, bug, db):
    subprocess.run(command + ["seed", db], check=True, env=dict(os.environ, NODE_NO_WARNINGS="1"))
    alice, bob = Process(command, db, bug, "alice"), Process(command, db, bug, "bob")
    try:
        state = alice.call({"name": "notes_delete", "arguments": ARGS})["result"]["requestState"]

        def retry(process, response):
            return kind(process.call({"name": "notes_delete", "arguments": ARGS, "requestState": state,
                                      "inputResponses": {"delete_choice": response}}))

        cancelled, invalid = retry(alice, {"action": "cancel"}), retry(alice, INVALID)
        got = (retry(bob, ACCEPT), retry(alice, ACCEPT))
    finally:
        alice.close()
        bob.close()
    ok = cancelled == "complete cancel" and invalid.startswith("isError") and got == EXPECTED[bug]
    print(f"{'ok ' if ok else 'BAD'} {bug or 'correct':17} cancel: {cancelled}; invalid: {invalid}; "
          f"bob copying alice's _meta: {got[0]}; alice's accept: {got[1]} (planted: {EXPECTED[bug]})")
    return ok


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    results = [check(sys.argv[1:], bug) for bug in EXPECTED]
    sys.exit(0 if all(results) else 1)
