"""What penalties and logprobs cost per speculative round, in the core, on real vocabulary sizes:
verification of k drafts (k+1 rows) with and without penalties, and logprobs of k+1 tokens
(top 0 and top 5), alternating in the same run; medians. With a target and a draft model, also
whole generations (greedy, fixed draft length k), plain settings / penalties / logprobs in turn:
time per round. Usage: sampling_extras_cost.py [k [TARGET DRAFT]]"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from pyllamaspec.engine.sampling import Sampler, SamplingParams, logprobs

K = int(sys.argv[1]) if len(sys.argv) > 1 else 4
REPS = 200


def main() -> None:
    rng = np.random.default_rng(0)
    for V in (49152, 262144):                      # SmolLM2, Gemma 3
        rows = rng.normal(0, 3, (K + 1, V)).astype(np.float32)
        draft = rng.integers(0, V, K).astype(np.int32)
        history = rng.integers(0, V, 500).astype(np.int32)
        q = np.zeros((K, V), np.float32)
        q[np.arange(K), draft] = 1.0
        base = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
        cases = {
            "verify": Sampler(V, SamplingParams(**base)),
            "verify + penalties (last 64)": Sampler(V, SamplingParams(**base, repeat_penalty=1.1, presence_penalty=0.5)),
            "verify + penalties (all 500)": Sampler(V, SamplingParams(**base, repeat_penalty=1.1, penalty_last_n=-1)),
        }
        for s in cases.values():
            s.push(history)
        times: dict[str, list[float]] = {name: [] for name in [*cases, "logprobs top 0", "logprobs top 5"]}
        for _ in range(REPS):                       # interleaved: the machine's noise hits all alike
            for name, s in cases.items():
                t0 = time.perf_counter()
                s.verify(rows, draft, q)
                times[name].append(time.perf_counter() - t0)
            for n_top in (0, 5):
                t0 = time.perf_counter()
                logprobs(rows, np.append(draft, 0), n_top)
                times[f"logprobs top {n_top}"].append(time.perf_counter() - t0)
        print(f"n_vocab {V}, k = {K} drafts ({K + 1} rows), medians of {REPS}:")
        for name, t in times.items():
            print(f"  {name:32s} {1e6 * statistics.median(t):9.1f} us")


def end_to_end(target_path: str, draft_path: str, rounds: int = 5) -> None:
    from pyllamaspec import Model, generate
    from pyllamaspec.engine.model import DRAFT_OPTIONS
    prompt = "Write a short story about a cat who learns to fly."
    cases = {"plain settings": {}, "penalties": dict(repeat_penalty=1.1, presence_penalty=0.3),
             "logprobs=5": dict(logprobs=5)}
    per_round: dict[str, list[float]] = {c: [] for c in cases}
    with Model(target_path, n_ctx=1024) as t, Model(draft_path, n_ctx=1024, **DRAFT_OPTIONS) as d:
        for r in range(rounds):
            order = list(cases)[r % 3:] + list(cases)[:r % 3]       # who goes first rotates
            for name in order:
                res = generate(prompt, t, d, max_tokens=64, temperature=0, n_draft=K, adaptive=False,
                               **cases[name])
                per_round[name].append(res.stats.t_generate / res.stats.rounds)
    print(f"generation, greedy, k = {K}, medians of {rounds} (ms per round):")
    for name, v in per_round.items():
        print(f"  {name:16s} {1e3 * statistics.median(v):7.2f}")


if __name__ == "__main__":
    main()
    if len(sys.argv) > 3:
        end_to_end(sys.argv[2], sys.argv[3])
