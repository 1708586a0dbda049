"""A bounded load test of the OpenAI-compatible server: C clients each send R short chat requests
(distinct questions, greedy), all at once; reports requests/s, latency percentiles, and that
every request was answered (none lost, none failed, the server's own count agrees).

    python scripts/server_load.py -m SmolLM2.gguf -md draft.gguf       (starts a server)
    python scripts/server_load.py --url http://127.0.0.1:8080           (a running server)

Extra arguments after -- go to the server (e.g. -- -c 2048 -t 2 --lookup).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

QUESTIONS = ["What is a cat?", "Name a color.", "What is 2+2?", "Say hello.", "What is rain?",
             "Name a fruit.", "What is the sun?", "Name a tree.", "What is a car?", "Say goodbye."]


def _get(url: str, timeout: float = 5) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _chat(url: str, question: str, max_tokens: int) -> tuple[float, dict]:
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t0, out


def _start(args: list[str]) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "pyllamaspec.server", *args, "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if p.poll() is not None:
            sys.exit(f"the server exited with {p.returncode}")
        try:
            _get(url + "/health")
            return p, url
        except OSError:
            time.sleep(0.2)
    p.terminate()
    sys.exit("the server did not come up")


def run(url: str, clients: int, requests: int, max_tokens: int) -> dict:
    before = _get(url + "/health")["requests"]
    jobs = [(c, i) for c in range(clients) for i in range(requests)]

    def client(c: int) -> list:
        return [_chat(url, QUESTIONS[(c + i) % len(QUESTIONS)], max_tokens) for i in range(requests)]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        results = [r for rs in ex.map(client, range(clients)) for r in rs]
    wall = time.perf_counter() - t0
    lat = sorted(t for t, _ in results)
    ok = [o for _, o in results if o.get("choices") and o["choices"][0]["message"]["content"]
          and o["choices"][0]["finish_reason"] in ("stop", "length")]
    served = _get(url + "/health")["requests"] - before
    q = statistics.quantiles(lat, n=20)
    return {"requests": len(jobs), "answered": len(ok), "served_by_server": served, "wall_s": round(wall, 2),
            "requests_per_s": round(len(results) / wall, 2), "p50_ms": round(1e3 * statistics.median(lat), 1),
            "p95_ms": round(1e3 * q[18], 1), "max_ms": round(1e3 * lat[-1], 1),
            "tokens": sum(o["usage"]["completion_tokens"] for o in ok)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (else one is started with -m/-md)")
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=10, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=8)
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    proc = None
    url = a.url
    if url is None:
        if not a.model:
            ap.error("give --url or -m")
        proc, url = _start(["-m", a.model] + (["-md", a.model_draft] if a.model_draft else []) + extra)
    try:
        r = run(url, a.clients, a.requests, a.max_tokens)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    print(json.dumps(r, indent=1))
    lost = r["requests"] - r["answered"]
    print(f"{r['requests']} requests ({a.clients} clients x {a.requests}), {r['answered']} answered, {lost} lost; "
          f"{r['requests_per_s']} requests/s; latency p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms", file=sys.stderr)
    return 0 if lost == 0 and r["served_by_server"] == r["requests"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
