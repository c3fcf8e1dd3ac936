"""The course's reference solution in Python (standard library only): a stateless MCP 2026-07-28 server over
stdio with one destructive tool, `notes_delete`, that asks the user which note to delete and to confirm
(multi-round-trip requests, MRTR). Read it after you have solved the levels (`mcpsim course check`); the
messages it speaks are in docs/wire.md.

    python3 server.py seed DB     # create DB (SQLite) with three notes; run once, before any instance
    python3 server.py stdio DB    # serve one JSON-RPC message a line on stdin/stdout

Environment:
    COURSE_PRINCIPAL      who this process acts for (a stdio server acts for whoever started it)
    COURSE_KEYS           the fleet's keys, "kid=secret,kid=secret": the first signs, every one verifies
    COURSE_EPHEMERAL_KEY  "1": no shared key, one drawn at random by this process (level 8 shows what it does)
    COURSE_BUG            unset: this correct server; "levelN": the mistake that fails level N (see BUGS)

The four ideas, one per comment block marked LESSON below:
  1. Nothing about a confirmation stays in this process: round 1 seals what round 2 needs into
     `requestState` (HMAC-SHA256) and the client carries it back, to any instance.
  2. Every instance holds the same keys, so any of them verifies any state; the key id travels in the state,
     so keys can rotate.
  3. Single use lives in the SHARED store: the state's nonce is claimed in a ledger row in the SAME
     transaction as the delete, so two instances can never both execute one confirmation.
  4. Only a decision consumes: a decline claims the nonce; a cancel and an invalid answer claim nothing.
"""
import base64
import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import sys
import time

VERSION = "2026-07-28"
SERVER_INFO = {"name": "course-python", "version": "1.0.0"}
WORKSPACE = "file:///notes"
NOTES = [("note-3", "TPS report 2023"), ("note-7", "TPS report 2024"), ("note-14", "TPS report 2025")]
INPUT_KEY = "delete_choice"
TTL_SECONDS = 300
BUGS = {
    "level1": "the protocol version in _meta is not checked: any version is served",
    "level2": "the instance that asked owns the confirmation (a sticky session with failover): another "
              "instance finishes it only while the owner is alive",
    "level3": "the accept never writes the ledger: a replay finds the note gone and says so",
    "level4": "check, then act: the ledger is read, the note deleted, and only later the nonce claimed",
    "level5": "a cancel claims the nonce, so the user cannot change their mind and accept",
    "level6": "the state is bound to _meta clientInfo.name (anyone can copy it), not to the credential",
    "level7": "the delete commits, slow work follows, and only then the ledger row, in a second transaction",
    "level8": "only the first key of COURSE_KEYS is held: a state sealed before a rotation is refused",
}
TOOLS = [{
    "name": "notes_delete",
    "description": "Delete a note whose title contains `title`; asks which one, and to confirm.",
    "inputSchema": {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}},
    "annotations": {"destructiveHint": True},
}]


class RpcError(Exception):
    """A JSON-RPC error answer: a code from the spec, and for refusals `data.reason` (docs/wire.md)."""

    def __init__(self, code, message, reason=None, **data):
        super().__init__(message)
        self.code, self.message = code, message
        self.data = dict(data, **({"reason": reason} if reason else {}))


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def digest(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def connect(path):
    # LESSON 3: the notes and the ledger of used states live in one SQLite file every instance opens.
    db = sqlite3.connect(path, timeout=5, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, title TEXT NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS ledger (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL, note TEXT)")
    return db


def result(text, structured, is_error=False):
    answer = {"resultType": "complete", "content": [{"type": "text", "text": text}],
              "structuredContent": structured, "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}
    if is_error:
        answer["isError"] = True
    return answer


class Server:
    def __init__(self, path):
        self.bug = os.environ.get("COURSE_BUG") or None
        if self.bug is not None and self.bug not in BUGS:
            sys.exit(f"unknown COURSE_BUG {self.bug!r}; one of {', '.join(BUGS)}")
        self.principal = os.environ.get("COURSE_PRINCIPAL") or sys.exit("set COURSE_PRINCIPAL")
        # LESSON 2: one key ring for the whole fleet. The first key signs; every key verifies.
        if os.environ.get("COURSE_EPHEMERAL_KEY") == "1":
            self.keys = [(secrets.token_hex(4), secrets.token_bytes(32))]
        else:
            ring = os.environ.get("COURSE_KEYS") or sys.exit("set COURSE_KEYS=kid=secret[,kid=secret…]")
            self.keys = [(kid, secret.encode()) for kid, _, secret in (k.partition("=") for k in ring.split(","))]
            if self.bug == "level8":
                self.keys = self.keys[:1]
        self.db = connect(path)

    # -- LESSON 1 and 2: the sealed state --------------------------------------------------------------------
    def seal(self, payload):
        kid, key = self.keys[0]
        body = b64(json.dumps(payload, sort_keys=True).encode())
        signed = f"{kid}.{body}"
        return f"{signed}.{b64(hmac.new(key, signed.encode(), hashlib.sha256).digest())}"

    def unseal(self, state):
        parts = state.split(".") if isinstance(state, str) else []
        if len(parts) != 3:
            raise RpcError(-32602, "requestState is malformed", "state_malformed")
        kid, body, mac = parts
        key = dict(self.keys).get(kid)
        expected = hmac.new(key or b"", f"{kid}.{body}".encode(), hashlib.sha256).digest()
        if key is None or not hmac.compare_digest(b64(expected), mac):
            raise RpcError(-32602, "requestState failed verification (altered, or sealed with a key not held)",
                           "state_signature")
        try:
            payload = json.loads(unb64(body))
        except ValueError:
            raise RpcError(-32602, "requestState is malformed", "state_malformed") from None
        if payload.get("exp", 0) < time.time():
            raise RpcError(-32602, "requestState expired; call notes_delete again", "state_expired")
        return payload

    # -- JSON-RPC --------------------------------------------------------------------------------------------
    def handle(self, method, params):
        if not isinstance(params, dict) or not isinstance(params.get("_meta"), dict):
            raise RpcError(-32602, "params._meta is required", "meta_invalid")
        meta = params["_meta"]
        version = meta.get("io.modelcontextprotocol/protocolVersion")
        if not isinstance(version, str):
            raise RpcError(-32602, "_meta io.modelcontextprotocol/protocolVersion is required", "meta_invalid")
        if version != VERSION and self.bug != "level1":
            raise RpcError(-32022, "unsupported protocol version", supported=[VERSION], requested=version)
        if method == "server/discover":
            return {"resultType": "complete", "supportedVersions": [VERSION], "capabilities": {"tools": {}},
                    "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}
        if method == "tools/list":
            return {"resultType": "complete", "tools": TOOLS}
        if method == "resources/list":  # the effect probe: one resource per note left
            rows = self.db.execute("SELECT id, title FROM notes ORDER BY id").fetchall()
            return {"resultType": "complete",
                    "resources": [{"uri": f"{WORKSPACE}/{i}", "name": t} for i, t in rows]}
        if method == "tools/call":
            if params.get("name") != "notes_delete":
                raise RpcError(-32602, f"unknown tool {params.get('name')!r}", "unknown_tool")
            return self.notes_delete(params, meta)
        raise RpcError(-32601, f"method not found: {method}")

    def who(self, meta):
        """Who a state is bound to: the credential this process was started with (COURSE_BUG=level6: the name
        the client gives itself in _meta, which any client can copy)."""
        if self.bug == "level6":
            return (meta.get("io.modelcontextprotocol/clientInfo") or {}).get("name")
        return self.principal

    def notes_delete(self, params, meta):
        arguments = params.get("arguments") or {}
        if not isinstance(arguments.get("title"), str):
            raise RpcError(-32602, "arguments.title must be a string", "arguments_invalid")
        state, responses = params.get("requestState"), params.get("inputResponses")
        if state is None and responses is None:
            return self.ask(arguments, meta)
        if state is None or not isinstance(responses, dict):
            raise RpcError(-32602, "requestState and inputResponses come together", "continuation_unpaired")
        payload = self.unseal(state)
        # Bound to who asked and what was asked: another principal, or changed arguments, cannot use it.
        if payload["p"] != self.who(meta) or payload["a"] != digest(arguments):
            raise RpcError(-32602, "requestState was issued for another principal or other arguments",
                           "state_mismatch")
        if self.bug == "level2" and not self.alive(payload["owner"]):
            raise RpcError(-32602, "the instance that asked has stopped; call notes_delete again", "state_expired")
        answer = responses.get(INPUT_KEY)
        if not isinstance(answer, dict) or answer.get("action") not in ("accept", "decline", "cancel"):
            raise RpcError(-32602, f"inputResponses.{INPUT_KEY} is missing", "response_invalid")
        # LESSON 4: a decline is a decision (it spends the state); a cancel is not (nothing is claimed).
        if answer["action"] == "decline":
            previous = self.claim_alone(payload["n"], "declined")
            if previous:
                raise self.consumed(previous)
            return result("not deleted: you declined", {"deleted": False, "outcome": "declined"})
        if answer["action"] == "cancel":
            if self.bug == "level5":
                self.claim_alone(payload["n"], "cancelled")
            return result("not deleted: cancelled", {"deleted": False, "outcome": "cancelled"})
        content = answer.get("content")
        if not isinstance(content, dict) or content.get("note_id") not in payload["c"] or content.get("confirm") is not True:
            # Checked before anything is claimed: an invalid answer consumes nothing, the user can try again.
            raise RpcError(-32602, "the answer must pick a note the form showed and confirm: true", "response_invalid")
        return self.delete(payload["n"], content["note_id"])

    def ask(self, arguments, meta):
        caps = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
        if not isinstance(caps.get("elicitation"), dict):
            raise RpcError(-32021, "this tool asks the user: declare the elicitation capability",
                           requiredCapabilities={"elicitation": {"form": {}}})
        rows = self.db.execute("SELECT id, title FROM notes WHERE instr(lower(title), lower(?)) > 0 ORDER BY id",
                               (arguments["title"],)).fetchall()
        if not rows:
            return result("no note matches", {"deleted": False, "outcome": "no_match"}, is_error=True)
        candidates = [i for i, _ in rows]
        # LESSON 1: everything round 2 needs, sealed; nothing kept here.
        payload = {"p": self.who(meta), "a": digest(arguments), "c": candidates,
                   "n": secrets.token_hex(16), "exp": int(time.time()) + TTL_SECONDS}
        if self.bug == "level2":
            payload["owner"] = os.getpid()
        form = {"mode": "form", "message": "Which note should be deleted? " + ", ".join(f"{i}: {t}" for i, t in rows),
                "requestedSchema": {"type": "object", "required": ["note_id", "confirm"], "properties": {
                    "note_id": {"type": "string", "title": "Note", "enum": candidates},
                    "confirm": {"type": "boolean", "title": "Really delete it?"}}}}
        return {"resultType": "input_required",
                "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": form}},
                "requestState": self.seal(payload)}

    @staticmethod
    def alive(pid):
        """COURSE_BUG=level2: whether the process that asked still runs (signal 0 only looks)."""
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False

    # -- LESSON 3: single use, in the shared store -----------------------------------------------------------
    def consumed(self, previous):
        outcome, note = previous
        return RpcError(-32602, "this confirmation was already used; call notes_delete again", "state_consumed",
                        previousOutcome={"outcome": outcome, **({"noteId": note} if note else {})})

    def claim_alone(self, nonce, outcome):
        """Claims the nonce with nothing else; returns the earlier claim (outcome, note) if there was one."""
        try:
            self.db.execute("INSERT INTO ledger (nonce, outcome) VALUES (?, ?)", (nonce, outcome))
            return None
        except sqlite3.IntegrityError:
            return self.db.execute("SELECT outcome, note FROM ledger WHERE nonce = ?", (nonce,)).fetchone()

    def delete(self, nonce, note_id):
        if self.bug in ("level3", "level4", "level7"):
            return self.delete_wrongly(nonce, note_id)
        # One transaction: claim the nonce, delete the note. BEGIN IMMEDIATE takes the write lock first, so a
        # second accept of the same state, on any process, waits and then finds the row.
        self.db.execute("BEGIN IMMEDIATE")
        try:
            previous = self.db.execute("SELECT outcome, note FROM ledger WHERE nonce = ?", (nonce,)).fetchone()
            if previous:
                self.db.execute("ROLLBACK")
                raise self.consumed(previous)
            if self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount != 1:
                self.db.execute("ROLLBACK")  # deleted by someone else since the form: nothing claimed
                raise RpcError(-32602, f"{note_id} no longer exists", "note_gone")
            self.db.execute("INSERT INTO ledger (nonce, outcome, note) VALUES (?, 'deleted', ?)", (nonce, note_id))
            self.db.execute("COMMIT")
        except sqlite3.Error:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise RpcError(-32603, "the store is unavailable; nothing was deleted, please retry", "store_unavailable")
        return result(f"deleted {note_id}", {"deleted": True, "noteId": note_id, "outcome": "deleted"})

    def delete_wrongly(self, nonce, note_id):
        """The broken variants of `delete` (COURSE_BUG level3, level4, level7): each a real design mistake."""
        deleted = result(f"deleted {note_id}", {"deleted": True, "noteId": note_id, "outcome": "deleted"})
        previous = self.db.execute("SELECT outcome, note FROM ledger WHERE nonce = ?", (nonce,)).fetchone()
        if previous:
            raise self.consumed(previous)
        removed = self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
        if self.bug == "level4":  # the claim comes after the effect: two accepts in between both delete
            time.sleep(0.2)
            self.db.execute("INSERT OR IGNORE INTO ledger (nonce, outcome, note) VALUES (?, 'deleted', ?)", (nonce, note_id))
            return deleted
        if removed != 1:
            if self.bug == "level7":  # another accept may be between its delete and its row: wait for the row
                for _ in range(60):
                    previous = self.db.execute("SELECT outcome, note FROM ledger WHERE nonce = ?", (nonce,)).fetchone()
                    if previous:
                        raise self.consumed(previous)
                    time.sleep(0.05)
            raise RpcError(-32602, f"{note_id} no longer exists", "note_gone")
        if self.bug == "level7":  # slow work after the effect (an audit call); a crash here loses the row
            time.sleep(2)
            self.db.execute("INSERT INTO ledger (nonce, outcome, note) VALUES (?, 'deleted', ?)", (nonce, note_id))
        return deleted

    def serve(self):
        for line in sys.stdin:
            try:
                message = json.loads(line)
            except ValueError:
                self.write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
                continue
            if not isinstance(message, dict) or "id" not in message:
                continue  # a notification: never answered, never acted on
            reply = {"jsonrpc": "2.0", "id": message["id"]}
            try:
                reply["result"] = self.handle(message.get("method"), message.get("params"))
            except RpcError as e:
                reply["error"] = {"code": e.code, "message": e.message, **({"data": e.data} if e.data else {})}
            self.write(reply)

    @staticmethod
    def write(value):
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("seed", "stdio"):
        sys.exit("usage: server.py seed DB | stdio DB")
    if sys.argv[1] == "seed":
        connect(sys.argv[2]).executemany("INSERT OR REPLACE INTO notes (id, title) VALUES (?, ?)", NOTES)
    else:
        Server(sys.argv[2]).serve()
