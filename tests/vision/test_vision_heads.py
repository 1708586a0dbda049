"""EAGLE-3 and DFlash draft heads across an image (issue 42: every drafter keeps drafting when
the prompt holds images): the target's features at the image's rows reach the head as at tokens
(DFlash reads nothing else; EAGLE-3 pairs them with the prompt's placeholder, the family's image
token), so greedy speculation equals plain decoding with drafts accepted after the image. The
tiny Gemma 3 text model and projector of test_vision.py; the head and the target pick one of two
tokens by one hidden dimension (models_heads.two_token_output), so drafts can be accepted."""
from __future__ import annotations

import numpy as np
import pytest

import models_vision as mv
import pyllamaspec
from models_heads import two_token_output, write_dflash_gguf, write_eagle3_gguf
from pyllamaspec import Model
from pyllamaspec.engine.head import DraftHead
from pyllamaspec.errors import InvalidArgumentError
from pyllamaspec.vision.projector import Projector
from test_vision import N_EMBD, N_VOCAB, PROMPT


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = mv.write_tiny_vision(tmp_path_factory.mktemp("vision_heads"), N_VOCAB, N_EMBD)
    two_token_output(d / "text.gguf", N_EMBD)
    for kind, writer, layers in (("eagle3", write_eagle3_gguf, (0, 1, 1)), ("dflash", write_dflash_gguf, (0, 1))):
        writer(d / f"{kind}.gguf", n_vocab=N_VOCAB, n_embd=N_EMBD, target_layers=layers, own_output=False, seed=3,
               **({"n_embd_target": N_EMBD} if kind == "eagle3" else {}))
        two_token_output(d / f"{kind}.gguf", N_EMBD)
    write_eagle3_gguf(d / "eagle3_raw.gguf", n_vocab=N_VOCAB, n_embd=N_EMBD, n_embd_target=N_EMBD,
                      target_layers=(0, 1, 1), own_output=False, seed=3)     # logits over every dimension
    return d


def _gen(tiny, m, drafter=None, image="a.png", **kw):
    return pyllamaspec.generate(PROMPT, m, drafter, images=[tiny / image], mmproj=tiny / "mmproj.gguf",
                                temperature=0, max_tokens=32, cache_prompt=False, **kw)


@pytest.mark.parametrize("kind", ["eagle3", "dflash"])
def test_greedy_speculation_with_a_head_across_an_image_equals_plain(tiny, kind):
    with Model(tiny / "text.gguf", n_ctx=256, n_threads=1) as m:
        plain = _gen(tiny, m)
        with DraftHead(tiny / f"{kind}.gguf") as head:
            for n_draft in (2, 5):
                spec = _gen(tiny, m, head, adaptive=False, n_draft=n_draft, p_min=0.0)
                assert spec.tokens == plain.tokens, n_draft
                assert spec.stats.accepted > 0, spec.stats
            # another image: the head's features there are the other image's
            other = _gen(tiny, m, image="b.png")
            spec = _gen(tiny, m, head, image="b.png", adaptive=False, n_draft=4, p_min=0.0)
            assert spec.tokens == other.tokens


def test_the_head_reads_the_rows_features(tiny):
    """EAGLE-3's first draft after an image is made from the target's features at the image's
    last row: the same image twice drafts the same logits to the bit, another image others."""
    proj = Projector(tiny / "mmproj.gguf")
    with Model(tiny / "text.gguf", n_ctx=256, n_threads=1) as m, DraftHead(tiny / "eagle3_raw.gguf") as head:
        m.attach_head(head)
        drafts = []
        for name in ("a.png", "a.png", "b.png"):
            rows = proj.encode(tiny / name)
            m.clear()
            s = m.sequence(0)
            s.eval([2, 3], logits="none")
            s.eval_rows(rows.rows, [-1 - i for i in range(rows.n_tokens)], rows.non_causal, draft_token=5)
            drafts.append(m.head_draft(9, 0).copy())
        assert np.array_equal(drafts[0], drafts[1])
        assert np.abs(drafts[0] - drafts[2]).max() > 1e-2
        with pytest.raises(InvalidArgumentError, match="draft_token"):
            s.eval_rows(rows.rows, [-1 - i for i in range(rows.n_tokens)], rows.non_causal, draft_token=N_VOCAB)
    proj.close()
