"""The official Python MCP SDK (`mcp`, pinned in requirements.txt) completes the notes_delete flow against
`mcpsim serve --http`: discover, list, round 1, its elicitation callback accepting note-7, the SDK's own retry
on a fresh id with the requestState echoed byte for byte, and the note is gone.

    MCPSIM_URL=http://127.0.0.1:PORT/mcp [MCPSIM_TOKEN=demo-alice] python notes_delete.py

Exits 0 with one summary line, or 1 naming the step that went wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from importlib.metadata import version

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

PROTOCOL_VERSION = "2026-07-28"
WORKSPACE = "file:///Users/alice/Documents/Notes"
CHOSEN_NOTE = "note-7"
# Bound on each request: a server that stops answering fails the run instead of hanging CI.
REQUEST_TIMEOUT_SECONDS = 15.0

# Every tools/call the SDK sends, and what came back, as seen on the wire: the retry is the SDK's own doing,
# so it is checked from the bytes it sent, not from anything it reports.
tool_calls: list[dict] = []
elicitations: list[types.ElicitRequestParams] = []
# The step under way, named when something fails (the SDK's task groups may wrap the error itself).
current_step = "connect"


async def record_request(request: httpx2.Request) -> None:
    if request.method == "POST" and request.content:
        body = json.loads(request.content)
        if body.get("method") == "tools/call":
            tool_calls.append({"request": body, "response": None})
            request.extensions["mcpsim_tool_call"] = len(tool_calls) - 1


async def record_response(response: httpx2.Response) -> None:
    index = response.request.extensions.get("mcpsim_tool_call")
    if index is not None and response.headers.get("content-type", "").startswith("application/json"):
        tool_calls[index]["response"] = json.loads(await response.aread())


async def accept_chosen_note(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    """The "user": accepts the candidate the server offers, as a person picking from the form would."""
    elicitations.append(params)
    schema = getattr(params, "requested_schema", None) or {}  # absent on URL-mode elicitations
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


async def flow(url: str, token: str) -> str:
    http_client = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=REQUEST_TIMEOUT_SECONDS,
        event_hooks={"request": [record_request], "response": [record_response]},
    )
    async with http_client, Client(
        streamable_http_client(url, http_client=http_client),
        mode=PROTOCOL_VERSION,
        elicitation_callback=accept_chosen_note,
        read_timeout_seconds=REQUEST_TIMEOUT_SECONDS,
    ) as client:
        step("server/discover")
        # The pinned mode adopts the version without a probe; discover explicitly, as a host would.
        discovered = types.DiscoverResult.model_validate(await client.session.send_discover(PROTOCOL_VERSION))
        check(PROTOCOL_VERSION in discovered.supported_versions, f"discover offers {PROTOCOL_VERSION}")
        check(client.protocol_version == PROTOCOL_VERSION, f"negotiated {client.protocol_version}")

        step("tools/list")
        tools = (await client.list_tools()).tools
        check(any(tool.name == "notes_delete" for tool in tools), f"notes_delete is listed: {[t.name for t in tools]}")

        step("resources/list before")
        names = [resource.name for resource in (await client.list_resources()).resources]
        check(CHOSEN_NOTE in names, f"{CHOSEN_NOTE} exists before: {names}")

        step("tools/call notes_delete (input_required, elicitation, retry)")
        arguments = {"workspaceUri": WORKSPACE, "title": "TPS report"}
        result = await client.call_tool("notes_delete", arguments)

        step("the outcome and the rounds on the wire")
        expected = {"deleted": True, "noteId": CHOSEN_NOTE, "outcome": "deleted"}
        check(result.structured_content == expected, f"structuredContent {result.structured_content}")
        check(len(elicitations) == 1, f"the elicitation callback ran once, not {len(elicitations)} times")
        check(len(tool_calls) == 2, f"round 1 and one retry, not {len(tool_calls)} tools/call requests")
        first, retry = tool_calls
        check(first["response"]["result"]["resultType"] == "input_required", "round 1 is input_required")
        check(retry["request"]["id"] != first["request"]["id"], "the retry is a new request with a fresh id")
        check(
            retry["request"]["params"]["requestState"] == first["response"]["result"]["requestState"],
            "requestState echoed byte for byte",
        )
        answer = {"action": "accept", "content": {"note_id": CHOSEN_NOTE, "confirm": True}}
        check(retry["request"]["params"]["inputResponses"] == {"delete_choice": answer}, "inputResponses")
        check(retry["request"]["params"]["arguments"] == arguments, "the retry repeats the original arguments")

        step("resources/list after (cache refreshed)")
        names = [resource.name for resource in (await client.list_resources(cache_mode="refresh")).resources]
        check(CHOSEN_NOTE not in names, f"{CHOSEN_NOTE} is gone: {names}")
        check("note-3" in names and "note-14" in names, f"the other notes stay: {names}")
    return (
        f"python mcp {version('mcp')}: notes_delete complete in 2 rounds "
        f"(ids {first['request']['id']} -> {retry['request']['id']}), {CHOSEN_NOTE} deleted"
    )


def main() -> int:
    url = os.environ.get("MCPSIM_URL")
    if not url:
        print("set MCPSIM_URL to the server, e.g. http://127.0.0.1:8080/mcp (mcpsim serve --http 127.0.0.1:8080)", file=sys.stderr)
        return 2
    try:
        print(asyncio.run(flow(url, os.environ.get("MCPSIM_TOKEN", "demo-alice"))))
    except Exception as error:  # noqa: BLE001 - every failure is reported with the step it happened in
        print(f"python peer: {current_step} failed:", file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
