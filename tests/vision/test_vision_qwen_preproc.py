"""Qwen3-VL / Qwen3.5 (``qwen3vl_merger``) images preprocessed as llama.cpp b11434's libmtmd does
(tests/data/reference/vision_qwen3vl.json, made by scripts/vision_reference_qwen.py): the smart
resize's size and the bicubic, padded pixels, to the bit. Needs neither the Qwen encoder nor the
core: image.py alone, against the pixels the probe read from the encoder's input. The fixture's
files are rebuilt here from the writers (by sha256), so a changed writer is caught before a stale
fixture is trusted. Negative controls: Gemma 3's path, bilinear in place of bicubic, and Python's
round in place of C's on the same cases give other pixels or sizes."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import models_vision as mv
from conftest import reference_dir
from pyllamaspec.vision import image as vi

REF = json.loads((reference_dir() / "vision_qwen3vl.json").read_text())
CASES = REF["cases"]
PROJ_DEFAULTS = dict(image_size=16, patch_size=2, merge=2, mean=(0.5,) * 3, std=(0.5,) * 3)  # the writer's


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image

    d = tmp_path_factory.mktemp("vision_qwen_ref")
    for name, im in REF["images"].items():
        px = mv.draw_test_image(im["width"], im["height"], im["mode"])
        assert _sha(px.tobytes()) == im["rgb_sha256"], name
        Image.fromarray(px, im["mode"]).save(d / f"{name}.png")
    return d


def test_writers_reproduce_the_fixture_files(tmp_path):
    for name, p in REF["projectors"].items():
        mv.write_qwen3vl_mmproj(tmp_path / f"{name}.gguf", **p["kwargs"])
        assert _sha((tmp_path / f"{name}.gguf").read_bytes()) == p["sha256"], name
    for name, t in REF["text_models"].items():
        mv.write_tiny_qwen_text(tmp_path / f"{name}.gguf", **t["kwargs"])
        assert _sha((tmp_path / f"{name}.gguf").read_bytes()) == t["sha256"], name


def _preprocess(c) -> vi.Preprocess:
    kw = dict(PROJ_DEFAULTS, **REF["projectors"][c["projector"]]["kwargs"])
    return vi.for_projector("qwen3vl_merger", kw["image_size"], kw["patch_size"], kw["merge"], kw["mean"], kw["std"],
                            min_tokens=c["image_min_tokens"], max_tokens=c["image_max_tokens"])


def _theirs(c) -> np.ndarray:
    nx, ny = c["preproc_size"]
    return np.array(c["preproc"], np.float32).reshape(3, ny, nx)


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_pixels_as_llamacpp(files, c):
    im = REF["images"][c["image"]]
    p = _preprocess(c)
    assert list(vi.target_size(im["width"], im["height"], p)) == c["preproc_size"]
    ours = vi.preprocess(vi.load_image(files / f"{c['image']}.png"), p)
    assert ours.dtype == np.float32 and ours.shape == _theirs(c).shape
    assert np.array_equal(ours, _theirs(c))                      # bit for bit


def test_the_cases_cover_the_smart_resize():
    """The fixture's cases reach each branch: over the max, under the min, padded, a plain copy."""
    kinds = set()
    for c in CASES:
        im, p = REF["images"][c["image"]], _preprocess(c)
        w, h = im["width"], im["height"]
        area = vi.SmartResize(p.smart.align)
        rw, rh = vi.smart_size(w, h, area)                        # rounded only
        kinds.add("over" if rw * rh > p.smart.max_pixels else "under" if rw * rh < p.smart.min_pixels else "within")
        tw, th = c["preproc_size"]
        kinds.add("copy" if (w, h) == (tw, th) else "padded" if vi.fit_size(w, h, p, (tw, th)) != (tw, th) else "filled")
    assert kinds >= {"over", "under", "within", "copy", "padded", "filled"}


def test_positions_recorded_for_every_image_token():
    for c in CASES:
        (img,) = [ch for ch in c["chunks"] if ch["type"] == "image"]
        assert len(c["positions"]) == img["n_tokens"] == c["grid"]["nx"] * c["grid"]["ny"]
        assert all(len(p) == 4 for p in c["positions"]) and c["grid"]["mrope"]


def test_negative_control_gemma_resize(files):
    """Gemma 3's preprocessing (bilinear into the image_size square) on the Qwen cases: other sizes."""
    for c in CASES:
        p = vi.Preprocess(PROJ_DEFAULTS["image_size"], PROJ_DEFAULTS["mean"], PROJ_DEFAULTS["std"])
        ours = vi.preprocess(vi.load_image(files / f"{c['image']}.png"), p)
        assert ours.shape != _theirs(c).shape or not np.array_equal(ours, _theirs(c))


def test_negative_control_bilinear(files):
    """The same target sizes, bilinear in place of bicubic: the resized cases' pixels differ."""
    differ = 0
    for c in CASES:
        p = _preprocess(c)
        p = vi.Preprocess(p.image_size, p.mean, p.std, resample="bilinear", smart=p.smart)
        ours = vi.preprocess(vi.load_image(files / f"{c['image']}.png"), p)
        assert ours.shape == _theirs(c).shape
        differ += not np.array_equal(ours, _theirs(c))
    assert differ == sum(REF["images"][c["image"]]["width"] != c["preproc_size"][0] or
                         REF["images"][c["image"]]["height"] != c["preproc_size"][1] for c in CASES)


def test_negative_control_python_round(monkeypatch):
    """Python's round (ties to even) in place of C's: tall_rgba's 4.5 and 8.5 patches round down."""
    c = next(c for c in CASES if c["image"] == "tall_rgba")
    im = REF["images"]["tall_rgba"]
    monkeypatch.setattr(vi, "_round_half_away", lambda v: round(float(v)))
    assert list(vi.target_size(im["width"], im["height"], _preprocess(c))) != c["preproc_size"]


def test_gemma3_keeps_its_preprocessing():
    p = vi.for_projector("gemma3", 896, 14, 4, (0.5,) * 3, (0.5,) * 3)
    assert p == vi.Preprocess(896, (0.5,) * 3, (0.5,) * 3) and p.smart is None
