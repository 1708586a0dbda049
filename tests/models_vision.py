"""Tiny random vision projectors (llama.cpp "mmproj" files): ``write_gemma3_mmproj`` writes a
Gemma 3 projector (SigLIP encoder + average pooling + soft-embedding norm + input projection) as
llama.cpp b11434's converter lays it out (conversion/gemma.py ``Gemma3VisionModel`` over
``MmprojModel``; names as clip.cpp's loader reads them, tools/mtmd/clip-impl.h ``TN_*``);
``write_qwen3vl_mmproj`` (models_vision_qwen.py) a Qwen3-VL / Qwen3.5 one. A file is a pure
function of the writer's arguments: tests/data/reference/vision_gemma3.json and vision_qwen3vl.json
record the sha256 of files written this way.
"""
from __future__ import annotations

import pathlib
from typing import Iterable, Mapping

import models_parts as parts
from models import gpt2_byte_tokens
from models_vision_qwen import (QWEN_IMAGE_MARKERS, qwen_image_marker_kv, write_qwen3vl_mmproj,  # noqa: F401
                                write_tiny_qwen_text)

IMAGE_MARKERS = ("<start_of_image>", "<end_of_image>")  # what mtmd puts around a gemma3 image
_DTYPES = ("F32", "F16", "Q8_0")


def _check(image_size: int, patch_size: int, n_embd: int, n_head: int, n_ff: int, scale_factor: int,
           dtype: str) -> None:
    parts.check_dtypes(_DTYPES, dtype)
    if image_size % patch_size:
        raise ValueError("image_size must be a multiple of patch_size")
    if (image_size // patch_size) % scale_factor:
        raise ValueError("the patches per side must be a multiple of scale_factor")
    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    if n_ff == n_embd:
        # clip.cpp swaps ffn_up / ffn_down of gemma3 files whose ffn_down has n_embd columns (old
        # converters named them the other way round): with n_ff == n_embd that cannot be told apart
        raise ValueError("n_ff == n_embd is ambiguous to clip.cpp's ffn swap rule (is_ffn_swapped)")
    if dtype == "Q8_0" and (n_embd % 32 or n_ff % 32):
        raise ValueError("Q8_0 needs n_embd and n_ff to be multiples of 32")


def _tensors(draw: parts.Draws, hp: dict) -> list:
    """The tensors in numpy shapes (ggml's ne reversed). 2-D weights of the encoder in ``dtype``;
    the patch and position embeddings F32 and the input projection F16 whatever ``dtype`` (the
    converter's tensor_force_quant); 1-D tensors (norms, biases) F32."""
    dtype, n_embd, n_ff, p = hp["dtype"], hp["n_embd"], hp["n_ff"], hp["patch_size"]
    fan_in = 3 * p * p
    t = [("v.patch_embd.weight", draw.normal(n_embd, 3, p, p) / fan_in ** 0.5, "F32"),  # ne [p, p, 3, n_embd]
         ("v.patch_embd.bias", draw.bias(n_embd), "F32"),
         ("v.position_embd.weight", draw.normal(hp["n_patches"], n_embd), "F32")]
    # fc1 (n_embd -> n_ff) is ffn_up, fc2 ffn_down; legacy_ffn_names writes them the other way round
    up, down = ("ffn_down", "ffn_up") if hp["legacy_ffn_names"] else ("ffn_up", "ffn_down")
    for i in range(hp["n_layer"]):
        b = f"v.blk.{i}."
        t += [(b + "ln1.weight", draw.norm(n_embd), "F32"), (b + "ln1.bias", draw.bias(n_embd), "F32")]
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t += [(b + name + ".weight", draw.lin(n_embd, n_embd), dtype),
                  (b + name + ".bias", draw.bias(n_embd), "F32")]
        t += [(b + "ln2.weight", draw.norm(n_embd), "F32"), (b + "ln2.bias", draw.bias(n_embd), "F32"),
              (b + up + ".weight", draw.lin(n_ff, n_embd), dtype), (b + up + ".bias", draw.bias(n_ff), "F32"),
              (b + down + ".weight", draw.lin(n_embd, n_ff), dtype), (b + down + ".bias", draw.bias(n_embd), "F32")]
    t += [("v.post_ln.weight", draw.norm(n_embd), "F32"), ("v.post_ln.bias", draw.bias(n_embd), "F32"),
          # the converter stores Gemma3RMSNorm's 1 + w: the file's weight multiplies as it is
          ("mm.soft_emb_norm.weight", draw.norm(n_embd), "F32"),
          # HF's mm_input_projection_weight, x @ W: numpy (n_embd, n_embd_text), ggml ne [n_embd_text, n_embd]
          # (siglip.cpp transposes it before its mul_mat)
          ("mm.input_projection.weight", draw.lin(n_embd, hp["n_embd_text"], fan_in=n_embd), "F16")]
    return t


def _keys(gguf, hp: dict) -> dict:
    """The converter's keys, in its order; ``clip.vision.projector.scale_factor`` only when it is
    not 4 (clip.cpp's default for gemma3), as the converter does."""
    kv = parts.clip_vision_kv(gguf, hp, parts.FILE_TYPE[hp["dtype"]])
    kv.update({"clip.projector_type": "gemma3",
               "clip.vision.attention.layer_norm_epsilon": float(hp["eps"]),
               "clip.use_gelu": True})
    if hp["scale_factor"] != 4:
        kv["clip.vision.projector.scale_factor"] = hp["scale_factor"]
    return kv


def write_gemma3_mmproj(path, *, n_embd_text: int, seed: int = 0, image_size: int = 32, patch_size: int = 4,
                        n_embd: int = 32, n_head: int = 4, n_ff: int = 64, n_layer: int = 2, scale_factor: int = 2,
                        eps: float = 1e-6, dtype: str = "F32", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
                        bias_std: float = 0.1, legacy_ffn_names: bool = False, name: str = "tiny-random-gemma3-mmproj",
                        drop_tensors: Iterable[str] = (), drop_keys: Iterable[str] = (),
                        extra_kv: Mapping[str, object] | None = None, return_weights: bool = False) -> dict:
    """Write a tiny random Gemma 3 projector for a text model ``n_embd_text`` wide.

    The encoder: ``image_size / patch_size`` patches per side, ``n_layer`` pre-norm SigLIP blocks
    (LayerNorm with ``eps``, biased q/k/v/out, GELU MLP ``n_embd -> n_ff -> n_embd``), post_ln;
    then average pooling of ``scale_factor`` x ``scale_factor`` patches (llama.cpp's n_merge; real
    Gemma 3 files: 896 / 14 = 64 per side, pooled by 4 to 256 tokens, key absent), RMS norm
    (``mm.soft_emb_norm``, same eps) and the projection to ``n_embd_text``.

    Weights: ``models_parts.Draws`` (projections N(0, 1/sqrt(fan_in)), norm weights 1 + N(0, 0.1),
    biases N(0, ``bias_std``), position embeddings N(0, 1)). ``dtype`` is the encoder's 2-D weights'
    type (F32, F16, Q8_0); the input projection is always F16, the embeddings F32 (the converter
    forces both). ``legacy_ffn_names`` names fc1 ``ffn_down`` and fc2 ``ffn_up`` (old converters;
    clip.cpp swaps them back). ``drop_tensors`` / ``drop_keys`` leave tensors / keys out;
    ``extra_kv`` adds or overrides keys.

    Returned dict: the arguments that describe the model, plus ``path``, ``n_patches``,
    ``n_tokens`` ((image_size / patch_size / scale_factor) ** 2), ``tensors`` (name -> (numpy shape,
    dtype name)) and, with ``return_weights``, ``weights`` (name -> float64 array before conversion).
    """
    import gguf

    _check(image_size, patch_size, n_embd, n_head, n_ff, scale_factor, dtype)
    path = pathlib.Path(path)
    side = image_size // patch_size
    hp = {"path": path, "name": name, "n_embd_text": n_embd_text, "seed": seed, "image_size": image_size,
          "patch_size": patch_size, "n_embd": n_embd, "n_head": n_head, "n_ff": n_ff, "n_layer": n_layer,
          "scale_factor": scale_factor, "eps": float(eps), "dtype": dtype, "mean": tuple(float(v) for v in mean),
          "std": tuple(float(v) for v in std), "bias_std": bias_std, "legacy_ffn_names": legacy_ffn_names,
          "n_patches": side * side, "n_tokens": (side // scale_factor) ** 2}
    tensors = _tensors(_Draws(seed, bias_std), hp)
    kv = _keys(gguf, hp)
    kv.update(extra_kv or {})
    hp["tensors"] = parts.write_file(gguf, path, "clip", kv, tensors, drop_keys=set(drop_keys),
                                     drop_tensors=set(drop_tensors))
    if return_weights:
        hp["weights"] = {t: a for t, a, _ in tensors if t in hp["tensors"]}
    return hp


class _Draws(parts.Draws):
    """``models_parts.Draws`` whose ``lin`` may take the fan-in explicitly (the input projection
    is stored input-major: numpy (n_in, n_out))."""

    def lin(self, *shape: int, fan_in: int | None = None):
        return self.rng.standard_normal(shape) / (fan_in or shape[-1]) ** 0.5


def draw_test_image(width: int, height: int, mode: str = "RGB"):
    """A deterministic test picture as a uint8 array: (height, width, 3) for ``mode`` "RGB",
    (height, width, 4) for "RGBA", (height, width) for "L". Red ramps along x, green along y, blue
    a diagonal ripple ((7x + 13y) mod 256); on top, a red rectangle (rows h/5..h/2, columns
    w/8..w/3), a green disk (centre (2w/3, 2h/3), radius min(w, h)/5) and a white diagonal x == y
    (integer divisions throughout). "RGBA" adds alpha (11 (x + y)) mod 256; "L" is the RGB
    picture's channel mean, rounded down."""
    import numpy as np

    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (7 * x + 13 * y) % 256], -1)
    img[height // 5:height // 2, width // 8:width // 3] = (230, 40, 40)
    img[(x - 2 * width // 3) ** 2 + (y - 2 * height // 3) ** 2 <= (min(width, height) // 5) ** 2] = (40, 200, 90)
    img[x == y] = 255
    if mode == "L":
        return (img.sum(-1) // 3).astype(np.uint8)
    if mode == "RGBA":
        img = np.concatenate([img, ((11 * (x + y)) % 256)[..., None]], -1)
    elif mode != "RGB":
        raise ValueError("mode must be RGB, RGBA or L")
    return img.astype(np.uint8)


def image_marker_kv(n_vocab: int) -> dict:
    """``extra_kv`` for ``models.write_gguf`` (n_vocab >= 266): its last two tokens (fillers)
    become Gemma 3's image markers ``IMAGE_MARKERS``, user-defined (token type 4) as in Gemma's
    vocabulary, so mtmd's ``<start_of_image>`` / ``<end_of_image>`` are single tokens."""
    if n_vocab < 266:
        raise ValueError("n_vocab must be >= 266 (256 bytes, 8 merges, then the two markers)")
    tokens, _ = gpt2_byte_tokens(n_vocab)
    tokens[-2:] = list(IMAGE_MARKERS)
    types = [1] * n_vocab
    types[-2:] = [4, 4]
    return {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}


def write_tiny_vision(d, n_vocab: int = 272, n_embd: int = 64):
    """The tests' tiny vision set in folder d: text.gguf (a tiny gemma3 whose vocabulary has the
    image markers), mmproj.gguf (its projector), a.png (48x40) and b.png (40x48). Returns d."""
    import models
    from PIL import Image

    d = pathlib.Path(d)
    models.write_gguf(d / "text.gguf", arch="gemma3", n_vocab=n_vocab, n_embd=n_embd, n_head=4, n_head_kv=2,
                      n_ff=96, seed=3, extra_kv=image_marker_kv(n_vocab))
    write_gemma3_mmproj(d / "mmproj.gguf", n_embd_text=n_embd, seed=5)
    Image.fromarray(draw_test_image(48, 40)).save(d / "a.png")
    Image.fromarray(draw_test_image(40, 48)).save(d / "b.png")
    return d
