"""Issue 44's done-when scenario: 20 sequential requests to one server for JSON records of different
customers, greedy, 96 tokens each; drafted / accepted tokens over requests 9-20 and tokens/s, per
drafting configuration, each answer checked against plain decoding's.

    python scripts/bench_suffix_records.py [-m MODEL.gguf] [-t THREADS] [-n 96] [--requests 20] [--rounds 1]

Configurations, each a fresh `python -m pyllamaspec.server` (-np 1) asked the same 20 requests in
the same order: plain; --lookup, --spec-type ngram-cache and --spec-type suffix with drafting forced
(--no-adaptive, as the issue measured); suffix and --lookup with the cost model. With --rounds R the
configurations run R times, their order rotating, and tokens/s is the median. Prints a Markdown
table. Default model: the offline SmolLM2-135M-Instruct (Q4_1).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CUSTOMERS = ["Alice Martin", "Bob Chen", "Carla Diaz", "David Okafor", "Eva Novak", "Farid Haddad", "Grace Kim",
             "Hugo Silva", "Ines Moreau", "Jonas Berg", "Kira Tanaka", "Liam Walsh", "Maya Patel", "Noah Fischer",
             "Olga Ivanova", "Pablo Ruiz", "Quinn Murphy", "Rosa Lopez", "Sven Larsen", "Tara Singh"]
CONFIGS = {
    "plain": [],
    "lookup, forced": ["--lookup", "--no-adaptive"],
    "ngram-cache, forced": ["--spec-type", "ngram-cache", "--no-adaptive"],
    "suffix, forced": ["--spec-type", "suffix", "--no-adaptive"],
    "lookup, cost model": ["--lookup"],
    "suffix, cost model": ["--spec-type", "suffix"],
}


def request(name: str) -> list[dict]:
    return [{"role": "user", "content": f"Write a JSON record for the customer {name}: fields name, email, phone, "
                                        f"address, city, country, orders (a list of 2 orders with id, date, total). "
                                        f"Output only JSON."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args: list[str]):
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen([sys.executable, "-m", "pyllamaspec.server", *args, "--port", str(self.port)],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {args}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the server did not start")

    def chat(self, messages: list[dict], n: int) -> dict:
        body = {"messages": messages, "max_tokens": n, "temperature": 0}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/chat/completions",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def one_config(model: str, threads: int, flags: list[str], n: int, requests: int) -> list[dict]:
    """Per request: its timings and answer."""
    s = Server(["-m", model, "-t", str(threads), "-c", "4096", "-np", "1", *flags])
    try:
        out = []
        for name in (CUSTOMERS * (requests // len(CUSTOMERS) + 1))[:requests]:
            got = s.chat(request(name), n)
            t = got["timings"]
            out.append(dict(n=t["predicted_n"], ms=t["predicted_ms"], drafted=t.get("draft_n", 0),
                            accepted=t.get("draft_n_accepted", 0), text=got["choices"][0]["message"]["content"]))
        return out
    finally:
        s.stop()


def main(argv: list[str] | None = None) -> int:
    from pyllamaspec.files.offline import real_model_path
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", help="GGUF (default: the offline SmolLM2-135M-Instruct)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=96)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--first", type=int, default=9, help="the first request counted (1-based; default 9)")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args(argv)
    model = a.model or str(real_model_path("smollm2"))
    names = list(CONFIGS)
    runs: dict[str, list[list[dict]]] = {k: [] for k in names}
    for r in range(a.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            runs[k].append(one_config(model, a.threads, CONFIGS[k], a.n, a.requests))
            print(f"round {r + 1}: {k} done", file=sys.stderr, flush=True)
    plain = runs["plain"][0]
    lo = a.first - 1
    print(f"# {pathlib.Path(model).name}, {a.threads} threads, {a.requests} requests x {a.n} tokens, greedy; "
          f"requests {a.first}-{a.requests} counted; medians of {a.rounds} round(s)")
    print("| configuration | drafted | accepted | acceptance | t/s (requests counted) | vs plain | answers = plain |")
    print("|---|---|---|---|---|---|---|")
    base = statistics.median(sum(x["n"] for x in run[lo:]) / sum(x["ms"] for x in run[lo:]) * 1e3
                             for run in runs["plain"])
    for k in names:
        run = runs[k][0]
        drafted, accepted = sum(x["drafted"] for x in run[lo:]), sum(x["accepted"] for x in run[lo:])
        tps = statistics.median(sum(x["n"] for x in rr[lo:]) / sum(x["ms"] for x in rr[lo:]) * 1e3 for rr in runs[k])
        same = sum(x["text"] == p["text"] for x, p in zip(run, plain))
        print(f"| {k} | {drafted} | {accepted} | {accepted / drafted if drafted else 0:.2f} | {tps:.1f} | "
              f"{tps / base:.2f}x | {same}/{len(run)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
