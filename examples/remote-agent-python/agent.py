#!/usr/bin/env python3
"""A drover remote agent in Python, with the standard library only.

It long-polls a drover server for the requests of one agent, runs each,
and completes or fails it with the request's token:

    POST /v1/agents/{agent}/poll              {"max": 1, "wait_ms": 30000}
    POST /v1/agents/requests/{id}/complete    {"token": "...", "output": {...}}
    POST /v1/agents/requests/{id}/fail        {"token": "...", "error": "...", "permanent": true}

Configuration (environment):
    DROVER_URL    server URL, default http://127.0.0.1:8080
    DROVER_TOKEN  bearer token with the scope "agent:<DROVER_AGENT>" (or "operator")
    DROVER_AGENT  agent name the workflow steps use, default "payments"

Flags:
    --once               handle one request, then exit
    --max-requests N     handle N requests, then exit (0: run until interrupted)
    --wait-ms MS         how long each poll waits for work (default 30000)

The business logic is handle() below: it "charges" the amount of the task
input and returns a receipt. A negative amount is refused for good
(PermanentError: the task's failure policy applies, e.g. compensation);
any other exception is reported as transient, and the server hands the
request out again before its deadline, after a delay that doubles with
each such failure.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone


class PermanentError(Exception):
    """An error that retrying cannot fix: the step fails for good."""


class StaleToken(Exception):
    """The server refused the token: the request is no longer ours."""


def handle(req):
    """Runs one request and returns the step's output (any JSON value)."""
    payload = req["input"] if isinstance(req["input"], dict) else {}
    if req["kind"] == "compensate":
        # Undo a completed step: here, refund what step_output says was charged.
        return {"refunded": req["step_output"], "handled_by": "python"}
    amount = payload.get("amount", 0)
    if not isinstance(amount, (int, float)) or amount < 0:
        raise PermanentError("invalid amount %r" % (amount,))
    # A real agent calls a service here, passing the idempotency key so
    # that a retried call does not charge twice.
    return {
        "handled_by": "python",
        "charged": amount,
        "receipt": "rcpt-" + req["idempotency_key"],
        "input": req["input"],
        "previous_output": req["previous_output"],
    }


def parse_time(s):
    """Parses the server's RFC 3339 times (nanoseconds, "Z") on any Python 3."""
    s = s.replace("Z", "+00:00")
    if "." in s:
        head, rest = s.split(".", 1)
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        s = head + "." + (digits + "000000")[:6] + rest
    return datetime.fromisoformat(s)


class Client:
    def __init__(self, base_url, token, timeout_slack=15):
        self.base = base_url.rstrip("/")
        self.token = token
        self.timeout_slack = timeout_slack

    def post(self, path, body, timeout):
        data = json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base + path, data=data, method="POST")
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read().decode("utf-8"))["error"]
            except Exception:
                err = {"code": str(e.code), "message": e.reason}
            if e.code == 409 and err.get("code") == "stale_token":
                raise StaleToken(err.get("message", ""))
            raise RuntimeError("HTTP %d %s: %s" % (e.code, err.get("code"), err.get("message"))) from e

    def poll(self, agent, max_requests, wait_ms):
        path = "/v1/agents/%s/poll" % urllib.parse.quote(agent, safe="")
        out = self.post(path, {"max": max_requests, "wait_ms": wait_ms}, wait_ms / 1000 + self.timeout_slack)
        return out["requests"]

    def complete(self, req, output):
        self.post("/v1/agents/requests/%d/complete" % req["id"], {"token": req["token"], "output": output}, 30)

    def fail(self, req, message, permanent):
        body = {"token": req["token"], "error": message[:4000] or "failed", "permanent": permanent}
        self.post("/v1/agents/requests/%d/fail" % req["id"], body, 30)


def log(*args):
    print("[agent]", *args, file=sys.stderr, flush=True)


def run_one(client, req):
    deadline = parse_time(req["complete_by"])
    log("request %d: task %s step %d (%s) attempt %d, due %s"
        % (req["id"], req["task_id"], req["step_index"], req["kind"], req["attempt"], req["complete_by"]))
    try:
        output = handle(req)
    except PermanentError as e:
        outcome = ("fail", str(e), True)
    except Exception as e:  # anything else may pass: let it be redelivered
        outcome = ("fail", "%s: %s" % (type(e).__name__, e), False)
    else:
        outcome = ("complete", output, None)
    if datetime.now(timezone.utc) >= deadline:
        # Past CompleteBy the server refuses the result and retries the step.
        log("request %d: deadline passed; sending nothing" % req["id"])
        return
    try:
        if outcome[0] == "complete":
            client.complete(req, outcome[1])
            log("request %d: completed" % req["id"])
        else:
            client.fail(req, outcome[1], outcome[2])
            log("request %d: failed (%s): %s" % (req["id"], "permanent" if outcome[2] else "transient", outcome[1]))
    except StaleToken as e:
        log("request %d: result refused, token stale: %s" % (req["id"], e))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--once", action="store_true", help="handle one request, then exit")
    ap.add_argument("--max-requests", type=int, default=0, help="handle N requests, then exit (0: no limit)")
    ap.add_argument("--wait-ms", type=int, default=30000, help="poll wait in milliseconds (0-60000)")
    args = ap.parse_args()
    limit = 1 if args.once else args.max_requests

    client = Client(os.environ.get("DROVER_URL", "http://127.0.0.1:8080"), os.environ.get("DROVER_TOKEN", ""))
    agent = os.environ.get("DROVER_AGENT", "payments")
    log("serving agent %r at %s" % (agent, client.base))

    handled, backoff = 0, 0.0
    while limit == 0 or handled < limit:
        try:
            reqs = client.poll(agent, 1, args.wait_ms)
        except StaleToken as e:  # not expected on a poll
            raise SystemExit("poll: %s" % e)
        except (urllib.error.URLError, OSError, RuntimeError) as e:
            msg = str(e)
            if "HTTP 4" in msg and "HTTP 429" not in msg:
                raise SystemExit("poll refused: %s" % msg)  # a wrong token, scope or agent name
            backoff = min(max(backoff * 2, 0.1), 10.0)
            log("poll failed (%s); retrying in %.1fs" % (msg, backoff))
            time.sleep(backoff)
            continue
        backoff = 0.0
        for req in reqs:
            run_one(client, req)
            handled += 1
    log("handled %d request(s); exiting" % handled)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
