"""The CPU time of one evaluation of n tokens (every row's logits) after 128 tokens of context, on
one thread: `time.process_time()` around `Model.eval`, the least of --reps. On a machine that other
processes load, wall time moves with their load while one thread's CPU time mostly does not, so
two builds or settings compare through it (run them in turns; docs/benchmarks.md):

    python scripts/cpu_rows_cost.py MODEL [--rows 1,2,4,8,16] [--no-repack]
    PYLLAMASPEC_MATMUL_ROWS=avx2 python scripts/cpu_rows_cost.py MODEL     # a setting
    PYLLAMASPEC_LIBRARY=OLD/libpyllamaspec.so python scripts/cpu_rows_cost.py MODEL   # another build

Prints "MODEL n:ms ..." (ms of CPU time for each n).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from pyllamaspec import Model


def cost(m: Model, n: int, n_context: int, reps: int) -> float:
    toks = np.random.default_rng(n).integers(0, m.n_vocab, n, dtype=np.int32)
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        m.eval(toks, logits="all")
        best = min(best, time.process_time() - t)
        m.truncate(n_context)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--no-repack", action="store_true", help="Model(use_repack=False): every weight plain")
    a = ap.parse_args()
    with Model(a.model, n_ctx=512, n_threads=1, use_repack=not a.no_repack) as m:
        m.eval(np.random.default_rng(1).integers(0, m.n_vocab, a.context, dtype=np.int32), logits="none")
        got = [f"{n}:{cost(m, n, a.context, a.reps):.1f}" for n in (int(x) for x in a.rows.split(","))]
    print(os.path.basename(a.model), " ".join(got), flush=True)


if __name__ == "__main__":
    main()
