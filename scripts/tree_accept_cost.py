"""The cost of one sampled token tree's acceptance (TreeVerifier.accept) on a real vocabulary,
in microseconds: what a tree round spends after the target's evaluation and before the rollback.

    PYTHONPATH=. python scripts/tree_accept_cost.py [-m MODEL.gguf] [--nodes 16] [--reps 100]

The rows are the model's own (Gemma 3 270M by default: 262144 tokens), the tree 16 nodes (two
children at the root and at each of them, then chains), each sibling group drawn without
replacement from the parent's row at 1.5 times the temperature (a draft that often agrees, not
always: some walks go deep, some siblings are rejected), under llama.cpp's default chain and under the bare softmax (top-k/p/min-p off: the
whole vocabulary). Works with either TreeVerifier (before: the numpy walk, accept(p, draft,
greedy); after: the core's, accept(p, draft)), so the same command times two source trees:
PYTHONPATH=<tree> PYLLAMASPEC_LIBRARY=<its core>. Medians of --reps calls, alternating nothing:
run the two trees one after the other on a quiet machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import statistics
import time

import numpy as np

from pyllamaspec import Model
from pyllamaspec.engine.sampling import Sampler, SamplingParams
from pyllamaspec.speculation.drafter import Draft
from pyllamaspec.speculation.tree.verify import TreeVerifier

SETTINGS = {"default": SamplingParams(), "full-vocab": SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)}
PROMPT = ("The old lighthouse keeper climbed the stairs every night and lit the lamp, and on the night the "
          "storm came he saw a small boat struggling against the waves")


def tree_parents(n: int) -> np.ndarray:
    """Two children at the root and at each of them, then one child per node (chains)."""
    parents = [-1, -1, 0, 0, 1, 1]
    while len(parents) < n:
        parents.append(len(parents) - 4)
    return np.asarray(parents[:n], np.int32)


def make_draft(sampler: Sampler, rows: np.ndarray, parents: np.ndarray, rng: np.random.Generator) -> Draft:
    """Each sibling group drawn without replacement (Gumbel top-k) from the parent row's law."""
    n = len(parents)
    tokens, q = np.zeros(n, np.int32), np.zeros((n, rows.shape[1]), np.float32)
    for v in range(-1, n):
        group = [i for i in range(n) if parents[i] == v]
        if not group:
            continue
        law = sampler.probs(rows[v + 1])
        support = np.nonzero(law)[0]
        keys = np.log(law[support].astype(np.float64)) + rng.gumbel(size=len(support))
        picks = support[np.argsort(-keys)[:len(group)]]
        for i, t in zip(group, picks):
            tokens[i], q[i] = t, law
    return Draft(tokens, q, parents)


def time_accept(tv: TreeVerifier, rows: np.ndarray, draft: Draft, reps: int) -> tuple[float, float]:
    """(median microseconds per accept, mean accepted depth)."""
    old = "greedy" in inspect.signature(tv.accept).parameters
    times, depth = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        path, _ = tv.accept(rows, draft, False) if old else tv.accept(rows, draft)
        times.append(time.perf_counter() - t0)
        depth.append(len(path))
    return statistics.median(times) * 1e6, float(np.mean(depth))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.model is None:
        from pyllamaspec.files.offline import real_model_path
        a.model = real_model_path("gemma3")
    parents = tree_parents(a.nodes)
    out = {}
    with Model(a.model, n_ctx=128, n_threads=2) as target:
        ids = target.tokenize(PROMPT)
        rows = np.ascontiguousarray(target.eval(ids, logits="all")[-(a.nodes + 1):], np.float32)
        for name, sp in SETTINGS.items():
            sampler = Sampler(target.n_vocab, sp)
            hotter = Sampler(target.n_vocab, dataclasses.replace(sp, temperature=1.5 * sp.temperature))
            draft = make_draft(hotter, rows, parents, np.random.default_rng(0))
            params = inspect.signature(TreeVerifier).parameters
            tv = TreeVerifier(target, sampler, 0) if "seed" in params else TreeVerifier(target, sampler)
            us, depth = time_accept(tv, rows, draft, a.reps)
            out[name] = {"us": round(us, 1), "mean_depth": round(depth, 2)}
    out["n_vocab"], out["nodes"] = int(rows.shape[1]), a.nodes
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
