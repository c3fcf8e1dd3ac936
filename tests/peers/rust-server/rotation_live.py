"""Checks that the Rust SDK's notes server really rotates its requestState key as targets/matrix/rust.toml
configures it, without mcpsim, so a matrix cell cannot pass because the server ignores its keys. One process per
stage of the file (its `env`, the stage's `env` over it, alice's), all on one fresh SQLite file: each seals a
round 1, and each state is answered `cancel` (which claims nothing) on every stage. A state must open exactly
where rmcp's recipe says (rmcp-3.11.0/src/model/request_state.rs:202-231): k1 and k1-k2 seal rs1 with k1, which
k1, k1-k2 and k2-k1 open and the retired k2 refuses; k2-k1 and k2 seal rs2 under kid k2, which every stage but
k1 opens; the own-key stage opens only its own (a second own-key process refuses it). Then a k1 state accepted
on k2-k1 really deletes, and a wrong key configuration stops the server with a message naming the variable,
never a key. Exit 0 when all held, 1 (naming what did not) otherwise.

    python3 tests/peers/rust-server/rotation_live.py [TARGET]    # default targets/matrix/rust.toml
"""
import base64
import os
import subprocess
import sys
import tempfile
import tomllib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from stdio_peer import META, StdioServer  # noqa: E402  (tests/peers/stdio_peer.py)

ARGS = {"workspaceUri": "file:///work/notes", "title": "TPS report"}
ACCEPT = {"action": "accept", "content": {"note_id": "note-7", "confirm": True}}
ROTATION = ["k1", "k1-k2", "k2-k1", "k2"]
# Where a state sealed on each stage opens (rmcp's recipe), and how it is sealed.
OPENS = {
    "k1": {"k1", "k1-k2", "k2-k1"},
    "k1-k2": {"k1", "k1-k2", "k2-k1"},
    "k2-k1": {"k1-k2", "k2-k1", "k2"},
    "k2": {"k1-k2", "k2-k1", "k2"},
    "own-key": {"own-key"},
}
RS2_K2 = "rs2." + base64.urlsafe_b64encode(b"k2").decode().rstrip("=") + "."
SEALED = {"k1": "rs1.", "k1-k2": "rs1.", "k2-k1": RS2_K2, "k2": RS2_K2, "own-key": "rs1."}


def fill(words, data_dir):
    return [word.replace("{data_dir}", data_dir) for word in words]


class Process(StdioServer):
    def __init__(self, command, env):
        super().__init__(command, {**os.environ, "NOTES_BUG": "", **env})

    def answer(self, state, response):
        return self.call({"name": "notes_delete", "arguments": ARGS, "requestState": state,
                          "inputResponses": {"delete_choice": response}})



def opened(answer):
    """True when the cancel was answered (the state opened), False when refused as an invalid state."""
    if "error" in answer and (answer["error"].get("data") or {}).get("reason") == "invalid_request_state":
        return False
    if (answer.get("result", {}).get("structuredContent") or {}).get("outcome") == "cancel":
        return True
    sys.exit(f"neither opened nor refused: {answer}")


def misconfigured(command, base, failures):
    """Wrong key configurations: the server exits non-zero naming the variable, and echoes no key."""
    keys = ["mcpsim-matrix-rust-key-1-0123456789abcdef", "short-secret-key"]
    cases = [
        ({"NOTES_STATE_KEYRING": f"k1={keys[0]}", "NOTES_STATE_ACTIVE_KID": "k1"}, "only one of"),
        ({"NOTES_STATE_KEY": "", "NOTES_STATE_KEYRING": f"k1={keys[1]}", "NOTES_STATE_ACTIVE_KID": "k1"},
         "NOTES_STATE_KEYRING"),
        ({"NOTES_STATE_KEY": "", "NOTES_STATE_KEYRING": f"k1={keys[0]}", "NOTES_STATE_ACTIVE_KID": "k9"},
         "NOTES_STATE_KEYRING"),
        ({"NOTES_STATE_KEY": "", "NOTES_STATE_KEYRING": f"k1={keys[0]}", "NOTES_STATE_ACTIVE_KID": "k1",
          "NOTES_STATE_RS1_FALLBACK": "k0"}, "NOTES_STATE_RS1_FALLBACK"),
        ({"NOTES_STATE_KEY": "", "NOTES_STATE_KEYRING": keys[0]}, "NOTES_STATE_KEYRING"),
        ({"NOTES_STATE_KEY": "", "NOTES_STATE_RS1_SIGNING": "k1"}, "NOTES_STATE_RS1_SIGNING"),
        ({"NOTES_STATE_KEY": ""}, "a requestState key is required"),
    ]
    for env, named in cases:
        run = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10,
                             env={**os.environ, **base, **env})
        echoed = any(key in run.stderr or key in run.stdout for key in keys)
        ok = run.returncode != 0 and named in run.stderr and not echoed
        if not ok:
            failures.append(f"{sorted(env)}: exit {run.returncode}, stderr {run.stderr.strip()!r}")
        print(f"{'ok ' if ok else 'BAD'} refused {', '.join(sorted(env))}: {run.stderr.strip()}")


def main(path):
    with open(path, "rb") as file:
        target = tomllib.load(file)
    failures = []
    if target["rotation"]["stages"] != ROTATION or target["rotation"].get("ephemeral") != "own-key":
        sys.exit(f"{path}: [rotation] is not the recipe this check knows ({ROTATION}, ephemeral own-key)")
    with tempfile.TemporaryDirectory(prefix="rotation-") as data_dir:
        for step in target.get("setup", []):
            subprocess.run(fill(step, data_dir), check=True)
        command = fill(target["command"], data_dir)
        base = {**target.get("env", {}), **target["principals"]["alice"].get("env", {})}
        stages = list(OPENS)
        processes = {name: Process(command, {**base, **target["stages"][name]["env"]}) for name in stages}
        processes["own-key again"] = Process(command, {**base, **target["stages"]["own-key"]["env"]})
        try:
            states = {name: processes[name].call({"name": "notes_delete", "arguments": ARGS})["result"]["requestState"]
                      for name in stages}
            for sealer in stages:
                if not states[sealer].startswith(SEALED[sealer]):
                    failures.append(f"{sealer} sealed {states[sealer][:12]}..., not {SEALED[sealer]}...")
                opens = {opener for opener in processes if opened(processes[opener].answer(states[sealer],
                                                                                         {"action": "cancel"}))}
                ok = opens == OPENS[sealer]
                if not ok:
                    failures.append(f"a state sealed on {sealer} opens on {sorted(opens)}, not {sorted(OPENS[sealer])}")
                print(f"{'ok ' if ok else 'BAD'} sealed on {sealer:7} ({states[sealer][:4]}) opens on: "
                      f"{', '.join(sorted(opens))}")
            # The recipe's point: a confirmation started before the rotation completes after it.
            answer = processes["k2-k1"].answer(states["k1"], ACCEPT)
            deleted = (answer.get("result", {}).get("structuredContent") or {}).get("outcome") == "deleted"
            if not deleted:
                failures.append(f"a k1 state accepted on k2-k1: {answer}")
            print(f"{'ok ' if deleted else 'BAD'} a k1 state accepted on k2-k1: {'deleted' if deleted else answer}")
        finally:
            for process in processes.values():
                process.close()
        misconfigured(command, base, failures)
    for failure in failures:
        print(f"FAILED: {failure}")
    return not failures


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1] if len(sys.argv) > 1 else "targets/matrix/rust.toml") else 1)
