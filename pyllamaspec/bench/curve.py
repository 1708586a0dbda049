"""`python -m pyllamaspec.bench -m MODEL --curve [--llama-bench PATH] [--rounds R] [--plot FILE.png]`:
the target's cost of scoring n = 1..16 tokens in one call, which speculation lives on, beside
llama.cpp's own (llama-bench's ppN after the same context) and a roofline.

Ours: one call of n tokens with every row's logits (a verification needs them all) after 128
tokens of context, the median of reps. llama-bench: `-p 1,...,16 -n 0 -d 128`, its ppN time
(it computes the last row's logits only, so the output head weighs less in its figures). The
engines alternate round by round and each figure is the median over rounds. The roofline: a
call reads every weight once (the weights' bytes over the measured memory bandwidth) and does
2 x n_params x n flops (over the measured F32 matrix-product peak); it costs the larger of the
two, which puts n rows near one row's cost until the arithmetic catches up with the reading."""
from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..engine.model import Model
from .engines import _run_json
from .plot import verify_curve

NS = tuple(range(1, 17))
CONTEXT = 128


def ours(path: str, threads: int, ns=NS, reps: int = 5) -> dict[int, float]:
    """ms (median of reps) of one call of n tokens with all logits, after CONTEXT random tokens
    (plot.verify_curve, which -md --plot draws too)."""
    with Model(path, n_ctx=512, n_threads=threads) as m:
        context = np.random.default_rng(1).integers(0, m.n_vocab, CONTEXT, dtype=np.int32).tolist()
        return {n: ms for n, ms in verify_curve(m, context, max(ns), reps) if n in ns}


def llama_bench(binary: str, path: str, threads: int, ns=NS, reps: int = 5) -> dict[int, float]:
    """llama-bench's ppN after CONTEXT tokens (flash attention on, as ours), ms (median of reps)."""
    rows = _run_json([binary, "-m", path, "-t", str(threads), "-p", ",".join(map(str, ns)), "-n", "0",
                      "-d", str(CONTEXT), "-r", str(reps), "-fa", "1", "-o", "json"], what="llama-bench")
    return {int(r["n_prompt"]): statistics.median(r["samples_ns"]) / 1e6 for r in rows if r["n_prompt"]}


def bandwidth_gbs(threads: int, mb: int = 512, reps: int = 5) -> float:
    """Memory read bandwidth (GB/s): `threads` threads summing their share of an array larger
    than any cache (numpy releases the GIL), the best of reps."""
    a = np.ones(mb * (1 << 20) // 8)
    parts = np.array_split(a, max(1, threads))
    best = 0.0
    for _ in range(reps):
        ts = [threading.Thread(target=np.sum, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = max(best, a.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def peak_gflops(reps: int = 5, n: int = 1024) -> float:
    """F32 matrix-product peak (GFLOP/s) of numpy's BLAS on its own threads, the best of reps."""
    rng = np.random.default_rng(0)
    x, y = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    x @ y
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        x @ y
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


@dataclass
class Roofline:
    weight_bytes: int
    n_params: int
    gbs: float
    gflops: float

    def ms(self, n: int) -> float:
        return 1e3 * max(self.weight_bytes / (self.gbs * 1e9), 2 * self.n_params * n / (self.gflops * 1e9))


def roofline(path: str, threads: int) -> Roofline:
    with Model(path, n_ctx=64, n_threads=1) as m:
        info = m.info
    return Roofline(info.size_bytes, info.n_params, bandwidth_gbs(threads), peak_gflops())


@dataclass
class Curves:
    """ms per call by n: ours, llama-bench's (when asked), the roofline's; medians over rounds."""
    ours: dict[int, float]
    llama_bench: dict[int, float] = field(default_factory=dict)
    roofline: dict[int, float] = field(default_factory=dict)
    gbs: float = 0.0
    gflops: float = 0.0


def measure(path: str, threads: int, rounds: int = 3, llama_bench_bin: str | None = None, ns=NS) -> Curves:
    """Ours and llama-bench's curves alternated over `rounds` (which goes first alternating), and
    the roofline."""
    engines = {"ours": lambda: ours(path, threads, ns)}
    if llama_bench_bin:
        engines["llama_bench"] = lambda: llama_bench(llama_bench_bin, path, threads, ns)
    runs: dict[str, list[dict[int, float]]] = {e: [] for e in engines}
    for r in range(rounds):
        for e in (list(engines) if r % 2 == 0 else list(engines)[::-1]):
            runs[e].append(engines[e]())
    med = {e: {n: statistics.median(c[n] for c in cs) for n in ns if all(n in c for c in cs)}
           for e, cs in runs.items()}
    rl = roofline(path, threads)
    return Curves(med["ours"], med.get("llama_bench", {}), {n: rl.ms(n) for n in ns}, rl.gbs, rl.gflops)


def print_curves(path: str, c: Curves) -> None:
    print(f"{os.path.basename(path)}: ms per call of n tokens (after {CONTEXT}), and n over 1 "
          f"(roofline: {c.gbs:.1f} GB/s read, {c.gflops:.0f} GFLOP/s F32)")
    cols = [("ours", c.ours)] + ([("llama-bench ppN", c.llama_bench)] if c.llama_bench else []) \
        + [("roofline", c.roofline)]
    # ours over llama.cpp's one token too: ours takes one-token products (kernels/matmul_rows), so
    # our own n/1 also moves with how much faster our one token got
    vs_lb = 1 in c.llama_bench
    print("| n | " + " | ".join(f"{k} ms | {k} /1" for k, _ in cols) + (" | ours / llama-bench pp1" if vs_lb else "")
          + " |")
    print("|---|" + "---|---|" * len(cols) + ("---|" if vs_lb else ""))
    for n in sorted(c.ours):
        cells = []
        for _, d in cols:
            cells += [f"{d[n]:.1f}", f"{d[n] / d[1]:.2f}x"] if n in d and 1 in d else ["-", "-"]
        if vs_lb:
            cells.append(f"{c.ours[n] / c.llama_bench[1]:.2f}x")
        print(f"| {n} | " + " | ".join(cells) + " |")


def draw(curves: dict[str, Curves], path: str) -> None:
    """Each model's ratio to one token by n: ours, llama-bench's, the roofline (--plot)."""
    from .plot import _check_matplotlib
    plt = _check_matplotlib()
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    for i, (model, c) in enumerate(curves.items()):
        color = f"C{i}"
        name = os.path.basename(model)
        for d, style, label in ((c.ours, "-o", "ours"), (c.llama_bench, "--s", "llama-bench ppN"),
                                (c.roofline, ":", "roofline")):
            if d and 1 in d:
                ns = sorted(d)
                ax.plot(ns, [d[n] / d[1] for n in ns], style, color=color, markersize=4, label=f"{name}: {label}")
    ax.set_xlabel("tokens in one call (n)")
    ax.set_ylabel("cost / cost of one token")
    ax.set_title("verification cost by batch size")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
