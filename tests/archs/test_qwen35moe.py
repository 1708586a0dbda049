"""Qwen3.5 / 3.6 MoE (``qwen35moe``, issue 24): what only it has. Its logits and MTP drafts
against llama.cpp and the oracle (tests/oracle_qwen35.py), broken conventions, batching, the
recurrent state's rollback and speculation: test_arch_checks.py's qwen35moe entry. Here: the
memory it holds (a KV cache and recurrent states), and the cost model on its verification
curve."""
from __future__ import annotations

from test_arch_checks import ARCHS, synth  # noqa: F401 (the fixture)


def test_memory_holds_kv_and_recurrent_state(synth):
    from pyllamaspec import Model
    with Model(synth(ARCHS["qwen35moe"])["moe"], n_ctx=256) as m:
        # the two attention layers of four cache K and V (2 heads of 16, F16) per token; the
        # linear-attention layers keep a fixed state instead
        assert m.memory["kv_bytes"] == m.memory["n_cells"] * 2 * 2 * (2 * 16) * 2
        assert m.memory["recurrent_bytes"] > 0


# ---- the cost model on a Qwen3.6-35B-A3B-shaped verification curve ------------------------------

def _qwen36_curve(shared: float = 0.55, state: float = 0.05) -> dict[int, float]:
    """Bandwidth-bound verification cost of n tokens, in units of one token: `shared` of the
    bytes (DeltaNet and attention layers, the shared expert, the head) read once per call, the
    rest per distinct expert of 256 the batch routes to (top 8, uniform), plus a recurrent state
    snapshot written per token (`state`), as scripts/moe_cost_curve.py --estimate assumes."""
    return {n: shared + (1 - shared) * 256 * (1 - (1 - 8 / 256) ** n) / 8 + state * (n - 1) for n in range(1, 18)}


def test_cost_model_on_the_qwen35moe_shape():
    """Verifying k + 1 tokens costs Qwen3.6-35B-A3B more than a dense model of the same
    single-token cost (so shorter drafts), less than qwen3moe's shape (128 experts, 30% of the
    bytes shared: so no shorter drafts), and a weak or expensive draft falls back to plain."""
    from test_moe import _moe_curve, _policy

    q36, q3 = _qwen36_curve(), _moe_curve(128, 8, 0.3)
    assert 1.35 < q36[2] < 1.6 and q36[16] > 4.5
    assert all(q36[n] < q3[n] for n in range(2, 18))
    dense = {n: 1 + 0.02 * (n - 1) for n in range(1, 18)}
    for alpha in (0.6, 0.7, 0.8, 0.9):
        k36, k3, kd = (_policy(alpha, 0.05, c).best_k(16) for c in (q36, q3, dense))
        print(f"alpha {alpha}: best k qwen35moe {k36}, qwen3moe {k3}, dense {kd}")
        assert k3 <= k36 < kd
    assert _policy(0.9, 0.05, q36).best_k(16) >= 2
    assert _policy(0.5, 0.3, q36).best_k(16) == 0
