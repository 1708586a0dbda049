"""Mistral Small 3.x / Ministral 3 / Devstral (``mistral3``, issue 24) on seeded tiny models
(tests/models_mistral3.py): logits against llama.cpp b11434's (tests/data/reference/
mistral3_llamacpp.json, scripts/arch_reference.py) within 3x llama.cpp's own AVX-512 / AVX2
spread; against the float64 oracle (tests/oracle.py's mistral3: rope_freqs, YaRN with the
file's betas and log multiplier, attention temperature), broken conventions far off; batched ==
token by token, rollback at every split, speculative greedy == plain."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import arch_checks as ac
import oracle
from models_mistral3 import write_mistral3_gguf

REF = ac.fixture("mistral3")
SYNTH = {
    "yarn-temp": dict(seed=91, bias=True, temperature_scale=0.5,
                      yarn=dict(factor=4.0, original_context_length=4, beta_fast=16.0, beta_slow=2.0,
                                log_multiplier=1.0)),
    "plain": dict(seed=92),
}
TOKS = np.random.default_rng(1).integers(0, 64, 14).astype(np.int32)


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory):
    return ac.regenerate_all(write_mistral3_gguf, REF, tmp_path_factory.mktemp("mistral3_ref"))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return ac.write_all(write_mistral3_gguf, SYNTH, tmp_path_factory.mktemp("mistral3"))


@pytest.mark.parametrize("name", list(REF))
def test_matches_llamacpp(ref_files, name):
    r = ac.compare_with_llamacpp(ref_files[name], REF[name])
    print(f"mistral3/{name} vs llama.cpp: max relative logit difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax agreement {r['agree']}/{r['n']}")


@pytest.mark.parametrize("name", list(SYNTH))
def test_matches_oracle(synth, name):
    want = oracle.Oracle(synth[name]).logits(TOKS)
    with ac.f32_model(synth[name]) as m:
        assert m.info.arch == "mistral3"
        got = m.eval(TOKS)
    assert ac.rel_diff(got, want) < 1e-5   # float32 against float64: measured <= 4e-7
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("attr,value", [("attn_temp", 0.0), ("yarn", None), ("rope_neox", True)])
def test_broken_conventions_are_far(synth, attr, value):
    """The attention temperature (a floor of 4 positions: it grows along the prompt), YaRN and
    the rope's pairing each move the logits far outside every tolerance."""
    with ac.f32_model(synth["yarn-temp"]) as m:
        got = m.eval(TOKS)
    wrong = copy.copy(oracle.Oracle(synth["yarn-temp"]))
    setattr(wrong, attr, value)
    if attr == "yarn":
        wrong.freq_scale = 1.0
    far = ac.rel_diff(got, wrong.logits(TOKS))
    print(f"mistral3 with {attr}={value}: {far:.2e}")
    ac.assert_far(far, REF)


@pytest.mark.parametrize("name", list(SYNTH))
def test_batched_equals_sequential(synth, name):
    assert ac.batched_vs_sequential(synth[name], TOKS) < 1e-5


@pytest.mark.parametrize("name", list(SYNTH))
def test_rollback_at_every_split(synth, name):
    assert ac.rollback_every_split(synth[name]) < 1e-5


def test_speculative_greedy_equals_plain(synth, tmp_path):
    near = tmp_path / "near.gguf"
    write_mistral3_gguf(near, **{**SYNTH["plain"], "rope_base": 100.0})
    rates = ac.speculative_greedy(synth["plain"], near, [1, 7, 3, 9, 12, 40])
    print(f"mistral3 speculative greedy: acceptance {rates}")
    assert 0.0 < min(rates) and max(rates) < 1.0
