"""Drives the notes_delete confirmation (discover, tools/list, round 1, round 2 accepting note-7, the same
round 2 replayed) through mcp-trace-capture 0.6.0, to record the traces tests/import.rs imports:

  python3 tests/traces/capture-notes-delete.py http  URL     # URL: the capture proxy in front of serve --http
  python3 tests/traces/capture-notes-delete.py stdio CMD…    # CMD: mcp-trace-capture … stdio -- mcpsim serve …

docs/importing.md has the whole commands. Plain Python (no SDK): the requests are the
ones a conforming 2026-07-28 client sends, with its own clientInfo."""
import json
import subprocess
import sys
import urllib.error
import urllib.request

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "capture-notes-delete.py", "version": "1.0.0"},
}
ARGS = {"workspaceUri": "file:///Users/alice/Documents/Notes", "title": "TPS report"}


def flow(post):
    post(1, "server/discover", {})
    post(2, "tools/list", {})
    form = post(3, "tools/call", {"name": "notes_delete", "arguments": ARGS}, "notes_delete")
    retry = {
        "name": "notes_delete",
        "arguments": ARGS,
        "inputResponses": {"delete_choice": {"action": "accept", "content": {"note_id": "note-7", "confirm": True}}},
        "requestState": form["result"]["requestState"],
    }
    done = post(4, "tools/call", retry, "notes_delete")
    assert done["result"]["structuredContent"]["deleted"] is True, done
    replayed = post(5, "tools/call", retry, "notes_delete")
    assert replayed["error"]["data"]["reason"] == "state_consumed", replayed


def over_http(url):
    def post(id, method, params, name=None):
        body = {"jsonrpc": "2.0", "id": id, "method": method, "params": dict(params, _meta=META)}
        headers = {
            "Authorization": "Bearer demo-alice",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": method,
        }
        if name:
            headers["Mcp-Name"] = name
        request = urllib.request.Request(url.rstrip("/") + "/mcp", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return json.loads(error.read())

    flow(post)


def over_stdio(command):
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def post(id, method, params, name=None):
        body = {"jsonrpc": "2.0", "id": id, "method": method, "params": dict(params, _meta=META)}
        server.stdin.write(json.dumps(body) + "\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())

    try:
        flow(post)
    finally:
        server.stdin.close()
        server.wait(timeout=30)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"] and len(sys.argv) == 3:
        over_http(sys.argv[2])
    elif sys.argv[1:2] == ["stdio"] and len(sys.argv) > 2:
        over_stdio(sys.argv[2:])
    else:
        sys.exit(__doc__)
