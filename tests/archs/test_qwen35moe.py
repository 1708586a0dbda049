"""Qwen3.5 / 3.6 MoE (``qwen35moe``, issue 24) on seeded tiny models (tests/models_qwen35.py with
experts):

* logits and chained MTP drafts against llama.cpp b11434's (tests/data/reference/
  qwen35moe_llamacpp.json, scripts/arch_reference.py, regenerated files), within 3x llama.cpp's
  own AVX-512 / AVX2 spread (tests/arch_checks.py);
* against the float64 oracle (tests/oracle_qwen35.py: DeltaNet recurrence, gated attention,
  routing with the gated shared expert), and the oracle with a convention broken lands far off;
* batched == token by token; the recurrent state rolls back exactly at every split, from its
  ring and by replay; speculative greedy == plain with a model draft and with the MTP block.
"""
from __future__ import annotations

import numpy as np
import pytest

import arch_checks as ac
from models_qwen35 import write_qwen35_gguf
from oracle_qwen35 import Qwen35Oracle

REF = ac.fixture("qwen35moe")
SYNTH = {
    "moe": dict(seed=41, n_expert=4),
    # two k heads for four v heads: which k head a v head reads matters
    "kv": dict(seed=42, n_expert=8, n_expert_used=3, n_k_heads=2, n_v_heads=4, d_state=8),
    "mtp": dict(seed=43, n_expert=4, n_nextn=1),
}
TOKS = np.random.default_rng(1).integers(0, 64, 14).astype(np.int32)


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory):
    return ac.regenerate_all(write_qwen35_gguf, REF, tmp_path_factory.mktemp("qwen35moe_ref"))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return ac.write_all(write_qwen35_gguf, SYNTH, tmp_path_factory.mktemp("qwen35moe"))


@pytest.mark.parametrize("name", list(REF))
def test_matches_llamacpp(ref_files, name):
    r = ac.compare_with_llamacpp(ref_files[name], REF[name])
    print(f"qwen35moe/{name} vs llama.cpp: max relative logit difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax agreement {r['agree']}/{r['n']}")


def test_mtp_matches_llamacpp(ref_files):
    r = ac.compare_mtp_with_llamacpp(ref_files["mtp"], REF["mtp"])
    print(f"qwen35moe MTP vs llama.cpp: max relative difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax {r['agree']}/{r['n']}")


@pytest.mark.parametrize("name", list(SYNTH))
def test_matches_oracle(synth, name):
    want = Qwen35Oracle(synth[name]).logits(TOKS)
    with ac.f32_model(synth[name]) as m:
        assert m.info.arch == "qwen35moe"
        got = m.eval(TOKS)
    assert ac.rel_diff(got, want) < 1e-5   # float32 against float64: measured <= 1.9e-6
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("attr,value,name", [("moe_norm", False, "moe"), ("shared_gate", False, "moe"),
                                             ("head_map", "div", "kv"), ("gate_attn", False, "moe")])
def test_broken_conventions_are_far(synth, attr, value, name):
    """Renormalized routing, the shared expert's gate, which k head a v head reads and the
    attention's output gate each move the logits by > 0.3 relative: far outside the oracle's
    1e-5 and every llama.cpp tolerance of the fixture."""
    o = Qwen35Oracle(synth[name])
    with ac.f32_model(synth[name]) as m:
        got = m.eval(TOKS)
    wrong = o.copy()
    setattr(wrong, attr, value)
    far = ac.rel_diff(got, wrong.logits(TOKS))
    print(f"qwen35moe with {attr}={value}: {far:.2e}")
    ac.assert_far(far, REF)


@pytest.mark.parametrize("name", ["moe", "kv"])
def test_batched_equals_sequential(synth, name):
    assert ac.batched_vs_sequential(synth[name], TOKS) < 1e-5


@pytest.mark.parametrize("snapshots", [None, 2])
def test_rollback_at_every_split(synth, monkeypatch, snapshots):
    """From the ring of recurrent states, and (a ring of 2) by replaying the kept tokens."""
    if snapshots:
        monkeypatch.setenv("PYLLAMASPEC_RS_SNAPSHOTS", str(snapshots))
    assert ac.rollback_every_split(synth["kv"]) < 1e-5


def test_speculative_greedy_equals_plain(synth, tmp_path):
    near = tmp_path / "near.gguf"
    write_qwen35_gguf(near, **{**SYNTH["moe"], "rope_base": 100.0})
    rates = ac.speculative_greedy(synth["moe"], near, [1, 7, 3, 9, 12, 40])
    print(f"qwen35moe speculative greedy: acceptance {rates}")
    assert 0.0 < min(rates) and max(rates) < 1.0


def test_mtp_greedy_equals_plain(synth):
    rates = ac.mtp_greedy_equals_plain(synth["mtp"], [1, 7, 3, 9, 12, 40])
    print(f"qwen35moe MTP greedy: acceptance {rates}")


def test_memory_holds_kv_and_recurrent_state(synth):
    from pyllamaspec import Model
    with Model(synth["moe"], n_ctx=256) as m:
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
