#!/usr/bin/env python3
"""A documented run (not a criterion bench): slowloris against the real `mcpsim serve --http`.

Usage: python3 benches/http_attack.py [path/to/mcpsim]   (default target/release/mcpsim, else target/debug)

Starts the server with its documented limits, then, while the attack runs:
- 300 connections that send nothing, and 64 that send half their headers (unauthenticated);
- 64 requests of bob's with complete headers and a body that stalls after one byte;
and meanwhile sends alice's requests one at a time, timing each. Prints how long a stalled connection lived,
how many of bob's stalled requests the server held (the rest were refused 429), and alice's latency.
"""
import json, os, socket, statistics, subprocess, sys, threading, time

BIN = sys.argv[1] if len(sys.argv) > 1 else next(p for p in ("target/release/mcpsim", "target/debug/mcpsim") if os.path.exists(p))
server = subprocess.Popen([BIN, "serve", "--http", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "MCPSIM_LOG": "warn"})
line = ""
while "listening on" not in line:
    line = server.stderr.readline()
host, port = line.split("http://")[1].split("/")[0].split(":")
ADDRESS = (host, int(port))

def body(i):
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}).encode()

def head(token, length):
    return (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: server/discover\r\nContent-Length: {length}\r\n\r\n").encode()

def lifetime(sock, started, lives):
    sock.settimeout(60)
    try:
        answer = sock.recv(65536)
        status = answer.split(b" ")[1].decode() if answer else "closed"
        while sock.recv(65536):
            pass
    except OSError:
        status = "reset"
    lives.append((time.monotonic() - started, status))

lives = {"silent": [], "half headers": [], "bob's stalled bodies": []}
threads = []
def attack(kind, count, payload):
    for _ in range(count):
        sock = socket.create_connection(ADDRESS)
        if payload:
            sock.sendall(payload)
        t = threading.Thread(target=lifetime, args=(sock, time.monotonic(), lives[kind]))
        t.start()
        threads.append(t)

attack("silent", 300, b"")
attack("half headers", 64, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz")
attack("bob's stalled bodies", 64, head("demo-bob", 1000) + b"{")

latencies, failures = [], 0
deadline = time.monotonic() + 12
i = 0
while time.monotonic() < deadline:
    i += 1
    sock = socket.create_connection(ADDRESS)
    payload = body(i)
    started = time.monotonic()
    sock.sendall(head("demo-alice", len(payload)) + payload)
    answer = sock.recv(65536)
    latencies.append((time.monotonic() - started) * 1000)
    if b" 200 " not in answer.split(b"\r\n")[0]:
        failures += 1
    sock.close()
    time.sleep(0.02)
for t in threads:
    t.join()
server.terminate()

for kind, seen in lives.items():
    statuses = {}
    for _, status in seen:
        statuses[status] = statuses.get(status, 0) + 1
    held = [life for life, status in seen if status in ("408", "closed", "reset")]
    print(f"{kind}: {len(seen)} connections; outcomes {statuses}; held ones lived "
          f"{min(held):.2f}-{max(held):.2f} s" if held else f"{kind}: {statuses}")
latencies.sort()
print(f"alice during the attack: {len(latencies)} requests, {failures} not 200; latency p50 {statistics.median(latencies):.1f} ms, "
      f"p99 {latencies[int(len(latencies) * 0.99) - 1]:.1f} ms, max {latencies[-1]:.1f} ms")
