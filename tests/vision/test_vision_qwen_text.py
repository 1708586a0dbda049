"""The text side of a Qwen image (tests/data/reference/vision_qwen3vl.json, made by
scripts/vision_reference_qwen.py with llama.cpp b11434's libmtmd): the encoder's rows llama.cpp
made (the fixture's ``embd``: this needs no encoder of ours) evaluated by ``eval_rows`` with the
image's grid in the tiny ``qwen35`` (a hybrid with interleaved M-RoPE), between the fixture's text
chunks, give llama.cpp's logits and greedy steps. The rows go at 2-D positions (t, t + y, t + x, 0)
and the text after them from t + max(nx, ny), as mtmd places them; a cell's position stays the
token's index (the masks, truncation, copies and state files count one a row).

Tolerance: llama.cpp's own spread on this fixture (``spread``: its logits with 1 thread and with
flash attention off, against the recorded run; 0 for the threads, up to 1.6e-3 for flash
attention), its largest value over the cases: ours land within it (measured: under 1e-6 of the
recorded run on every case). The negative control (the same rows at one position a row) lands
100 times further (0.16 .. 0.43)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import models_vision_qwen as mq
from conftest import reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import InvalidArgumentError, PyllamaspecError

REF = json.loads((reference_dir() / "vision_qwen3vl.json").read_text())
CASES = REF["cases"]
SPREAD = max(v["logits"] for c in CASES for v in c["spread"].values())
TOL = SPREAD


@pytest.fixture(scope="module")
def text_model(tmp_path_factory):
    (name, t), = REF["text_models"].items()
    path = tmp_path_factory.mktemp("qwen_text") / f"{name}.gguf"
    mq.write_tiny_qwen_text(path, **t["kwargs"])
    assert hashlib.sha256(path.read_bytes()).hexdigest() == t["sha256"], "the writer no longer makes the fixture's model"
    return path


def _image(c) -> tuple[np.ndarray, list[int], tuple[int, int]]:
    rows = np.array(c["embd"], np.float32)
    return rows, [-(i + 1) for i in range(len(rows))], (c["grid"]["nx"], c["grid"]["ny"])


def _prompt(s, c, grid=True) -> np.ndarray:
    """The case's chunks into s; the logits after the last."""
    out = None
    for ch in c["chunks"]:
        if ch["type"] == "text":
            out = s.eval(ch["ids"], logits="last")[0].copy()
        else:
            rows, ids, g = _image(c)
            assert ch["n_tokens"] == len(rows) and not ch["non_causal"]
            s.eval_rows(rows, ids, False, grid=g if grid else None)
    assert c["chunks"][-1]["type"] == "text"
    return out


def _rope_positions(c) -> list[list[int]]:
    """mtmd's rule, as the core applies it: what the fixture's positions must be."""
    p0 = len(c["chunks"][0]["ids"])
    nx, ny = c["grid"]["nx"], c["grid"]["ny"]
    return [[p0, p0 + i // nx, p0 + i % nx, 0] for i in range(nx * ny)]


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_positions_rule_is_llamacpps(c):
    assert c["grid"]["mrope"] and c["positions"] == _rope_positions(c)
    text = sum(len(ch["ids"]) for ch in c["chunks"] if ch["type"] == "text")
    assert c["n_past"] == text + max(c["grid"]["nx"], c["grid"]["ny"])


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_logits_and_greedy_steps_are_llamacpps(text_model, c):
    want = np.array(c["logits"], np.float32)
    with Model(text_model, n_ctx=256, n_threads=2) as m, m.lease(None) as s:
        got = _prompt(s, c)
        assert np.abs(got - want).max() < TOL
        for step in c["gen"]:
            top = step["top"]
            near_tie = len(top) > 1 and top[0][1] - top[1][1] < TOL
            assert int(np.argmax(got)) == step["id"] or near_tie
            got = s.eval([step["id"]], logits="last")[0].copy()
        s.clear()
        one_d = _prompt(s, c, grid=False)   # negative control: the rows at one position a row
        assert np.abs(one_d - want).max() > 50 * TOL


def test_rollback_state_and_copy_after_the_image(text_model):
    c = CASES[0]
    before, after = c["chunks"][0]["ids"], c["chunks"][2]["ids"]
    rows, ids, g = _image(c)
    with Model(text_model, n_ctx=256, n_threads=2, n_seq_max=3) as m, m.lease(None) as s:
        s.eval(before, logits="none")
        s.eval_rows(rows, ids, False, grid=g)
        n = s.n_past
        want = s.eval(after, logits="last")[0].copy()
        s.truncate(n)                      # drafts rolled back (within the recurrent ring)
        s.eval([5, 6, 7], logits="all")
        s.truncate(n)
        assert np.array_equal(s.eval(after, logits="last")[0], want)
        s.truncate(n)
        state = s.save_state()
        with m.lease(None) as t:
            t.load_state(state)
            assert np.array_equal(t.eval(after, logits="last")[0], want)
            t.clear()
            t.copy_from(s, n)
            assert np.array_equal(t.eval(after, logits="last")[0], want)
            t.clear()                       # a plain text there afterwards: text positions again
            t.eval(before, logits="none")
            plain = t.eval(after, logits="last")[0].copy()
        with m.lease(None) as u:
            u.clear()
            u.eval(before, logits="none")
            assert np.array_equal(u.eval(after, logits="last")[0], plain)


def test_a_cut_inside_the_image_is_refused(text_model):
    c = CASES[0]
    before = c["chunks"][0]["ids"]
    rows, ids, g = _image(c)
    with Model(text_model, n_ctx=256, n_threads=2, n_seq_max=2) as m, m.lease(None) as s:
        s.eval(before, logits="none")
        s.eval_rows(rows, ids, False, grid=g)
        n = s.n_past
        for k in (len(before) + 1, n - 1):
            with pytest.raises(InvalidArgumentError, match="cut an image"):
                s.truncate(k)
            assert s.n_past == n
            with m.lease(None) as t, pytest.raises(InvalidArgumentError, match="cut an image"):
                t.copy_from(s, k)
        s.truncate(len(before))            # before the image: fine, and text goes on from there
        assert s.n_past == len(before)


@pytest.mark.parametrize("grid, msg", [((3, 5), "holds 15 rows"), ((0, 4), "both sides"), ((-2, -3), "both sides")])
def test_bad_grids_are_refused(text_model, grid, msg):
    rows, ids, _ = _image(CASES[0])
    with Model(text_model, n_ctx=256, n_threads=2) as m, m.lease(None) as s:
        s.eval([1, 2], logits="none")
        with pytest.raises(InvalidArgumentError, match=msg):
            s.eval_rows(rows, ids, False, grid=grid)
        assert s.n_past == 2
        s.eval_rows(rows, ids, False, grid=_image(CASES[0])[2])   # the sequence goes on as it was
        assert s.n_past == 2 + len(rows)


def test_a_stale_hybrid_over_an_image_is_refused_not_replayed(text_model):
    """A cut deeper than the recurrent ring leaves the state to be rebuilt from tokens: over an
    image that would evaluate its ids as text, so the next eval fails clearly instead."""
    c = CASES[0]
    rows, ids, g = _image(c)
    with Model(text_model, n_ctx=512, n_threads=2) as m, m.lease(None) as s:
        s.eval(c["chunks"][0]["ids"], logits="none")
        s.eval_rows(rows, ids, False, grid=g)
        n = s.n_past
        s.eval(list(range(1, 41)), logits="none")   # further than the ring rolls back
        s.truncate(n)
        with pytest.raises(PyllamaspecError, match="image"):
            s.eval([3], logits="last")


def test_the_decoder_places_an_image_on_a_hybrid_and_reuses_its_prefix(text_model):
    """The decoder's prompt path: the image at its grid's positions (its logits llama.cpp's), a
    hybrid's checkpoints after the image and in the text after it, and later prompts parting from
    the first there (deeper than the recurrent ring) resuming from them, as a fresh evaluation."""
    from pyllamaspec import SamplingParams
    from pyllamaspec.speculation.decoder import Decoder
    from pyllamaspec.vision.projector import ImageRows
    from pyllamaspec.vision.prompt import ImagePrompt, image_ids

    c = CASES[0]
    rows, _, g = _image(c)
    img = ImageRows(rows, "5eed" * 16, False, grid=g)
    own = image_ids(img)
    before, after = c["chunks"][0]["ids"], c["chunks"][2]["ids"]
    end = len(before) + len(own)             # the image's end: one checkpoint there, one 3 tokens on
    first = before + own + after
    long = first[:-1] + list(range(30, 60)) + first[-1:]
    with Model(text_model, n_ctx=256, n_threads=2, n_seq_max=1) as m:
        def run(ids, fresh=False, cuts=(end, end + 3)):
            d = Decoder(m, None, SamplingParams(temperature=0))
            d.images = ImagePrompt(list(ids), {own[0]: img}, 0)
            d.prefill(list(ids), fresh=fresh, checkpoints=cuts)
            out = d.tseq.eval([ids[-1]], logits="last")[0].copy(), d.stats.n_reused
            d.close()
            return out

        got, _ = run(first, fresh=True, cuts=())
        assert np.abs(got - np.array(c["logits"], np.float32)).max() < TOL
        for part, kept in ((end + 3, end + 3), (end + 1, end)):
            run(long, fresh=True)             # 30 tokens past the cut: further than the ring
            other = long[:part] + [40, 41, 42, 7]
            got, reused = run(other)
            assert reused == kept
            # fresh, split at the same cuts (a hybrid's batches round differently): to the bit
            want, reused = run(other, fresh=True)
            assert reused == 0 and np.array_equal(got, want)
