"""Qwen2-VL / Qwen2.5-VL images end to end (issue 42): our ``qwen2vl_merger`` and
``qwen2.5vl_merger`` encoders (csrc/vision/qwen2vl.cpp) and the ``qwen2vl`` text architecture
(csrc/models/qwen2vl.cpp: Qwen2 with M-RoPE) against llama.cpp b11434's libmtmd
(tests/data/reference/vision_qwen2vl.json, made by scripts/vision_reference_qwen2vl.py; its files
rebuilt here from the writers and checked by sha256): the preprocessed pixels (to the bit), the
rows, the grid, the prompt's chunks, the image's M-RoPE positions, the logits after the prompt and
the greedy answer, through Projector, eval_rows and generate(); greedy speculation across a 2.5
image (a draft model, n-gram lookup) equals plain.

Tolerances: llama.cpp's own spread stored per case (``spread``: 1 thread against 2, 0.0; flash
attention off against on: rows 7e-4 .. 1.9e-3, logits 1.3e-3 .. 2.2e-3), the largest of a case.
Measured: our rows equal llama.cpp's to the bit on every case (window attention included); our
logits from its rows lie 6e-4 .. 9.4e-4 from its recorded ones (our attention over the cache runs
its query rows in other chunks than llama.cpp's one batch). Negative controls, each at least 100
times the rows' spread away (50 times the logits'): 2.5's windows off (every layer full attention)
on the images of more than one window, the LayerNorm in place of 2.5's RMS norm, and the image's
rows at one position a row in the text model. A near tie (a step's top two logits closer than 4
times the case's spread) ends a greedy comparison."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import models_vision_qwen as mq
import pyllamaspec
from conftest import reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import InvalidArgumentError, PyllamaspecError, UnsupportedModelError
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector

REF = json.loads((reference_dir() / "vision_qwen2vl.json").read_text())
CASES = REF["cases"]
IDS = [f"{c['projector']}-{c['image']}" for c in CASES]
TEXT = "tiny_qwen2vl.gguf"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return mq.write_reference_files(tmp_path_factory.mktemp("vision_qwen2vl"), REF, mq.write_qwen2vl_mmproj,
                                    mq.write_tiny_qwen2vl_text)


def _spread(c, key: str) -> float:
    return max(v[key] for v in c["spread"].values())


def _dist(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32)).max())


def _case(projector: str, image: str) -> dict:
    return next(c for c in CASES if c["projector"] == projector and c["image"] == image)


def _kwargs(c) -> dict:
    return dict(REF["projectors"][c["projector"]]["kwargs"])


@pytest.mark.parametrize("c", CASES, ids=IDS)
def test_rows_as_llamacpp(files, c):
    ref = np.array(c["embd"], np.float32)
    want_type = mq.QWEN2VL_KINDS[_kwargs(c)["kind"]]
    with Projector(files / f"{c['projector']}.gguf") as p:
        assert p.info.type == want_type and p.info.mrope and not p.info.non_causal
        px = p.pixels(files / f"{c['image']}.png")             # mtmd's smart resize, CLIP's mean / std
        assert [px.shape[2], px.shape[1]] == c["preproc_size"]
        assert hashlib.sha256(px.astype("<f4").tobytes()).hexdigest() == c["preproc_sha256"]
        rows = p.encode_pixels(px)
        assert rows.grid == (c["grid"]["nx"], c["grid"]["ny"]) and rows.rows.shape == ref.shape
        assert _dist(rows.rows, ref) <= _spread(c, "embd")


def _rows(path, image) -> np.ndarray:
    with Projector(path) as p:
        return p.encode(image).rows


@pytest.mark.parametrize("image, windows", [("win", 4), ("tall_rgba", 2), ("small", 1)])
def test_window_attention_as_llamacpp(files, tmp_path, image, windows):
    """2.5's windows off (n_wa_pattern 1: every layer full) move the rows far where the image
    spans more than one window of 4 x 4 rows, and not at all where it fits in one."""
    c = _case("q25", image)
    mq.write_qwen2vl_mmproj(tmp_path / "full.gguf", **dict(_kwargs(c), n_wa_pattern=1))
    ref, tol = np.array(c["embd"], np.float32), _spread(c, "embd")
    d = _dist(_rows(tmp_path / "full.gguf", files / f"{image}.png"), ref)
    if windows > 1:
        assert d > 100 * tol
    else:
        assert d == 0.0


def test_qwen25_norm_is_rms(files, tmp_path):
    """The same weights read as a qwen2vl_merger (LayerNorms; clip.cpp's graph takes the gated
    MLP for both types) on an image of one window: only the norm differs, and the rows move far."""
    c = _case("q25", "small")
    kw = _kwargs(c)
    mq.write_qwen2vl_mmproj(tmp_path / "ln.gguf", **kw, drop_keys=("clip.vision.n_wa_pattern",),
                            extra_kv={"clip.projector_type": "qwen2vl_merger"})
    assert _dist(_rows(tmp_path / "ln.gguf", files / "small.png"), c["embd"]) > 100 * _spread(c, "embd")


@pytest.mark.parametrize("c", CASES, ids=IDS)
def test_prompt_chunks_and_positions_as_llamacpp(files, c):
    with Projector(files / f"{c['projector']}.gguf") as p, Model(files / TEXT, n_ctx=256) as m:
        rows = p.encode(files / f"{c['image']}.png")
        ip = vp.tokenize(m, c["prompt_before"] + vp.MEDIA_MARKER + c["prompt_after"], [rows], p.info.type)
    want = [t for ch in c["chunks"] for t in (ch["ids"] if ch["type"] == "text" else [None] * ch["n_tokens"])]
    assert [t if t >= 0 else None for t in ip.ids] == want
    # mtmd's rule, which the core applies (memory/row_spans.h): row i at (p, p + i / nx, p + i % nx, 0)
    p0, nx, ny = len(c["chunks"][0]["ids"]), c["grid"]["nx"], c["grid"]["ny"]
    assert c["grid"]["mrope"] and c["positions"] == [[p0, p0 + i // nx, p0 + i % nx, 0] for i in range(nx * ny)]
    text = sum(len(ch["ids"]) for ch in c["chunks"] if ch["type"] == "text")
    assert c["n_past"] == text + max(nx, ny)


def _prompt_logits(s, c, grid=True) -> np.ndarray:
    out = None
    for ch in c["chunks"]:
        if ch["type"] == "text":
            out = s.eval(ch["ids"], logits="last")[0].copy()
        else:
            rows = np.array(c["embd"], np.float32)
            g = (c["grid"]["nx"], c["grid"]["ny"]) if grid else None
            s.eval_rows(rows, [-(i + 1) for i in range(len(rows))], False, grid=g)
    return out


@pytest.mark.parametrize("c", CASES, ids=IDS)
def test_logits_and_greedy_steps_are_llamacpps(files, c):
    want, tol = np.array(c["logits"], np.float32), _spread(c, "logits")
    with Model(files / TEXT, n_ctx=256, n_threads=2) as m, m.lease(None) as s:
        got = _prompt_logits(s, c)
        assert _dist(got, want) <= tol
        for step in c["gen"]:
            top = step["top"]
            assert int(np.argmax(got)) == step["id"] or top[0][1] - top[1][1] < 4 * tol
            got = s.eval([step["id"]], logits="last")[0].copy()
        s.clear()
        assert _dist(_prompt_logits(s, c, grid=False), want) > 50 * tol   # one position a row


def _llamacpp_answer(c) -> list[int]:
    near, ids = 4 * _spread(c, "logits"), []
    for g in c["gen"]:
        if g["eog"] or g["top"][0][1] - g["top"][1][1] < near:
            break
        ids.append(g["id"])
    return ids


@pytest.mark.parametrize("c", [_case("q2", "win"), _case("q25", "win")], ids=["q2", "q25"])
def test_greedy_answer_is_llamacpps(files, c):
    want = _llamacpp_answer(c)
    assert len(want) >= 2, "the fixture's case should hold at least two clear steps"
    with Model(files / TEXT, n_ctx=256) as m:
        r = pyllamaspec.generate(c["prompt_before"] + "<__media__>" + c["prompt_after"], m,
                                 images=[files / f"{c['image']}.png"], mmproj=str(files / f"{c['projector']}.gguf"),
                                 temperature=0, max_tokens=c["n_gen"], cache_prompt=False)
    assert r.tokens[:len(want)] == want
    assert len(r.prompt_tokens) == sum(len(ch.get("ids", [])) or ch.get("n_tokens", 0) for ch in c["chunks"])


def test_greedy_speculation_across_a_qwen25_image_equals_plain(files):
    """A draft model (the target itself, seeing placeholders at the image's rows) and n-gram
    lookup keep drafting after a 2.5 image; greedy output stays the target's, drafts accepted."""
    c = _case("q25", "win")
    with Model(files / TEXT, n_ctx=256) as m, Model(files / TEXT, n_ctx=256) as d:
        def gen(draft=None, **kw):
            return pyllamaspec.generate(c["prompt_before"] + "<__media__>" + c["prompt_after"], m, draft,
                                        images=[files / "win.png"], mmproj=str(files / "q25.gguf"), temperature=0,
                                        max_tokens=24, cache_prompt=False, **kw)
        plain = gen()
        assert len(plain.tokens) == 24
        for drafter in (d, "ngram"):
            spec = gen(drafter, adaptive=False, n_draft=4)
            assert spec.tokens == plain.tokens, drafter
        assert gen(d, adaptive=False, n_draft=4).stats.accepted > 0


def test_bad_sizes_refused(files):
    with Projector(files / "q25.gguf") as p:
        for w, h in [(0, 28), (28, 0), (-28, 28), (14, 28), (28, 42), (1 << 40, 28), (28 * 700, 28 * 700)]:
            with pytest.raises(InvalidArgumentError, match="projector takes|patches"):
                p.grid(w, h)
        with pytest.raises(InvalidArgumentError, match="multiples of 28"):
            p.encode_pixels(np.zeros((3, 28, 42), np.float32))


@pytest.mark.parametrize("kw, err, msg", [
    (dict(kind="qwen25vl", drop_keys=("clip.vision.n_wa_pattern",)), PyllamaspecError, "n_wa_pattern"),
    (dict(kind="qwen2vl", extra_kv={"clip.vision.n_wa_pattern": 2}), UnsupportedModelError, "n_wa_pattern"),
    (dict(kind="qwen25vl", patch_size=64, image_size=128), UnsupportedModelError, "attention windows"),
    (dict(kind="qwen2vl", drop_tensors=("v.blk.0.attn_q.bias",)), PyllamaspecError, "attn_q.bias"),
    (dict(kind="qwen2vl", drop_tensors=("mm.2.bias",)), PyllamaspecError, "mm.2.bias"),
])
def test_bad_projectors_refused(tmp_path, kw, err, msg):
    mq.write_qwen2vl_mmproj(tmp_path / "bad.gguf", n_embd_text=32, **kw)
    with pytest.raises(err, match=msg):
        Projector(tmp_path / "bad.gguf")


@pytest.mark.parametrize("kw, msg", [(dict(drop_keys=("qwen2vl.rope.dimension_sections",)), "dimension_sections"),
                                     (dict(rope_sections=(0, 0, 0, 0)), "sum to 0"),
                                     (dict(n_rot=4), "whole heads")])
def test_bad_text_models_refused(tmp_path, kw, msg):
    mq.write_tiny_qwen2vl_text(tmp_path / "bad.gguf", **kw)
    with pytest.raises(PyllamaspecError, match=msg):
        Model(tmp_path / "bad.gguf", n_ctx=64)


def test_text_alone_is_qwen2s_and_consistent(tmp_path):
    """A text token's M-RoPE positions (p, p, p, 0) rotate as Qwen2's NEOX rope at p: the same
    weights as a qwen2 file give the same logits (measured: equal to the bit); batched equals
    token by token, rollback at every split, and greedy speculation (chains and trees) equals plain
    (tests/arch_checks.py's checks; the draft another seed)."""
    import arch_checks as ac
    from models import write_gguf

    kw = dict(n_vocab=272, n_embd=32, seed=3)
    mq.write_tiny_qwen2vl_text(tmp_path / "vl.gguf", **kw)
    write_gguf(tmp_path / "q2.gguf", arch="qwen2", extra_kv=mq.qwen_image_marker_kv(272), **kw)
    toks = np.random.default_rng(1).integers(0, 260, 14).astype(np.int32)
    with ac.f32_model(tmp_path / "vl.gguf") as vl, ac.f32_model(tmp_path / "q2.gguf") as q2:
        assert np.array_equal(vl.eval(toks), q2.eval(toks))
    assert ac.batched_vs_sequential(tmp_path / "vl.gguf", toks) < 1e-5
    assert ac.rollback_every_split(tmp_path / "vl.gguf") < 1e-5         # as tests/archs/test_arch_checks.py
    mq.write_tiny_qwen2vl_text(tmp_path / "draft.gguf", **dict(kw, seed=4))
    ac.speculative_greedy(tmp_path / "vl.gguf", tmp_path / "draft.gguf", [1, 7, 3, 9, 12, 40])
