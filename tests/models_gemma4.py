"""Tiny random Gemma 4 (``gemma4``) GGUFs, laid out as llama.cpp's converter writes them
(conversion/gemma.py Gemma4Model; tensor names and keys of src/models/gemma4.cpp), so that
llama.cpp and pyllamaspec load the same file. A file is a pure function of the arguments
(seeded numpy draws): tests/data/reference/gemma4_llamacpp.json records the sha256 of each file
its logits were computed on.

What the shapes exercise: sliding-window layers (``swa_pattern``) with their own head size,
kv-head count and rope width; full layers with "proportional" rope (``rope_freqs``: 1 for the
rotated pairs, 1e30 for the others); per-layer FFN widths (``n_ff`` a list: E2B's double-wide
MLP on shared layers); ``shared_kv_layers`` last layers that reuse earlier caches; per-layer
inputs (``n_embd_per_layer``); a mixture of experts beside the dense FFN (``n_expert``), with
the router's input scale and per-expert output scales; layers without ``attn_v`` on full
attention (``k_eq_v``: k serves as v); a per-layer output scale; final soft-capping.
"""
from __future__ import annotations

import pathlib
from typing import Mapping

import numpy as np

import models
import models_parts as parts

__all__ = ["write_gemma4_gguf"]

_DTYPES = ("F32", "F16", "Q8_0")


def write_gemma4_gguf(
    path,
    *,
    n_vocab: int = 64,
    n_embd: int = 64,
    swa_pattern: tuple = (True, False, True, False, True, False),
    n_head: int = 4,
    n_head_kv_swa: int = 2,
    n_head_kv_full: int = 1,
    head_dim_swa: int = 16,
    head_dim_full: int = 32,
    n_rot_swa: int = 16,
    n_rot_pairs_full: int = 4,
    n_ff: int | list = 48,
    shared_kv_layers: int = 0,
    n_embd_per_layer: int = 0,
    n_expert: int = 0,
    n_expert_used: int = 2,
    n_ff_exp: int = 32,
    k_eq_v: bool = False,
    out_scale: bool = True,
    tied: bool = True,
    sliding_window: int = 4,
    rope_base: float = 1_000_000.0,
    rope_base_swa: float = 10_000.0,
    softcap: float | None = 30.0,
    n_ctx_train: int = 256,
    eps: float = 1e-6,
    dtype: str = "F32",
    seed: int = 0,
    extra_kv: Mapping[str, object] | None = None,
    drop_tensors: tuple[str, ...] = (),
    extra_tensors: tuple = (),
) -> dict:
    """Write a tiny random ``gemma4`` GGUF; returns its description.

    Layer ``il`` is a sliding-window layer when ``swa_pattern[il]``; ``n_ff`` is one width or
    one per layer; ``n_rot_pairs_full`` of the full layers' ``head_dim_full / 2`` rope pairs
    rotate. ``n_expert`` > 0 makes every layer a mixture-of-experts layer; ``k_eq_v`` leaves
    ``attn_v`` out of the full-attention layers. 2-D and 3-D weights in ``dtype``, 1-D in F32.
    ``extra_tensors`` ((name, numpy array, dtype), ...) are written too (bad-file tests).
    """
    import gguf

    parts.check_dtypes(_DTYPES, dtype)
    path = pathlib.Path(path)
    n_layer = len(swa_pattern)
    ffs = list(n_ff) if isinstance(n_ff, (list, tuple)) else [n_ff] * n_layer
    if len(ffs) != n_layer:
        raise ValueError("n_ff must give one width per layer")
    draw = parts.Draws(seed)
    tensors = parts.embeddings_and_head(draw, n_vocab, n_embd, dtype, dtype, tied=tied)
    if n_embd_per_layer:
        w = n_embd_per_layer * n_layer
        tensors += [("per_layer_token_embd.weight", draw.normal(n_vocab, w), _fit(dtype, w)),
                    ("per_layer_model_proj.weight", draw.lin(w, n_embd), dtype)]
        tensors += parts.norms(draw, "", n_embd_per_layer, "per_layer_proj_norm")
    pairs = head_dim_full // 2
    tensors.append(("rope_freqs.weight", np.array([1.0] * n_rot_pairs_full + [1e30] * (pairs - n_rot_pairs_full)), "F32"))
    for il, swa in enumerate(swa_pattern):
        hd, n_kv = (head_dim_swa, n_head_kv_swa) if swa else (head_dim_full, n_head_kv_full)
        tensors += _layer(draw, f"blk.{il}.", dtype, n_embd, hd * n_head, hd * n_kv, hd, ffs[il],
                          drop_v=k_eq_v and not swa, out_scale=out_scale)
        if n_expert:
            tensors += _experts(draw, f"blk.{il}.", dtype, n_embd, n_expert, n_ff_exp)
        if n_embd_per_layer:
            tensors += [(f"blk.{il}.inp_gate.weight", draw.lin(n_embd_per_layer, n_embd), dtype),
                        (f"blk.{il}.proj.weight", draw.lin(n_embd, n_embd_per_layer), _fit(dtype, n_embd_per_layer))]
            tensors += parts.norms(draw, f"blk.{il}.", n_embd, "post_norm")

    a = "gemma4"
    kv = parts.general_kv(gguf, "tiny-random-gemma4", parts.FILE_TYPE[dtype])
    kv.update(parts.hparams_kv(a, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer, n_ff=ffs, n_head=n_head,
                               n_head_kv=[n_head_kv_swa if s else n_head_kv_full for s in swa_pattern], eps=eps,
                               rope_base=rope_base, head_dim=head_dim_full))
    kv.update({f"{a}.attention.key_length_swa": head_dim_swa, f"{a}.attention.value_length_swa": head_dim_swa,
               f"{a}.rope.dimension_count": head_dim_full, f"{a}.rope.dimension_count_swa": n_rot_swa,
               f"{a}.rope.freq_base_swa": float(rope_base_swa), f"{a}.attention.sliding_window": sliding_window,
               f"{a}.attention.sliding_window_pattern": [bool(s) for s in swa_pattern],
               f"{a}.attention.shared_kv_layers": shared_kv_layers,
               f"{a}.embedding_length_per_layer_input": n_embd_per_layer})
    if softcap is not None:
        kv[f"{a}.final_logit_softcapping"] = float(softcap)
    if n_expert:
        kv.update({f"{a}.expert_count": n_expert, f"{a}.expert_used_count": n_expert_used,
                   f"{a}.expert_feed_forward_length": n_ff_exp})
    kv.update(parts.vocab_kv(a, n_vocab, *models.gpt2_byte_tokens(n_vocab)))
    kv.update(extra_kv or {})
    info = parts.write_file(gguf, path, a, kv, tensors + list(extra_tensors), drop_tensors=frozenset(drop_tensors))
    return {"path": path, "arch": a, "n_vocab": n_vocab, "n_layer": n_layer, "seed": seed, "tensors": info}


def _fit(dtype: str, n_in: int) -> str:
    """``dtype``, or F16 where a quantized type's 32-value blocks do not fit the row."""
    return dtype if dtype in ("F32", "F16") or n_in % 32 == 0 else "F16"


def _layer(draw: parts.Draws, p: str, dtype: str, n_embd: int, n_q: int, n_kv: int, hd: int, n_ff: int, *,
           drop_v: bool, out_scale: bool) -> list:
    """Attention (q/k/v/output, q/k norms, post-attention norm), the dense GeGLU FFN with its
    norms, and the layer's output scale."""
    t = parts.norms(draw, p, n_embd, "attn_norm")
    t += [x for x in parts.attention(draw, p, dtype, n_embd, n_q, n_kv) if not (drop_v and "attn_v." in x[0])]
    t += parts.norms(draw, p, hd, "attn_q_norm", "attn_k_norm")
    t += parts.norms(draw, p, n_embd, "post_attention_norm", "ffn_norm")
    t += parts.ffn(draw, p, dtype, n_embd, n_ff)
    t += parts.norms(draw, p, n_embd, "post_ffw_norm")
    if out_scale:
        t.append((p + "layer_output_scale.weight", 0.5 + 0.5 * draw.rng.random(1), "F32"))
    return t


def _experts(draw: parts.Draws, p: str, dtype: str, n_embd: int, n_expert: int, n_ff_exp: int) -> list:
    """The router (weights, input scale), the branch norms, the stacked experts and their
    per-expert output scales."""
    t = [(p + "ffn_gate_inp.weight", draw.lin(n_expert, n_embd), "F32"),
         (p + "ffn_gate_inp.scale", draw.norm(n_embd), "F32")]
    t += parts.norms(draw, p, n_embd, "pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2")
    t += parts.ffn(draw, p, dtype, n_embd, n_ff_exp, kind="_exps", n_expert=n_expert)
    t.append((p + "ffn_down_exps.scale", 0.5 + draw.rng.random(n_expert), "F32"))
    return t
