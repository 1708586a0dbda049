"""MTP drafting across a Qwen image (issue 42): the tiny qwen35 of test_vision_qwen with a NextN
block; the target's graph fills the block's cache at the image's rows (the row is its embedding
there, as llama.cpp's graph_mtp takes an embeddings batch) at their 2-D M-RoPE positions, and
the draft nodes after the image take the positions the image shifted.

Greedy MTP speculation with an image equals plain, drafts accepted (the block made to agree
with its trunk, test_mtp's _agreeing). Where the block ignores the target's hidden rows (its
hnorm zeroed), a draft is a function of tokens, rows and positions only, so a chain's second
step (attending to the first step's scratch cell, roped by the drafter) equals a first step
after the target evaluated that token (its cell roped by the target's graph); the same rows placed
one position a row give other drafts: the M-RoPE positions reach the MTP block."""
from __future__ import annotations

import json

import numpy as np
import pytest

import models_vision_qwen as mq
import pyllamaspec
from conftest import reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.vision.projector import Projector
from test_mtp import _agreeing

REF = json.loads((reference_dir() / "vision_qwen3vl.json").read_text())
C = REF["cases"][1]                     # the largest image: 60 rows, 10 x 6 (54 positions saved)
N_LAYER = 4                             # write_tiny_qwen_text's trunk
# batched and one-token MTP rows differ by float rounding (test_mtp's ROW_TOL); a wrong position
# changes a row by O(0.1) of its largest logit
TOL = 1e-5


def _hidden_ignored(w):
    w[f"blk.{N_LAYER}.nextn.hnorm.weight"][:] = 0.0


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = mq.write_reference_files(tmp_path_factory.mktemp("vision_qwen_mtp"), REF)
    kw = REF["text_models"]["tiny_qwen35"]["kwargs"]
    mq.write_tiny_qwen_text(d / "agree.gguf", n_nextn=1, edit=_agreeing(N_LAYER), **kw)
    mq.write_tiny_qwen_text(d / "tokens_only.gguf", n_nextn=1, edit=_hidden_ignored, **kw)
    mq.write_tiny_qwen_text(d / "own_table.gguf", n_nextn=1, nextn_embed=True, **kw)
    return d


def _open(path):
    return Model(path, n_ctx=256, n_threads=1, type_k="f32", type_v="f32")


def _gen(files, m, draft=None, **kw):
    with Projector(files / f"{C['projector']}.gguf", image_min_tokens=C["image_min_tokens"],
                   image_max_tokens=C["image_max_tokens"]) as p:
        return pyllamaspec.generate(C["prompt_before"] + "<__media__>" + C["prompt_after"], m, draft,
                                    images=[files / f"{C['image']}.png"], mmproj=p, temperature=0, **kw)


def test_greedy_mtp_with_a_qwen_image_equals_plain(files):
    with _open(files / "agree.gguf") as m:
        plain = _gen(files, m, max_tokens=24, cache_prompt=False)
        spec = _gen(files, m, "mtp", max_tokens=24, cache_prompt=False, adaptive=False, n_draft=4, p_min=0.0)
    assert spec.tokens == plain.tokens
    assert spec.stats.accepted > 0


def _image(files):
    with Projector(files / f"{C['projector']}.gguf", image_min_tokens=C["image_min_tokens"],
                   image_max_tokens=C["image_max_tokens"]) as p:
        img = p.encode(files / f"{C['image']}.png")
    assert img.grid[0] != img.grid[1] and img.grid[0] * img.grid[1] > 2 * max(img.grid)
    return np.array(img.rows), img.grid


def _prefix(m, rows, grid):
    """`look: <|vision_start|>`, the image, then a few tokens; MTP on from the start."""
    m.enable_mtp()
    m.eval(m.tokenize(C["prompt_before"], add_special=False) + [270], logits="none")
    m.sequence(0).eval_rows(rows, [-1 - i for i in range(len(rows))], False, grid=grid)
    m.eval([271] + m.tokenize(" what", add_special=False), logits="none")


def _drafts(path, rows, grid, y=100, z=120):
    """z's MTP row after y, twice: a chain's step 1 (y drafted into a scratch cell), and step 0
    after the target evaluated y."""
    with _open(path) as m:
        _prefix(m, rows, grid)
        m.mtp_draft(y, 0)
        chain = m.mtp_draft(z, 1).copy()
    with _open(path) as m:
        _prefix(m, rows, grid)
        m.eval([y], logits="none")
        after = m.mtp_draft(z, 0).copy()
    return chain, after


def test_mtp_draft_after_a_qwen_image_at_its_mrope_positions(files):
    rows, grid = _image(files)
    chain, after = _drafts(files / "tokens_only.gguf", rows, grid)
    np.testing.assert_allclose(chain, after, rtol=0, atol=TOL * np.abs(after).max())
    # negative control: the same rows one position a row (no 2-D grid, no positions saved)
    chain_1d, after_1d = _drafts(files / "tokens_only.gguf", rows, None)
    np.testing.assert_allclose(chain_1d, after_1d, rtol=0, atol=TOL * np.abs(after_1d).max())
    assert np.abs(chain_1d - chain).max() > 100 * TOL * np.abs(after).max()


def test_mtp_drafts_after_a_qwen_image_survive_a_saved_state(files):
    """The state after the image (its spans, the block's cache at its rows and the hidden rows'
    trailer) gives a fresh context the same drafts, with the block reading the hidden rows."""
    rows, grid = _image(files)
    with _open(files / "agree.gguf") as m:
        _prefix(m, rows, grid)
        state = m.sequence(0).save_state()
        want = [m.mtp_draft(100, 0).copy(), m.mtp_draft(120, 1).copy()]
    with _open(files / "agree.gguf") as m:
        m.enable_mtp()
        m.sequence(0).load_state(state)
        np.testing.assert_array_equal(m.mtp_draft(100, 0), want[0])
        np.testing.assert_array_equal(m.mtp_draft(120, 1), want[1])


def test_mtp_with_its_own_embedding_table_reads_an_image_s_rows(files):
    """A block with its own nextn.embed_tokens takes the rows themselves at the image (llama.cpp's
    graph_mtp: an embeddings batch has no tokens to look up); greedy MTP still equals plain."""
    with _open(files / "own_table.gguf") as m:
        plain = _gen(files, m, max_tokens=12, cache_prompt=False)
        spec = _gen(files, m, "mtp", max_tokens=12, cache_prompt=False, adaptive=False, n_draft=4, p_min=0.0)
    assert spec.tokens == plain.tokens
    assert spec.stats.drafted > 0
