"""Qwen3-VL's deepstack end to end (issue 42): a ``qwen3vl_merger`` with deepstack mergers (ViT
layers 0 and 2 of 3: rows n_embd_text * 3 wide) over a tiny ``qwen3vl`` text model with
n_deepstack_layers 2, against llama.cpp b11434's libmtmd (tests/data/reference/
vision_qwen3vl_deepstack.json, made by scripts/vision_reference_qwen3vl.py; its files rebuilt here
from the writers and checked by sha256): our encoder's rows, the logits after the prompt with the
image at its 2-D M-RoPE positions (the slices added after the text model's first two layers),
greedy steps, generate()'s answer; the width of a projector's rows must be the model's.

Tolerance: llama.cpp's own spread on this fixture (``spread``: 1 thread against 2, 0.0; flash
attention off against auto: rows 1.5e-3, logits 2.8e-3), its largest value over the cases, for
rows and logits alike. Negative control: the rows with their deepstack slices zeroed (the text
model reading the embedding alone) land far outside it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import models_vision_qwen as mq
import pyllamaspec
from conftest import reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import InvalidArgumentError
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector

REF = json.loads((reference_dir() / "vision_qwen3vl_deepstack.json").read_text())
CASES = REF["cases"]
ROWS_TOL = max(v["embd"] for c in CASES for v in c["spread"].values())
TOL = max(v["logits"] for c in CASES for v in c["spread"].values())
TEXT, N_EMBD, N_DS = "tiny_qwen3vl.gguf", 32, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return mq.write_reference_files(tmp_path_factory.mktemp("vision_qwen3vl_ds"), REF)


def _projector(files, c) -> Projector:
    return Projector(files / f"{c['projector']}.gguf", image_min_tokens=c["image_min_tokens"],
                     image_max_tokens=c["image_max_tokens"])


def _theirs(c) -> np.ndarray:
    nx, ny = c["preproc_size"]
    return np.array(c["preproc"], np.float32).reshape(3, ny, nx)


def _prompt_logits(s, c, rows: np.ndarray) -> np.ndarray:
    """The case's chunks into s, the image as rows at its grid; the logits after the last."""
    out = None
    for ch in c["chunks"]:
        if ch["type"] == "text":
            out = s.eval(ch["ids"], logits="last")[0].copy()
        else:
            s.eval_rows(rows, [-(i + 1) for i in range(len(rows))], False, grid=(c["grid"]["nx"], c["grid"]["ny"]))
    return out


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_rows_as_llamacpp(files, c):
    ref = np.array(c["embd"], np.float32)
    assert ref.shape[1] == N_EMBD * (1 + N_DS)
    with _projector(files, c) as p:
        assert (p.info.n_embd, p.info.n_deepstack, p.info.mrope) == (N_EMBD * (1 + N_DS), N_DS, True)
        rows = p.encode_pixels(_theirs(c))
        assert rows.rows.shape == ref.shape and rows.grid == (c["grid"]["nx"], c["grid"]["ny"])
        assert np.abs(rows.rows - ref).max() <= ROWS_TOL
        ours = p.encode(files / f"{c['image']}.png")          # our preprocessing too
        assert np.abs(ours.rows - ref).max() <= ROWS_TOL


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_logits_and_greedy_steps_are_llamacpps(files, c):
    want = np.array(c["logits"], np.float32)
    rows = np.array(c["embd"], np.float32)
    with Model(files / TEXT, n_ctx=256, n_threads=2) as m, m.lease(None) as s:
        assert m.info.n_embd_inp == rows.shape[1]
        got = _prompt_logits(s, c, rows)
        assert s.n_past == len(c["positions"]) + sum(len(ch.get("ids", [])) for ch in c["chunks"])
        assert np.abs(got - want).max() <= TOL
        for step in c["gen"]:
            top = step["top"]
            near_tie = top[0][1] - top[1][1] < 4 * TOL
            assert int(np.argmax(got)) == step["id"] or near_tie
            got = s.eval([step["id"]], logits="last")[0].copy()
        s.clear()
        dropped = rows.copy()
        dropped[:, N_EMBD:] = 0.0           # negative control: the deepstack slices dropped
        far = np.abs(_prompt_logits(s, c, dropped) - want).max()
        assert far > 50 * TOL, far


def _llamacpp_answer(c) -> list[int]:
    """The recorded greedy ids up to (not including) the first near tie or end of generation."""
    ids = []
    for g in c["gen"]:
        if g["eog"] or g["top"][0][1] - g["top"][1][1] < 4 * TOL:
            break
        ids.append(g["id"])
    return ids


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_generate_answers_as_llamacpp_and_reuses_the_prefix(files, c):
    """generate() with our encoder: llama.cpp's greedy answer; a second turn with the same image
    reuses the prompt's prefix across the image (its rows are not stored: the cache holds its ids)
    and answers the same; a state saved after the image and loaded gives the same logits."""
    want = _llamacpp_answer(c)
    assert len(want) >= 2, "the case should hold at least two clear steps"
    prompt = c["prompt_before"] + vp.MEDIA_MARKER + c["prompt_after"]
    image = files / f"{c['image']}.png"
    with Model(files / TEXT, n_ctx=256) as m, _projector(files, c) as p:
        first = pyllamaspec.generate(prompt, m, images=[image], mmproj=p, temperature=0, max_tokens=c["n_gen"])
        again = pyllamaspec.generate(prompt, m, images=[image], mmproj=p, temperature=0, max_tokens=c["n_gen"])
    assert first.tokens[:len(want)] == want
    assert again.tokens == first.tokens and again.stats.n_reused > len(c["positions"])


def test_greedy_speculation_with_a_deepstack_image_equals_plain(files):
    """A text draft model (the target itself, seeing placeholders at the image's rows) and
    n-gram lookup: greedy speculation equals plain. The n-gram drafts are accepted (8 of 15);
    the draft model's none (86 drafted): without the image's rows and their slices this tiny
    model continues otherwise, and the target's verification keeps the output exact anyway."""
    c = CASES[0]
    prompt = c["prompt_before"] + vp.MEDIA_MARKER + c["prompt_after"]
    with Model(files / TEXT, n_ctx=256) as m, Model(files / TEXT, n_ctx=256) as d, _projector(files, c) as p:
        def gen(draft=None, **kw):
            return pyllamaspec.generate(prompt, m, draft, images=[files / f"{c['image']}.png"], mmproj=p,
                                        temperature=0, max_tokens=24, cache_prompt=False, **kw)
        plain = gen()
        for drafter in (d, "ngram"):
            spec = gen(drafter, adaptive=False, n_draft=4)
            assert spec.tokens == plain.tokens and spec.stats.drafted > 0, drafter
        assert spec.stats.accepted > 0


def test_state_after_the_image(files):
    c = CASES[0]
    rows = np.array(c["embd"], np.float32)
    before, after = c["chunks"][0]["ids"], c["chunks"][2]["ids"]
    with Model(files / TEXT, n_ctx=256, n_threads=2, n_seq_max=2) as m, m.lease(None) as s:
        s.eval(before, logits="none")
        s.eval_rows(rows, [-(i + 1) for i in range(len(rows))], False, grid=(c["grid"]["nx"], c["grid"]["ny"]))
        state = s.save_state()
        want = s.eval(after, logits="last")[0].copy()
        with m.lease(None) as t:
            t.load_state(state)
            assert np.array_equal(t.eval(after, logits="last")[0], want)


def test_width_mismatch_refused(files, tmp_path):
    """Rows of another width than the model's n_embd * (1 + n_deepstack): refused with the widths
    named, the sequence unchanged; in Python before anything is evaluated."""
    c = CASES[0]
    rows = np.array(c["embd"], np.float32)
    ids = [-(i + 1) for i in range(len(rows))]
    grid = (c["grid"]["nx"], c["grid"]["ny"])
    one = tmp_path / "one.gguf"
    mq.write_tiny_qwen3vl_text(one, n_embd=N_EMBD, seed=75, n_deepstack=1)   # one slice fewer
    for path, given, msg in [(files / TEXT, rows[:, :N_EMBD], "0 deepstack slices"),
                             (one, rows, "2 deepstack slices.*1 deepstack"),
                             (files / TEXT, rows[:, :N_EMBD * 2 + 1], "width 65")]:
        with Model(path, n_ctx=256) as m, m.lease(None) as s:
            s.eval([1, 2], logits="none")
            with pytest.raises(InvalidArgumentError, match=msg):
                s.eval_rows(np.ascontiguousarray(given), ids, False, grid=grid)
            assert s.n_past == 2
    mq.write_qwen3vl_mmproj(tmp_path / "plain.gguf", n_embd_text=N_EMBD, seed=5, n_layer=3)
    with Model(files / TEXT, n_ctx=256) as m, Projector(tmp_path / "plain.gguf") as p:
        assert p.info.n_deepstack == 0 and p.info.n_embd == N_EMBD
        with pytest.raises(InvalidArgumentError, match="rows are 32 wide; the model takes 96"):
            vp.tokenize(m, "a" + vp.MEDIA_MARKER, [p.encode_pixels(_theirs(c))], p.info.type)


def test_the_moe_text_model_reads_deepstack_rows_too(files, tmp_path):
    """qwen3vlmoe shares the trunk: the same rows evaluate there, and their slices count (no
    llama.cpp recording of this pair: the dense one above is the reference)."""
    c = CASES[0]
    rows = np.array(c["embd"], np.float32)
    path = tmp_path / "moe.gguf"
    mq.write_tiny_qwen3vl_text(path, moe=True, n_embd=N_EMBD, seed=76, n_deepstack=N_DS)
    with Model(path, n_ctx=256, n_threads=2) as m, m.lease(None) as s:
        got = _prompt_logits(s, c, rows)
        s.clear()
        dropped = rows.copy()
        dropped[:, N_EMBD:] = 0.0
        assert np.abs(_prompt_logits(s, c, dropped) - got).max() > 50 * TOL
