"""The Qwen3-VL / Qwen3.5 encoder (``qwen3vl_merger``, csrc/vision/qwen3vl.cpp) against llama.cpp
b11434's libmtmd (tests/data/reference/vision_qwen3vl.json, made by scripts/vision_reference_qwen.py;
its files rebuilt here from the writers and checked by sha256): the rows from the fixture's pixels
and from the image through our own preprocessing, the merged grid, the prompt's chunk ids.

Tolerance: llama.cpp's own spread stored per case (``spread``: its results at 1 thread against 2,
0.0, and with flash attention off against on, the encoder's K and V in F32 against F16, about
8e-4), the largest of them. Negative controls: another seed's projector and the patches in plain
raster order (the pixels' 2 x 2 blocks shuffled) move the rows by far more."""
from __future__ import annotations

import json

import numpy as np
import pytest

import models_vision_qwen as mq
from conftest import reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import InvalidArgumentError
from pyllamaspec.vision import image as vi
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector

REF = json.loads((reference_dir() / "vision_qwen3vl.json").read_text())
CASES = REF["cases"]
PROJ_DEFAULTS = dict(image_size=16, patch_size=2, merge=2, mean=(0.5,) * 3, std=(0.5,) * 3)  # the writer's


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return mq.write_reference_files(tmp_path_factory.mktemp("vision_qwen_enc"), REF)


def _spread(c, key: str) -> float:
    """llama.cpp's own spread between its settings for key (threads; flash attention off)."""
    return max(v[key] for v in c["spread"].values())


def _theirs(c) -> np.ndarray:
    nx, ny = c["preproc_size"]
    return np.array(c["preproc"], np.float32).reshape(3, ny, nx)


def _preprocess(c) -> vi.Preprocess:
    kw = dict(PROJ_DEFAULTS, **REF["projectors"][c["projector"]]["kwargs"])
    return vi.for_projector("qwen3vl_merger", kw["image_size"], kw["patch_size"], kw["merge"], kw["mean"], kw["std"],
                            min_tokens=c["image_min_tokens"], max_tokens=c["image_max_tokens"])


def _dist(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max())


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_rows_as_llamacpp(files, c):
    ref = np.array(c["embd"], np.float32)
    with Projector(files / f"{c['projector']}.gguf") as p:
        assert p.info.type == "qwen3vl_merger" and p.info.mrope and not p.info.non_causal
        px = _theirs(c)
        assert p.grid(px.shape[2], px.shape[1]) == (c["grid"]["nx"], c["grid"]["ny"])
        rows = p.encode_pixels(px)
        assert rows.grid == (c["grid"]["nx"], c["grid"]["ny"]) and rows.rows.shape == ref.shape
        assert _dist(rows.rows, ref) <= _spread(c, "embd")
        p.preprocess = _preprocess(c)                      # the case's token limits
        ours = p.encode(files / f"{c['image']}.png")
        assert ours.grid == rows.grid and _dist(ours.rows, ref) <= _spread(c, "embd")


def _raster_blocks(px: np.ndarray) -> np.ndarray:
    """The pixels with each row of 2 x 2 patch blocks laid out as if mtmd's block order were plain
    raster order (the patches of a block taken from one row): a wrong patch order's rows."""
    _, h, w = px.shape
    q = 2 * PROJ_DEFAULTS["patch_size"]
    return px.reshape(3, h // q, q, w // q, q).transpose(0, 1, 3, 2, 4).reshape(3, h, w)


def test_negative_controls(files, tmp_path):
    c = max(CASES, key=lambda c: len(c["embd"]))
    ref, tol = np.array(c["embd"], np.float32), _spread(c, "embd")
    kw = dict(REF["projectors"][c["projector"]]["kwargs"])
    kw["seed"] += 1
    mq.write_qwen3vl_mmproj(tmp_path / "other.gguf", **kw)
    with Projector(tmp_path / "other.gguf") as p:
        assert _dist(p.encode_pixels(_theirs(c)).rows, ref) > 100 * max(tol, 1e-4)
    with Projector(files / f"{c['projector']}.gguf") as p:
        assert _dist(p.encode_pixels(_raster_blocks(_theirs(c))).rows, ref) > 100 * max(tol, 1e-4)


def test_bad_sizes_refused(files):
    with Projector(files / "q32.gguf") as p:
        for w, h in [(0, 8), (8, 0), (-4, 8), (6, 8), (8, 10), (1 << 40, 8), (1 << 14 + 2, 4), (4096, 4096)]:
            with pytest.raises(InvalidArgumentError, match="projector takes|patches"):
                p.grid(w, h)
        with pytest.raises(InvalidArgumentError, match="multiples of 4"):
            p.encode_pixels(np.zeros((3, 8, 6), np.float32))
        with pytest.raises(InvalidArgumentError, match="shape"):
            p.encode_pixels(np.zeros((8, 8), np.float32))


def test_deepstack_rows_are_wider(tmp_path):
    """Deepstack mergers (Qwen3-VL) load: each adds n_embd_text to a row (their values against
    llama.cpp: test_vision_qwen3vl_deepstack.py); without them the rows are the main merger's."""
    mq.write_qwen3vl_mmproj(tmp_path / "ds.gguf", n_embd_text=32, deepstack_layers=(0,))
    with Projector(tmp_path / "ds.gguf") as p:
        assert (p.info.n_embd, p.info.n_deepstack) == (64, 1)
        assert p.encode_pixels(np.zeros((3, 8, 8), np.float32)).rows.shape == (4, 64)


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_prompt_chunks_as_llamacpp(files, c):
    with Projector(files / f"{c['projector']}.gguf") as p, Model(files / f"{c['text_model']}.gguf", n_ctx=512) as m:
        rows = p.encode_pixels(_theirs(c))
        ip = vp.tokenize(m, c["prompt_before"] + vp.MEDIA_MARKER + c["prompt_after"], [rows], p.info.type)
    want = [t for ch in c["chunks"] for t in (ch["ids"] if ch["type"] == "text" else [None] * ch["n_tokens"])]
    assert [t if t >= 0 else None for t in ip.ids] == want
