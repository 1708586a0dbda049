"""Gemma 4's MTP assistant across an image (issue 42): the assistant holds no cache of its own and
attends over its target's, which holds the image's rows, so it keeps drafting after an image and
its first draft there depends on the image. The tiny gemma4 text model with per-layer inputs and
Gemma 4's image markers (models_vision_gemma4.write_tiny_gemma4_text), the seeded tiny gemma4v
projector of test_vision_gemma4v.py (64 wide: the text width) and an assistant sized for that
target (models_heads.write_gemma4_assistant_gguf). Target and assistant pick one of two tokens
by one hidden dimension's sign (models_heads.two_token_output) from the same first column of
their output heads, so they agree often enough for drafts to be accepted."""
from __future__ import annotations

import numpy as np
import pytest

import models_vision as mv
import models_vision_gemma4 as mg
import pyllamaspec
from models_heads import overwrite_tensor, two_token_output, write_gemma4_assistant_gguf
from pyllamaspec import Model
from pyllamaspec.engine.head import DraftHead
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector

N_VOCAB, N_EMBD, N_EMBD_HEAD = 272, 64, 32
PROMPT = "look: " + vp.MEDIA_MARKER + " what is it?"
TOKENS = dict(image_min_tokens=8, image_max_tokens=32)      # test_vision_gemma4v's first case: 30 rows


def _tensor(path, name: str) -> np.ndarray:
    import gguf
    r = gguf.GGUFReader(str(path))
    return np.array(next(t for t in r.tensors if t.name == name).data)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from PIL import Image
    d = tmp_path_factory.mktemp("vision_assistant")
    mg.write_tiny_gemma4_text(d / "text.gguf", n_vocab=N_VOCAB, n_embd=N_EMBD, seed=3, tied=False)
    mg.write_gemma4v_mmproj(d / "mmproj.gguf", n_embd_text=N_EMBD, seed=1)
    for name, seed in (("assistant", 16), ("assistant_raw", 16)):
        write_gemma4_assistant_gguf(d / f"{name}.gguf", n_vocab=N_VOCAB, n_embd=N_EMBD_HEAD, n_embd_target=N_EMBD,
                                    sliding_window=8, seed=seed)
    two_token_output(d / "text.gguf", N_EMBD)
    two_token_output(d / "assistant.gguf", N_EMBD_HEAD)
    # the assistant's tied head: its first column the target's, so both pick the same two tokens
    emb = _tensor(d / "assistant.gguf", "token_embd.weight").copy()
    emb[:, 0] = _tensor(d / "text.gguf", "output.weight")[:, 0]
    overwrite_tensor(d / "assistant.gguf", "token_embd.weight", emb)
    Image.fromarray(mv.draw_test_image(48, 40)).save(d / "a.png")
    Image.fromarray(mv.draw_test_image(40, 48)).save(d / "b.png")
    return d


def _gen(tiny, m, p, drafter=None, image="a.png", **kw):
    return pyllamaspec.generate(PROMPT, m, drafter, images=[tiny / image], mmproj=p, temperature=0, max_tokens=32,
                                cache_prompt=False, **kw)


def test_greedy_speculation_with_the_assistant_across_an_image_equals_plain(tiny):
    with Model(tiny / "text.gguf", n_ctx=256, n_threads=1) as m, Projector(tiny / "mmproj.gguf", **TOKENS) as p, \
            DraftHead(tiny / "assistant.gguf") as head:
        for image in ("a.png", "b.png"):
            plain = _gen(tiny, m, p, image=image)
            assert len(plain.tokens) == 32 and len(set(plain.tokens)) == 2, plain.tokens
            for n_draft in (2, 5):
                spec = _gen(tiny, m, p, head, image=image, adaptive=False, n_draft=n_draft, p_min=0.0)
                assert spec.tokens == plain.tokens, (image, n_draft)
                assert spec.stats.accepted > 0, spec.stats
                print(f"{image} n_draft={n_draft}: {spec.stats.accepted}/{spec.stats.drafted} accepted")


def _first_draft(m, p, tiny, image: str | None) -> np.ndarray:
    """The assistant's first draft logits after the prompt (its chunks evaluated as mtmd's helper
    does); image None: the image's placeholder ids evaluated as tokens instead of its rows (the
    control: then the image cannot matter)."""
    rows = p.encode(tiny / (image or "a.png"))
    ip = vp.tokenize(m, PROMPT, [rows], p.info.type)
    placeholder = vp._placeholder(m, "<|image>")
    m.clear()
    s = m.sequence(0)
    runs = list(ip.chunks(0, len(ip.ids) - 1))
    for run in runs:
        if run[0] == "text":
            s.eval(run[1], logits="none")
        elif image is None:
            s.eval([placeholder] * run[1].n_tokens, logits="none")
        else:
            s.eval_rows(run[1].rows, run[2], run[1].non_causal, draft_token=placeholder)
    return m.head_draft(ip.ids[-1], 0).copy()


def test_the_first_draft_after_an_image_depends_on_the_image(tiny):
    """The assistant attends over the target's cache, which holds the image's rows: the same image
    twice drafts the same logits to the bit, another image others; placeholders in place of the
    rows (the control) draft alike whatever the image."""
    with Model(tiny / "text.gguf", n_ctx=256, n_threads=1) as m, Projector(tiny / "mmproj.gguf", **TOKENS) as p, \
            DraftHead(tiny / "assistant_raw.gguf") as head:
        m.attach_head(head)
        a1, a2, b = (_first_draft(m, p, tiny, name) for name in ("a.png", "a.png", "b.png"))
        assert np.array_equal(a1, a2)
        diff = np.abs(a1 - b).max() / np.abs(a1).max()
        print(f"first draft after a.png against b.png: {diff:.2e} of the largest logit")
        assert diff > 1e-3
        assert not np.array_equal(a1, _first_draft(m, p, tiny, None))
