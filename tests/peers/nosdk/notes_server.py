"""A notes server with no SDK: MCP 2026-07-28 over stdio, hand-written on the Python standard library only
(json, sqlite3, hmac), with the MRTR flow of notes_delete, for fleets of processes sharing one SQLite file
(targets/sdk/nosdk-*.toml, docs/targets.md "Planted mistakes").

    python3 notes_server.py seed DB      # create DB with the three TPS notes and an empty ledger (idempotent)
    python3 notes_server.py stdio DB     # serve over stdio, one JSON-RPC message a line

Environment:
    NOTES_STATE_KEY   the deployment-wide HMAC key sealing requestState (at least 32 bytes; required)
    NOTES_PRINCIPAL   who this process acts for: the credential a stdio server is started with (required)
    NOTES_BUG         unset: the correct server; or one planted mistake (see BUGS)
    NOTES_AUDIT       "random": every tools/call result's structuredContent carries a fresh random `audit` id
                      (a value that differs by design); unset: no audit id
    NOTES_EFFECT_MS   how long the delete's effect takes, in milliseconds (default 0): the window a
                      check-then-act race needs (under ledger-after-effect and release-on-store-error: how long
                      the step after the delete's commit takes, the window a fault lands in)
    NOTES_BUSY_MS     release-on-store-error only: how long the outcome's write waits for a locked store
                      before it counts as a store error (default 200)

The correct server: the state is sealed (HMAC-SHA256) with the principal, a digest of the arguments, the
candidates shown, an expiry and a random nonce. A valid accept claims the nonce in a ledger row and deletes the
note in ONE SQLite transaction (BEGIN IMMEDIATE): a second accept of the same state, on any process, finds the
row and is refused, and a crash between the two cannot leave one without the other. A decline claims the nonce
(the confirmation is spent); a cancel and an invalid answer (wrong type, missing field, a candidate not shown)
claim nothing, so the same state may be accepted afterwards, once.
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
SERVER_INFO = {"name": "notes-nosdk", "version": "0.1.0"}
WORKSPACE = "file:///work/notes"
SEED = [
    ("note-3", WORKSPACE, "TPS report 2023"),
    ("note-7", WORKSPACE, "TPS report 2024"),
    ("note-14", WORKSPACE, "TPS report 2025"),
]
TTL_SECONDS = 300
INPUT_KEY = "delete_choice"
BUGS = {
    "burn-on-cancel": "the state's nonce is claimed when a cancel arrives",
    "burn-on-invalid": "the nonce is claimed before the answer is validated",
    "bind-client-info": "the state is bound to _meta clientInfo.name instead of the credential (NOTES_PRINCIPAL)",
    "error-on-retry": "the accepted retry deletes the note, then answers isError: true",
    "check-then-act": "the ledger is read, the note deleted, then the nonce claimed (three steps, no transaction)",
    "no-single-use": "no ledger at all (what the SDKs do by default); the delete checks its row count",
    "gone-on-replay": "the live note is looked up before the ledger: a used confirmation's replay is answered "
                      "'already gone', as if nothing had been done (single use holds; the outcome is not honest)",
    # Three that pass crash-only testing and fail only under a fault (docs/targets.md, "Broken servers only
    # faults expose"): each is race-safe (concurrent accepts serialize on the write lock), so 02-accepts-race
    # and replay-concurrent hold.
    "ledger-after-effect": "the delete commits in its own transaction, the ledger row in a second one that "
                           "takes NOTES_EFFECT_MS: a crash between the two leaves the effect without its row",
    "own-clock-expiry": "used nonces are pruned from the ledger once expired by this process's own clock, with "
                        "no grace: a process whose clock runs ahead forgets a state another one still accepts",
    "release-on-store-error": "the claim and the delete commit together, the outcome is written NOTES_EFFECT_MS "
                              "later; when that write fails (a locked store), the claim is released",
}
BUSY_SECONDS = 10

TOOLS = [
    {
        "name": "notes_list",
        "description": "Every note (id and title).",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "notes_delete",
        "description": "Delete a note by title inside a workspace; asks the user to pick and confirm.",
        "inputSchema": {
            "type": "object",
            "properties": {"workspaceUri": {"type": "string"}, "title": {"type": "string"}},
            "required": ["workspaceUri", "title"],
        },
        "annotations": {"destructiveHint": True, "readOnlyHint": False},
    },
]


class RpcError(Exception):
    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def connect(path):
    db = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, workspace TEXT NOT NULL, title TEXT NOT NULL)")
    # exp: when the state a row spent expires (only own-clock-expiry reads it).
    db.execute("CREATE TABLE IF NOT EXISTS ledger (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL, exp REAL)")
    return db


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def digest(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Server:
    def __init__(self, path):
        key = os.environ.get("NOTES_STATE_KEY", "")
        if len(key.encode()) < 32:
            sys.exit("NOTES_STATE_KEY must be set to a shared key of at least 32 bytes")
        self.key = key.encode()
        self.principal = os.environ.get("NOTES_PRINCIPAL", "")
        if not self.principal:
            sys.exit("NOTES_PRINCIPAL must name who this process acts for")
        self.bug = os.environ.get("NOTES_BUG") or None
        if self.bug is not None and self.bug not in BUGS:
            sys.exit(f"unknown NOTES_BUG {self.bug}; one of {', '.join(BUGS)}")
        self.audit = os.environ.get("NOTES_AUDIT") == "random"
        self.effect_seconds = int(os.environ.get("NOTES_EFFECT_MS", "0")) / 1000
        self.busy_ms = int(os.environ.get("NOTES_BUSY_MS", "200"))
        self.db = connect(path)

    # -- requestState ----------------------------------------------------------------------------------------
    def seal(self, payload):
        body = b64(json.dumps(payload, sort_keys=True).encode())
        mac = b64(hmac.new(self.key, body.encode(), hashlib.sha256).digest())
        return f"{body}.{mac}"

    def unseal(self, state):
        invalid = RpcError(-32602, "Invalid or expired requestState", {"reason": "invalid_request_state"})
        if not isinstance(state, str) or state.count(".") != 1:
            raise invalid
        body, mac = state.split(".")
        expected = b64(hmac.new(self.key, body.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(mac, expected):
            raise invalid
        try:
            payload = json.loads(unb64(body))
        except ValueError:
            raise invalid from None
        if not isinstance(payload, dict) or not isinstance(payload.get("exp"), (int, float)) or payload["exp"] < time.time():
            raise invalid
        return payload

    def bound_principal(self, meta):
        if self.bug == "bind-client-info":
            info = meta.get("io.modelcontextprotocol/clientInfo")
            return info.get("name", "") if isinstance(info, dict) else ""
        return self.principal

    # -- results ---------------------------------------------------------------------------------------------
    def result(self, text, structured=None, is_error=False):
        structured = dict(structured or {})
        if self.audit:
            structured["audit"] = secrets.token_hex(8)
        result = {"resultType": "complete", "content": [{"type": "text", "text": text}],
                  "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}
        if structured:
            result["structuredContent"] = structured
        if is_error:
            result["isError"] = True
        return result

    def claim(self, nonce, outcome, exp=None):
        """Claims a nonce on its own (a decline, or a planted mistake); False when it was already claimed."""
        try:
            self.db.execute("INSERT INTO ledger (nonce, outcome, exp) VALUES (?, ?, ?)", (nonce, outcome, exp))
            return True
        except sqlite3.IntegrityError:
            return False

    def used(self):
        return self.result("this confirmation was already used", {"deleted": False, "outcome": "used"}, is_error=True)

    # -- tools -----------------------------------------------------------------------------------------------
    def notes_list(self):
        rows = self.db.execute("SELECT id, title FROM notes ORDER BY id").fetchall()
        notes = [{"id": i, "title": t} for i, t in rows]
        return self.result(json.dumps(notes), {"notes": notes})

    def notes_delete(self, params, meta):
        arguments = params.get("arguments") or {}
        workspace, title = arguments.get("workspaceUri"), arguments.get("title")
        if not isinstance(workspace, str) or not isinstance(title, str):
            return self.result("workspaceUri and title must be strings", is_error=True)
        if self.bug == "own-clock-expiry":
            # Housekeeping that keeps the ledger small: an expired state is refused anyway, so its row looks
            # useless once the state has expired -- by this process's clock, with no grace for the others'.
            self.db.execute("DELETE FROM ledger WHERE exp IS NOT NULL AND exp < ?", (time.time(),))
        state = params.get("requestState")
        if state is None:
            return self.ask(arguments, workspace, title, meta)
        payload = self.unseal(state)
        if payload.get("p") != self.bound_principal(meta) or payload.get("a") != digest(arguments):
            raise RpcError(-32602, "Invalid or expired requestState", {"reason": "invalid_request_state"})
        responses = params.get("inputResponses")
        answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
        if not isinstance(answer, dict) or answer.get("action") not in ("accept", "decline", "cancel"):
            return self.result(f"missing {INPUT_KEY}", is_error=True)
        nonce, exp = payload["n"], payload["exp"]
        action = answer["action"]
        if action == "decline":
            if not self.claim(nonce, "declined", exp):
                return self.used()
            return self.result("not deleted (decline)", {"deleted": False, "outcome": "decline"})
        if action == "cancel":
            if self.bug == "burn-on-cancel" and not self.claim(nonce, "cancelled", exp):
                return self.used()
            return self.result("not deleted (cancel)", {"deleted": False, "outcome": "cancel"})
        claimed = self.bug == "burn-on-invalid"
        if claimed and not self.claim(nonce, "answered", exp):
            return self.used()
        content = answer.get("content")
        note_id = content.get("note_id") if isinstance(content, dict) else None
        if not isinstance(note_id, str) or note_id not in payload["c"] or (content or {}).get("confirm") is not True:
            return self.result("invalid answer: note_id must be one of the candidates shown and confirm true", is_error=True)
        return self.delete(nonce, exp, note_id, claimed)

    def ask(self, arguments, workspace, title, meta):
        caps = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
        elicitation = caps.get("elicitation") if isinstance(caps, dict) else None
        if not isinstance(elicitation, dict) or (elicitation.get("form") is None and elicitation.get("url") is not None):
            raise RpcError(-32021, "form elicitation required", {"requiredCapabilities": {"elicitation": {"form": {}}}})
        rows = self.db.execute(
            "SELECT id FROM notes WHERE workspace = ? AND instr(lower(title), lower(?)) > 0 ORDER BY id", (workspace, title)
        ).fetchall()
        candidates = [r[0] for r in rows]
        if not candidates:
            return self.result("no matching note", is_error=True)
        schema = {"type": "object",
                  "properties": {"note_id": {"type": "string", "enum": candidates, "title": "Note"},
                                 "confirm": {"type": "boolean", "title": "Really delete?"}},
                  "required": ["note_id", "confirm"]}
        payload = {"n": secrets.token_hex(16), "c": candidates, "p": self.bound_principal(meta), "a": digest(arguments),
                   "exp": int(time.time()) + TTL_SECONDS}
        return {"resultType": "input_required",
                "inputRequests": {INPUT_KEY: {"method": "elicitation/create", "params": {
                    "mode": "form", "message": f"Which '{title}' should be deleted?", "requestedSchema": schema}}},
                "requestState": self.seal(payload),
                "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}

    def effect(self):
        if self.effect_seconds > 0:
            time.sleep(self.effect_seconds)

    def delete(self, nonce, exp, note_id, claimed):
        deleted = self.result(f"deleted {note_id}", {"deleted": True, "noteId": note_id, "outcome": "deleted"})
        gone = self.result(f"{note_id} is already gone", {"deleted": False, "outcome": "gone"}, is_error=True)
        if self.bug == "no-single-use":
            removed = self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
            self.effect()
            return deleted if removed == 1 else gone
        if self.bug == "check-then-act":
            if self.db.execute("SELECT 1 FROM ledger WHERE nonce = ?", (nonce,)).fetchone():
                return self.used()
            # The ledger is trusted to make the state single-use, so the row count is not looked at.
            self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,))
            self.effect()
            self.db.execute("INSERT OR IGNORE INTO ledger (nonce, outcome, exp) VALUES (?, 'accepted', ?)", (nonce, exp))
            return deleted
        if self.bug == "gone-on-replay" and not self.db.execute("SELECT 1 FROM notes WHERE id = ?", (note_id,)).fetchone():
            return gone
        if self.bug == "ledger-after-effect":
            return self.delete_then_record(nonce, exp, note_id, deleted, gone)
        if self.bug == "release-on-store-error":
            return self.delete_then_update(nonce, exp, note_id, deleted, gone)
        # The correct way (also under burn-on-*, bind-client-info, error-on-retry, gone-on-replay): claim and delete in one
        # transaction; a claim that conflicts means the state was used, a delete that removed nothing rolls back.
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if not claimed:  # burn-on-invalid claimed it before looking at the answer
                if self.db.execute("SELECT outcome FROM ledger WHERE nonce = ?", (nonce,)).fetchone():
                    self.db.execute("ROLLBACK")
                    return self.used()
                self.db.execute("INSERT INTO ledger (nonce, outcome, exp) VALUES (?, 'accepted', ?)", (nonce, exp))
            removed = self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
            self.effect()
            if removed != 1:
                self.db.execute("ROLLBACK")
                return gone
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        if self.bug == "error-on-retry":
            # The note is deleted; reading it back to describe it then fails, and the failure is what is answered.
            return self.result(f"{note_id} not found", {"deleted": False, "outcome": "error"}, is_error=True)
        return deleted

    def transaction(self, steps):
        """Runs `steps()` inside BEGIN IMMEDIATE ... COMMIT; `steps` returns (commit?, value)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            commit, value = steps()
            self.db.execute("COMMIT" if commit else "ROLLBACK")
            return value
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise

    def delete_then_record(self, nonce, exp, note_id, deleted, gone):
        """ledger-after-effect: the delete (after a look at the ledger) commits on its own; the ledger row is
        written in a second transaction, taken at once (so concurrent accepts, waiting for the write lock, find
        the row), whose outcome record takes NOTES_EFFECT_MS. A process killed in that window rolls the row
        back and leaves the delete committed: a retry elsewhere finds no row and no note, and answers "gone"."""
        def remove():
            if self.db.execute("SELECT 1 FROM ledger WHERE nonce = ?", (nonce,)).fetchone():
                return False, self.used()
            removed = self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
            return removed == 1, deleted if removed == 1 else gone

        answer = self.transaction(remove)
        if answer is gone:
            # No note and no row: another accept of this state may be between its delete and its row (the two
            # commits leave a gap a loaded machine widens). Its row is waited for, as long as writing it takes
            # and a second more: concurrent replays are told "used" as without the bug, and only a process killed
            # in that window (the fault this server is for) leaves a retry to answer "gone".
            deadline = time.monotonic() + self.effect_seconds + 1.0
            while time.monotonic() < deadline:
                if self.db.execute("SELECT 1 FROM ledger WHERE nonce = ?", (nonce,)).fetchone():
                    return self.used()
                time.sleep(0.05)
            return gone
        if answer is not deleted:
            return answer

        def record():
            self.effect()
            self.db.execute("INSERT INTO ledger (nonce, outcome, exp) VALUES (?, 'accepted', ?)", (nonce, exp))
            return True, deleted

        return self.transaction(record)

    def delete_then_update(self, nonce, exp, note_id, deleted, gone):
        """release-on-store-error: the claim and the delete commit together (race-safe, crash-safe); the outcome
        is written NOTES_EFFECT_MS later, waiting at most NOTES_BUSY_MS for the store. When that write fails, the
        handler gives the claim back "so the client can retry" -- but the delete had committed: the retry finds
        no claim and no note, and answers "gone"."""
        def claim_and_remove():
            if self.db.execute("SELECT 1 FROM ledger WHERE nonce = ?", (nonce,)).fetchone():
                return False, self.used()
            self.db.execute("INSERT INTO ledger (nonce, outcome, exp) VALUES (?, 'claimed', ?)", (nonce, exp))
            removed = self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
            return removed == 1, deleted if removed == 1 else gone

        answer = self.transaction(claim_and_remove)
        if answer is not deleted:
            return answer
        self.effect()
        self.db.execute(f"PRAGMA busy_timeout = {self.busy_ms}")
        try:
            self.db.execute("UPDATE ledger SET outcome = 'deleted' WHERE nonce = ?", (nonce,))
            failed = None
        except sqlite3.OperationalError as e:
            failed = e
        self.db.execute(f"PRAGMA busy_timeout = {BUSY_SECONDS * 1000}")
        if failed is not None:
            # Waits (BUSY_SECONDS) for the store to come back, then gives the claim back.
            self.db.execute("DELETE FROM ledger WHERE nonce = ?", (nonce,))
            raise RpcError(-32603, f"the store failed ({failed}); please retry")
        return deleted

    # -- JSON-RPC --------------------------------------------------------------------------------------------
    def handle(self, method, params):
        if method == "initialize":
            raise RpcError(-32601, f"initialize is not supported: this server speaks only {VERSION}",
                           {"supported": [VERSION]})
        if not isinstance(params, dict) or not isinstance(params.get("_meta"), dict):
            raise RpcError(-32602, "params._meta is required")
        meta = params["_meta"]
        version = meta.get("io.modelcontextprotocol/protocolVersion")
        if not isinstance(version, str):
            raise RpcError(-32602, "_meta io.modelcontextprotocol/protocolVersion is required")
        if not isinstance(meta.get("io.modelcontextprotocol/clientCapabilities"), dict):
            raise RpcError(-32602, "_meta io.modelcontextprotocol/clientCapabilities is required")
        if version != VERSION:
            raise RpcError(-32022, "Unsupported protocol version", {"supported": [VERSION], "requested": version})
        if method == "server/discover":
            return {"resultType": "complete", "supportedVersions": [VERSION], "capabilities": {"tools": {}},
                    "ttlMs": 0, "cacheScope": "private", "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}
        if method == "tools/list":
            return {"resultType": "complete", "tools": TOOLS, "ttlMs": 0, "cacheScope": "private",
                    "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}
        if method == "tools/call":
            name = params.get("name")
            if name == "notes_list":
                return self.notes_list()
            if name == "notes_delete":
                return self.notes_delete(params, meta)
            raise RpcError(-32602, f"Unknown tool: {name}")
        raise RpcError(-32601, f"Method not found: {method}")

    def serve(self):
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.write({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
                continue
            if not isinstance(message, dict) or "id" not in message:
                continue  # a notification (or nothing we answer): never answered, never acted on
            reply = {"jsonrpc": "2.0", "id": message["id"]}
            try:
                reply["result"] = self.handle(message.get("method"), message.get("params"))
            except RpcError as e:
                reply["error"] = {"code": e.code, "message": e.message}
                if e.data is not None:
                    reply["error"]["data"] = e.data
            self.write(reply)

    @staticmethod
    def write(value):
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("seed", "stdio"):
        sys.exit("usage: notes_server.py seed DB | stdio DB")
    if sys.argv[1] == "seed":
        db = connect(sys.argv[2])
        db.executemany("INSERT OR REPLACE INTO notes (id, workspace, title) VALUES (?, ?, ?)", SEED)
    else:
        Server(sys.argv[2]).serve()
