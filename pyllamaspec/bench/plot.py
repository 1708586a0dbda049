"""`python -m pyllamaspec.bench -m TARGET -md DRAFT --plot FILE.png`: a picture of what
speculation does on a pair, measured in one process:

  left   the target's verification cost: ms for one call of n = 1..k_max + 1 tokens (the curve
         speculation lives on), and the cost model's own estimate of it after a generation;
  right  tokens/s by draft length k: plain decoding (k = 0), speculative decoding with each fixed
         k, the cost model's adaptive run, and the tokens/s the cost model expects at each k
         (from the measured curve, its draft cost and acceptance), with the k it would choose.

Every figure is the median of --rounds runs; plain, fixed-k and adaptive runs alternate within
each round, so a machine that slows down favours none of them. Needs matplotlib:
``pip install "pyllamaspec[plot]"``."""
from __future__ import annotations

import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np

from ..engine.model import Model
from ..generation.drafts import open_draft
from ..engine.sampling import SamplingParams
from ..errors import PyllamaspecError
from ..generation.generate import iter_generate
from ..speculation.decoder import DraftParams

KS = (1, 2, 4, 8, 16)


@dataclass
class PairMeasure:
    """What the picture shows."""
    label: str
    curve: list[tuple[int, float]] = field(default_factory=list)        # (n tokens, ms per call)
    model_curve: list[tuple[int, float]] = field(default_factory=list)  # the cost model's c_target, ms
    plain: float = 0.0                                                   # tokens/s (median)
    fixed: dict[int, float] = field(default_factory=dict)                # k -> tokens/s (median)
    adaptive: float = 0.0
    expected: dict[int, float] = field(default_factory=dict)             # k -> tokens/s the cost model expects
    chosen: int = 0
    c_draft_ms: float = 0.0
    alpha: float = 0.0


def _check_matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PyllamaspecError('--plot needs matplotlib: pip install "pyllamaspec[plot]"') from None
    return plt


def verify_curve(target: Model, context: list[int], n_max: int, reps: int = 5) -> list[tuple[int, float]]:
    """ms (median of reps) of one call of n = 1..n_max tokens with all logits, after `context`."""
    rng = np.random.default_rng(0)
    target.clear()
    target.eval(context, logits="none")
    out = []
    for n in range(1, n_max + 1):
        toks = rng.integers(0, target.n_vocab, n, dtype=np.int32)
        times = []
        for _ in range(reps + 1):
            target.truncate(len(context))
            t0 = time.perf_counter()
            target.eval(toks, logits="all")
            times.append(time.perf_counter() - t0)
        out.append((n, 1e3 * statistics.median(times[1:])))
    target.clear()
    return out


def _run(ids: list[int], target: Model, draft, n_gen: int, dp: DraftParams | None) -> dict:
    result: dict = {}
    for _ in iter_generate(ids, target, draft if dp is not None else None, sampling=SamplingParams(temperature=0),
                           draft=dp or DraftParams(), max_tokens=n_gen, stop=[], result=result):
        pass
    return result


def measure(target_path: str, draft_path: str, ids_of, threads: int, n_gen: int, rounds: int,
            k_max: int = 16) -> PairMeasure:
    """ids_of(target) -> the prompt's ids. Alternates plain, each fixed k and the adaptive run."""
    import os
    with ExitStack() as stack:
        target = stack.enter_context(Model(target_path, n_ctx=2048, n_threads=threads))
        draft = open_draft(draft_path, target, stack, n_ctx=2048, n_threads=threads)   # (another vocabulary too)
        ids = ids_of(target)
        m = PairMeasure(label=f"{os.path.basename(target_path)} + {os.path.basename(draft_path)}")
        m.curve = verify_curve(target, ids, k_max + 1)
        _run(ids, target, draft, 16, DraftParams(n_draft=k_max))                    # warm-up, both models
        runs: dict = {"plain": [], "adaptive": [], **{k: [] for k in KS if k <= k_max}}
        policy = None
        for r in range(rounds):
            order = list(runs) if r % 2 == 0 else list(runs)[::-1]
            for key in order:
                dp = None if key == "plain" else DraftParams(n_draft=k_max) if key == "adaptive" else \
                    DraftParams(n_draft=key, adaptive=False, p_min=0.0)
                res = _run(ids, target, draft, n_gen, dp)
                runs[key].append(res["stats"].generate_tps)
                if key == "adaptive":
                    policy = res["policy"]
        m.plain, m.adaptive = statistics.median(runs["plain"]), statistics.median(runs["adaptive"])
        m.fixed = {k: statistics.median(v) for k, v in runs.items() if isinstance(k, int)}
        _expectations(m, policy, k_max)
    return m


def _expectations(m: PairMeasure, pol, k_max: int) -> None:
    """What the cost model, as the last adaptive run left it, expects and would choose."""
    if pol is None or pol.c_draft is None or 1 not in pol.c_target:
        return
    m.model_curve = [(n, 1e3 * c) for n, c in sorted(pol.c_target.items())]
    m.c_draft_ms, m.alpha = 1e3 * pol.c_draft, pol.alpha
    m.expected = {0: 1.0 / pol.target_cost(1)}
    for k in range(1, k_max + 1):
        m.expected[k] = pol.expected_tokens(pol.alpha, k) / (k * pol.c_draft + pol.target_cost(k + 1))
    m.chosen = pol.best_k(k_max, alpha=pol.alpha_upper)


def draw(m: PairMeasure, path: str) -> None:
    plt = _check_matplotlib()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    n, ms = zip(*m.curve)
    left.plot(n, ms, "o-", color="#2d4a3e", label="measured (median)")
    if m.model_curve:
        left.plot(*zip(*m.model_curve), "x", color="#c0392b", markersize=8, label="the cost model's estimate")
    left.set_xlabel("tokens verified in one call (draft length k + 1)")
    left.set_ylabel("ms per call")
    left.set_title("the target's verification cost")
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.legend()

    ks = sorted(m.fixed)
    right.plot([0] + ks, [m.plain] + [m.fixed[k] for k in ks], "o-", color="#2d4a3e",
               label="measured: plain (k = 0) and fixed k")
    right.axhline(m.plain, color="grey", linestyle=":", label=f"plain decoding: {m.plain:.1f} t/s")
    right.axhline(m.adaptive, color="#2874a6", linestyle="--",
                  label=f"cost model, adaptive: {m.adaptive:.1f} t/s ({m.adaptive / m.plain:.2f}x)")
    if m.expected:
        right.plot(list(m.expected), list(m.expected.values()), "-", color="#c0392b", alpha=0.7,
                   label=f"what the cost model expects (acceptance {m.alpha:.2f}, draft {m.c_draft_ms:.1f} ms/token)")
        right.axvline(m.chosen, color="#c0392b", linestyle="--", alpha=0.5, label=f"its choice: k = {m.chosen}")
    right.set_xlabel("draft length k")
    right.set_ylabel("tokens/s")
    right.set_title("speed by draft length (greedy)")
    right.set_ylim(bottom=0)
    right.grid(alpha=0.3)
    right.legend(fontsize=8, loc="best", framealpha=0.85)
    fig.suptitle(m.label)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["PairMeasure", "measure", "draw", "verify_curve"]
