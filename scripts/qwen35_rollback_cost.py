"""What exact rollback costs a hybrid (qwen35) target per speculative round, on a random model
with Qwen3.5-0.8B's per-layer sizes (n_embd 1024, 16+16 DeltaNet heads of 128, d_conv 4,
n_ff 3584, gated attention 8/2 heads of 256) and fewer layers (default 8: 6 linear, 2 attention).

The ring of recurrent states (csrc/memory/recurrent_state.h) makes every verify batch of n tokens keep
the states after its last min(n, K) tokens; rollback is then O(1). Measured here, in one run,
interleaved: the median time of an n-token verify batch with the ring (K = 17) and without it
(K = 1, only the newest state kept), so the difference is the snapshotting's cost per round;
and the time of the alternative, "snapshot at round start, replay the accepted tokens": one more
target eval of n_accepted + 1 tokens (the K = 1 batch time at that size). truncate() itself is
timed too.

    PYLLAMASPEC_LIBRARY=... python scripts/qwen35_rollback_cost.py [--layers 8] [--threads 2] [--reps 15]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from models_qwen35 import write_qwen35_gguf  # noqa: E402
from pyllamaspec import Model  # noqa: E402

SIZES = dict(n_vocab=4096, n_embd=1024, n_head=8, n_head_kv=2, head_dim=256, n_rot=64, rope_sections=(11, 11, 10, 0),
             n_ff=3584, d_conv=4, d_state=128, n_k_heads=16, n_v_heads=16, full_attention_interval=4,
             n_ctx_train=4096, dtype="F16")


def model(layers: int, tmp: pathlib.Path) -> pathlib.Path:
    p = tmp / f"qwen35-0.8b-shape-{layers}l.gguf"
    write_qwen35_gguf(p, n_layer=layers, seed=1, **SIZES)
    return p


def open_with_ring(path, k: int, threads: int) -> Model:
    os.environ["PYLLAMASPEC_RS_SNAPSHOTS"] = str(k)
    try:
        return Model(path, n_ctx=4096, n_threads=threads)
    finally:
        del os.environ["PYLLAMASPEC_RS_SNAPSHOTS"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = model(a.layers, pathlib.Path(tmp))
        ring, flat = open_with_ring(path, 17, a.threads), open_with_ring(path, 1, a.threads)
        prompt = rng.integers(0, 4096, 64).astype(np.int32)
        for m in (ring, flat):
            m.eval(prompt, logits="none")
        sizes = (1, 2, 4, 8, 16)
        t = {(k, n): [] for k in (17, 1) for n in sizes}
        for _ in range(a.reps):
            for n in sizes:
                batch = rng.integers(0, 4096, n).astype(np.int32)
                for k, m in ((17, ring), (1, flat)):
                    t0 = time.perf_counter()
                    m.eval(batch, logits="all")
                    t[k, n].append(time.perf_counter() - t0)
        tr = []
        for _ in range(200):
            n0 = ring.n_past
            ring.eval(prompt[:4], logits="none")
            t0 = time.perf_counter()
            ring.truncate(n0 + 1)
            tr.append(time.perf_counter() - t0)
        med = {key: statistics.median(v) * 1e3 for key, v in t.items()}
        print(f"{a.layers} layers ({a.layers - a.layers // 4} linear), {a.threads} threads, {a.reps} reps, medians (ms)")
        print("n tokens | ring K=17 | newest only K=1 | snapshot overhead | replay alternative (one more K=1 eval of n)")
        for n in sizes:
            r, f = med[17, n], med[1, n]
            print(f"{n:8d} | {r:9.2f} | {f:15.2f} | {r - f:+8.2f} ({(r - f) / f:+.1%}) | {f:.2f}")
        print(f"truncate into the ring: median {statistics.median(tr) * 1e6:.1f} us")
        ring.close()
        flat.close()


if __name__ == "__main__":
    main()
