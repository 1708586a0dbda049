"""qwen35 (hybrid Gated DeltaNet + gated attention) on seeded tiny random models:

* logits against llama.cpp's (tests/data/reference/qwen35_tiny_llamacpp.json, written by
  scripts/qwen35_reference.py from the same models, which are regenerated here bit for bit);
* the recurrent state's rollback: eval A, R; truncate into R; eval D == a fresh A, R[:s], D, for
  every split s, from the snapshot ring and (ring too short) by replay;
* batched == token by token; speculative greedy == plain greedy with qwen35 and llama drafts.

Tolerance against llama.cpp: max |ours - ref| / max |ref| < 1e-4 (tests/tolerances.py) and every
argmax with a clear margin equal. Both run ggml's kernels in F32 with an F16 KV cache; what differs
is summation order (threads, graph shapes, and the CPU's instruction set): measured 1.4e-9 against
llama.cpp on the same machine, and up to 3.2e-5 between llama.cpp's own AVX-512, AVX2 and generic
builds; 1e-4 still fails on any real formula error (a wrong gate, rope section or norm moves logits
by O(1e-2) or more).
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest
import tolerances

from models import write_gguf
from models_qwen35 import write_qwen35_gguf
from pyllamaspec import Model, generate
from pyllamaspec.errors import EvaluationInterrupted

REF = pathlib.Path(__file__).parents[1] / "data" / "reference" / "qwen35_tiny_llamacpp.json"


def _fixture() -> dict:
    return json.loads(REF.read_text())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, pathlib.Path]:
    """The reference's models, regenerated from their seeds (identical files or the test fails)."""
    d = tmp_path_factory.mktemp("qwen35")
    paths = {}
    for name, spec in _fixture()["models"].items():
        p = d / f"{name}.gguf"
        write_qwen35_gguf(p, **spec["kwargs"])
        assert hashlib.sha256(p.read_bytes()).hexdigest() == spec["sha256"], f"model {name} is not regenerated bit for bit"
        paths[name] = p
    return paths


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("name", ["a", "b"])
def test_matches_llamacpp(tiny, name):
    spec = _fixture()["models"][name]
    tol = tolerances.QWEN35[name].tol()     # llama.cpp across CPUs: <= 3.2e-5, under the 1e-4 floor
    with Model(tiny[name], n_ctx=256, n_threads=1) as m:
        for prompt, ref in zip(spec["prompts"], spec["logits"]):
            ref = np.asarray(ref, np.float32)
            m.truncate(0)
            ours = m.eval(np.asarray(prompt, np.int32), logits="all")
            assert ours.shape == ref.shape
            assert _rel(ours, ref) < tol
            clear = np.array([tolerances.clear_margin(row, tol) for row in ref])
            assert (ours.argmax(1) == ref.argmax(1))[clear].all()


@pytest.mark.parametrize("name", ["a", "b"])
def test_batched_equals_sequential(tiny, name):
    # an F32 KV cache: with F16 the one-token and batched attention kernels round differently
    # (1.6e-4 of the largest logit on model b)
    prompt = np.asarray(_fixture()["models"][name]["prompts"][1], np.int32)
    kw = dict(n_ctx=256, n_threads=1, type_k="f32", type_v="f32")
    with Model(tiny[name], **kw) as m:
        whole = m.eval(prompt, logits="all")
    with Model(tiny[name], n_batch=7, **kw) as m:   # split into graphs of 7
        split = m.eval(prompt, logits="all")
    with Model(tiny[name], **kw) as m:
        one = np.concatenate([m.eval(prompt[i:i + 1], logits="all") for i in range(len(prompt))])
    assert _rel(split, whole) < 1e-5 and _rel(one, whole) < 1e-5
    assert (one.argmax(1) == whole.argmax(1)).all()


def _rollback_case(path, monkeypatch, snapshots: int | None):
    if snapshots is not None:
        monkeypatch.setenv("PYLLAMASPEC_RS_SNAPSHOTS", str(snapshots))
    rng = np.random.default_rng(5)
    a, r, d = (rng.integers(2, 64, n).astype(np.int32) for n in (9, 6, 4))
    with Model(path, n_ctx=128, n_threads=1) as m, Model(path, n_ctx=128, n_threads=1) as fresh:
        for s in range(len(r) + 1):
            m.truncate(0)
            m.eval(a, logits="none")
            m.eval(r, logits="all")                       # a verification round
            m.truncate(len(a) + s)                        # s of its tokens accepted
            assert m.n_past == len(a) + s
            got = m.eval(d, logits="all")
            fresh.truncate(0)
            fresh.eval(a, logits="none")
            if s:
                fresh.eval(r[:s], logits="none")
            want = fresh.eval(d, logits="all")
            assert _rel(got, want) < 1e-5, f"split {s}"
            assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("name", ["a", "b"])
def test_rollback_from_snapshots(tiny, name, monkeypatch):
    _rollback_case(tiny[name], monkeypatch, None)


def test_rollback_by_replay(tiny, monkeypatch):
    # a ring of 2 states: most truncations into the round reach further back and replay
    _rollback_case(tiny["a"], monkeypatch, 2)


def test_rollback_chains_and_errors(tiny, monkeypatch):
    monkeypatch.setenv("PYLLAMASPEC_RS_SNAPSHOTS", "3")
    rng = np.random.default_rng(6)
    a, r, d = (rng.integers(2, 64, n).astype(np.int32) for n in (10, 8, 3))
    with Model(tiny["b"], n_ctx=64, n_threads=1) as m, Model(tiny["b"], n_ctx=64, n_threads=1) as fresh:
        m.eval(a, logits="none")
        m.eval(r, logits="none")
        m.truncate(len(a) + 6)          # in the ring
        m.truncate(len(a) + 2)          # beyond it: replay pending
        m.truncate(len(a) + 1)          # further still, before the replay ran
        m.interrupt()                   # the next eval stops before its first batch
        with pytest.raises(EvaluationInterrupted):
            m.eval(d, logits="all")
        assert m.n_past == len(a) + 1
        got = m.eval(d, logits="all")
        want_ctx = np.concatenate([a, r[:1], d])
        want = fresh.eval(want_ctx, logits="all")[-len(d):]
        assert _rel(got, want) < 1e-5
    with pytest.raises(Exception, match="PYLLAMASPEC_RS_SNAPSHOTS"):
        monkeypatch.setenv("PYLLAMASPEC_RS_SNAPSHOTS", "0")
        Model(tiny["a"], n_ctx=64)


@pytest.fixture(scope="module")
def llama_draft(tmp_path_factory) -> pathlib.Path:
    p = tmp_path_factory.mktemp("qwen35_draft") / "llama.gguf"
    write_gguf(p, arch="llama", n_vocab=64, seed=3)
    return p


@pytest.fixture(scope="module")
def near_draft(tmp_path_factory) -> pathlib.Path:
    """Model a with another rope base: a qwen35 draft that agrees with it part of the time, so
    rounds accept every number of tokens and both hybrid caches roll back to every split."""
    p = tmp_path_factory.mktemp("qwen35_near") / "near.gguf"
    write_qwen35_gguf(p, **{**_fixture()["models"]["a"]["kwargs"], "rope_base": 100.0})
    return p


@pytest.mark.parametrize("draft", ["self", "near", "llama"])
def test_speculative_greedy_equals_plain(tiny, llama_draft, near_draft, draft):
    dpath = {"self": tiny["a"], "near": near_draft, "llama": llama_draft}[draft]
    prompt = [int(t) for t in _fixture()["models"]["a"]["prompts"][0]]
    with Model(tiny["a"], n_ctx=256, n_threads=1) as target, Model(dpath, n_ctx=256, n_threads=1) as dm:
        plain = generate(prompt, target, max_tokens=40, temperature=0)
        for k in (1, 3, 8):
            spec = generate(prompt, target, dm, max_tokens=40, temperature=0, n_draft=k, p_min=0.0, adaptive=False)
            assert spec.tokens == plain.tokens, f"n_draft={k}"
            if draft == "self":
                assert spec.stats.acceptance_rate == 1.0
            if draft == "near" and k > 1:   # partial rounds: rollbacks into the round happened
                assert set(spec.stats.accepted_per_round) - {0, k}
            print(f"qwen35 target, {draft} draft, n_draft={k}: acceptance {spec.stats.acceptance_rate:.3f}")


def test_draft_length_capped_by_the_ring(tiny, near_draft, monkeypatch):
    monkeypatch.setenv("PYLLAMASPEC_RS_SNAPSHOTS", "4")   # O(1) rollback of 3 tokens at most
    prompt = [int(t) for t in _fixture()["models"]["a"]["prompts"][0]]
    with Model(tiny["a"], n_ctx=256, n_threads=1) as target, Model(near_draft, n_ctx=256, n_threads=1) as dm:
        assert target.max_rollback == 3
        plain = generate(prompt, target, max_tokens=30, temperature=0)
        spec = generate(prompt, target, dm, max_tokens=30, temperature=0, n_draft=8, p_min=0.0, adaptive=False)
    assert spec.tokens == plain.tokens
    assert max(spec.stats.accepted_per_round) <= 3 and spec.stats.drafted <= 3 * spec.stats.rounds


@pytest.mark.parametrize("kv,kwargs", [
    ({"qwen35.ssm.inner_size": 31}, {}),
    ({"qwen35.ssm.group_count": 3}, {}),
    ({"qwen35.rope.dimension_sections": [0, 0, 0, 0]}, {}),
    ({"qwen35.rope.dimension_sections": [40, 0, 0, 0]}, {}),
    ({"qwen35.nextn_predict_layers": 4}, {}),
    ({"qwen35.attention.recurrent_layers": [True, False, True]}, {"recurrent_layers": [True, False, True, False]}),
    ({"qwen35.attention.recurrent_layers": "yes"}, {"recurrent_layers": [True, False, True, False]}),
])
def test_malformed_hparams_raise(tmp_path, kv, kwargs):
    from pyllamaspec.errors import ModelFormatError
    p = tmp_path / "bad.gguf"
    write_qwen35_gguf(p, extra_kv=kv, **kwargs)
    with pytest.raises(ModelFormatError):
        Model(p, n_ctx=64, n_threads=1)
