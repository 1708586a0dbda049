"""This checkout's generate() against another checkout's, in one run: the same prompts, greedy,
plain and speculative (the model's Q4_0 variant as the draft), on the offline models; rounds
alternate which checkout goes first, each in a process of its own. Prints the medians of
tokens/s and whether every output is bit-identical between the two (a refactor must leave both
unchanged).

    python scripts/ab_generate.py --other /path/to/other/.venv/bin/python [--models smollm2,gemma3]
        [--rounds 3] [-n 64] [-t 2]

The other interpreter must have the other checkout's pyllamaspec installed (pip install . in
its own virtual environment).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROMPTS = ["Write a short poem about the sea.", "Explain what a CPU does in two sentences.",
           "List three fruits and their colors.", "Tell me a fact about the moon."]


def worker(name: str, n: int, threads: int) -> dict:
    """One checkout's run: the outputs and tokens/s of plain and speculative decoding."""
    from pyllamaspec import Model, generate
    from pyllamaspec.files.convert import ensure_variant
    from pyllamaspec.files.offline import real_model_path
    path = str(real_model_path(name))
    out: dict = {}
    with Model(path, n_ctx=2048, n_threads=threads) as t, \
            Model(ensure_variant(path, "q4_0"), n_ctx=2048, n_threads=threads, tokenizer=False) as d:
        ids = [t.tokenize(p) for p in PROMPTS]
        generate(ids[0], t, d, temperature=0, max_tokens=8)          # warm-up
        for kind, draft in (("plain", None), ("spec", d)):
            toks, secs, outs = 0, 0.0, []
            for p in ids:
                r = generate(p, t, draft, temperature=0, max_tokens=n, cache_prompt=False)
                toks, secs = toks + r.stats.n_generated, secs + r.stats.t_generate
                outs.append(r.tokens)
            out[kind] = {"tps": toks / secs, "tokens": outs}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--other", help="the other checkout's Python")
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.max_tokens, a.threads)))
        return 0
    if not a.other:
        ap.error("--other is required")
    sides = {"this": sys.executable, "other": a.other}
    for name in a.models.split(","):
        runs: dict = {s: [] for s in sides}
        for r in range(a.rounds):
            for side in (("this", "other") if r % 2 == 0 else ("other", "this")):
                p = subprocess.run([sides[side], __file__, "--worker", name, "-n", str(a.max_tokens),
                                    "-t", str(a.threads)], capture_output=True, text=True, check=True)
                runs[side].append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(f"\n{name}: {a.rounds} rounds, {len(PROMPTS)} prompts x {a.max_tokens} tokens, greedy")
        print("| checkout | plain t/s | speculative t/s |")
        print("|---|---|---|")
        for side in sides:
            med = {k: statistics.median(x[k]["tps"] for x in runs[side]) for k in ("plain", "spec")}
            print(f"| {side} | {med['plain']:.1f} | {med['spec']:.1f} |")
        ref = runs["this"][0]
        same = all(x[k]["tokens"] == ref[k]["tokens"] for s in sides for x in runs[s] for k in ("plain", "spec"))
        spec_eq_plain = ref["spec"]["tokens"] == ref["plain"]["tokens"]
        print(f"outputs bit-identical across checkouts and rounds: {same}; speculative == plain: {spec_eq_plain}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
