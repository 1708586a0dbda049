"""What penalties and logprobs cost per speculative round, in the core, on real vocabulary sizes:
verification of k drafts (k+1 rows) with and without penalties, and logprobs of k+1 tokens
(top 0 and top 5), alternating in the same run; medians. Usage: sampling_extras_cost.py [k]"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from pyllamaspec.sampling import Sampler, SamplingParams, logprobs

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


if __name__ == "__main__":
    main()
