"""What one MTP draft step costs against a target eval, on a random qwen35 with Qwen3.5-0.8B's
per-layer sizes (as scripts/qwen35_rollback_cost.py) plus one NextN block, fewer layers (default
8) and a smaller vocabulary (default 32768; the real 248k makes the head, which the MTP step
shares, a larger part of both). Measured in one run, interleaved, medians: a 1-token target
eval (with the MTP cache fill, and without: MTP not enabled), a (k+1)-token verify eval, MTP step 0 and a chained step 3, all at the same cache length.
(Acceptance on a random model means nothing: tests/speculation/test_mtp.py prints it for the tiny one.)

    PYLLAMASPEC_LIBRARY=... python scripts/mtp_cost.py [--layers 8] [--vocab 32768] [--threads 2] [--reps 30]
"""
from __future__ import annotations

import argparse
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

SIZES = dict(n_embd=1024, n_head=8, n_head_kv=2, head_dim=256, n_rot=64, rope_sections=(11, 11, 10, 0),
             n_ff=3584, d_conv=4, d_state=128, n_k_heads=16, n_v_heads=16, full_attention_interval=4,
             n_ctx_train=4096, dtype="F16", n_nextn=1)


def timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--k", type=int, default=4, help="draft length of the verify batch")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "qwen35-mtp.gguf"
        write_qwen35_gguf(path, n_layer=a.layers, n_vocab=a.vocab, seed=1, **SIZES)
        with Model(path, n_ctx=1024, n_threads=a.threads) as m, Model(path, n_ctx=1024, n_threads=a.threads) as off:
            m.enable_mtp()
            rng = np.random.default_rng(0)
            prompt = rng.integers(0, a.vocab, 256).astype(np.int32)
            m.eval(prompt, logits="none")
            off.eval(prompt, logits="none")
            n0 = m.n_past
            out = np.empty(a.vocab, np.float32)
            times: dict[str, list[float]] = {"target 1 token": [], "same, MTP off": [], f"target verify {a.k + 1}": [],
                                             "mtp step 0": [], "mtp step 3": []}
            for _ in range(a.reps):
                times["target 1 token"].append(timed(lambda: m.eval([5], logits="last")))
                m.truncate(n0)
                times["same, MTP off"].append(timed(lambda: off.eval([5], logits="last")))
                off.truncate(n0)
                times[f"target verify {a.k + 1}"].append(timed(lambda: m.eval([5] * (a.k + 1), logits="all")))
                m.truncate(n0)
                times["mtp step 0"].append(timed(lambda: m.mtp_draft(5, 0, out)))
                for s in (1, 2):
                    m.mtp_draft(6, s, out)
                times["mtp step 3"].append(timed(lambda: m.mtp_draft(7, 3, out)))
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            for k, v in med.items():
                print(f"{k:>20}: {v:8.3f} ms (median of {a.reps})")
            print(f"MTP step / 1-token target eval: {med['mtp step 3'] / med['target 1 token']:.3f}")


if __name__ == "__main__":
    main()
