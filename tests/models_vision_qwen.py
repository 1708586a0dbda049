"""Tiny random Qwen3-VL / Qwen3.5 vision projectors (clip.cpp's ``qwen3vl_merger``) and the tiny
text model they pair with, laid out as llama.cpp b11434 writes and reads them:
conversion/qwen3vl.py ``Qwen3VLVisionModel`` over ``MmprojModel`` (keys, the Conv3D patch kernel
split into ``v.patch_embd.weight`` and ``.weight.1``, the merger as ``v.post_ln`` / ``mm.0`` /
``mm.2``, deepstack mergers as ``v.deepstack.{layer}.*``), tools/mtmd/clip.cpp's loader (the
tensors it asks for) and models/qwen3vl.cpp (what the graph asserts: a patch bias, position
embeddings, no class embedding). A file is a pure function of the writer's arguments:
tests/data/reference/vision_qwen3vl.json records the sha256 of files written this way.
"""
from __future__ import annotations

import pathlib
from typing import Iterable, Mapping

import models_parts as parts
from models import gpt2_byte_tokens

QWEN_IMAGE_MARKERS = ("<|vision_start|>", "<|vision_end|>")  # what mtmd puts around a Qwen image


def _check(image_size: int, patch_size: int, n_embd: int, n_head: int, merge: int,
           deepstack_layers: Iterable[int], n_layer: int) -> None:
    if image_size % patch_size:
        raise ValueError("image_size must be a multiple of patch_size")
    if merge != 2:
        # qwen3vl.cpp merges 2 x 2 patches whatever the key says (its reshapes hard-code 2 and 4)
        raise ValueError("spatial_merge_size must be 2 (clip_graph_qwen3vl's merger is 2 x 2)")
    if n_embd % n_head or (n_embd // n_head) % 4:
        # the vision rope splits each head into 4 sections of d_head / 4
        raise ValueError("n_embd / n_head must be a multiple of 4")
    if any(not 0 <= i < n_layer for i in deepstack_layers):
        raise ValueError("deepstack_layers must be layer indices")


def _blocks(draw: parts.Draws, hp: dict) -> list:
    """The encoder's pre-norm blocks: LayerNorms, fused biased qkv, attn_out, GELU MLP."""
    n, f, t = hp["n_embd"], hp["n_ff"], []
    for i in range(hp["n_layer"]):
        b = f"v.blk.{i}."
        t += [(b + "ln1.weight", draw.norm(n), "F32"), (b + "ln1.bias", draw.bias(n), "F32"),
              (b + "attn_qkv.weight", draw.lin(3 * n, n), "F32"), (b + "attn_qkv.bias", draw.bias(3 * n), "F32"),
              (b + "attn_out.weight", draw.lin(n, n), "F32"), (b + "attn_out.bias", draw.bias(n), "F32"),
              (b + "ln2.weight", draw.norm(n), "F32"), (b + "ln2.bias", draw.bias(n), "F32"),
              (b + "ffn_up.weight", draw.lin(f, n), "F32"), (b + "ffn_up.bias", draw.bias(f), "F32"),
              (b + "ffn_down.weight", draw.lin(n, f), "F32"), (b + "ffn_down.bias", draw.bias(n), "F32")]
    return t


def _mergers(draw: parts.Draws, hp: dict) -> list:
    """The merger (post_ln over each patch, then 2 x 2 patches concatenated: mm.0, GELU, mm.2) and
    a deepstack merger per listed layer (LayerNorm over the concatenated 4 patches, fc1, GELU, fc2)."""
    n4, out = 4 * hp["n_embd"], hp["n_embd_text"]
    t = [("v.post_ln.weight", draw.norm(hp["n_embd"]), "F32"), ("v.post_ln.bias", draw.bias(hp["n_embd"]), "F32"),
         ("mm.0.weight", draw.lin(n4, n4), "F32"), ("mm.0.bias", draw.bias(n4), "F32"),
         ("mm.2.weight", draw.lin(out, n4), "F32"), ("mm.2.bias", draw.bias(out), "F32")]
    for il in hp["deepstack_layers"]:
        d = f"v.deepstack.{il}."
        t += [(d + "norm.weight", draw.norm(n4), "F32"), (d + "norm.bias", draw.bias(n4), "F32"),
              (d + "fc1.weight", draw.lin(n4, n4), "F32"), (d + "fc1.bias", draw.bias(n4), "F32"),
              (d + "fc2.weight", draw.lin(out, n4), "F32"), (d + "fc2.bias", draw.bias(out), "F32")]
    return t


def _tensors(draw: parts.Draws, hp: dict) -> list:
    """numpy shapes (ggml's ne reversed), all F32 (the converter keeps the patch kernels F32 in an
    F32 file: tensor_force_quant)."""
    n, p = hp["n_embd"], hp["patch_size"]
    fan_in = 3 * p * p
    t = [("v.patch_embd.weight", draw.normal(n, 3, p, p) / fan_in ** 0.5, "F32"),    # ne [p, p, 3, n_embd]
         ("v.patch_embd.weight.1", draw.normal(n, 3, p, p) / fan_in ** 0.5, "F32"),  # the 2nd temporal slice
         ("v.patch_embd.bias", draw.bias(n), "F32"),
         ("v.position_embd.weight", draw.normal(hp["n_pos_embd"], n), "F32")]
    return t + _blocks(draw, hp) + _mergers(draw, hp)


def _keys(gguf, hp: dict) -> dict:
    """The converter's keys in its order (MmprojModel's, then Qwen3VLVisionModel's)."""
    kv = parts.clip_vision_kv(gguf, hp, parts.FILE_TYPE["F32"])
    kv.update({"clip.projector_type": "qwen3vl_merger", "clip.use_gelu": True,
               "clip.vision.spatial_merge_size": hp["merge"],
               "clip.vision.attention.layer_norm_epsilon": float(hp["eps"]),
               "clip.vision.is_deepstack_layers": [i in hp["deepstack_layers"] for i in range(hp["n_layer"])]})
    return kv


def write_qwen3vl_mmproj(path, *, n_embd_text: int, seed: int = 0, image_size: int = 16, patch_size: int = 2,
                         n_embd: int = 16, n_head: int = 2, n_ff: int = 40, n_layer: int = 2, merge: int = 2,
                         deepstack_layers: Iterable[int] = (), eps: float = 1e-6, mean=(0.5, 0.5, 0.5),
                         std=(0.5, 0.5, 0.5), bias_std: float = 0.1, name: str = "tiny-random-qwen3vl-mmproj",
                         drop_tensors: Iterable[str] = (), drop_keys: Iterable[str] = (),
                         extra_kv: Mapping[str, object] | None = None) -> dict:
    """Write a tiny random ``qwen3vl_merger`` projector for a text model ``n_embd_text`` wide.

    The encoder (clip_graph_qwen3vl): two ``patch_size`` kernels (the Conv3D's temporal slices,
    both applied to a still image and summed) plus a bias; learned position embeddings for an
    ``image_size / patch_size`` square grid, resized bilinearly to each image's grid; ``n_layer``
    pre-norm blocks (LayerNorm ``eps``, fused qkv, 2-D M-RoPE, GELU MLP ``n_embd -> n_ff``);
    ``v.post_ln``, 2 x 2 patches concatenated (``merge``; 2 only), ``mm.0`` (4 n_embd square),
    GELU, ``mm.2`` to ``n_embd_text``. ``deepstack_layers`` (Qwen3-VL's deepstack_visual_indexes;
    Qwen3.5 has none) add a merger each whose output is concatenated to the rows: mtmd then wants
    a text model whose input is ``n_embd_text * (1 + len)`` wide (llama.cpp's qwen3vl arch splits
    it into the embedding and the deepstack features); the fixtures use none, as Qwen3.5. clip.cpp's default token limits
    for the type are 8 .. 4096 (``image_min_tokens`` / ``image_max_tokens`` override them).

    Weights: ``models_parts.Draws`` (seed; projections N(0, 1/sqrt(fan_in)), norm weights
    1 + N(0, 0.1), biases N(0, ``bias_std``), position embeddings N(0, 1)). Returned dict: the
    arguments that describe the model, plus ``path``, ``n_pos_embd`` and ``tensors`` (name ->
    (numpy shape, dtype name)).
    """
    import gguf

    deepstack_layers = tuple(int(i) for i in deepstack_layers)
    _check(image_size, patch_size, n_embd, n_head, merge, deepstack_layers, n_layer)
    path = pathlib.Path(path)
    hp = {"path": path, "name": name, "n_embd_text": n_embd_text, "seed": seed, "image_size": image_size,
          "patch_size": patch_size, "n_embd": n_embd, "n_head": n_head, "n_ff": n_ff, "n_layer": n_layer,
          "merge": merge, "deepstack_layers": deepstack_layers, "eps": float(eps),
          "mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std), "bias_std": bias_std,
          "n_pos_embd": (image_size // patch_size) ** 2}
    kv = _keys(gguf, hp)
    kv.update(extra_kv or {})
    hp["tensors"] = parts.write_file(gguf, path, "clip", kv, _tensors(parts.Draws(seed, bias_std), hp),
                                     drop_keys=set(drop_keys), drop_tensors=set(drop_tensors))
    return hp


def qwen_image_marker_kv(n_vocab: int) -> dict:
    """``extra_kv`` for a tiny text model's byte-level vocabulary (n_vocab >= 266): its last two
    tokens (fillers) become ``<|vision_start|>`` / ``<|vision_end|>``, control tokens (type 3) as
    in Qwen's vocabulary, so mtmd's markers are single tokens; and no BOS, as Qwen's files say
    (``tokenizer.ggml.add_bos_token`` false)."""
    if n_vocab < 266:
        raise ValueError("n_vocab must be >= 266 (256 bytes, 8 merges, then the two markers)")
    tokens, _ = gpt2_byte_tokens(n_vocab)
    tokens[-2:] = list(QWEN_IMAGE_MARKERS)
    types = [1] * n_vocab
    types[-2:] = [3, 3]
    return {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.add_bos_token": False}


def write_tiny_qwen_text(path, *, n_vocab: int = 272, n_embd: int = 32, seed: int = 3, **kw) -> dict:
    """The text model a tiny qwen3vl_merger pairs with: a tiny ``qwen35`` (models_qwen35) with the
    markers of ``qwen_image_marker_kv``. Why qwen35: libmtmd places an image's tokens at M-RoPE
    positions only when the text model's rope type is MROPE / IMROPE (mtmd.cpp's mtmd_context:
    llama_model_rope_type), which llama.cpp gives qwen2vl, qwen3vl(moe) and qwen35(moe), not
    qwen3 (NEOX: sequential positions); qwen35 is the one of those this project runs, and Qwen3.5's
    real projectors are qwen3vl_merger without deepstack, so n_embd_inp == n_embd matches the
    projector's width. Its ``rope.dimension_sections`` are models_qwen35's (2, 1, 1, 0) with
    n_rot 8: interleaved M-RoPE over t, y, x (IMROPE)."""
    from models_qwen35 import write_qwen35_gguf

    return write_qwen35_gguf(path, n_vocab=n_vocab, n_embd=n_embd, seed=seed,
                             extra_kv=qwen_image_marker_kv(n_vocab), **kw)


def write_tiny_qwen3vl_text(path, *, n_vocab: int = 272, **kw) -> dict:
    """The text model a deepstack projector pairs with: a tiny ``qwen3vl`` (models_qwen3vl; pass
    ``n_deepstack`` = the projector's deepstack layers, as Qwen3-VL's files match theirs) with the
    markers of ``qwen_image_marker_kv``."""
    from models_qwen3vl import write_qwen3vl_gguf

    return write_qwen3vl_gguf(path, n_vocab=n_vocab, extra_kv=qwen_image_marker_kv(n_vocab), **kw)


QWEN3VL_TEXT_WRITER = "models_qwen3vl.write_qwen3vl_gguf"   # a fixture's text_models[name]["writer"]


def write_reference_files(d, ref: Mapping, mmproj_writer=None, text_writer=None) -> pathlib.Path:
    """The files of a reference fixture (vision_qwen3vl.json: its projectors, text models and
    images) written into d from the writers, each checked against the fixture's sha256, so that a
    changed writer is caught before a stale fixture is trusted. mmproj_writer / text_writer:
    another fixture's (vision_qwen2vl.json: write_qwen2vl_mmproj, write_tiny_qwen2vl_text)."""
    import hashlib

    from PIL import Image

    import models_vision as mv

    d = pathlib.Path(d)

    def check(path: pathlib.Path, data: bytes, want: str) -> None:
        if hashlib.sha256(data).hexdigest() != want:
            raise AssertionError(f"{path.name}: the writer no longer makes the fixture's file")

    for name, p in ref["projectors"].items():
        (mmproj_writer or write_qwen3vl_mmproj)(d / f"{name}.gguf", **p["kwargs"])
        check(d / f"{name}.gguf", (d / f"{name}.gguf").read_bytes(), p["sha256"])
    for name, t in ref["text_models"].items():
        writer = text_writer or (write_tiny_qwen3vl_text if t.get("writer") == QWEN3VL_TEXT_WRITER
                                 else write_tiny_qwen_text)
        writer(d / f"{name}.gguf", **t["kwargs"])
        check(d / f"{name}.gguf", (d / f"{name}.gguf").read_bytes(), t["sha256"])
    for name, im in ref["images"].items():
        px = mv.draw_test_image(im["width"], im["height"], im["mode"])
        check(d / f"{name}.png", px.tobytes(), im["rgb_sha256"])
        Image.fromarray(px, im["mode"]).save(d / f"{name}.png")
    return d


# ---- Qwen2-VL / Qwen2.5-VL (clip.cpp's qwen2vl_merger / qwen2.5vl_merger) ---------------------

QWEN2VL_KINDS = {"qwen2vl": "qwen2vl_merger", "qwen25vl": "qwen2.5vl_merger"}
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)   # Qwen2-VL's preprocessor_config (OpenAI CLIP's)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _qwen2vl_tensors(draw: parts.Draws, hp: dict) -> list:
    """conversion/qwenvl.py's tensors (numpy shapes, all F32): the Conv3D's two temporal slices
    (no bias, no position embeddings); per block ln1 / ln2 (Qwen2-VL: LayerNorm weight and bias;
    Qwen2.5-VL: RMSNorm weight), q, k, v (split from qkv, biased), attn_out, the MLP (Qwen2-VL:
    fc1 as ffn_up, fc2 as ffn_down; Qwen2.5-VL: ffn_gate, ffn_up, ffn_down, all biased); the
    merger: ln_q as v.post_ln, mm.0 (4 n_embd square), mm.2 (to n_embd_text)."""
    n, f, p, layer_norm = hp["n_embd"], hp["n_ff"], hp["patch_size"], hp["kind"] == "qwen2vl"
    fan_in = 3 * p * p

    def norm(name: str, width: int) -> list:
        t = [(name + ".weight", draw.norm(width), "F32")]
        return t + [(name + ".bias", draw.bias(width), "F32")] if layer_norm else t

    def linear(name: str, n_out: int, n_in: int) -> list:
        return [(name + ".weight", draw.lin(n_out, n_in), "F32"), (name + ".bias", draw.bias(n_out), "F32")]

    t = [("v.patch_embd.weight", draw.normal(n, 3, p, p) / fan_in ** 0.5, "F32"),
         ("v.patch_embd.weight.1", draw.normal(n, 3, p, p) / fan_in ** 0.5, "F32")]
    for i in range(hp["n_layer"]):
        b = f"v.blk.{i}."
        t += norm(b + "ln1", n)
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t += linear(b + name, n, n)
        t += norm(b + "ln2", n)
        if not layer_norm:
            t += linear(b + "ffn_gate", f, n)
        t += linear(b + "ffn_up", f, n) + linear(b + "ffn_down", n, f)
    n4 = 4 * n
    return t + norm("v.post_ln", n) + linear("mm.0", n4, n4) + linear("mm.2", hp["n_embd_text"], n4)


def write_qwen2vl_mmproj(path, *, kind: str = "qwen2vl", n_embd_text: int, seed: int = 0, image_size: int = 56,
                         patch_size: int = 14, n_embd: int = 16, n_head: int = 2, n_ff: int = 40, n_layer: int = 2,
                         n_wa_pattern: int | None = None, eps: float = 1e-6, mean=CLIP_MEAN, std=CLIP_STD,
                         bias_std: float = 0.1, name: str | None = None, drop_tensors: Iterable[str] = (),
                         drop_keys: Iterable[str] = (), extra_kv: Mapping[str, object] | None = None) -> dict:
    """Write a tiny random Qwen2-VL (``kind="qwen2vl"``: ``qwen2vl_merger``) or Qwen2.5-VL
    (``"qwen25vl"``: ``qwen2.5vl_merger``) projector for a text model ``n_embd_text`` wide, as
    b11434's converter (conversion/qwenvl.py ``Qwen2VLVisionModel``) lays one out.

    The encoder (clip_graph_qwen2vl): two ``patch_size`` kernels summed, ``n_layer`` pre-norm
    blocks (``eps``; biased q, k, v; 2-D vision rope; an MLP ``n_embd -> n_ff``: quick GELU for
    Qwen2-VL, gated SiLU for 2.5 (``clip.use_silu``)), the merger to ``n_embd_text``. Qwen2.5-VL
    attends within 112-pixel windows except in every ``n_wa_pattern``-th layer (default 2:
    layer 0 windowed, 1 full; the converter's fullatt_block_indexes[0] + 1). As the converter,
    Qwen2-VL's ``feed_forward_length`` key holds its config's ``hidden_size`` (the text model's
    width, ``n_embd_text``), not the MLP's: clip.cpp never reads it for these types. Weights:
    ``models_parts.Draws`` (seed). Returned dict: the arguments, ``path`` and ``tensors``."""
    import gguf

    if kind not in QWEN2VL_KINDS:
        raise ValueError(f"kind must be one of {', '.join(QWEN2VL_KINDS)}")
    if image_size % (2 * patch_size):
        raise ValueError("image_size must be a multiple of 2 * patch_size")
    if n_embd % n_head or (n_embd // n_head) % 4:
        raise ValueError("n_embd / n_head must be a multiple of 4 (the vision rope's 4 sections)")
    if n_ff == n_embd:
        raise ValueError("n_ff == n_embd is ambiguous to clip.cpp's ffn swap rule (is_ffn_swapped)")
    if n_wa_pattern is None:
        n_wa_pattern = 2 if kind == "qwen25vl" else 0
    path = pathlib.Path(path)
    hp = {"path": path, "kind": kind, "name": name or f"tiny-random-{kind}-mmproj", "n_embd_text": n_embd_text,
          "seed": seed, "image_size": image_size, "patch_size": patch_size, "n_embd": n_embd, "n_head": n_head,
          "n_ff": n_ff, "n_layer": n_layer, "n_wa_pattern": n_wa_pattern, "eps": float(eps),
          "mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std), "bias_std": bias_std}
    kv = parts.clip_vision_kv(gguf, dict(hp, n_ff=n_embd_text if kind == "qwen2vl" else n_ff), parts.FILE_TYPE["F32"])
    kv["clip.projector_type"] = QWEN2VL_KINDS[kind]
    if kind == "qwen25vl":
        kv.update({"clip.use_silu": True, "clip.vision.n_wa_pattern": n_wa_pattern})
    kv["clip.vision.attention.layer_norm_epsilon"] = float(eps)
    kv.update(extra_kv or {})
    hp["tensors"] = parts.write_file(gguf, path, "clip", kv, _qwen2vl_tensors(parts.Draws(seed, bias_std), hp),
                                     drop_keys=set(drop_keys), drop_tensors=set(drop_tensors))
    return hp


def write_tiny_qwen2vl_text(path, *, n_vocab: int = 272, n_embd: int = 32, seed: int = 3,
                            rope_sections=(2, 1, 1, 0), **kw) -> dict:
    """The text model a tiny Qwen2-VL projector pairs with: a tiny ``qwen2vl`` (models.write_gguf:
    Qwen2's layout, q/k/v biases) with ``rope.dimension_sections`` (M-RoPE: llama.cpp's rope type
    for qwen2vl, so mtmd places images at 2-D positions; 4 heads of 8 by default, 4 rotary
    pairs: t 2, y 1, x 1, as Qwen2-VL's 16 / 24 / 24 of 64) and the markers of
    ``qwen_image_marker_kv``."""
    from models import write_gguf

    extra = dict(qwen_image_marker_kv(n_vocab))
    extra["qwen2vl.rope.dimension_sections"] = [int(s) for s in rope_sections]
    extra.update(kw.pop("extra_kv", None) or {})
    return write_gguf(path, arch="qwen2vl", n_vocab=n_vocab, n_embd=n_embd, seed=seed, extra_kv=extra, **kw)
