"""DeepSeek V2 / V3 (``deepseek2``: multi-head latent attention, issue 24): what only it has.
Its logits and MTP drafts against llama.cpp and the oracle (tests/oracle_mla.py), the cache's
bytes per token (one latent row per token and layer, no V), broken conventions, batching,
rollback and speculation: test_arch_checks.py's deepseek2 entry. Here: the NextN block against
the oracle at every position, MTP switched on after the prompt (a replay), and malformed or
legacy files refused with a message."""
from __future__ import annotations

import numpy as np
import pytest

import arch_checks as ac
import pyllamaspec
from models_mla import write_deepseek2_gguf
from oracle_mla import MlaOracle
from pyllamaspec import Model
from test_arch_checks import ARCHS, TOKS, synth  # noqa: F401 (the fixture)


@pytest.fixture(scope="module")
def v3(synth):
    return synth(ARCHS["deepseek2"])["v3"]


def test_mtp_first_step_matches_oracle(v3):
    """The NextN block at every position: one draft step after the target's prefix."""
    want = MlaOracle(v3).mtp_logits(TOKS)
    with ac.f32_model(v3) as m:
        m.enable_mtp()
        for p in (1, 7, len(TOKS) - 1):
            m.clear()
            m.eval(TOKS[:p], logits="none")
            got = m.mtp_draft(int(TOKS[p]), 0)
            assert np.abs(got - want[p]).max() < 1e-5 * np.abs(want[p]).max()


def test_mtp_enabled_on_a_filled_cache_replays(v3):
    """A KV-only model keeps its tokens, so MTP switched on after the prompt rebuilds the block's
    cache by a replay, as the hybrid models do."""
    with ac.f32_model(v3) as late, ac.f32_model(v3) as early:
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
