"""What our numerical choices buy and cost, measured in one run (docs/speculation.md's "KV cache
types" and "Deterministic numerics"; the numbers are in docs/benchmarks.md):

    python scripts/numerics_bench.py kv  [--models smollm2,gemma3] [--rounds 3] [-t 2]
    python scripts/numerics_bench.py det [--models smollm2,gemma3] [--rounds 3] [-t 2]

kv:  the F16 cache (the default, llama.cpp's) against F32: each one's distance to exact maths
     (the median over 50 random 10-token prompts of each prompt's median |logit - exact| over
     the exact top 5; float64 maths on the dequantized weights, tests/oracle.py), and decoding
     speed after 0, 512 and 2048 tokens of context (32 tokens, rounds alternating the types).
det: the default kernels against deterministic=True: plain greedy decoding and greedy
     speculation with the model's Q4_0 variant as the draft (tokens/s, rounds alternating),
     and whether speculation gave plain decoding's tokens.
Medians over the rounds. The models are the offline pair (pyllamaspec.files.offline).
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

from pyllamaspec import Model, generate                      # noqa: E402
from pyllamaspec.files.convert import ensure_variant          # noqa: E402
from pyllamaspec.files.offline import real_model_path         # noqa: E402

PROMPTS = ["Write a short poem about the sea.", "Explain what a CPU does in two sentences.",
           "List three fruits and their colors.", "Tell me a fact about the moon."]


def decode_tps(m: Model, depth: int, n: int, rng: np.random.Generator) -> float:
    """Tokens/s of n one-token evaluations after `depth` tokens of context."""
    m.clear()
    if depth:
        m.eval(rng.integers(100, 10000, depth).tolist(), logits="last")
    tok = 1000
    t0 = time.perf_counter()
    for _ in range(n):
        tok = int(m.eval([tok], logits="last")[0].argmax())
    return n / (time.perf_counter() - t0)


def kv(path: str, rounds: int, threads: int) -> None:
    import oracle
    rng = np.random.default_rng(1234)
    prompts = [rng.integers(100, 10000, 10).tolist() for _ in range(50)]
    depths = (0, 512, 2048)
    types = ("f16", "f32")
    models = {t: Model(path, n_ctx=4096, n_threads=threads, type_k=t, type_v=t) for t in types}
    dist = {t: float(np.median(oracle.prompt_distances_to_exact(models[t], path, prompts))) for t in types}
    tps = {(t, d): [] for t in types for d in depths}
    for r in range(rounds):
        for t in (types if r % 2 == 0 else types[::-1]):
            for d in depths:
                tps[t, d].append(decode_tps(models[t], d, 32, np.random.default_rng(r)))
    print(f"\n{pathlib.Path(path).name}, {threads} threads, {rounds} rounds")
    print("| cache | distance to exact maths | " + " | ".join(f"t/s after {d}" for d in depths) + " |")
    print("|---|---|" + "---|" * len(depths))
    for t in types:
        print(f"| {t} | {dist[t]:.4f} | " + " | ".join(f"{statistics.median(tps[t, d]):.1f}" for d in depths) + " |")
    print("| f32/f16 | " + f"{dist['f32'] / dist['f16']:.3f} | " +
          " | ".join(f"{statistics.median(tps['f32', d]) / statistics.median(tps['f16', d]):.2f}x" for d in depths) + " |")
    for m in models.values():
        m.close()


def det(path: str, rounds: int, threads: int, n: int) -> None:
    draft_path = ensure_variant(path, "q4_0")
    modes = ("default", "deterministic")
    models = {}
    for mode in modes:
        kw = dict(n_ctx=2048, n_threads=threads, deterministic=mode == "deterministic")
        models[mode] = (Model(path, **kw), Model(draft_path, tokenizer=False, **kw))
    ids = [models["default"][0].apply_chat_template([{"role": "user", "content": q}], tokenize=True) for q in PROMPTS]
    tps = {(mode, kind): [] for mode in modes for kind in ("plain", "spec")}
    same = {mode: True for mode in modes}
    for r in range(rounds):
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            t, d = models[mode]
            for kind in ("plain", "spec"):
                toks, secs, outs = 0, 0.0, []
                for p in ids:
                    res = generate(p, t, d if kind == "spec" else None, temperature=0, max_tokens=n, cache_prompt=False)
                    toks += res.stats.n_generated
                    secs += res.stats.t_generate
                    outs.append(res.tokens)
                tps[mode, kind].append(toks / secs)
                if kind == "plain":
                    plain = outs
                elif outs != plain:
                    same[mode] = False
    print(f"\n{pathlib.Path(path).name} (draft: its Q4_0), {threads} threads, {rounds} rounds, "
          f"{len(PROMPTS)} chat prompts x {n} tokens, greedy")
    print("| kernels | plain t/s | speculative t/s | speculation == plain |")
    print("|---|---|---|---|")
    for mode in modes:
        print(f"| {mode} | {statistics.median(tps[mode, 'plain']):.1f} | {statistics.median(tps[mode, 'spec']):.1f} | "
              f"{'yes' if same[mode] else 'no'} |")
    for kind in ("plain", "spec"):
        ratio = statistics.median(tps["deterministic", kind]) / statistics.median(tps["default", kind])
        print(f"deterministic / default, {kind}: {ratio:.2f}x")
    for t, d in models.values():
        t.close()
        d.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["kv", "det"])
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    a = ap.parse_args()
    for name in a.models.split(","):
        path = str(real_model_path(name))
        if a.what == "kv":
            kv(path, a.rounds, a.threads)
        else:
            det(path, a.rounds, a.threads, a.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
