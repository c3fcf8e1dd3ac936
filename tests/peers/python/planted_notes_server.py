"""A notes server with no SDK (the standard library only) and switches for the mistakes developers make, so
the tests can show mcpsim's verdicts catch each one and nothing on the correct server. Test-only: nothing
ships it.

    python3 planted_notes_server.py seed DB             # the notes, in one SQLite file every instance shares
    python3 planted_notes_server.py stdio DB PRINCIPAL  # one instance over stdio, acting for PRINCIPAL

PLANTED (comma-separated) plants mistakes; without it the server is correct:
  burn-on-cancel     a cancel consumes the confirmation (MISSION.md §3: cancel consumes nothing)
  burn-on-invalid    an answer refused as invalid consumes it (an invalid response consumes nothing)
  bind-client-info   the state is bound to the self-reported _meta clientInfo instead of the principal
  error-on-accept    every valid accept is answered with a tool error (isError: true), nothing deleted
PLANTED_KEY is the requestState key every instance shares.
"""

from __future__ import annotations

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
TTL_SECONDS = 300
PLANTED = set(filter(None, os.environ.get("PLANTED", "").split(",")))
KEY = os.environ.get("PLANTED_KEY", "planted-test-key").encode()
NOTES = [("note-3", "TPS report 2023"), ("note-7", "TPS report 2024"), ("note-14", "TPS report 2025"), ("note-20", "Lunch")]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(claims: dict) -> str:
    payload = b64(json.dumps(claims, sort_keys=True).encode())
    return payload + "." + b64(hmac.new(KEY, payload.encode(), hashlib.sha256).digest())


def unseal(state: str):
    try:
        payload, signature = state.split(".")
        if not hmac.compare_digest(unb64(signature), hmac.new(KEY, payload.encode(), hashlib.sha256).digest()):
            return None
        return json.loads(unb64(payload))
    except Exception:
        return None


class Refused(Exception):
    def __init__(self, code: int, reason: str, message: str, data: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.data = code, reason, data or {}


def digest(arguments) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()


class Server:
    def __init__(self, db: str, principal: str):
        self.db = sqlite3.connect(db, timeout=30, isolation_level=None)
        self.principal = principal

    def claim(self, nonce: str) -> bool:
        try:
            self.db.execute("INSERT INTO used (nonce) VALUES (?)", (nonce,))
            return True
        except sqlite3.IntegrityError:
            return False

    def bound_to(self, meta: dict) -> str:
        if "bind-client-info" in PLANTED:
            return str((meta.get("io.modelcontextprotocol/clientInfo") or {}).get("name"))
        return self.principal

    def handle(self, method: str, params: dict):
        meta = params.get("_meta")
        if not isinstance(meta, dict) or "io.modelcontextprotocol/protocolVersion" not in meta:
            raise Refused(-32602, "meta_invalid", "_meta.protocolVersion is required")
        requested = meta["io.modelcontextprotocol/protocolVersion"]
        if requested != VERSION:
            raise Refused(-32022, "unsupported_version", "unsupported version", {"supported": [VERSION], "requested": requested})
        if method == "tools/list":
            return {"resultType": "complete", "tools": [{"name": "notes_delete", "inputSchema": {"type": "object"}}]}
        if method == "resources/list":
            rows = self.db.execute("SELECT id, title FROM notes ORDER BY id").fetchall()
            return {"resultType": "complete", "resources": [{"uri": f"file:///notes/{i}.md", "name": i, "title": t} for i, t in rows]}
        if method != "tools/call" or params.get("name") != "notes_delete":
            raise Refused(-32602, "unknown_tool", f"no tool {params.get('name')!r}")
        return self.notes_delete(params, meta)

    def notes_delete(self, params: dict, meta: dict):
        arguments = params.get("arguments") or {}
        state, responses = params.get("requestState"), params.get("inputResponses")
        if (state is None) != (responses is None):
            raise Refused(-32602, "continuation_unpaired", "requestState and inputResponses go together")
        if state is None:
            capabilities = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
            if "form" not in (capabilities.get("elicitation") or {}):
                raise Refused(-32021, "missing_capability", "form elicitation needed", {"requiredCapabilities": {"elicitation": {"form": {}}}})
            return self.ask(arguments, meta)
        claims = unseal(state) if isinstance(state, str) else None
        if claims is None:
            raise Refused(-32602, "state_signature", "requestState failed verification")
        if claims["principal"] != self.bound_to(meta) or claims["arguments"] != digest(arguments):
            raise Refused(-32602, "state_mismatch", "requestState was issued for another principal or call")
        if claims["expires"] < time.time():
            raise Refused(-32602, "state_expired", "requestState expired")
        answer = responses.get("delete_choice") if isinstance(responses, dict) else None
        if not isinstance(answer, dict):
            return self.ask(arguments, meta)  # the needed answer is missing: ask again (SPEC-MRTR-17)
        action = answer.get("action")
        if action == "decline":
            if not self.claim(claims["nonce"]):
                raise Refused(-32602, "state_consumed", "this confirmation was already used")
            return {"resultType": "complete", "content": [], "structuredContent": {"deleted": False, "outcome": "declined"}}
        if action == "cancel":
            if "burn-on-cancel" in PLANTED:
                self.claim(claims["nonce"])
            return {"resultType": "complete", "content": [], "structuredContent": {"deleted": False, "outcome": "cancelled"}}
        content = answer.get("content")
        reason = None
        if action != "accept" or not isinstance(content, dict):
            reason = "response_invalid"
        elif not isinstance(content.get("note_id"), str) or content.get("confirm") is not True:
            reason = "response_invalid"
        elif content["note_id"] not in claims["candidates"]:
            reason = "not_a_candidate"
        if reason:
            if "burn-on-invalid" in PLANTED:
                self.claim(claims["nonce"])
            raise Refused(-32602, reason, "the answer does not match the form")
        if "error-on-accept" in PLANTED:
            return {"resultType": "complete", "isError": True, "content": [{"type": "text", "text": "delete failed"}]}
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if not self.claim(claims["nonce"]):
                self.db.execute("ROLLBACK")
                raise Refused(-32602, "state_consumed", "this confirmation was already used")
            deleted = self.db.execute("DELETE FROM notes WHERE id = ?", (content["note_id"],)).rowcount
            self.db.execute("COMMIT")
        except sqlite3.Error:
            self.db.execute("ROLLBACK")
            raise
        if not deleted:
            return {"resultType": "complete", "isError": True, "content": [{"type": "text", "text": "the note is gone"}]}
        return {"resultType": "complete", "content": [], "structuredContent": {"deleted": True, "noteId": content["note_id"], "outcome": "deleted"}}

    def ask(self, arguments: dict, meta: dict):
        title = str(arguments.get("title", ""))
        rows = self.db.execute("SELECT id FROM notes WHERE title LIKE ? ORDER BY id", (f"%{title}%",)).fetchall()
        candidates = [r[0] for r in rows]
        if not candidates:
            return {"resultType": "complete", "isError": True, "content": [{"type": "text", "text": "no note matches"}]}
        claims = {"principal": self.bound_to(meta), "arguments": digest(arguments), "candidates": candidates,
                  "nonce": secrets.token_hex(16), "expires": time.time() + TTL_SECONDS}
        schema = {"type": "object", "properties": {"note_id": {"type": "string", "enum": candidates}, "confirm": {"type": "boolean"}},
                  "required": ["note_id", "confirm"]}
        question = {"method": "elicitation/create", "params": {"mode": "form", "message": "Which note?", "requestedSchema": schema}}
        return {"resultType": "input_required", "inputRequests": {"delete_choice": question}, "requestState": seal(claims)}


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "seed":
        db = sqlite3.connect(sys.argv[2])
        db.execute("CREATE TABLE notes (id TEXT PRIMARY KEY, title TEXT)")
        db.execute("CREATE TABLE used (nonce TEXT PRIMARY KEY)")
        db.executemany("INSERT INTO notes VALUES (?, ?)", NOTES)
        db.commit()
        return 0
    if len(sys.argv) != 4 or sys.argv[1] != "stdio":
        print(__doc__, file=sys.stderr)
        return 2
    server = Server(sys.argv[2], sys.argv[3])
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            print(json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}), flush=True)
            continue
        if not isinstance(message, dict) or "id" not in message:
            continue  # a notification: no answer, and nothing done
        reply = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            reply["result"] = server.handle(message.get("method"), params)
        except Refused as refused:
            reply["error"] = {"code": refused.code, "message": str(refused), "data": {"reason": refused.reason, **refused.data}}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
