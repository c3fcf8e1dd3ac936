#!/usr/bin/env python3
"""Judges one mcp-trace-capture trace with mcp-trace-validator and tells whose finding each failure is.

    python3 .ci/judge-trace.py --validator PATH TRACE.jsonl

The validator reports each failing clause with the trace events (`seq`) that broke it, and the clause's text.
A clause whose text puts the obligation on one party ("the client MUST …", "the server MUST …") is that
party's, wherever its finding points (LIFE-003's missing `notifications/initialized` is found at the server's
answer to `initialize`, but sending it is the client's duty); otherwise a finding whose event the server sent
(direction server-to-client) is the server's and one on an event the client sent is the client's (an SDK's
business, reported but not held against us). Exits 1 if any MUST-level clause has a server-side
finding, 2 if the validator could not judge the trace, 3 if the trace is not one session's (the validator found
both eras in it: a simulated run's export interleaves every client, and a 2025-11-25 session beside
2026-07-28 requests is several sessions the format cannot tell apart); prints the totals and every finding.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

# mcp-trace-validator exit statuses: 0 pass, 1 a clause failed; anything else means no verdict.
VALIDATOR_VERDICT_STATUSES = (0, 1)
# Bound on how long one validation may take.
VALIDATOR_SECONDS_MAX = 120


def obligated_party(clause: dict) -> str | None:
    """The one party the clause's quoted text obliges, if it names exactly one."""
    quote = ((clause.get("source") or {}).get("quote") or "").lower()
    parties = [party for party in ("client", "server") if re.search(rf"\b{party}s? (must|should)\b", quote)]
    return parties[0] if len(parties) == 1 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validator", required=True, help="path of the mcp-trace-validator binary")
    parser.add_argument("trace", help="the JSON Lines trace mcp-trace-capture wrote")
    args = parser.parse_args()

    with open(args.trace, encoding="utf-8") as trace:
        directions = {event["seq"]: event["direction"] for event in map(json.loads, trace)}
    run = subprocess.run(
        [args.validator, "validate", "--format", "json", args.trace],
        capture_output=True,
        text=True,
        timeout=VALIDATOR_SECONDS_MAX,
    )
    if run.returncode not in VALIDATOR_VERDICT_STATUSES:
        print(f"mcp-trace-validator gave no verdict (exit {run.returncode}):\n{run.stderr}{run.stdout}", file=sys.stderr)
        return 2
    report = json.loads(run.stdout)
    revisions = report.get("revisions") or []
    if len(revisions) > 1:
        # Each clause would be judged against the other era's traffic and the other clients' request ids.
        print(f"  not judged: the trace holds {' and '.join(revisions)} traffic of several clients (not one session)")
        return 3

    server_failures = 0
    for clause in report["requirements"]:
        if clause["outcome"] not in ("fail", "warn"):
            continue
        for finding in clause.get("findings", []):
            side = obligated_party(clause) or (
                "server" if directions.get(finding.get("seq")) == "server-to-client" else "client"
            )
            if clause["outcome"] == "fail" and side == "server":
                server_failures += 1
            print(f"  {clause['outcome'].upper()} {clause['id']} ({clause['level']}, {side}-side) seq {finding.get('seq')}: {finding['detail']}")

    totals = report["totals"]
    print(
        f"  validator {report['revision']}: {totals['pass']} pass, {totals['fail']} fail, {totals['warn']} warn, "
        f"{totals['not_observed']} not observed, {totals['excluded']} excluded; "
        f"server-side failures: {server_failures}"
    )
    return 1 if server_failures else 0


if __name__ == "__main__":
    sys.exit(main())
