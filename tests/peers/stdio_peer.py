"""One stdio server process spoken to line by line, as the peers' checks without mcpsim do
(planted_live.py and each SDK's rotation_live.py): a tools/call written, its one-line answer read."""
import json
import subprocess
import sys
import tempfile

# The 2026-07-28 client _meta every such check sends (a form-capable client named "user").
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "user", "version": "1.0.0"}}


class StdioServer:
    """`argv` started with `env`, its stderr kept in a file (shown, its last 2000 characters, if it exits
    without answering)."""

    def __init__(self, argv, env):
        self.log = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        env=env, text=True)
        self.id = 0

    def call(self, params):
        self.id += 1
        message = {"jsonrpc": "2.0", "id": self.id, "method": "tools/call", "params": {"_meta": META, **params}}
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.log.seek(0)
            sys.exit(f"the server exited without answering {message}:\n{self.log.read()[-2000:]}")
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        self.process.wait(30)
        self.log.close()
