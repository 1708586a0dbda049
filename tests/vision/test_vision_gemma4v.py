"""Gemma 4 images end to end (issue 42): our gemma4v encoder (csrc/vision/gemma4v.cpp) and its rows
in the tiny gemma4 text model (per-layer inputs at the rows from token 0's), against llama.cpp
b11434's libmtmd (tests/data/reference/vision_gemma4v.json, made by scripts/vision_reference_gemma4.py;
its files rebuilt here from the writers and checked by sha256): the dyn-size resized pixels, the
rows, the prompt's chunks, the logits after the prompt, the greedy answer; greedy speculation (a
draft model seeing placeholders, n-gram lookup) equal to plain with drafts accepted.

Tolerances: llama.cpp's own spread stored per case (``spread``: 1 thread against 2, 0.0; flash
attention off against on, the encoder's and the text model's attention in F32 against F16: rows
up to 3.9e-3, logits up to 0.11), the largest of them. Near tie: a greedy step whose top two
logits in the recording are closer than 4 x the case's logits spread may go either way; the
comparison stops there. Negative controls: the projector without its clamps, with its x and y
position tables swapped, and the rows attending causally move rows or logits far outside."""
from __future__ import annotations

import json

import numpy as np
import pytest

import models_vision_gemma4 as mg
import pyllamaspec
from conftest import reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import InvalidArgumentError, ModelFormatError, UnsupportedModelError
from pyllamaspec.vision import image as vi
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector

REF = json.loads((reference_dir() / "vision_gemma4v.json").read_text())
CASES = REF["cases"]
TEXT = "tiny_gemma4.gguf"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return mg.write_reference_files(tmp_path_factory.mktemp("vision_gemma4v"), REF)


def _spread(c, key: str) -> float:
    return max(v[key] for v in c["spread"].values())


def _projector(files, c, name=None) -> Projector:
    return Projector(files / f"{name or c['projector']}.gguf", image_min_tokens=c["image_min_tokens"],
                     image_max_tokens=c["image_max_tokens"])


def _prompt(c) -> str:
    return c["prompt_before"] + vp.MEDIA_MARKER + c["prompt_after"]


def _last_logits(m, ip, non_causal=None) -> np.ndarray:
    """The prompt's chunks evaluated as mtmd's helper does (each text chunk, then the image's rows
    in one batch), the last position's logits."""
    with m.lease(None) as s:
        s.clear()
        for run in ip.chunks(0, len(ip.ids)):
            if run[0] == "text":
                last = s.eval(run[1], logits="last")
            else:
                s.eval_rows(run[1].rows, run[2], run[1].non_causal if non_causal is None else non_causal)
        return last[0].copy()


def _llamacpp_answer(c) -> list[int]:
    near = 4 * _spread(c, "logits")
    ids = []
    for g in c["gen"]:
        if g["eog"] or g["top"][0][1] - g["top"][1][1] < near:
            break
        ids.append(g["id"])
    return ids


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_pixels_rows_and_logits_as_llamacpp(files, c):
    img = files / f"{c['image']}.png"
    with _projector(files, c) as p, Model(files / TEXT, n_ctx=256) as m:
        assert p.info.type == "gemma4v" and p.info.non_causal and not p.info.mrope
        px = p.pixels(img)
        nx, ny = c["preproc_size"]
        assert px.shape == (3, ny, nx)
        # the probe reads inp_raw after gemma4v's first node ran in place on it (2x - 1)
        assert np.array_equal((2 * px - 1).reshape(-1), np.array(c["preproc"], np.float32))
        rows = p.encode(img)
        assert np.abs(rows.rows - np.array(c["embd"], np.float32)).max() <= _spread(c, "embd")
        ip = vp.tokenize(m, _prompt(c), [rows], p.info.type)
        want = [t for ch in c["chunks"] for t in (ch["ids"] if ch["type"] == "text" else [None] * ch["n_tokens"])]
        assert [t if t >= 0 else None for t in ip.ids] == want
        assert np.abs(_last_logits(m, ip) - np.array(c["logits"], np.float32)).max() <= _spread(c, "logits")


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_greedy_answer_is_llamacpps(files, c):
    want = _llamacpp_answer(c)   # may be empty: "exact"'s first step is a near tie
    assert sum(len(_llamacpp_answer(k)) for k in CASES) >= 2 * len(CASES), "the fixture should hold clear steps"
    with _projector(files, c) as p, Model(files / TEXT, n_ctx=256) as m:
        r = pyllamaspec.generate(_prompt(c), m, images=[files / f"{c['image']}.png"], mmproj=p, temperature=0,
                                 max_tokens=c["n_gen"], cache_prompt=False)
    assert r.tokens[:len(want)] == want


def test_negative_controls(files, tmp_path):
    """Far outside the spread: no clamps, the position tables swapped (the y rope and lookup on
    x's patches), the rows causal."""
    c = CASES[0]
    img = files / f"{c['image']}.png"
    ref = np.array(c["embd"], np.float32)
    kw = REF["projectors"][c["projector"]]["kwargs"]
    clamps = [n for n in mg.write_gemma4v_mmproj(tmp_path / "all.gguf", **kw)["tensors"] if n.endswith(("_min", "_max"))]
    mg.write_gemma4v_mmproj(tmp_path / "noclamp.gguf", drop_tensors=clamps, **kw)
    mg.write_gemma4v_mmproj(tmp_path / "swapped.gguf", swap_pos_tables=True, **kw)
    for name in ("noclamp", "swapped"):
        with Projector(tmp_path / f"{name}.gguf", image_min_tokens=c["image_min_tokens"],
                       image_max_tokens=c["image_max_tokens"]) as p:
            assert np.abs(p.encode(img).rows - ref).max() > 20 * _spread(c, "embd"), name
    with _projector(files, c) as p, Model(files / TEXT, n_ctx=256) as m:
        ip = vp.tokenize(m, _prompt(c), [p.encode(img)], p.info.type)
        causal = _last_logits(m, ip, non_causal=False)
        assert np.abs(causal - np.array(c["logits"], np.float32)).max() > 4 * _spread(c, "logits")


def test_greedy_speculation_with_a_gemma4_image_equals_plain(files):
    c = CASES[0]                                                       # 30 rows
    with _projector(files, c) as p, Model(files / TEXT, n_ctx=256) as m, Model(files / TEXT, n_ctx=256) as d:
        def gen(draft=None, **kw):
            return pyllamaspec.generate(_prompt(c), m, draft, images=[files / f"{c['image']}.png"], mmproj=p,
                                        temperature=0, max_tokens=32, cache_prompt=False, **kw)
        plain = gen()
        assert len(plain.tokens) == 32
        for drafter in (d, "ngram"):
            spec = gen(drafter, adaptive=False, n_draft=4)
            assert spec.tokens == plain.tokens, drafter
            if drafter is d:   # the target itself as a text draft model, placeholders at the rows:
                assert spec.stats.accepted > 0   # some drafts accepted all the same (9 of 85 here)


def test_sizes_refused_and_preprocessing(files):
    c = CASES[0]
    with _projector(files, c) as p:
        assert vp.WRAP[p.info.type] == ("<|image>", "<image|>")
        assert p.preprocess.smart is not None and p.preprocess.resample == "bicubic"
        align = p.info.patch_size * p.info.n_merge
        for w, h in ((align + 1, align), (0, align), (align * 100, align)):   # not multiples; past the tables
            with pytest.raises(InvalidArgumentError):
                p.grid(w, h)
        assert p.grid(align * 2, align * 3) == (2, 3)
    d = vi.for_projector("gemma4v", 24, 2, 3, (0,) * 3, (1,) * 3)
    assert (d.smart.min_pixels, d.smart.max_pixels) == (70 * 36, 1120 * 36)   # clip.cpp's 70 .. 1120 tokens


def test_placeholder_is_the_image_soft_token(files):
    with Model(files / TEXT, n_ctx=64) as m:
        soft = m.tokenize("<|image|>", add_special=False, parse_special=True)
        assert len(soft) == 1
        assert vp._placeholder(m, "<|image>") == soft[0]


def test_bad_gemma4v_files_are_refused(tmp_path):
    """A clamp bound of two values, a min above its max, the unified variant: clear errors."""
    kw = dict(n_embd_text=64, seed=1, n_layer=1)
    for name, value in (("two.gguf", [1.0, 2.0]), ("order.gguf", [-9.0])):
        _write_with(tmp_path / name, kw, {"mm.input_projection.input_max": np.array(value)})
        with pytest.raises(ModelFormatError, match="input_max|clamp"):
            Projector(tmp_path / name)
    mg.write_gemma4v_mmproj(tmp_path / "uv.gguf", extra_kv={"clip.projector_type": "gemma4uv"}, **kw)
    with pytest.raises(UnsupportedModelError, match="gemma4uv"):
        Projector(tmp_path / "uv.gguf")


def _write_with(path, kw, replace):
    """write_gemma4v_mmproj's file with the tensors of ``replace`` (name -> F32 array) in place
    of the writer's."""
    import models_parts as parts

    orig = parts.write_file

    def write_file(g, p, arch, kv, ts, **k):
        return orig(g, p, arch, kv, [(n, replace.get(n, a), t) for n, a, t in ts], **k)

    parts.write_file = write_file
    try:
        mg.write_gemma4v_mmproj(path, **kw)
    finally:
        parts.write_file = orig
