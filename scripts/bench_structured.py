#!/usr/bin/env python3
"""Tokens per second for JSON-schema output, with and without speculation, and with the
grammar's forced text drafted for free; llama-server b11434 in the same run (plain and with the
same draft model), rounds alternated, medians reported.

Every engine completes the same prompts under the same JSON schemas (a completion: llama.cpp's
json_schema_to_grammar, the /v1/completions `json_schema` field), greedy, up to -n tokens:
  ours plain             the grammar's mask, no drafts at all
  ours plain + forced    no draft model; the text the grammar forces drafted for free
  ours draft             the draft model (the cost model sizes drafts), no forced drafts
  ours draft + forced    the draft model, then forced text
  ours ngram + forced    prompt lookup, cut where the grammar forbids, then forced text
  llama-server plain     -m TARGET
  llama-server draft     -m TARGET -md DRAFT (llama.cpp's defaults for drafts)
Rate: generated tokens over generation time (the prompt excluded), summed over the prompts of
a round; the answers are checked equal across our configurations (greedy is exact).

  python scripts/bench_structured.py [-m TARGET] [-md DRAFT] [--server PATH] [-r 3] [-n 96] [-t 2]
(defaults: SmolLM2-135M at F16 as target, its Q4_1 original as draft)
"""
from __future__ import annotations

import argparse
import json
import pathlib
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"},
                                      "email": {"type": "string", "maxLength": 30}},
     "required": ["name", "age", "email"]},
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                      "unit": {"enum": ["celsius", "fahrenheit"]},
                                      "forecast": {"type": "array", "items": {"type": "object", "properties": {
                                          "day": {"enum": ["monday", "tuesday", "wednesday"]},
                                          "temperature": {"type": "integer"}}, "required": ["day", "temperature"]},
                                                   "minItems": 3, "maxItems": 3}},
     "required": ["city", "unit", "forecast"]},
    {"type": "object", "properties": {"title": {"type": "string", "maxLength": 30},
                                      "ingredients": {"type": "array", "items": {"type": "string", "maxLength": 20},
                                                      "minItems": 3, "maxItems": 3},
                                      "vegetarian": {"type": "boolean"}, "minutes": {"type": "integer"}},
     "required": ["title", "ingredients", "vegetarian", "minutes"]},
]
PROMPTS = ["A customer record as JSON:\n", "The weather forecast as JSON:\n", "A recipe as JSON:\n"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, binary: str, args: list[str]):
        self.port = free_port()
        self.proc = subprocess.Popen([binary, *args, "--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("llama-server did not start")

    def run(self, prompt: str, schema: dict, n: int) -> tuple[int, float, str]:
        body = {"prompt": prompt, "json_schema": schema, "max_tokens": n, "temperature": 0, "cache_prompt": False}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        t = out["timings"]
        return t["predicted_n"], t["predicted_ms"] / 1e3, out["choices"][0]["text"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def ours(target, draft, forced: bool):
    import pyllamaspec

    def run(prompt: str, schema: dict, n: int) -> tuple[int, float, str]:
        r = pyllamaspec.generate(prompt, target, draft, json_schema=schema, max_tokens=n, temperature=0,
                                 forced=forced, cache_prompt=False)
        return r.stats.n_generated, r.stats.t_generate, r.text
    return run


def main() -> None:
    from pyllamaspec import Model
    from pyllamaspec.files.convert import ensure_variant
    from pyllamaspec.files.offline import real_model_path
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", help="target GGUF (default: SmolLM2-135M at F16)")
    ap.add_argument("-md", help="draft GGUF (default: SmolLM2-135M Q4_1)")
    ap.add_argument("--server", default="/work/llamacpp/build-native/bin/llama-server")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=96)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    draft_path = a.md or str(real_model_path("smollm2"))
    target_path = a.m or str(ensure_variant(real_model_path("smollm2"), "f16"))
    common = ["-c", "2048", "-t", str(a.threads), "-np", "1"]
    servers = {"llama-server plain": LlamaServer(a.server, ["-m", target_path, *common]),
               "llama-server draft": LlamaServer(a.server, ["-m", target_path, "-md", draft_path, *common,
                                                            "-td", str(a.threads)])}
    with Model(target_path, n_ctx=2048, n_threads=a.threads) as target, \
         Model(draft_path, n_ctx=2048, n_threads=a.threads, tokenizer=False) as draft:
        engines = {"ours plain": ours(target, None, False), "ours plain + forced": ours(target, None, True),
                   "ours draft": ours(target, draft, False), "ours draft + forced": ours(target, draft, True),
                   "ours ngram + forced": ours(target, "ngram", True),
                   **{k: s.run for k, s in servers.items()}}
        rates: dict[str, list[float]] = {k: [] for k in engines}
        texts: dict[str, list[str]] = {}
        try:
            for rnd in range(a.rounds + 1):           # round 0 warms the caches up, not counted
                for name, run in engines.items():
                    n_tok, secs = 0, 0.0
                    for prompt, schema in zip(PROMPTS, SCHEMAS):
                        k, t, text = run(prompt, schema, a.n)
                        n_tok, secs = n_tok + k, secs + t
                        texts.setdefault(name, []).append(text)
                    if rnd:
                        rates[name].append(n_tok / secs)
        finally:
            for s in servers.values():
                s.stop()
    mine = {tuple(v) for k, v in texts.items() if k.startswith("ours")}
    print(f"# target {pathlib.Path(target_path).name}, draft {pathlib.Path(draft_path).name}, {a.threads} threads, "
          f"-n {a.n}, {len(PROMPTS)} schemas, {a.rounds} rounds; our answers identical across configurations: "
          f"{len(mine) == 1}")
    base = statistics.median(rates["llama-server plain"])
    print(f"{'engine':24s} {'median t/s':>10s} {'rounds':>24s} {'vs llama-server plain':>22s}")
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"{name:24s} {med:10.1f} {' '.join(f'{x:.1f}' for x in r):>24s} {med / base:21.2f}x")


if __name__ == "__main__":
    main()
