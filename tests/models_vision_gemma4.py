"""A tiny random Gemma 4 vision projector (``gemma4v``) as llama.cpp b11434's converter lays it out
(conversion/gemma.py ``Gemma4VisionAudioModel``: scalars as 1-value tensors, the position table
[2, pos_size, n_embd]; names as clip.cpp reads them, tools/mtmd/clip-impl.h ``TN_*``), and the
tiny ``gemma4`` text model it pairs with (models_gemma4, per-layer inputs on, Gemma 4's image
markers single tokens). A file is a pure function of the writer's arguments:
tests/data/reference/vision_gemma4v.json records the sha256 of the files written this way.
"""
from __future__ import annotations

import pathlib
from typing import Iterable, Mapping

import models_parts as parts
from models import gpt2_byte_tokens

# mtmd.cpp's img_beg / img_end for gemma4v, and the image soft token of Gemma 4's vocabulary
GEMMA4_IMAGE_MARKERS = ("<|image>", "<image|>", "<|image|>")
CLAMPED = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down")


def _clamps(draw: parts.Draws, stem: str, bound: float) -> list:
    """Gemma4ClippableLinear's four scalars for ``stem``: bounds near ``bound`` (a little drawn,
    so that each differs), which an O(1) activation crosses often."""
    b = bound * (1.0 + 0.1 * draw.rng.random(4))
    return [(stem + ".input_min", -b[:1], "F32"), (stem + ".input_max", b[1:2], "F32"),
            (stem + ".output_min", -b[2:3], "F32"), (stem + ".output_max", b[3:4], "F32")]


def _tensors(draw: parts.Draws, hp: dict) -> list:
    """The tensors in numpy shapes (ggml's ne reversed): 2-D weights in ``dtype``, the patch
    kernel, the position tables and 1-D tensors F32."""
    dtype, e, ff, p, d = hp["dtype"], hp["n_embd"], hp["n_ff"], hp["patch_size"], hp["n_embd"] // hp["n_head"]
    fan_in = 3 * p * p
    t = [("v.patch_embd.weight", draw.normal(e, 3, p, p) / fan_in ** 0.5, "F32"),  # ne [p, p, 3, n_embd]
         ("v.position_embd.weight", 0.5 * draw.normal(2, hp["pos_size"], e), "F32")]  # ne [n_embd, pos_size, 2]
    if hp["swap_pos_tables"]:   # a negative control: the y table where x's belongs
        t[1] = (t[1][0], t[1][1][::-1].copy(), "F32")
    for i in range(hp["n_layer"]):
        b = f"v.blk.{i}."
        t.append((b + "ln1.weight", draw.norm(e), "F32"))
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t.append((b + name + ".weight", draw.lin(e, e), dtype))
        t += [(b + "attn_q_norm.weight", draw.norm(d), "F32"), (b + "attn_k_norm.weight", draw.norm(d), "F32"),
              (b + "attn_post_norm.weight", draw.norm(e), "F32"), (b + "ln2.weight", draw.norm(e), "F32"),
              (b + "ffn_gate.weight", draw.lin(ff, e), dtype), (b + "ffn_up.weight", draw.lin(ff, e), dtype),
              (b + "ffn_down.weight", draw.lin(e, ff), dtype), (b + "ffn_post_norm.weight", draw.norm(e), "F32")]
        if hp["out_scale"]:
            t.append((b + "out_scale.weight", 0.5 + 0.5 * draw.rng.random(1), "F32"))
        if hp["clamp"]:
            for name in CLAMPED:
                t += _clamps(draw, b + name, hp["clamp"])
    t += [("v.std_bias", 0.1 * draw.normal(e), "F32"), ("v.std_scale", draw.norm(e), "F32"),
          # HF's embedding_projection (n_embd_text, n_embd): ggml ne [n_embd, n_embd_text], multiplied as it is
          ("mm.input_projection.weight", draw.lin(hp["n_embd_text"], e), dtype)]
    if hp["clamp"]:
        t += _clamps(draw, "mm.input_projection", hp["clamp"])
    return t


def write_gemma4v_mmproj(path, *, n_embd_text: int, seed: int = 0, image_size: int = 24, patch_size: int = 2,
                         n_embd: int = 32, n_head: int = 2, n_ff: int = 48, n_layer: int = 2, scale_factor: int = 3,
                         pos_size: int = 40, eps: float = 1e-6, dtype: str = "F32", mean=(0.0, 0.0, 0.0),
                         std=(1.0, 1.0, 1.0), clamp: float = 1.5, out_scale: bool = True, swap_pos_tables: bool = False,
                         name: str = "tiny-random-gemma4v-mmproj", drop_tensors: Iterable[str] = (),
                         drop_keys: Iterable[str] = (), extra_kv: Mapping[str, object] | None = None) -> dict:
    """Write a tiny random Gemma 4 projector for a text model ``n_embd_text`` wide.

    ``n_layer`` RMS-norm blocks (q / k norms per head, post-attention and post-FFN norms, a gated
    FFN ``n_embd -> n_ff -> n_embd``, an output scale with ``out_scale``); position tables of
    ``pos_size`` entries a side; pooling by ``scale_factor`` (written only when not 3, clip.cpp's
    default, as the converter leaves it); std_bias / std_scale; the input projection. ``clamp``
    (0: none) bounds every projection's input and output near +-clamp (Gemma4ClippableLinear's
    scalars); ``swap_pos_tables`` stores the y table first (a negative control). Mean 0, std 1
    (Gemma 4's processor: the graph maps [0, 1] to [-1, 1] itself). ``image_size`` is what the converter writes (unused by mtmd). Returns the arguments that
    describe it plus ``path`` and ``tensors`` (name -> (numpy shape, dtype name))."""
    import gguf

    parts.check_dtypes(("F32", "F16"), dtype)
    if n_embd % n_head or (n_embd // n_head) % 4:
        raise ValueError("the head size must be a multiple of 4")
    path = pathlib.Path(path)
    hp = {"path": path, "name": name, "n_embd_text": n_embd_text, "seed": seed, "image_size": image_size,
          "patch_size": patch_size, "n_embd": n_embd, "n_head": n_head, "n_ff": n_ff, "n_layer": n_layer,
          "scale_factor": scale_factor, "pos_size": pos_size, "eps": float(eps), "dtype": dtype,
          "mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std), "clamp": clamp,
          "out_scale": out_scale, "swap_pos_tables": swap_pos_tables}
    tensors = _tensors(parts.Draws(seed), hp)
    kv = parts.clip_vision_kv(gguf, hp, parts.FILE_TYPE[dtype])
    kv.update({"clip.projector_type": "gemma4v", "clip.vision.attention.layer_norm_epsilon": float(eps)})
    if scale_factor != 3:
        kv["clip.vision.projector.scale_factor"] = scale_factor
    kv.update(extra_kv or {})
    hp["tensors"] = parts.write_file(gguf, path, "clip", kv, tensors, drop_keys=set(drop_keys),
                                     drop_tensors=set(drop_tensors))
    return hp


def gemma4_image_marker_kv(n_vocab: int) -> dict:
    """``extra_kv`` for a tiny text model's byte-level vocabulary (n_vocab >= 267): its last three
    tokens (fillers) become ``GEMMA4_IMAGE_MARKERS``, user-defined (type 4), so mtmd's markers and
    the image soft token are single tokens."""
    if n_vocab < 267:
        raise ValueError("n_vocab must be >= 267 (256 bytes, 8 merges, then the three markers)")
    tokens, _ = gpt2_byte_tokens(n_vocab)
    tokens[-3:] = list(GEMMA4_IMAGE_MARKERS)
    types = [1] * n_vocab
    types[-3:] = [4, 4, 4]
    return {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}


def write_tiny_gemma4_text(path, *, n_vocab: int = 272, n_embd: int = 64, seed: int = 3, n_embd_per_layer: int = 8,
                           sliding_window: int = 8, **kw) -> dict:
    """The text model a tiny gemma4v pairs with: models_gemma4's tiny ``gemma4`` with per-layer
    inputs (what an image's rows read as token 0's) and the markers of ``gemma4_image_marker_kv``."""
    from models_gemma4 import write_gemma4_gguf

    return write_gemma4_gguf(path, n_vocab=n_vocab, n_embd=n_embd, seed=seed, n_embd_per_layer=n_embd_per_layer,
                             sliding_window=sliding_window, extra_kv=gemma4_image_marker_kv(n_vocab), **kw)


def write_reference_files(d, ref: Mapping) -> pathlib.Path:
    """The files of vision_gemma4v.json (its projectors, text models and images) written into d
    from the writers, each checked against the fixture's sha256, so that a changed writer is
    caught before a stale fixture is trusted."""
    import hashlib

    from PIL import Image

    import models_vision as mv

    d = pathlib.Path(d)

    def check(path: pathlib.Path, data: bytes, want: str) -> None:
        if hashlib.sha256(data).hexdigest() != want:
            raise AssertionError(f"{path.name}: the writer no longer makes the fixture's file")

    for name, p in ref["projectors"].items():
        write_gemma4v_mmproj(d / f"{name}.gguf", **p["kwargs"])
        check(d / f"{name}.gguf", (d / f"{name}.gguf").read_bytes(), p["sha256"])
    for name, t in ref["text_models"].items():
        write_tiny_gemma4_text(d / f"{name}.gguf", **t["kwargs"])
        check(d / f"{name}.gguf", (d / f"{name}.gguf").read_bytes(), t["sha256"])
    for name, im in ref["images"].items():
        px = mv.draw_test_image(im["width"], im["height"], im["mode"])
        check(d / f"{name}.png", px.tobytes(), im["rgb_sha256"])
        Image.fromarray(px, im["mode"]).save(d / f"{name}.png")
    return d
