"""A tiny Gemma 3 vision pair in which a narrow draft computes what its wide target does: the
target (``n_embd_wide``) is the draft (``n_embd``) with every embedding-wide axis padded with
zeros, and its projector the draft's projector with zero columns after the draft's rows, so
the target's residual stream is the draft's followed by zeros, at tokens and at an image alike.
Draft speculation that sees the image then agrees with the target (up to rounding), while a
draft that sees placeholders there does not: what tests/vision/test_vision_draft.py measures.

Why the rescaling is exact: RMSNorm over n_wide dims of [x, 0] is sqrt(n_wide / n) times the
norm over x's n dims, so the wide norms' weights are the narrow ones times sqrt(n / n_wide);
gemma3 scales token embeddings by sqrt(n_embd) (not an image's rows), so the wide token table
is the narrow one times sqrt(n / n_wide) (its tied output head then scales every logit alike:
the greedy choice is the same). The head size is the narrow model's in both (key_length)."""
from __future__ import annotations

import pathlib

import numpy as np

import models
import models_vision as mv
from models_heads import overwrite_tensor

# tensors (gemma3 names) whose numpy axis 1 is the embedding (inputs of the projections), axis 0
_IN_AXIS = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "ffn_gate.weight", "ffn_up.weight",
            "token_embd.weight")
_OUT_AXIS = ("attn_output.weight", "ffn_down.weight")
_NORMS = ("output_norm.weight", "attn_norm.weight", "ffn_norm.weight", "post_attention_norm.weight",
          "post_ffw_norm.weight")


def _read(path) -> dict[str, np.ndarray]:
    import gguf
    r = gguf.GGUFReader(str(path))
    out = {t.name: np.array(t.data, np.float32) for t in r.tensors}
    del r
    return out


def _pad(a: np.ndarray, axis: int, width: int) -> np.ndarray:
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, width - a.shape[axis])
    return np.pad(a, pad)


def _widen(name: str, a: np.ndarray, n: int, wide: int) -> np.ndarray:
    """One tensor of the narrow model as the wide one holds it."""
    s = (n / wide) ** 0.5
    if name.endswith(_IN_AXIS):
        return _pad(a * (s if name == "token_embd.weight" else 1.0), 1, wide)
    if name.endswith(_OUT_AXIS):
        return _pad(a, 0, wide)
    if name.endswith(_NORMS):
        return _pad(a * s, 0, wide)
    return a                                       # the head-sized q/k norms


def write_twin_pair(d, *, n_vocab: int = 272, n_embd: int = 32, n_embd_wide: int = 64, n_head: int = 4,
                    n_ff: int = 48, seed: int = 3, embd_scale: float = 0.02) -> pathlib.Path:
    """In folder d: draft.gguf and draft_mmproj.gguf (n_embd wide), target.gguf and mmproj.gguf
    (n_embd_wide: the draft padded), a.png and b.png. embd_scale shrinks the token table so that
    an image's rows weigh in the residual stream as much as the text's (the random model's greedy
    text then depends on the image). Returns d."""
    from PIL import Image

    d = pathlib.Path(d)
    kw = dict(arch="gemma3", n_vocab=n_vocab, n_head=n_head, n_head_kv=2, n_ff=n_ff, seed=seed,
              head_dim=n_embd // n_head, extra_kv=mv.image_marker_kv(n_vocab))
    models.write_gguf(d / "draft.gguf", n_embd=n_embd, **kw)
    emb = _read(d / "draft.gguf")["token_embd.weight"]
    overwrite_tensor(d / "draft.gguf", "token_embd.weight", emb * embd_scale)
    models.write_gguf(d / "target.gguf", n_embd=n_embd_wide, **kw)
    for name, a in _read(d / "draft.gguf").items():
        overwrite_tensor(d / "target.gguf", name, _widen(name, a, n_embd, n_embd_wide))
    mv.write_gemma3_mmproj(d / "draft_mmproj.gguf", n_embd_text=n_embd, seed=5)
    mv.write_gemma3_mmproj(d / "mmproj.gguf", n_embd_text=n_embd_wide, seed=5)
    proj = _read(d / "draft_mmproj.gguf")["mm.input_projection.weight"]      # numpy (n_vision, n_text)
    overwrite_tensor(d / "mmproj.gguf", "mm.input_projection.weight", _pad(proj, 1, n_embd_wide))
    Image.fromarray(mv.draw_test_image(48, 40)).save(d / "a.png")
    Image.fromarray(mv.draw_test_image(40, 48)).save(d / "b.png")
    return d
