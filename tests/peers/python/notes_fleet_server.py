"""A notes server on the official Python SDK (mcp 2.3.0, MCPServer) with an MRTR notes_delete tool, for
fleets: every instance reads and deletes notes in one SQLite file, so mcpsim can run several of them as a
target (targets/python-sdk-*.toml, docs/targets.md).

    python notes_fleet_server.py seed DB          # create DB with the three TPS notes (idempotent)
    python notes_fleet_server.py stdio DB         # serve over stdio

The requestState key is the SDK's business: with NOTES_STATE_KEY set (a deployment-wide secret of at least
32 bytes) every instance seals and opens states with it (`RequestStateSecurity(keys=[key])`, what the SDK's
docs ask for behind a load balancer); without it the SDK's default applies (a random key per process).
The delete itself is written carefully: it reports a deletion only when its DELETE removed a row, so a race
between two instances cannot report two deletions of one note. What the SDK does not do (single use of a
state) is left as the SDK leaves it: that is what the harness is for.
"""
import json
import os
import secrets
import sqlite3
import sys

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


def connect(path):
    db = sqlite3.connect(path, timeout=10, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, workspace TEXT NOT NULL, title TEXT NOT NULL)")
    return db


def serve(path):
    key = os.environ.get("NOTES_STATE_KEY")
    security = RequestStateSecurity(keys=[key], ttl=300) if key else None  # None: the SDK's per-process default
    mcp = MCPServer("notes-fleet", version="0.1.0", request_state_security=security)
    db = connect(path)

    @mcp.tool()
    async def notes_list() -> CallToolResult:
        """Every note (id and title)."""
        rows = db.execute("SELECT id, title FROM notes ORDER BY id").fetchall()
        notes = [{"id": i, "title": t} for i, t in rows]
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(notes))], structured_content={"notes": notes})

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
                request_state=json.dumps({"candidates": candidates, "nonce": secrets.token_hex(8)}),
            )
        state = json.loads(ctx.request_state)
        answer = (ctx.input_responses or {}).get("delete_choice")
        if not isinstance(answer, ElicitResult):
            return CallToolResult(content=[TextContent(type="text", text="missing delete_choice")], is_error=True)
        if answer.action != "accept":
            return CallToolResult(content=[TextContent(type="text", text=f"not deleted ({answer.action})")],
                                  structured_content={"deleted": False, "outcome": answer.action})
        content = answer.content or {}
        note_id = content.get("note_id")
        if content.get("confirm") is not True or note_id not in state["candidates"]:
            return CallToolResult(content=[TextContent(type="text", text="invalid choice")], is_error=True)
        removed = db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount
        if removed != 1:
            return CallToolResult(content=[TextContent(type="text", text=f"{note_id} is already gone")], is_error=True)
        return CallToolResult(content=[TextContent(type="text", text=f"deleted {note_id}")],
                              structured_content={"deleted": True, "noteId": note_id, "outcome": "deleted"})

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
