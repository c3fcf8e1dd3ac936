"""A notes server on the official Python SDK (mcp 2.3.0, MCPServer) with an MRTR notes_delete tool, for
fleets: every instance reads and deletes notes in one SQLite file, so mcpsim can run several of them as a
target (targets/python-sdk-*.toml, docs/targets.md).

    python notes_fleet_server.py seed DB          # create DB with the three TPS notes (idempotent)
    python notes_fleet_server.py stdio DB         # serve over stdio

The requestState key is the SDK's business: with NOTES_STATE_KEY set (a deployment-wide secret of at least
32 bytes) every instance seals and opens states with it (`RequestStateSecurity(keys=[key])`, what the SDK's
docs ask for behind a load balancer); without it the SDK's default applies (a random key per process).
NOTES_STATE_KEYS is the SDK's own rotation ring, in its own terms: an ordered, comma-separated key list handed
to `RequestStateSecurity(keys=[...])`, where keys[0] seals and every key opens (mcp/server/request_state.py,
the class's docstring: `[old, new]`, then `[new, old]`, then `[new]` after one TTL; targets/matrix/python.toml).
Set one of the two; an empty value counts as unset (a target's stage clears the key that way).
The delete itself is written carefully: it reports a deletion only when its DELETE removed a row, so a race
between two instances cannot report two deletions of one note.

What the SDK does not do is make a state single-use. With NOTES_BUG unset this server does it correctly: the
state carries a random nonce, a valid accept claims it in a ledger row and deletes the note in ONE SQLite
transaction (BEGIN IMMEDIATE), a decline claims it, a cancel or an invalid answer claims nothing. NOTES_BUG
plants one mistake developers make (the same switches as tests/peers/nosdk/notes_server.py, where each is
described; targets/sdk/python-*.toml): burn-on-cancel, burn-on-invalid, bind-client-info, error-on-retry,
check-then-act, no-single-use (the SDK's default: no ledger; targets/python-sdk-*.toml use it).

NOTES_PRINCIPAL (set per principal by the target file) is the credential the state is bound to
(`RequestStateSecurity(bind_principal=...)`); unset, the SDK's default binding applies (none over stdio).
NOTES_AUDIT=random puts a fresh random `audit` id in every tools/call result's structured content (a value
that differs by design); NOTES_EFFECT_MS makes the delete's effect take that long (a check-then-act window).
"""
import json
import os
import secrets
import sqlite3
import sys
import time

from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)

WORKSPACE = "file:///work/notes"
SEED = [
    ("note-3", WORKSPACE, "TPS report 2023"),
    ("note-7", WORKSPACE, "TPS report 2024"),
    ("note-14", WORKSPACE, "TPS report 2025"),
]


BUGS = ("burn-on-cancel", "burn-on-invalid", "bind-client-info", "error-on-retry", "check-then-act", "no-single-use")


def connect(path):
    db = sqlite3.connect(path, timeout=10, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, workspace TEXT NOT NULL, title TEXT NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS ledger (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL)")
    return db


def client_info_name(rctx):
    """The self-reported client name of a request (what bind-client-info wrongly binds the state to)."""
    meta = (rctx.params or {}).get("_meta") or {}
    info = meta.get("io.modelcontextprotocol/clientInfo") if isinstance(meta, dict) else None
    return info.get("name") if isinstance(info, dict) else None


def state_keys():
    """The requestState key ring from the environment, keys[0] sealing (None: the SDK's per-process default).

    Exits naming the variable, never echoing a key, when it is malformed; the SDK itself refuses a key under 32
    bytes or a duplicate, and that refusal is reported the same way."""
    single, ring = os.environ.get("NOTES_STATE_KEY") or None, os.environ.get("NOTES_STATE_KEYS") or None
    if single is not None and ring is not None:
        sys.exit("set one of NOTES_STATE_KEY (one key) and NOTES_STATE_KEYS (the rotation ring), not both")
    if ring is None and single is None:
        return None
    name, keys = ("NOTES_STATE_KEY", [single]) if ring is None else ("NOTES_STATE_KEYS", ring.split(","))
    if any(not k for k in keys):
        sys.exit("NOTES_STATE_KEYS has an empty entry: give comma-separated keys, the sealing key first")
    try:
        RequestStateSecurity(keys=keys)
    except (TypeError, ValueError) as error:
        sys.exit(f"{name} refused by the SDK: {error}")
    return keys


def serve(path):
    bug = os.environ.get("NOTES_BUG") or None
    if bug is not None and bug not in BUGS:
        sys.exit(f"unknown NOTES_BUG {bug}; one of {', '.join(BUGS)}")
    principal = os.environ.get("NOTES_PRINCIPAL")
    audit = os.environ.get("NOTES_AUDIT") == "random"
    effect_seconds = int(os.environ.get("NOTES_EFFECT_MS", "0")) / 1000
    binding = {}
    if bug == "bind-client-info":
        binding = {"bind_principal": client_info_name}
    elif principal:
        binding = {"bind_principal": lambda rctx: principal}
    keys = state_keys()
    security = RequestStateSecurity(keys=keys, ttl=300, **binding) if keys else None
    if security is None and binding:
        # The SDK's per-process default key (what MCPServer installs when given no policy), still bound to the
        # credential: `ephemeral()` takes no binding, so it is set on the policy it returns.
        security = RequestStateSecurity.ephemeral(ttl=300)
        security.bind_principal = binding["bind_principal"]
    # Still None: MCPServer installs the SDK's default itself (a random key per process, no binding over stdio).
    mcp = MCPServer("notes-fleet", version="0.1.0", request_state_security=security)
    db = connect(path)

    def result(text, structured=None, is_error=False):
        structured = dict(structured or {})
        if audit:
            structured["audit"] = secrets.token_hex(8)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured or None,
                              is_error=is_error)

    def claim(nonce, outcome):
        try:
            db.execute("INSERT INTO ledger (nonce, outcome) VALUES (?, ?)", (nonce, outcome))
            return True
        except sqlite3.IntegrityError:
            return False

    def used():
        return result("this confirmation was already used", {"deleted": False, "outcome": "used"}, is_error=True)

    def effect():
        if effect_seconds > 0:
            time.sleep(effect_seconds)

    def delete(nonce, note_id, claimed):
        deleted = result(f"deleted {note_id}", {"deleted": True, "noteId": note_id, "outcome": "deleted"})
        gone = result(f"{note_id} is already gone", {"deleted": False, "outcome": "gone"}, is_error=True)
        if bug == "no-single-use":
            removed = db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
            effect()
            return deleted if removed == 1 else gone
        if bug == "check-then-act":
            if db.execute("SELECT 1 FROM ledger WHERE nonce = ?", (nonce,)).fetchone():
                return used()
            # The ledger is trusted to make the state single-use, so the row count is not looked at.
            db.execute("DELETE FROM notes WHERE id = ?", (note_id,))
            effect()
            db.execute("INSERT OR IGNORE INTO ledger (nonce, outcome) VALUES (?, 'accepted')", (nonce,))
            return deleted
        # Claim and delete in one transaction: a claim already there means the state was used.
        db.execute("BEGIN IMMEDIATE")
        try:
            if not claimed:
                if db.execute("SELECT 1 FROM ledger WHERE nonce = ?", (nonce,)).fetchone():
                    db.execute("ROLLBACK")
                    return used()
                db.execute("INSERT INTO ledger (nonce, outcome) VALUES (?, 'accepted')", (nonce,))
            removed = db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
            effect()
            if removed != 1:
                db.execute("ROLLBACK")
                return gone
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if bug == "error-on-retry":
            return result(f"{note_id} not found", {"deleted": False, "outcome": "error"}, is_error=True)
        return deleted

    @mcp.tool()
    async def notes_list() -> CallToolResult:
        """Every note (id and title)."""
        rows = db.execute("SELECT id, title FROM notes ORDER BY id").fetchall()
        notes = [{"id": i, "title": t} for i, t in rows]
        return result(json.dumps(notes), {"notes": notes})

    @mcp.tool(annotations=ToolAnnotations(destructiveHint=True, readOnlyHint=False))
    async def notes_delete(workspaceUri: str, title: str, ctx: Context) -> CallToolResult | InputRequiredResult:
        """Delete a note by title inside a workspace; asks the user to pick and confirm."""
        rows = db.execute("SELECT id FROM notes WHERE workspace = ? AND instr(lower(title), lower(?)) > 0 ORDER BY id", (workspaceUri, title))
        candidates = [r[0] for r in rows.fetchall()]
        if ctx.request_state is None:
            caps = ctx.client_capabilities
            elicitation = caps.elicitation if caps else None
            if elicitation is None or (elicitation.form is None and elicitation.url is not None):
                raise MCPError(code=MISSING_REQUIRED_CLIENT_CAPABILITY, message="form elicitation required",
                               data={"requiredCapabilities": {"elicitation": {"form": {}}}})
            if not candidates:
                return CallToolResult(content=[TextContent(type="text", text="no matching note")], is_error=True)
            schema = {"type": "object",
                      "properties": {"note_id": {"type": "string", "enum": candidates, "title": "Note"},
                                     "confirm": {"type": "boolean", "title": "Really delete?"}},
                      "required": ["note_id", "confirm"]}
            return InputRequiredResult(
                input_requests={"delete_choice": ElicitRequest(params=ElicitRequestFormParams(
                    message=f"Which '{title}' should be deleted?", requested_schema=schema))},
                request_state=json.dumps({"candidates": candidates, "nonce": secrets.token_hex(16)}),
            )
        state = json.loads(ctx.request_state)
        nonce = state["nonce"]
        answer = (ctx.input_responses or {}).get("delete_choice")
        if not isinstance(answer, ElicitResult):
            return result("missing delete_choice", is_error=True)
        if answer.action == "decline":
            if bug != "no-single-use" and not claim(nonce, "declined"):
                return used()
            return result("not deleted (decline)", {"deleted": False, "outcome": "decline"})
        if answer.action == "cancel":
            if bug == "burn-on-cancel" and not claim(nonce, "cancelled"):
                return used()
            return result("not deleted (cancel)", {"deleted": False, "outcome": "cancel"})
        claimed = bug == "burn-on-invalid"
        if claimed and not claim(nonce, "answered"):
            return used()
        content = answer.content or {}
        note_id = content.get("note_id")
        if content.get("confirm") is not True or not isinstance(note_id, str) or note_id not in state["candidates"]:
            return result("invalid answer: note_id must be one of the candidates shown and confirm true", is_error=True)
        return delete(nonce, note_id, claimed)

    mcp.run("stdio")


if __name__ == "__main__":
    command, path = sys.argv[1], sys.argv[2]
    if command == "seed":
        db = connect(path)
        db.executemany("INSERT OR REPLACE INTO notes (id, workspace, title) VALUES (?, ?, ?)", SEED)
    elif command == "stdio":
        serve(path)
    else:
        sys.exit(f"unknown command {command}: seed DB | stdio DB")
