"""Speculation on a mixture of experts: the target's verification cost curve, MoE against dense.

Verifying k drafted tokens evaluates k + 1 tokens in one call. A dense model reads its weights
once for the whole batch, so the call costs little more than one token; a mixture of experts
reads the experts its tokens are routed to, up to (k + 1) * top_k of them, so its curve is
steeper and the draft length that pays is shorter. This writes three seeded random models of
equal active size to --dir (not to the repository): a qwen3 (dense FFN of width 4 * 384), a
qwen3moe (32 experts of width 384, top 4; ~165M parameters, ~27M active) and a qwen35moe
(Qwen3.6-35B-A3B's shape scaled down: 6 Gated DeltaNet + 2 gated attention layers, the same
experts plus a shared expert of width 384), all Q8_0, times them as pyllamaspec.bench.cost_curve
does (median ms of one call of n = 1..16 tokens after 128 tokens of context), interleaving the
models call by call, and prints the curves and what the cost model (DraftPolicy.best_k) makes of
them for a draft costing --draft-frac of one target token. A qwen35moe verification also writes
the recurrent state after each of the last tokens (its O(1) rollback), which a plain step does not.

    python scripts/moe_cost_curve.py [--dir /tmp/moe-bench] [--threads 1] [--reps 21]
    python scripts/moe_cost_curve.py --estimate     # the Apple Silicon estimate (no timing)

On a few CPU cores even the dense model is compute-bound (its cost grows with n too); where
decoding is bandwidth-bound (a GPU, Apple Silicon, many cores) the dense curve is nearly flat
and the MoE's follows the distinct experts its batch reads (see --estimate).
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

ALPHAS = (0.6, 0.7, 0.8, 0.9)
N_EMBD, N_LAYER, N_EXPERT, TOP_K, N_FF_EXP = 512, 8, 32, 4, 384


def write_models(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    import models_moe

    import models

    folder.mkdir(parents=True, exist_ok=True)
    import models_qwen35

    paths = {"dense": folder / "dense-qwen3.gguf", "moe": folder / "moe-qwen3moe.gguf",
             "qwen35moe": folder / "moe-qwen35moe.gguf"}
    common = dict(n_vocab=64, n_embd=N_EMBD, n_layer=N_LAYER, n_head=8, n_head_kv=4, head_dim=64, dtype="Q8_0")
    if not paths["dense"].exists():
        models.write_gguf(paths["dense"], arch="qwen3", n_ff=TOP_K * N_FF_EXP, seed=1, **common)
    if not paths["moe"].exists():
        models_moe.write_moe_gguf(paths["moe"], arch="qwen3moe", n_expert=N_EXPERT, n_expert_used=TOP_K,
                                  n_ff_exp=N_FF_EXP, seed=2, **common)
    if not paths["qwen35moe"].exists():
        # 3 of 4 layers linear attention (Qwen3.6's pattern), DeltaNet heads of 64
        models_qwen35.write_qwen35_gguf(paths["qwen35moe"], n_vocab=64, n_embd=N_EMBD, n_layer=N_LAYER, n_head=8,
                                        n_head_kv=2, head_dim=64, n_rot=16, rope_sections=(6, 1, 1, 0),
                                        full_attention_interval=4, d_state=64, n_k_heads=4, n_v_heads=8,
                                        n_ff=N_FF_EXP, n_expert=N_EXPERT, n_expert_used=TOP_K, n_ff_exp=N_FF_EXP,
                                        n_ff_shexp=N_FF_EXP, dtype="Q8_0", seed=3)
    return paths


def policy_row(curve: dict[int, float], alpha: float, draft_frac: float) -> tuple[int, float]:
    """(best k, expected speed-up over plain decoding) by the cost model for this curve."""
    from pyllamaspec.speculation.cost_model import DraftPolicy

    p = DraftPolicy(len(curve) - 1, prior_alpha=alpha, prior_weight=1e9)
    p.c_target = dict(curve)
    p.c_draft = draft_frac * curve[1]
    k = p.best_k(len(curve) - 1)
    rate = p.expected_tokens(alpha, k) / (k * p.c_draft + curve[k + 1]) if k else 1 / curve[1]
    return k, rate * curve[1]


def report(curves: dict[str, dict[int, float]], draft_frac: float) -> None:
    print("n | " + " | ".join(f"{m} ms | {m} c(n)/c(1)" for m in curves))
    for n in sorted(curves["dense"]):
        print(f"{n} | " + " | ".join(f"{c[n]:.2f} | {c[n] / c[1]:.2f}" for c in curves.values()))
    print(f"\ncost model, draft = {draft_frac:g} x c(1): best k (expected speed-up)")
    for alpha in ALPHAS:
        cells = [f"{m}: k={k} ({s:.2f}x)" for m, (k, s) in ((m, policy_row(c, alpha, draft_frac))
                                                             for m, c in curves.items())]
        print(f"alpha {alpha}: " + ", ".join(cells))


def measure(paths: dict[str, pathlib.Path], threads: int, reps: int, n_max: int = 16) -> dict[str, dict[int, float]]:
    """pyllamaspec.bench.cost_curve's measurement (one call of n tokens, all logits, after 128
    tokens of context; median ms), interleaved: every repetition times each n on each model in
    turn, so that a busy spell on a shared machine hits both curves alike."""
    import time

    import numpy as np

    from pyllamaspec import Model

    rng = np.random.default_rng(0)
    ms = {name: Model(str(p), n_ctx=512, n_threads=threads) for name, p in paths.items()}
    try:
        for m in ms.values():
            m.eval(rng.integers(0, m.n_vocab, 128, dtype=np.int32), logits="none")
        times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in range(1, n_max + 1)} for name in ms}
        for rep in range(reps + 1):
            for n in range(1, n_max + 1):
                toks = rng.integers(0, 64, n, dtype=np.int32)
                for name, m in ms.items():
                    m.truncate(128)
                    t0 = time.perf_counter()
                    m.eval(toks, logits="all")
                    if rep:                              # the first pass warms up
                        times[name][n].append(1e3 * (time.perf_counter() - t0))
        return {name: {n: statistics.median(t) for n, t in c.items()} for name, c in times.items()}
    finally:
        for m in ms.values():
            m.close()


def estimate() -> None:
    """ESTIMATE, not a measurement: Qwen3-30B-A3B (Q4_K_M) verified on Apple Silicon, as a
    bandwidth-bound cost curve, with Qwen3-0.6B as the draft. See the printed assumptions."""
    bpw = 4.88                       # Q4_K_M's average bits per weight (30.5B params, 18.6 GB)
    n_layer, n_embd, n_expert, top_k, n_ff_exp = 48, 2048, 128, 8, 768
    attn = n_layer * (2 * n_embd * 4096 + 2 * n_embd * 512)        # q, o (32 x 128) and k, v (4 x 128)
    head = 151936 * n_embd                                          # untied output matrix
    expert = 3 * n_embd * n_ff_exp                                  # gate, up, down of one expert
    flops_tok = 2 * (attn + head + n_layer * top_k * expert)        # multiply-adds of one token
    draft_bytes = 0.6e9 * bpw / 8
    print("ESTIMATE (not measured): Qwen3-30B-A3B Q4_K_M target, Qwen3-0.6B Q4_K_M draft, batch of n "
          "tokens reads the attention and head weights once and each expert any token routes to;\n"
          "routing either uniform and independent across tokens (the steep end) or with half of each\n"
          "token's experts shared with the batch's others (correlated routing); 60% of peak bandwidth "
          "reached; compute at 10 TFLOP/s.")

    def distinct(n: int, reuse: float) -> float:   # expected distinct experts per layer for n tokens
        if reuse == 0.0:
            return n_expert * (1 - (1 - top_k / n_expert) ** n)
        return min(n_expert, top_k * (1 + (1 - reuse) * (n - 1)))

    for (name, bw), reuse in ((m, r) for m in (("M3 Max, 400 GB/s", 400e9), ("M4 Pro, 273 GB/s", 273e9))
                              for r in (0.0, 0.5)):
        eff_bw = 0.6 * bw
        curve = {}
        for n in range(1, 17):
            touched = distinct(n, reuse)
            bytes_n = (attn + head + n_layer * touched * expert) * bpw / 8
            curve[n] = 1e3 * (bytes_n / eff_bw + n * flops_tok / 10e12)
        c_draft = 1e3 * max(draft_bytes / eff_bw, 2.5e-3)                # small models are latency-bound: >= 2.5 ms
        print(f"\n{name}, {'independent routing' if reuse == 0 else f'{reuse:.0%} expert reuse'}: c(1) = {curve[1]:.1f} ms ({1e3 / curve[1]:.0f} tok/s plain), draft {c_draft:.1f} ms/token")
        print("  c(n)/c(1): " + ", ".join(f"{n}:{curve[n] / curve[1]:.2f}" for n in (2, 3, 4, 5, 8, 16)))
        for alpha in ALPHAS:
            k, s = policy_row(curve, alpha, c_draft / curve[1])
            print(f"  alpha {alpha}: best k = {k}, expected {s:.2f}x plain ({s * 1e3 / curve[1]:.0f} tok/s)")


def estimate_qwen36() -> None:
    """ESTIMATE, not a measurement: Qwen3.6-35B-A3B (qwen35moe, Q4_K_M) verified on Apple
    Silicon as a bandwidth-bound cost curve, with Qwen3.5-0.8B as the draft."""
    bpw = 4.88
    n_layer, n_embd, n_expert, top_k, n_ff_exp = 40, 2048, 256, 8, 512
    expert = 3 * n_embd * n_ff_exp
    # read once per call: 30 DeltaNet + 10 gated attention layers, the shared experts, the head
    # (248k x 2048); every token also writes its recurrent state snapshot (30 x 32 x 128 x 128 F32)
    once = 30 * n_embd * (2 * 2048 + 4096 + 2 * 4096) + 10 * n_embd * (2 * 4096 + 2 * 512 + 4096) \
        + n_layer * expert + 248320 * n_embd
    state_bytes = 30 * 32 * 128 * 128 * 4
    flops_tok = 2 * (once + n_layer * top_k * expert)
    print("\nESTIMATE (not measured): Qwen3.6-35B-A3B Q4_K_M (256 experts, top 8, one shared; 3 of 4 layers "
          "Gated DeltaNet), Qwen3.5-0.8B Q4_K_M draft; assumptions as above, plus one recurrent state "
          "snapshot written per verified token.")
    for name, bw in (("M3 Max, 400 GB/s", 400e9), ("M4 Pro, 273 GB/s", 273e9)):
        eff_bw = 0.6 * bw
        curve = {}
        for n in range(1, 17):
            touched = n_expert * (1 - (1 - top_k / n_expert) ** n)
            curve[n] = 1e3 * (((once + n_layer * touched * expert) * bpw / 8 + n * state_bytes) / eff_bw
                              + n * flops_tok / 10e12)
        c_draft = 1e3 * max(0.8e9 * bpw / 8 / eff_bw, 2.5e-3)
        print(f"\n{name}: c(1) = {curve[1]:.1f} ms ({1e3 / curve[1]:.0f} tok/s plain), draft {c_draft:.1f} ms/token")
        print("  c(n)/c(1): " + ", ".join(f"{n}:{curve[n] / curve[1]:.2f}" for n in (2, 3, 4, 5, 8, 16)))
        for alpha in ALPHAS:
            k, s = policy_row(curve, alpha, c_draft / curve[1])
            print(f"  alpha {alpha}: best k = {k}, expected {s:.2f}x plain ({s * 1e3 / curve[1]:.0f} tok/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/moe-bench")
    ap.add_argument("--threads", type=int, default=1,
                    help="1 by default: on a shared machine, spinning thread barriers swamp the timing")
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--draft-frac", type=float, default=0.1, help="draft cost per token / target c(1)")
    ap.add_argument("--estimate", action="store_true", help="print the Apple Silicon estimate only")
    a = ap.parse_args()
    if a.estimate:
        estimate()
        estimate_qwen36()
        return
    paths = write_models(pathlib.Path(a.dir))
    report(measure(paths, a.threads, a.reps), a.draft_frac)


if __name__ == "__main__":
    main()
