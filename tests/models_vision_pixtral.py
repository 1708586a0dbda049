"""A tiny random Pixtral / Mistral Small 3.x vision projector (clip.cpp's ``pixtral``) and the tiny
``mistral3`` text model it pairs with, laid out as llama.cpp b11434 writes and reads them
(conversion's PixtralModel / LlavaVisionModel over MmprojModel; tools/mtmd/clip.cpp's loader:
the tensors it asks for; models/pixtral.cpp's graph). A file is a pure function of the writer's
arguments: tests/data/reference/vision_pixtral.json records the sha256 of files written this way.
"""
from __future__ import annotations

import pathlib
from typing import Iterable, Mapping

import models_parts as parts
from models import gpt2_byte_tokens

PIXTRAL_TOKENS = ("[IMG]", "[IMG_BREAK]", "[IMG_END]")   # Mistral's image tokens (control tokens)
PIXTRAL_MEAN = (0.48145466, 0.4578275, 0.40821073)      # Pixtral's preprocessor_config (OpenAI CLIP's)
PIXTRAL_STD = (0.26862954, 0.26130258, 0.27577711)


def _tensors(draw: parts.Draws, hp: dict) -> list:
    """The converter's tensors (numpy shapes, F32): the patch kernel (no bias), ln_pre as
    v.pre_ln (RMS), per block ln1 / ln2 (RMS weights), unbiased q, k, v, attn_out, a SwiGLU MLP
    (ffn_gate, ffn_up, ffn_down); Mistral Small 3.1's merger (mm.input_norm, mm.patch_merger,
    when merge > 1); the LLaVA projector mm.1, mm.2 (biased); the [IMG_BREAK] embedding."""
    n, f, p, m, t_ = hp["n_embd"], hp["n_ff"], hp["patch_size"], hp["merge"], hp["n_embd_text"]
    t = [("v.patch_embd.weight", draw.normal(n, 3, p, p) / (3 * p * p) ** 0.5, "F32"),
         ("v.pre_ln.weight", draw.norm(n), "F32")]
    for i in range(hp["n_layer"]):
        b = f"v.blk.{i}."
        t += [(b + "ln1.weight", draw.norm(n), "F32")]
        t += [(b + name + ".weight", draw.lin(n, n), "F32") for name in ("attn_q", "attn_k", "attn_v", "attn_out")]
        t += [(b + "ln2.weight", draw.norm(n), "F32"), (b + "ffn_gate.weight", draw.lin(f, n), "F32"),
              (b + "ffn_up.weight", draw.lin(f, n), "F32"), (b + "ffn_down.weight", draw.lin(n, f), "F32")]
    if m > 1:
        t += [("mm.input_norm.weight", draw.norm(n), "F32"), ("mm.patch_merger.weight", draw.lin(n, n * m * m), "F32")]
    t += [("mm.1.weight", draw.lin(t_, n), "F32"), ("mm.1.bias", draw.bias(t_), "F32"),
          ("mm.2.weight", draw.lin(t_, t_), "F32"), ("mm.2.bias", draw.bias(t_), "F32"),
          ("v.token_embd.img_break", draw.normal(t_), "F32")]
    return t


def write_pixtral_mmproj(path, *, n_embd_text: int, seed: int = 0, image_size: int = 64, patch_size: int = 4,
                         merge: int = 2, n_embd: int = 16, n_head: int = 2, n_ff: int = 40, n_layer: int = 2,
                         eps: float = 1e-5, mean=PIXTRAL_MEAN, std=PIXTRAL_STD, bias_std: float = 0.1,
                         name: str | None = None, drop_tensors: Iterable[str] = (), drop_keys: Iterable[str] = (),
                         extra_kv: Mapping[str, object] | None = None) -> dict:
    """Write a tiny random ``pixtral`` projector for a text model ``n_embd_text`` wide: ``n_layer``
    RMS-norm blocks (``eps``; 2-D rope, SwiGLU ``n_embd -> n_ff``: ``clip.use_silu``), Mistral Small
    3.1's ``merge`` x ``merge`` patch merger (``clip.vision.spatial_merge_size``; 1: none, as the
    original Pixtral), the LLaVA projector to ``n_embd_text``. Returned dict: the arguments,
    ``path`` and ``tensors``."""
    import gguf

    if n_embd % n_head or (n_embd // n_head) % 4:
        raise ValueError("n_embd / n_head must be a multiple of 4 (the 2-D rope's two halves)")
    path = pathlib.Path(path)
    hp = {"path": path, "name": name or "tiny-random-pixtral-mmproj", "n_embd_text": n_embd_text, "seed": seed,
          "image_size": image_size, "patch_size": patch_size, "merge": merge, "n_embd": n_embd, "n_head": n_head,
          "n_ff": n_ff, "n_layer": n_layer, "eps": float(eps), "mean": tuple(float(v) for v in mean),
          "std": tuple(float(v) for v in std), "bias_std": bias_std}
    kv = parts.clip_vision_kv(gguf, hp, parts.FILE_TYPE["F32"])
    kv.update({"clip.projector_type": "pixtral", "clip.use_silu": True,
               "clip.vision.attention.layer_norm_epsilon": float(eps)})
    if merge > 1:
        kv["clip.vision.spatial_merge_size"] = merge
    kv.update(extra_kv or {})
    hp["tensors"] = parts.write_file(gguf, path, "clip", kv, _tensors(parts.Draws(seed, bias_std), hp),
                                     drop_keys=set(drop_keys), drop_tensors=set(drop_tensors))
    return hp


def pixtral_token_kv(n_vocab: int) -> dict:
    """``extra_kv`` for a tiny text model's byte-level vocabulary (n_vocab >= 267): its last three
    tokens (fillers) become [IMG], [IMG_BREAK], [IMG_END], control tokens (type 3), so that
    mtmd's [IMG_END] is one token and a drafter's placeholder [IMG] is one too."""
    if n_vocab < 267:
        raise ValueError("n_vocab must be >= 267 (256 bytes, 8 merges, then the three tokens)")
    tokens, _ = gpt2_byte_tokens(n_vocab)
    tokens[-3:] = list(PIXTRAL_TOKENS)
    types = [1] * n_vocab
    types[-3:] = [3, 3, 3]
    return {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}


def write_tiny_mistral3_text(path, *, n_vocab: int = 272, n_embd: int = 32, seed: int = 3, **kw) -> dict:
    """The text model a tiny pixtral projector pairs with: a tiny ``mistral3``
    (models_mistral3.write_mistral3_gguf) with the image tokens of ``pixtral_token_kv``."""
    from models_mistral3 import write_mistral3_gguf

    extra = dict(pixtral_token_kv(n_vocab))
    extra.update(kw.pop("extra_kv", None) or {})
    return write_mistral3_gguf(path, n_vocab=n_vocab, n_embd=n_embd, seed=seed, extra_kv=extra, **kw)
