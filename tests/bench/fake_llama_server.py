#!/usr/bin/env python3
"""A stand-in for llama.cpp's llama-server (tests/bench/test_spec_bench.py): answers /health and
/v1/chat/completions with fixed timings (10 tokens in 50 ms, or in --fake-ms; 8 drafted, 6 accepted), and writes
its command line and the requests' message counts to $FAKE_LLAMA_SERVER_LOG."""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

LOG = os.environ.get("FAKE_LLAMA_SERVER_LOG")
MS = 50.0


def log(entry) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200 if self.path == "/health" else 404, {"status": "ok"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        log({"messages": len(body["messages"]), "max_tokens": body["max_tokens"]})
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": "fake answer"}}],
                         "timings": {"predicted_n": 10, "predicted_ms": MS, "draft_n": 8, "draft_n_accepted": 6}})


if __name__ == "__main__":
    argv = sys.argv[1:]
    log({"argv": argv})
    if "--fail" in argv:
        sys.exit(3)
    if "--fake-ms" in argv:
        MS = float(argv[argv.index("--fake-ms") + 1])
    HTTPServer(("127.0.0.1", int(argv[argv.index("--port") + 1])), Handler).serve_forever()
