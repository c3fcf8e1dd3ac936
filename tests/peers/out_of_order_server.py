"""A stdio MCP server that answers two requests in flight in the reverse of the order they were written, as
servers that run requests concurrently do (rmcp answers each as it finishes). For tests/target.rs: mcpsim must
match answers to requests by id, never drop one as a stray line.

notes_delete-like: round 1 asks `choice`; an accept is held until a second accept arrives, then the second is
answered first (it finds the state consumed) and the first after it (it completes). A lone accept is answered
when stdin ends or after 0.5 s without another one. The tool `count` (the effect probe) lists one item once an
accept completed.
"""
import json
import select
import sys

STATE = "state-1"
consumed = False
held = None


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def settle(request):
    global consumed
    if consumed:
        send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32602, "message": "used", "data": {"reason": "state_consumed"}}})
    else:
        consumed = True
        send({"jsonrpc": "2.0", "id": request["id"], "result": {"resultType": "complete", "content": [], "structuredContent": {"deleted": True}}})


def handle(request):
    global held
    method = request.get("method")
    if "id" not in request:
        return
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": request["id"], "result": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}})
        return
    params = request.get("params", {})
    if method == "tools/call" and params.get("name") == "count":
        # The effect probe: one item once an accept completed.
        send({"jsonrpc": "2.0", "id": request["id"], "result": {"resultType": "complete", "structuredContent": {"done": [1] if consumed else []}}})
        return
    if method != "tools/call":
        send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "no such method"}})
    elif "inputResponses" not in params:
        form = {"method": "elicitation/create", "params": {"mode": "form", "message": "sure?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}
        send({"jsonrpc": "2.0", "id": request["id"], "result": {"resultType": "input_required", "requestState": STATE, "inputRequests": {"choice": form}}})
    elif held is None:
        held = request
    else:
        first, held = held, None
        settle(request)
        settle(first)


# Unbuffered, so select() sees every line still unread (a buffered reader may hold the next one already).
stdin = sys.stdin.buffer.raw
while True:
    ready, _, _ = select.select([stdin], [], [], 0.5)
    if not ready:
        if held is not None:
            first, held = held, None
            settle(first)
        continue
    line = stdin.readline()
    if not line:
        break
    handle(json.loads(line))
if held is not None:
    settle(held)
