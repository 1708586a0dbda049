"""A bounded load test of the OpenAI-compatible server: C clients each send R short chat requests
(distinct questions, greedy), all at once; reports requests/s, tokens/s, latency percentiles, and
that every request was answered (none lost, none failed, the server's own count agrees).

    python scripts/server_load.py -m SmolLM2.gguf -md draft.gguf       (starts a server)
    python scripts/server_load.py --url http://127.0.0.1:8080           (a running server)

Extra arguments after -- go to the server (e.g. -- -c 2048 -t 2 --lookup).

Several servers in one run, alternated (one at a time, the order rotating each round; medians of
the rounds), e.g. ours with one slot and four against llama-server b11434 with and without
speculation; each --server is NAME=PROGRAM:ARGS, PROGRAM "pyllamaspec" for ours or a
llama-server binary, ARGS its flags ({T} and {D} stand for -m / -md's paths):

    python scripts/server_load.py -m T.gguf -md D.gguf --clients 8 --requests 16 --max-tokens 64 \
        --rounds 3 --server "np1=pyllamaspec:-m {T} -md {D} -np 1 -c 4096 -t 2" \
        --server "np4=pyllamaspec:-m {T} -md {D} -np 4 -c 4096 -t 2" \
        --server "llama-np4-spec=/path/llama-server:-m {T} -md {D} --spec-type draft-simple -np 4 -c 4096 -t 2" \
        --server "llama-np4=/path/llama-server:-m {T} -np 4 -c 4096 -t 2"

It prints each configuration's median tokens/s, p50/p95 latency, the ratios to the first, and
how many greedy answers differ from the first configuration's (the same question, the same
text expected where the kernels do not depend on the batch's composition).
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


def _start(args: list[str], program: str = "pyllamaspec") -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "pyllamaspec.server"] if program == "pyllamaspec" else [program]
    p = subprocess.Popen([*cmd, *args, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1500):
        if p.poll() is not None:
            sys.exit(f"the server exited with {p.returncode}: {' '.join(cmd + args)}")
        try:
            if _get(url + "/health").get("status") == "ok":
                return p, url
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    p.terminate()
    sys.exit("the server did not come up")


def run(url: str, clients: int, requests: int, max_tokens: int) -> dict:
    before = _get(url + "/health").get("requests", 0)
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
    served = _get(url + "/health").get("requests", before + len(jobs)) - before
    q = statistics.quantiles(lat, n=20)
    tokens = sum(o["usage"]["completion_tokens"] for o in ok)
    answers = {}
    for c in range(clients):
        for i in range(requests):
            _, o = results[c * requests + i]
            answers.setdefault(QUESTIONS[(c + i) % len(QUESTIONS)], set()).add(
                o["choices"][0]["message"]["content"] if o.get("choices") else None)
    return {"requests": len(jobs), "answered": len(ok), "served_by_server": served, "wall_s": round(wall, 2),
            "requests_per_s": round(len(results) / wall, 2), "tokens_per_s": round(tokens / wall, 1),
            "p50_ms": round(1e3 * statistics.median(lat), 1), "p95_ms": round(1e3 * q[18], 1),
            "max_ms": round(1e3 * lat[-1], 1), "tokens": tokens, "answers": answers}


def compare(servers: list[str], a: argparse.Namespace) -> int:
    """The --server configurations, one at a time, alternated over a.rounds rounds."""
    confs = []
    for spec in servers:
        name, _, rest = spec.partition("=")
        program, _, args = rest.partition(":")
        confs.append((name, program, args.format(T=a.model, D=a.model_draft).split()))
    runs: dict[str, list[dict]] = {n: [] for n, _, _ in confs}
    for r in range(a.rounds):
        for name, program, args in confs[r % len(confs):] + confs[:r % len(confs)]:
            proc, url = _start(args, program)
            try:
                _chat(url, "Hi", 4)                       # warm: weights paged in, graphs built
                res = run(url, a.clients, a.requests, a.max_tokens)
            finally:
                proc.terminate()
                proc.wait(60)
            runs[name].append(res)
            print(f"round {r + 1} {name}: {res['tokens_per_s']} t/s, p50 {res['p50_ms']} ms, "
                  f"p95 {res['p95_ms']} ms, answered {res['answered']}/{res['requests']}", file=sys.stderr)
    first = confs[0][0]
    base = statistics.median(x["tokens_per_s"] for x in runs[first])
    ref = runs[first][0]["answers"]
    print(f"{'server':<18}{'t/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'vs ' + first:>12}  answers differing from {first}")
    for name, _, _ in confs:
        xs = runs[name]
        tps = statistics.median(x["tokens_per_s"] for x in xs)
        diff = sum(1 for q, got in xs[0]["answers"].items() if got != ref.get(q))
        print(f"{name:<18}{tps:>8.1f}{statistics.median(x['p50_ms'] for x in xs):>9.0f}"
              f"{statistics.median(x['p95_ms'] for x in xs):>9.0f}{tps / base:>11.2f}x  {diff}/{len(ref)}")
    return 0 if all(x["answered"] == x["requests"] for xs in runs.values() for x in xs) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (else one is started with -m/-md)")
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=10, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--server", action="append", default=[], metavar="NAME=PROGRAM:ARGS",
                    help="a configuration to compare (see the module's docstring); repeat")
    ap.add_argument("--rounds", type=int, default=3, help="with --server: alternated rounds")
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    if a.server:
        return compare(a.server, a)
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
    r.pop("answers")
    print(json.dumps(r, indent=1))
    lost = r["requests"] - r["answered"]
    print(f"{r['requests']} requests ({a.clients} clients x {a.requests}), {r['answered']} answered, {lost} lost; "
          f"{r['requests_per_s']} requests/s; latency p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms", file=sys.stderr)
    return 0 if lost == 0 and r["served_by_server"] == r["requests"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
