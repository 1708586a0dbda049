"""Mixture-of-experts architectures (issue 13): qwen3moe, qwen2moe and gpt-oss on tiny seeded
models, against llama.cpp's logits (tests/data/reference/moe_llamacpp.json, made by
scripts/moe_reference.py on the very files these tests regenerate) and against exact maths
(tests/oracle.py); batched == token by token, rollback, bad hyper-parameters."""
from __future__ import annotations

import copy
import json
import pathlib

import models_moe
import numpy as np
import oracle
import pytest
import tolerances

import pyllamaspec
from pyllamaspec import Model

REF = pathlib.Path(__file__).parents[1] / "data" / "reference" / "moe_llamacpp.json"

# models for the oracle and consistency tests: F32 everywhere (exact maths is the judge), and
# gpt-oss with YaRN and a window of 4 < the 14-token prompt
SYNTH = {
    "qwen3moe": dict(arch="qwen3moe", seed=3),
    "qwen3moe-top1": dict(arch="qwen3moe", seed=4, n_expert=4, n_expert_used=1),
    "qwen2moe": dict(arch="qwen2moe", seed=5),
    "gpt-oss": dict(arch="gpt-oss", seed=6, sliding_window=4, yarn_factor=4.0),
}


def _tokens(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 64, n).astype(np.int32)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("moe")


@pytest.fixture(scope="module")
def synth(moe_dir):
    made = {}

    def make(name):
        if name not in made:
            made[name] = moe_dir / f"{name}.gguf"
            models_moe.write_moe_gguf(made[name], **SYNTH[name])
        return made[name]
    return make


def _f32(path, **kw):
    return Model(path, n_ctx=64, type_k="f32", type_v="f32", **kw)


@pytest.mark.parametrize("name", SYNTH)
def test_matches_oracle_f32(synth, name):
    path = synth(name)
    toks = _tokens(14)
    want = oracle.Oracle(path).logits(toks)
    with _f32(path) as m:
        assert m.info.arch == SYNTH[name]["arch"]
        got = m.eval(toks)
    # float32 sums against float64 ones, logits of +-4: measured <= 1e-6; a broken convention
    # (routing, sinks, YaRN, window) moves them by > 1 (test below)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert (got.argmax(1) == want.argmax(1)).all()


def test_routing_conventions_matter(synth):
    """The oracle with qwen3moe's renormalization switched off, or with gpt-oss's sinks, YaRN
    or window left out, is far from us (measured > 1.3): the conventions the test above
    checks are in force."""
    toks = _tokens(14)
    for name, breaks in (("qwen3moe", [("moe_norm", False)]), ("gpt-oss", [("yarn", None), ("n_swa", 10**9)])):
        path = synth(name)
        ex = oracle.Oracle(path)
        with _f32(path) as m:
            got = m.eval(toks)
        for attr, value in breaks:
            wrong = copy.copy(ex)
            setattr(wrong, attr, value)
            assert np.abs(got - wrong.logits(toks)).max() > 0.1, attr
    no_sinks = copy.copy(oracle.Oracle(synth("gpt-oss")))
    no_sinks.has = lambda n, o=no_sinks: "attn_sinks" not in n and n in o.tensors
    with _f32(synth("gpt-oss")) as m:
        assert np.abs(m.eval(toks) - no_sinks.logits(toks)).max() > 0.1


@pytest.mark.parametrize("name", SYNTH)
def test_batched_equals_sequential_and_rollback(synth, name):
    path = synth(name)
    toks = _tokens(14)
    with _f32(path) as m, _f32(path) as fresh:
        batched = m.eval(toks).copy()
        m.clear()
        seq = np.concatenate([m.eval(toks[i:i + 1]) for i in range(len(toks))])
        np.testing.assert_allclose(batched, seq, atol=1e-4, rtol=0)   # measured <= 1.1e-6
        m.clear()
        m.eval(toks[:5])
        m.eval(toks[5:10])
        m.truncate(5)          # roll back what toks[5:10] wrote
        got = m.eval(toks[10:])
        fresh.eval(toks[:5])
        np.testing.assert_array_equal(got, fresh.eval(toks[10:]))


# ---- llama.cpp -----------------------------------------------------------------------------

def _reference():
    return json.loads(REF.read_text())["models"]


@pytest.mark.parametrize("name", ["qwen3moe", "qwen2moe", "qwen3moe-q8_0", "gpt-oss"])
def test_matches_llama_cpp(moe_dir, name):
    ref = _reference()[name]
    path = moe_dir / f"ref-{name}.gguf"
    models_moe.write_moe_gguf(path, **ref["writer"])
    # the fixture was computed on this very file: the writer must regenerate it bit for bit
    assert models_moe.sha256(path) == ref["sha256"]
    tol = tolerances.moe(name)
    rel, agree, n, clear, agree_clear = 0.0, 0, 0, 0, 0
    with Model(path, n_ctx=512) as m:
        for prompt, want in zip(ref["prompts"], ref["logits"]):
            m.clear()
            got = m.eval(prompt)
            want = np.asarray(want)
            rel = max(rel, float((np.abs(got - want).max(1) / np.abs(want).max(1)).max()))
            same = got.argmax(1) == want.argmax(1)
            agree += int(same.sum())
            n += len(prompt)
            # argmax compared where the reference's margin is clear of the tolerance
            ok = np.array([tolerances.clear_margin(row, tol) for row in want])
            clear += int(ok.sum())
            agree_clear += int((same & ok).sum())
    print(f"{name} vs llama.cpp: max relative logit difference {rel:.2e}, argmax agreement {agree}/{n} "
          f"({clear} rows with a clear margin)")
    # llama.cpp's own spread across CPUs, x2 (tests/tolerances.py: up to 6.9e-3 on gpt-oss, whose
    # experts quantize their input to Q8_0); far below what a wrong routing, activation, sink or
    # rope gives (> 0.37 relative, test_broken_conventions_are_far_from_llama_cpp)
    assert rel <= tol
    assert agree_clear == clear


def test_broken_conventions_are_far_from_llama_cpp(moe_dir):
    """The negative control of the comparison above, in its metric: exact maths (tests/oracle.py)
    on the fixture's files stands within llama.cpp's rounding steps of its logits, and the same
    maths with a convention broken stands > 10x the tolerance away (measured >= 0.37)."""
    def rel(ex, spec):
        return max(float((np.abs(ex.logits(np.asarray(p)) - np.asarray(w)).max(1) / np.abs(np.asarray(w)).max(1)).max())
                   for p, w in zip(spec["prompts"], spec["logits"]))
    for name, breaks in (("qwen3moe", [("moe_norm", False)]), ("gpt-oss", [("yarn", None), ("n_swa", 10**9)])):
        spec = _reference()[name]
        path = moe_dir / f"neg-{name}.gguf"
        models_moe.write_moe_gguf(path, **spec["writer"])
        ex = oracle.Oracle(path)
        assert rel(ex, spec) < 2e-2     # F16 KV cache and Q8_0 activations in llama.cpp, not in float64 maths
        for attr, value in breaks:
            wrong = copy.copy(ex)
            setattr(wrong, attr, value)
            assert rel(wrong, spec) > 10 * tolerances.moe(name), attr


# ---- bad files ----------------------------------------------------------------------------

@pytest.mark.parametrize("kv", [{"qwen3moe.expert_used_count": 9}, {"qwen3moe.expert_count": 0},
                                {"qwen3moe.expert_feed_forward_length": 0}])
def test_bad_expert_counts_are_refused(tmp_path, kv):
    path = tmp_path / "bad.gguf"
    models_moe.write_moe_gguf(path, arch="qwen3moe", extra_kv=kv)
    with pytest.raises(pyllamaspec.ModelFormatError, match="mixture-of-experts hyper-parameters"):
        Model(path)


def test_missing_expert_tensor_is_refused(tmp_path):
    path = tmp_path / "bad.gguf"
    models_moe.write_moe_gguf(path, arch="gpt-oss", n_layer=1, drop_tensors=("blk.0.ffn_down_exps.bias",))
    with pytest.raises(pyllamaspec.ModelFormatError, match="ffn_down_exps.bias"):
        Model(path)


# ---- speculation with a mixture-of-experts target --------------------------------------------

def test_speculative_greedy_identity_on_moe_target(moe_dir):
    """Verification runs k + 1 tokens through the router at once; greedy speculative output
    must be the plain greedy output whatever k. The draft is the target's first layer alone
    (same seed, same draws), so it agrees often, not always."""
    from pyllamaspec.generation.generate import generate

    t, d = moe_dir / "spec-target.gguf", moe_dir / "spec-draft.gguf"
    models_moe.write_moe_gguf(t, arch="qwen3moe", seed=21, n_layer=2)
    models_moe.write_moe_gguf(d, arch="qwen3moe", seed=21, n_layer=1)
    with _f32(t, n_threads=1) as target, _f32(d, n_threads=1) as draft:
        plain = generate("the cat", target, max_tokens=24, temperature=0)
        accepted = []
        for k in (1, 2, 4, 8):
            spec = generate("the cat", target, draft, max_tokens=24, temperature=0, n_draft=k, p_min=0.0,
                            adaptive=False)
            assert spec.tokens == plain.tokens, f"n_draft={k}"
            accepted.append(spec.stats.acceptance_rate)
    assert 0.0 < min(accepted) < 1.0          # rejections and rollbacks did happen


# ---- speculation on a mixture of experts: the cost model ------------------------------------

from pyllamaspec.speculation.cost_model import DraftPolicy


def _policy(alpha: float, c_draft: float, c_target: dict[int, float]) -> DraftPolicy:
    p = DraftPolicy(16, prior_alpha=alpha, prior_weight=1e9)     # acceptance pinned
    p.c_draft, p.c_target = c_draft, dict(c_target)
    return p


def _moe_curve(n_expert: int, top_k: int, shared: float) -> dict[int, float]:
    """A bandwidth-bound MoE verification curve: `shared` of one token's cost (attention, head)
    is read once per call, the rest per distinct expert the batch routes to (uniform routing)."""
    return {n: shared + (1 - shared) * n_expert * (1 - (1 - top_k / n_expert) ** n) / top_k for n in range(1, 18)}


def test_policy_falls_back_to_plain_when_verification_grows_linearly():
    """When verifying k + 1 tokens costs k + 1 single-token calls (every token reads weights
    of its own, as a mixture of experts does when no two tokens share an expert), no draft
    can pay, even one always accepted: E[k] <= k + 1 tokens for k * c_draft + (k + 1) c(1)."""
    linear = {n: 0.010 * n for n in range(1, 18)}
    for alpha in (0.5, 0.9, 0.999):
        for c_draft in (0.0001, 0.001):
            p = _policy(alpha, c_draft, linear)
            assert p.best_k(16) == 0 and p.best_k(16, alpha=1.0) == 0
            p.n_draft_obs = DraftPolicy.CONFIDENT        # the draft's cost is believed: no probes
            assert all(p.choose(16) == 0 for _ in range(200))
    # the same draft and acceptance on a flat (dense, bandwidth-bound) curve speculates
    flat = {n: 0.010 * (1 + 0.02 * (n - 1)) for n in range(1, 18)}
    assert _policy(0.9, 0.001, flat).best_k(16) >= 8


def test_policy_drafts_less_on_a_steeper_moe_curve():
    """A mixture of experts (128 experts, top 8, 30% of the bytes outside the experts) verifies
    k + 1 tokens at a steeper cost than a dense model of the same single-token cost, so the
    chosen draft is shorter and speculation pays less, down to plain decoding."""
    moe = _moe_curve(128, 8, 0.3)
    assert 1.5 < moe[2] / moe[1] < 1.8 and moe[16] / moe[1] > 5
    dense = {n: moe[1] * (1 + 0.02 * (n - 1)) for n in range(1, 18)}
    for alpha in (0.6, 0.8, 0.9):
        k_moe, k_dense = _policy(alpha, 0.05, moe).best_k(16), _policy(alpha, 0.05, dense).best_k(16)
        assert k_moe < k_dense
    assert _policy(0.6, 0.3, moe).best_k(16) == 0 and _policy(0.6, 0.3, dense).best_k(16) > 0


def test_bad_yarn_parameters_are_refused(tmp_path):
    path = tmp_path / "bad.gguf"
    models_moe.write_moe_gguf(path, arch="gpt-oss", n_layer=1, yarn_factor=4.0,
                              extra_kv={"gpt-oss.rope.scaling.original_context_length": -5})
    with pytest.raises(pyllamaspec.ModelFormatError, match="YaRN"):
        Model(path)
