"""The official Python MCP SDK (`mcp`, pinned in requirements.txt) completes the notes_delete flow over stdio:
it starts the server command itself (its stdio client), then discover, list, round 1, its elicitation callback
accepting note-7, the SDK's own retry with the requestState, and the note is gone.

    MCPSIM_SERVER_COMMAND='["mcpsim", "record", "--stdio", "--out", "t.jsonl", "--", "mcpsim", "serve", "--stdio"]' \
        python notes_delete_stdio.py

MCPSIM_SERVER_COMMAND is a JSON array: the program and its arguments. Exits 0 with one summary line, or 1 naming
the step that went wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from importlib.metadata import version

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

PROTOCOL_VERSION = "2026-07-28"
WORKSPACE = "file:///Users/alice/Documents/Notes"
CHOSEN_NOTE = "note-7"
# Bound on each request: a server that stops answering fails the run instead of hanging CI.
REQUEST_TIMEOUT_SECONDS = 15.0

elicitations: list[types.ElicitRequestParams] = []
current_step = "start the server"


async def accept_chosen_note(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    """The "user": accepts the candidate the server offers, as a person picking from the form would."""
    elicitations.append(params)
    schema = getattr(params, "requested_schema", None) or {}
    candidates = schema.get("properties", {}).get("note_id", {}).get("enum", [])
    if CHOSEN_NOTE not in candidates:
        raise AssertionError(f"the form offers {CHOSEN_NOTE}: {candidates}")
    return types.ElicitResult(action="accept", content={"note_id": CHOSEN_NOTE, "confirm": True})


def step(name: str) -> None:
    global current_step
    current_step = name


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


async def flow(command: list[str]) -> str:
    server = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(
        stdio_client(server),
        mode=PROTOCOL_VERSION,
        elicitation_callback=accept_chosen_note,
        read_timeout_seconds=REQUEST_TIMEOUT_SECONDS,
    ) as client:
        step("server/discover")
        discovered = types.DiscoverResult.model_validate(await client.session.send_discover(PROTOCOL_VERSION))
        check(PROTOCOL_VERSION in discovered.supported_versions, f"discover offers {PROTOCOL_VERSION}")

        step("tools/list")
        tools = (await client.list_tools()).tools
        check(any(tool.name == "notes_delete" for tool in tools), f"notes_delete is listed: {[t.name for t in tools]}")

        step("tools/call notes_delete (input_required, elicitation, retry)")
        result = await client.call_tool("notes_delete", {"workspaceUri": WORKSPACE, "title": "TPS report"})
        expected = {"deleted": True, "noteId": CHOSEN_NOTE, "outcome": "deleted"}
        check(result.structured_content == expected, f"structuredContent {result.structured_content}")
        check(len(elicitations) == 1, f"the elicitation callback ran once, not {len(elicitations)} times")

        step("resources/list after")
        names = [resource.name for resource in (await client.list_resources(cache_mode="refresh")).resources]
        check(CHOSEN_NOTE not in names, f"{CHOSEN_NOTE} is gone: {names}")
    return f"python mcp {version('mcp')} over stdio: notes_delete complete, {CHOSEN_NOTE} deleted"


def main() -> int:
    text = os.environ.get("MCPSIM_SERVER_COMMAND")
    if not text:
        print('set MCPSIM_SERVER_COMMAND to a JSON array, e.g. ["mcpsim", "serve", "--stdio"]', file=sys.stderr)
        return 2
    command = json.loads(text)
    try:
        print(asyncio.run(flow(command)))
    except Exception as error:  # noqa: BLE001 - every failure is reported with the step it happened in
        print(f"python peer: {current_step} failed:", file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
