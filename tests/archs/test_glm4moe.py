"""GLM-4.5 / 4.6 / 4.7 (``glm4moe``, issue 24) on seeded tiny models (tests/models_glm4moe.py):

* logits and chained MTP drafts against llama.cpp b11434's (tests/data/reference/
  glm4moe_llamacpp.json, scripts/arch_reference.py), within 3x llama.cpp's own AVX-512 / AVX2
  spread (tests/arch_checks.py);
* against the float64 oracle (tests/oracle.py's glm4moe layout: sigmoid routing with the
  selection bias, shared experts, partial NEOX rope); broken conventions land far off;
* batched == token by token, rollback at every split, speculative greedy == plain (model draft
  and the NextN block).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import arch_checks as ac
import oracle
import pyllamaspec
from models_glm4moe import write_glm4moe_gguf
from pyllamaspec import Model

REF = ac.fixture("glm4moe")
SYNTH = {
    "air": dict(seed=81, n_nextn=1),
    "qknorm": dict(seed=82, qk_norm=True, qkv_bias=False, weights_scale=None, weights_norm=False, n_rot=32),
}
TOKS = np.random.default_rng(1).integers(0, 64, 14).astype(np.int32)


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory):
    return ac.regenerate_all(write_glm4moe_gguf, REF, tmp_path_factory.mktemp("glm4moe_ref"))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return ac.write_all(write_glm4moe_gguf, SYNTH, tmp_path_factory.mktemp("glm4moe"))


@pytest.mark.parametrize("name", list(REF))
def test_matches_llamacpp(ref_files, name):
    r = ac.compare_with_llamacpp(ref_files[name], REF[name])
    print(f"glm4moe/{name} vs llama.cpp: max relative logit difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax agreement {r['agree']}/{r['n']}")


def test_mtp_matches_llamacpp(ref_files):
    r = ac.compare_mtp_with_llamacpp(ref_files["air"], REF["air"])
    print(f"glm4moe MTP vs llama.cpp: max relative difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax {r['agree']}/{r['n']}")


@pytest.mark.parametrize("name", list(SYNTH))
def test_matches_oracle(synth, name):
    want = oracle.Oracle(synth[name]).logits(TOKS)
    with ac.f32_model(synth[name]) as m:
        assert m.info.arch == "glm4moe"
        got = m.eval(TOKS)
    assert ac.rel_diff(got, want) < 1e-5   # float32 against float64: measured <= 5e-7
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("attr,value", [("probs_bias", False), ("moe_gating", "softmax"), ("moe_norm", False),
                                        ("rope_neox", False), ("moe_scale", 0.0)])
def test_broken_conventions_are_far(synth, attr, value):
    with ac.f32_model(synth["air"]) as m:
        got = m.eval(TOKS)
    wrong = copy.copy(oracle.Oracle(synth["air"]))
    setattr(wrong, attr, value)
    far = ac.rel_diff(got, wrong.logits(TOKS))
    print(f"glm4moe with {attr}={value}: {far:.2e}")
    ac.assert_far(far, REF)


@pytest.mark.parametrize("name", list(SYNTH))
def test_batched_equals_sequential(synth, name):
    assert ac.batched_vs_sequential(synth[name], TOKS) < 1e-5


@pytest.mark.parametrize("name", list(SYNTH))
def test_rollback_at_every_split(synth, name):
    assert ac.rollback_every_split(synth[name]) < 1e-5


def test_speculative_greedy_equals_plain(synth, tmp_path):
    near = tmp_path / "near.gguf"
    write_glm4moe_gguf(near, **{**SYNTH["qknorm"], "rope_base": 100.0})
    rates = ac.speculative_greedy(synth["qknorm"], near, [1, 7, 3, 9, 12, 40])
    print(f"glm4moe speculative greedy: acceptance {rates}")
    assert 0.0 < min(rates) and max(rates) < 1.0


def test_mtp_greedy_equals_plain(synth):
    rates = ac.mtp_greedy_equals_plain(synth["air"], [1, 7, 3, 9, 12, 40])
    print(f"glm4moe MTP greedy: acceptance {rates}")


def test_missing_selection_bias_is_refused(tmp_path):
    p = tmp_path / "bad.gguf"
    write_glm4moe_gguf(p, drop_tensors=("blk.1.exp_probs_b.bias",))
    with pytest.raises(pyllamaspec.ModelFormatError, match="exp_probs_b"):
        Model(p)
