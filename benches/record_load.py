#!/usr/bin/env python3
"""N sequential resources/list POSTs on one keep-alive connection to URL (a `serve --http` or a `record --http`
proxy in front of one), for the cost measurement of docs/recording.md:

    python3 benches/record_load.py http://127.0.0.1:PORT/mcp 2000
"""
import http.client, json, sys, time, urllib.parse
url = urllib.parse.urlparse(sys.argv[1]); n = int(sys.argv[2])
conn = http.client.HTTPConnection(url.hostname, url.port)
body = json.dumps({"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}})
headers = {"Authorization":"Bearer demo-alice","Content-Type":"application/json","Accept":"application/json, text/event-stream","MCP-Protocol-Version":"2026-07-28","Mcp-Method":"resources/list"}
start = time.perf_counter()
for _ in range(n):
    conn.request("POST", url.path, body, headers); r = conn.getresponse(); r.read(); assert r.status == 200, r.status
print(f"{n} requests in {time.perf_counter()-start:.2f} s")
