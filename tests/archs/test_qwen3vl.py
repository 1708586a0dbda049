"""Qwen3-VL's text architectures (qwen3vl, qwen3vlmoe), text only: logits against llama.cpp
b11434's (tests/data/reference/qwen3vl_llamacpp.json, scripts/qwen3vl_reference.py) within 3x its
own spread (1 thread, flash attention off: arch_checks.tolerance), batched == token by token,
rollback at every split point, speculative greedy == plain greedy; files llama.cpp refuses are
refused. Images with deepstack: tests/vision/test_vision_qwen3vl_deepstack.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

import arch_checks as ac
from models_qwen3vl import write_qwen3vl_gguf
from pyllamaspec import Model
from pyllamaspec.errors import ModelFormatError

REF = ac.fixture("qwen3vl")


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory):
    return ac.regenerate_all(write_qwen3vl_gguf, REF, tmp_path_factory.mktemp("qwen3vl"))


@pytest.mark.parametrize("name", list(REF))
def test_matches_llamacpp(ref_files, name):
    r = ac.compare_with_llamacpp(ref_files[name], REF[name])
    print(f"qwen3vl/{name} vs llama.cpp: max relative logit difference {r['rel']:.2e} "
          f"(tolerance {r['tol']:.1e}), argmax agreement {r['agree']}/{r['n']}")


def test_other_weights_far_outside(tmp_path):
    """Negative control: the dense model's file with another rope base (the same weights) lands
    far outside the tolerance, so the comparison can fail."""
    spec = REF["dense"]
    path = tmp_path / "other.gguf"
    write_qwen3vl_gguf(path, **dict(spec["writer"], rope_base=100.0))
    with Model(path, n_ctx=512) as m:
        rel = max(ac.rel_diff(m.eval(p), np.asarray(w)) for p, w in zip(spec["prompts"], spec["logits"])
                  if m.clear() is None)
    assert rel > 10 * ac.tolerance(spec), rel


@pytest.mark.parametrize("name", ["dense", "moe"])
def test_batched_and_rollback(ref_files, name):
    toks = np.random.default_rng(1).integers(0, 64, 14).astype(np.int32)
    assert ac.batched_vs_sequential(ref_files[name], toks) < 1e-5   # f32 cache: measured <= 1e-6
    assert ac.rollback_every_split(ref_files[name]) < 1e-5   # as test_arch_checks: measured 3.3e-7 (dense)


def test_speculative_greedy(tmp_path):
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    write_qwen3vl_gguf(target, seed=81)
    write_qwen3vl_gguf(draft, seed=81, rope_base=100.0)   # agrees part of the time
    rates = ac.speculative_greedy(target, draft, [1, 7, 3, 9, 12, 40])
    assert max(rates) > 0


@pytest.mark.parametrize("kw,what", [
    (dict(drop_keys=["qwen3vl.rope.dimension_sections"]), "rope.dimension_sections"),
    (dict(rope_sections=(0, 0, 0, 0)), "sum to"),
    (dict(n_deepstack=3), "n_deepstack_layers"),   # as many slices as layers: one after no layer
])
def test_bad_files_refused(tmp_path, kw, what):
    path = tmp_path / "bad.gguf"
    write_qwen3vl_gguf(path, **kw)
    with pytest.raises(ModelFormatError, match=what):
        Model(path)


def test_fixture_spread_recorded():
    """The tolerance comes from a spread measured on llama.cpp itself (not a guess)."""
    for spec in REF.values():
        assert {"spread_threads", "spread_flash_attn_off"} <= set(spec)
        assert json.dumps(spec["writer"])   # the writer's arguments regenerate the file
