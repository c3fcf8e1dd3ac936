"""The official Python MCP SDK (`mcp`, pinned in requirements.txt) completes a URL-mode elicitation against
`mcpsim serve --http --out-of-band`: notes_publish answers input_required with an elicitation in mode "url";
the SDK hands it to its elicitation callback, which plays the user. The first time the "user" agrees without
finishing the page (accept is not completion: the server asks again); the second time the callback does the
browser step with plain HTTP (opens the link, signs in with the user's own token, submits the page with its
CSRF token) and accepts; the SDK's own retry then publishes.

    MCPSIM_URL=http://127.0.0.1:PORT/mcp [MCPSIM_TOKEN=demo-alice] python notes_publish_url_mode.py

Exits 0 with one summary line, or 1 naming the step that went wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import traceback
from importlib.metadata import version

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

PROTOCOL_VERSION = "2026-07-28"
WORKSPACE = "file:///Users/alice/Documents/Notes"
NOTE = "note-99"
REQUEST_TIMEOUT_SECONDS = 15.0

tool_calls: list[dict] = []
elicitations: list[types.ElicitRequestParams] = []
pages: list[str] = []
current_step = "connect"
token = os.environ.get("MCPSIM_TOKEN", "demo-alice")


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


def outcome_of(html: str) -> str:
    found = re.search(r'data-outcome="([a-z_]+)"', html)
    return found.group(1) if found else "(none)"


async def browser_step(url: str) -> None:
    """What the person does in a browser: open the link, sign in as themselves, authorize."""
    async with httpx2.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS, follow_redirects=False) as browser:
        opened = await browser.get(url)
        pages.append(outcome_of(opened.text))
        check(outcome_of(opened.text) == "sign_in", f"the page asks to sign in first: {outcome_of(opened.text)}")
        # The sign-in form's CSRF token is bound to the pre-session cookie the page set with it.
        pre_session = opened.headers["set-cookie"].split(";")[0]
        sign_in_csrf = re.search(r'name="csrf" value="([^"]+)"', opened.text).group(1)
        signed = await browser.post(
            f"{url}/sign-in", data={"csrf": sign_in_csrf, "token": token}, headers={"Cookie": pre_session}
        )
        check(signed.status_code == 303, f"sign-in redirects back to the page: {signed.status_code}")
        cookie = signed.headers["set-cookie"]
        check("HttpOnly" in cookie and "SameSite=Strict" in cookie, f"a protected session cookie: {cookie}")
        session = cookie.split(";")[0]
        ready = await browser.get(url, headers={"Cookie": session})
        pages.append(outcome_of(ready.text))
        check(outcome_of(ready.text) == "ready", f"signed in, the page asks to authorize: {outcome_of(ready.text)}")
        csrf = re.search(r'name="csrf" value="([^"]+)"', ready.text).group(1)
        done = await browser.post(url, data={"csrf": csrf}, headers={"Cookie": session})
        pages.append(outcome_of(done.text))
        check(outcome_of(done.text) == "completed", f"the page says authorized: {outcome_of(done.text)}")


async def play_the_user(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    elicitations.append(params)
    check(getattr(params, "mode", None) == "url", f"a URL-mode elicitation: {params}")
    check(getattr(params, "elicitation_id", None) is None, "no elicitationId at 2026-07-28")
    if len(elicitations) > 1:
        await browser_step(params.url)
    # The first time, the user agrees to open the page but does not finish it.
    return types.ElicitResult(action="accept")


def step(name: str) -> None:
    global current_step
    current_step = name


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


async def flow(url: str) -> str:
    http_client = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=REQUEST_TIMEOUT_SECONDS,
        event_hooks={"request": [record_request], "response": [record_response]},
    )
    async with http_client, Client(
        streamable_http_client(url, http_client=http_client),
        mode=PROTOCOL_VERSION,
        elicitation_callback=play_the_user,
        read_timeout_seconds=REQUEST_TIMEOUT_SECONDS,
    ) as client:
        step("tools/list")
        tools = (await client.list_tools()).tools
        check(any(tool.name == "notes_publish" for tool in tools), f"notes_publish is listed: {[t.name for t in tools]}")

        step("tools/call notes_publish (input_required in URL mode, accept, asked again, page, retry)")
        arguments = {"workspaceUri": WORKSPACE, "noteId": NOTE}
        result = await client.call_tool("notes_publish", arguments)

        step("the outcome and the rounds on the wire")
        expected = {"noteId": NOTE, "outcome": "published", "published": True}
        check(result.structured_content == expected, f"structuredContent {result.structured_content}")
        check(len(elicitations) == 2, f"asked twice (accept is not completion), not {len(elicitations)} times")
        check(len(tool_calls) == 3, f"round 1 and two retries, not {len(tool_calls)} tools/call requests")
        first, early, last = tool_calls
        declared = first["request"]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"]
        check("url" in declared, f"the SDK declares URL mode: {declared}")
        check(early["response"]["result"]["resultType"] == "input_required", "accepted before the page: asked again")
        for retry in (early, last):
            check(retry["request"]["params"]["requestState"] == first["response"]["result"]["requestState"], "state echoed")
            check(
                retry["request"]["params"]["inputResponses"] == {"publish_authorization": {"action": "accept"}},
                f"inputResponses {retry['request']['params']['inputResponses']}",
            )
    return (
        f"python mcp {version('mcp')}: notes_publish complete in 3 rounds, URL-mode elicitation shown twice, "
        f"page {' -> '.join(pages)}, {NOTE} published"
    )


def main() -> int:
    url = os.environ.get("MCPSIM_URL")
    if not url:
        print("set MCPSIM_URL to the server, e.g. http://127.0.0.1:8080/mcp (mcpsim serve --http 127.0.0.1:8080 --out-of-band)", file=sys.stderr)
        return 2
    try:
        print(asyncio.run(flow(url)))
    except Exception as error:  # noqa: BLE001 - every failure is reported with the step it happened in
        print(f"python peer: {current_step} failed:", file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
