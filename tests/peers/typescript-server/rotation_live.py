"""Checks that the TypeScript notes server (notes_server.mjs) really seals and opens with the key its
environment names, without mcpsim, so a cell of targets/matrix/typescript.toml cannot pass because the server
ignores its keys. The SDK's codec takes one key and no fallback (its rotation is "switch the one key"), so:
a state sealed under k1 is refused by a process on k2 (the key switched: the old key retired at once) and by a
process on an ephemeral key, with nothing deleted, and still completes on another process on k1; a state sealed
by an ephemeral process is refused by a second ephemeral process and completes on its own; and a process
started with no key or a short one refuses to start. Exit 0 when all of it held, 1 (naming what did not).

    python3 tests/peers/typescript-server/rotation_live.py NODE     # the node that imports the pinned SDK
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from stdio_peer import META, StdioServer  # noqa: E402  (tests/peers/stdio_peer.py)

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes_server.mjs")
# The keys of targets/matrix/typescript.toml's stages.
K1 = "mcpsim-matrix-typescript-k1-0123456789abcdef"
K2 = "mcpsim-matrix-typescript-k2-0123456789abcdef"
ARGS = {"workspaceUri": "file:///work/notes", "title": "TPS report"}
ACCEPT = {"delete_choice": {"action": "accept", "content": {"note_id": "note-7", "confirm": True}}}


class Process(StdioServer):
    def __init__(self, node, db, key):
        env = dict(os.environ, NOTES_PRINCIPAL="alice", NODE_NO_WARNINGS="1")
        for name in ("NOTES_BUG", "NOTES_STATE_KEY", "NOTES_AUDIT"):
            env.pop(name, None)
        if key is not None:
            env["NOTES_STATE_KEY"] = key
        super().__init__([node, SERVER, "stdio", db], env)

    def round1(self):
        return self.call({"name": "notes_delete", "arguments": ARGS})["result"]["requestState"]

    def accept(self, state):
        """What the accept of `state` amounts to: deleted, refused (-32602), or what else it answered."""
        answer = self.call({"name": "notes_delete", "arguments": ARGS, "requestState": state,
                            "inputResponses": ACCEPT})
        if answer.get("error", {}).get("code") == -32602:
            return "refused"
        outcome = ((answer.get("result") or {}).get("structuredContent") or {}).get("outcome")
        return "deleted" if outcome == "deleted" else f"other: {json.dumps(answer)[:200]}"

    def notes(self):
        answer = self.call({"name": "notes_list", "arguments": {}})
        return len(answer["result"]["structuredContent"]["notes"])



def check(node, folder):
    results = []

    def expect(what, got, wanted):
        results.append(got == wanted)
        print(f"{'ok ' if got == wanted else 'BAD'} {what}: {got} (expected {wanted})")

    for key, why in ((None, "no key"), ("too-short-key", "a key of 13 bytes")):
        env = dict(os.environ, NOTES_PRINCIPAL="alice")
        env.pop("NOTES_STATE_KEY", None)
        if key is not None:
            env["NOTES_STATE_KEY"] = key
        started = subprocess.run([node, SERVER, "stdio", os.path.join(folder, "none.db")], input="", text=True,
                                 capture_output=True, timeout=60, env=env)
        expect(f"a process started with {why}", f"exit {started.returncode}", "exit 2")

    db = os.path.join(folder, "notes.db")
    subprocess.run([node, SERVER, "seed", db], check=True, env=dict(os.environ, NODE_NO_WARNINGS="1"))
    minter, k1, k2, own = Process(node, db, K1), Process(node, db, K1), Process(node, db, K2), \
        Process(node, db, "ephemeral")
    try:
        state = minter.round1()
        expect("a k1 state accepted on a process on k2", k2.accept(state), "refused")
        expect("the same on a process on its own ephemeral key", own.accept(state), "refused")
        expect("notes after those two refusals", k2.notes(), 3)
        expect("the same state accepted on another process on k1", k1.accept(state), "deleted")
        expect("notes after it", k1.notes(), 2)
    finally:
        for process in (minter, k1, k2, own):
            process.close()

    subprocess.run([node, SERVER, "seed", db], check=True, env=dict(os.environ, NODE_NO_WARNINGS="1"))
    first, second = Process(node, db, "ephemeral"), Process(node, db, "ephemeral")
    try:
        state = first.round1()
        expect("an ephemeral process's state accepted on a second ephemeral process", second.accept(state),
               "refused")
        expect("the same state accepted on the process that sealed it", first.accept(state), "deleted")
    finally:
        first.close()
        second.close()
    return all(results)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory(prefix="rotation-") as directory:
        sys.exit(0 if check(sys.argv[1], directory) else 1)
