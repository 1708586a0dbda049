"""DeepSeek V2 / V3 (``deepseek2``: multi-head latent attention, issue 24) on seeded tiny models
(tests/models_mla.py):

* logits and chained MTP drafts against llama.cpp b11434's (tests/data/reference/
  deepseek2_llamacpp.json, scripts/arch_reference.py), within 3x llama.cpp's own AVX-512 / AVX2
  spread (tests/arch_checks.py);
* against the float64 oracle (tests/oracle_mla.py: heads decompressed from the latent, which is
  what the absorbed form computes), the NextN block too; broken conventions land far off;
* the cache holds one latent row (kv_lora_rank + n_rot values) per token and layer, no V: the
  bytes per token llama.cpp's cache holds (measured by scripts/llamacpp_kv_bytes.cpp);
* batched == token by token, rollback at every split, speculative greedy == plain (model draft
  and MTP); a legacy file without key_length_mla is refused with a message.
"""
from __future__ import annotations

import numpy as np
import pytest

import arch_checks as ac
import pyllamaspec
from models_mla import write_deepseek2_gguf
from oracle_mla import MlaOracle
from pyllamaspec import Model

REF = ac.fixture("deepseek2")
SYNTH = {
    "v3": dict(seed=71, n_nextn=1),
    "v2": dict(seed=72, groups=None, yarn=None, gating=1, probs_bias=False, weights_scale=None, weights_norm=False),
}
TOKS = np.random.default_rng(1).integers(0, 64, 14).astype(np.int32)


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory):
    return ac.regenerate_all(write_deepseek2_gguf, REF, tmp_path_factory.mktemp("deepseek2_ref"))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return ac.write_all(write_deepseek2_gguf, SYNTH, tmp_path_factory.mktemp("deepseek2"))


@pytest.mark.parametrize("name", list(REF))
def test_matches_llamacpp(ref_files, name):
    r = ac.compare_with_llamacpp(ref_files[name], REF[name])
    print(f"deepseek2/{name} vs llama.cpp: max relative logit difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax agreement {r['agree']}/{r['n']}")


def test_mtp_matches_llamacpp(ref_files):
    r = ac.compare_mtp_with_llamacpp(ref_files["v3"], REF["v3"])
    print(f"deepseek2 MTP vs llama.cpp: max relative difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax {r['agree']}/{r['n']}")


@pytest.mark.parametrize("name", list(REF))
def test_kv_cache_bytes_per_token_as_llamacpp(ref_files, name):
    """MLA: (kv_lora_rank + n_rot) F16 values per token and layer, no V."""
    ours = ac.kv_bytes_per_token(ref_files[name])
    print(f"deepseek2/{name}: KV cache {ours:.0f} B/token (llama.cpp {REF[name]['kv_bytes_per_token']})")
    assert ours == REF[name]["kv_bytes_per_token"]
    kw = REF[name]["writer"]
    assert ours == kw.get("n_layer", 3) * (kw.get("kv_lora_rank", 32) + kw.get("n_rot", 16)) * 2


@pytest.mark.parametrize("name", list(SYNTH))
def test_matches_oracle(synth, name):
    want = MlaOracle(synth[name]).logits(TOKS)
    with ac.f32_model(synth[name]) as m:
        assert m.info.arch == "deepseek2"
        got = m.eval(TOKS)
    assert ac.rel_diff(got, want) < 1e-5   # float32 against float64: measured <= 4e-7
    assert (got.argmax(1) == want.argmax(1)).all()


def test_mtp_first_step_matches_oracle(synth):
    """The NextN block at every position: one draft step after the target's prefix."""
    want = MlaOracle(synth["v3"]).mtp_logits(TOKS)
    with ac.f32_model(synth["v3"]) as m:
        m.enable_mtp()
        for p in (1, 7, len(TOKS) - 1):
            m.clear()
            m.eval(TOKS[:p], logits="none")
            got = m.mtp_draft(int(TOKS[p]), 0)
            assert np.abs(got - want[p]).max() < 1e-5 * np.abs(want[p]).max()


@pytest.mark.parametrize("attr,value", [("use_bias", False), ("use_groups", False), ("yarn_log_mul", 0.0),
                                        ("yarn", False)])
def test_broken_conventions_are_far(synth, attr, value):
    """The selection bias, group-limited routing, YaRN's log multiplier (the attention scale) and
    YaRN itself each move the logits far outside every tolerance."""
    with ac.f32_model(synth["v3"]) as m:
        got = m.eval(TOKS)
    wrong = MlaOracle(synth["v3"]).copy()
    setattr(wrong, attr, value)
    far = ac.rel_diff(got, wrong.logits(TOKS))
    print(f"deepseek2 with {attr}={value}: {far:.2e}")
    ac.assert_far(far, REF)


@pytest.mark.parametrize("name", list(SYNTH))
def test_batched_equals_sequential(synth, name):
    assert ac.batched_vs_sequential(synth[name], TOKS) < 1e-5


@pytest.mark.parametrize("name", list(SYNTH))
def test_rollback_at_every_split(synth, name):
    assert ac.rollback_every_split(synth[name]) < 1e-5


def test_speculative_greedy_equals_plain(synth, tmp_path):
    near = tmp_path / "near.gguf"
    write_deepseek2_gguf(near, **{**SYNTH["v2"], "rope_base": 50.0})
    rates = ac.speculative_greedy(synth["v2"], near, [1, 7, 3, 9, 12, 40])
    print(f"deepseek2 speculative greedy: acceptance {rates}")
    assert 0.0 < min(rates) and max(rates) < 1.0


def test_mtp_greedy_equals_plain(synth):
    rates = ac.mtp_greedy_equals_plain(synth["v3"], [1, 7, 3, 9, 12, 40])
    print(f"deepseek2 MTP greedy: acceptance {rates}")


def test_mtp_enabled_on_a_filled_cache_replays(synth):
    """A KV-only model keeps its tokens, so MTP switched on after the prompt rebuilds the block's
    cache by a replay, as the hybrid models do."""
    with ac.f32_model(synth["v3"]) as late, ac.f32_model(synth["v3"]) as early:
        early.enable_mtp()
        early.eval(TOKS[:9], logits="none")
        late.eval(TOKS[:9], logits="none")
        late.enable_mtp()
        for step, t in enumerate([5, 17, 30]):
            np.testing.assert_array_equal(late.mtp_draft(t, step), early.mtp_draft(t, step))


@pytest.mark.parametrize("kw,err,match", [
    (dict(extra_kv={"deepseek2.attention.key_length_mla": 0, "deepseek2.attention.value_length_mla": 0}),
     pyllamaspec.UnsupportedModelError, "legacy"),
    (dict(extra_kv={"deepseek2.attention.key_length": 40}), pyllamaspec.ModelFormatError, "MLA hyper-parameters"),
    (dict(groups=(3, 2)), pyllamaspec.ModelFormatError, "expert groups"),
    (dict(extra_kv={"deepseek2.attention.temperature_scale": 0.5}), pyllamaspec.ModelFormatError, "temperature"),
])
def test_malformed_files_are_refused(tmp_path, kw, err, match):
    p = tmp_path / "bad.gguf"
    write_deepseek2_gguf(p, **kw)
    with pytest.raises(err, match=match):
        Model(p)
