"""Images against llama.cpp b11434's libmtmd (tests/data/reference/vision_gemma3.json, made by
scripts/vision_reference.py): the preprocessed pixels, the projector's rows, the prompt's tokens
around the image, the logits after it and the greedy answer, for tiny seeded Gemma 3 projectors
over the real Gemma 3 270M and a tiny gemma3.

Tolerances are llama.cpp's own spread, measured by the script and stored per case, the largest
of: its results with flash attention off against on (the encoder's K and V in F32 against F16;
between thread counts it moved by 0.0), and the recorded settings on other CPUs (--add-machine:
llama.cpp b11434 on a Xeon with AVX-512 FP16 and AMX, whose kernels differ: AMX tiles, native F16
attention; the real model's logits moved by 1.70 from the recording, the rows by 4.6e-4, and ours
there are at those same distances, 1.7020149 and 4.59e-4; on an AMD EPYC Zen 4, AVX-512 without
AMX or FP16, llama.cpp's logits moved by 2.58 and its tiny model's by up to 2.4e-3, and ours there
are 0.88 (1.76 with ggml's products) and exactly llama.cpp's distances on the tiny model; its
AVX2-only build on that machine equals the recording to the bit). Measured on the recording's Zen 3
(AVX2): pixels and rows equal llama.cpp's to the bit; the tiny model's logits within 2.2e-6; the
real model's top-64 logits equal to the bit with ggml's products (PYLLAMASPEC_MATMUL_ROWS=ggml) and
within 0.53 with ours (kernels/matmul_rows: vec_dot's numbers for the 12 text tokens after the
image, where llama.cpp runs its repacked gemm). The negative control, another seed's projector,
moves the rows by O(1), over 100 times the spread."""
from __future__ import annotations

import base64
import hashlib
import json
import zlib

import numpy as np
import pytest

import models
import models_vision as mv
import pyllamaspec
from conftest import real_model, reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector

REF = json.loads((reference_dir() / "vision_gemma3.json").read_text())
CASES = REF["cases"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("vision_ref")
    from PIL import Image
    for name, p in REF["projectors"].items():
        mv.write_gemma3_mmproj(d / f"{name}.gguf", **p["kwargs"])
        assert hashlib.sha256((d / f"{name}.gguf").read_bytes()).hexdigest() == p["sha256"], name
    kw = REF["text_models"]["tiny"]["kwargs"]
    models.write_gguf(d / "tiny.gguf", **kw, extra_kv=mv.image_marker_kv(kw["n_vocab"]))
    assert hashlib.sha256((d / "tiny.gguf").read_bytes()).hexdigest() == REF["text_models"]["tiny"]["sha256"]
    for name, im in REF["images"].items():
        px = mv.draw_test_image(im["width"], im["height"], im["mode"])
        assert hashlib.sha256(px.tobytes()).hexdigest() == im["rgb_sha256"], name
        Image.fromarray(px).save(d / f"{name}.png")
    return d


def _spread(c, key: str) -> float:
    """The case's tolerance for key: the largest of llama.cpp's own spreads the fixture holds (flash
    attention off against on; thread counts; the recorded settings on other CPUs, whose kernels
    differ: scripts/vision_reference.py --add-machine)."""
    return max(v[key] for v in c["spread"].values())


def _text_model(files, name):
    return real_model("gemma3") if name == "gemma3-270m" else files / "tiny.gguf"


def _ref_logits(c) -> tuple[list[int], np.ndarray]:
    """The ids compared and llama.cpp's logits there (the real model: its top 64, full precision)."""
    lg = c["logits"]
    if isinstance(lg, dict):
        return [t for t, _ in lg["top"]], np.array([v for _, v in lg["top"]], np.float32)
    return list(range(len(lg))), np.array(lg, np.float32)


def _prompt(c) -> str:
    return c["prompt_before"] + vp.MEDIA_MARKER + c["prompt_after"]


def _last_logits(m, ip) -> np.ndarray:
    """The prompt's chunks evaluated as mtmd's helper does (each text chunk, then the image's rows
    in one non-causal batch), the last position's logits."""
    with m.lease(None) as s:
        s.clear()
        for run in ip.chunks(0, len(ip.ids)):
            if run[0] == "text":
                last = s.eval(run[1], logits="last")
            else:
                s.eval_rows(run[1].rows, run[2], run[1].non_causal)
        return last[0].copy()


@pytest.mark.cpu_kernels
@pytest.mark.parametrize("c", CASES, ids=[f"{c['text_model']}-{c['image']}" for c in CASES])
def test_image_as_llamacpp(files, c):
    img = files / f"{c['image']}.png"
    with Projector(files / f"{c['projector']}.gguf") as p, Model(_text_model(files, c["text_model"]), n_ctx=512) as m:
        px = p.pixels(img)
        assert np.array_equal(px.reshape(-1), np.array(c["preproc"], np.float32))      # mtmd's resize, bit for bit
        rows = p.encode(img)
        ref = np.array(c["embd"], np.float32)
        assert np.abs(rows.rows - ref).max() <= _spread(c, "embd")
        ip = vp.tokenize(m, _prompt(c), [rows], p.info.type)
        want = [t for ch in c["chunks"] for t in (ch["ids"] if ch["type"] == "text" else [None] * ch["n_tokens"])]
        assert [t if t >= 0 else None for t in ip.ids] == want
        ids, ref_lg = _ref_logits(c)
        assert np.abs(_last_logits(m, ip)[ids] - ref_lg).max() <= _spread(c, "logits")
        r = pyllamaspec.generate(_prompt(c), m, images=[img], mmproj=p, temperature=0, max_tokens=c["n_gen"],
                                 cache_prompt=False)
        assert r.tokens == [g["id"] for g in c["gen"] if not g["eog"]]


def test_real_case_with_ggml_products(files, monkeypatch):
    """With ggml's own products (as llama.cpp multiplies) the logits after the image are llama.cpp's
    to the bit on an AVX2 machine like the one that recorded them; elsewhere within llama.cpp's own
    spread between CPUs (and on the AMX Xeon that measured it, at exactly llama.cpp's distance)."""
    c = next(c for c in CASES if c["text_model"] == "gemma3-270m")
    monkeypatch.setenv("PYLLAMASPEC_MATMUL_ROWS", "ggml")
    with Projector(files / f"{c['projector']}.gguf") as p, Model(real_model("gemma3"), n_ctx=512) as m:
        ip = vp.tokenize(m, _prompt(c), [p.encode(files / f"{c['image']}.png")], p.info.type)
        ids, ref = _ref_logits(c)
        lg = _last_logits(m, ip)
        assert np.abs(lg[ids] - ref).max() <= _spread(c, "logits")
        full = np.frombuffer(zlib.decompress(base64.b64decode(c["logits"]["f16_zlib_b64"])), "<f2").astype(np.float32)
        assert np.abs(lg - full).max() <= np.abs(full).max() * 2.0 ** -10 + _spread(c, "logits")


def test_negative_control_another_projector(files, tmp_path):
    c = next(c for c in CASES if c["text_model"] == "tiny")
    mv.write_gemma3_mmproj(tmp_path / "other.gguf", **dict(REF["projectors"][c["projector"]]["kwargs"], seed=99))
    with Projector(tmp_path / "other.gguf") as p:
        rows = p.encode(files / f"{c['image']}.png").rows
    assert np.abs(rows - np.array(c["embd"], np.float32)).max() > 100 * _spread(c, "embd")
