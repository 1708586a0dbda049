"""Tiny random DeepSeek V2/V3 (``deepseek2``, multi-head latent attention) GGUFs, laid out as
llama.cpp's converter writes them today (conversion/deepseek.py: the absorbed form, ``attn_k_b``
and ``attn_v_b`` split out of ``kv_b``, ``key_length_mla`` / ``value_length_mla``), so that
llama.cpp and pyllamaspec load the same file. A file is a pure function of the arguments (seeded
numpy draws): tests/data/reference/deepseek2_llamacpp.json records the sha256 of each file.

Shapes (numpy order): ``attn_q_a`` (q_lora_rank, n_embd) + ``attn_q_a_norm`` + ``attn_q_b``
(n_head * key_length_mla, q_lora_rank), or ``attn_q`` when ``q_lora_rank`` is 0 (llama.cpp
takes that path for 26- or 27-layer files); ``attn_kv_a_mqa`` (kv_lora_rank + n_rot, n_embd) +
``attn_kv_a_norm``; ``attn_k_b`` (n_head, kv_lora_rank, key_length_mla - n_rot); ``attn_v_b``
(n_head, value_length_mla, kv_lora_rank); ``attn_output`` (n_embd, n_head * value_length_mla).
The first ``n_dense`` layers have a dense SwiGLU FFN, the others experts (``exp_probs_b`` when
``probs_bias``) and ``n_shared`` shared experts; ``n_nextn`` MTP blocks follow the trunk.
"""
from __future__ import annotations

import pathlib
from typing import Mapping

import models
import models_parts as parts

__all__ = ["write_deepseek2_gguf"]

_DTYPES = ("F32", "F16", "Q8_0")


def write_deepseek2_gguf(
    path,
    *,
    n_vocab: int = 64,
    n_embd: int = 64,
    n_layer: int = 3,
    n_head: int = 4,
    q_lora_rank: int = 32,
    kv_lora_rank: int = 32,
    n_rot: int = 16,
    qk_nope: int = 32,
    v_head: int = 32,
    n_ff: int = 96,
    n_dense: int = 1,
    n_expert: int = 8,
    n_expert_used: int = 2,
    n_ff_exp: int = 32,
    n_shared: int = 1,
    gating: int | None = 2,
    probs_bias: bool = True,
    weights_norm: bool = True,
    weights_scale: float | None = 2.5,
    groups: tuple[int, int] | None = (4, 2),
    yarn: tuple[float, int, float] | None = (4.0, 64, 0.1),
    n_nextn: int = 0,
    n_ctx_train: int = 256,
    rope_base: float = 10000.0,
    eps: float = 1e-6,
    dtype: str = "F32",
    seed: int = 0,
    extra_kv: Mapping[str, object] | None = None,
    drop_tensors: tuple[str, ...] = (),
) -> dict:
    """Write a tiny random ``deepseek2`` GGUF; returns its description. ``gating`` is
    ``expert_gating_func`` (1 softmax, 2 sigmoid, None: not written), ``groups`` (count, used)
    the expert groups, ``yarn`` (factor, original context, yarn_log_multiplier as the converter
    writes it: 0.1 x mscale_all_dim) the rope scaling, None for none."""
    import gguf

    parts.check_dtypes(_DTYPES, dtype)
    path = pathlib.Path(path)
    draw = parts.Draws(seed, 0.3)
    tensors = parts.embeddings_and_head(draw, n_vocab, n_embd, dtype, dtype)
    kq = qk_nope + n_rot
    for il in range(n_layer + n_nextn):
        p = f"blk.{il}."
        tensors += _mla(draw, p, dtype, n_embd, n_head, q_lora_rank, kv_lora_rank, n_rot, qk_nope, v_head)
        tensors += parts.norms(draw, p, n_embd, "ffn_norm")
        if il < n_dense:
            tensors += parts.ffn(draw, p, dtype, n_embd, n_ff)
        else:
            tensors += [(p + "ffn_gate_inp.weight", draw.lin(n_expert, n_embd), "F32")]
            if probs_bias:
                tensors += [(p + "exp_probs_b.bias", draw.bias(n_expert), "F32")]
            tensors += parts.ffn(draw, p, dtype, n_embd, n_ff_exp, kind="_exps", n_expert=n_expert)
            tensors += parts.ffn(draw, p, dtype, n_embd, n_ff_exp * n_shared, kind="_shexp")
        if il >= n_layer:
            tensors += [(p + "nextn.eh_proj.weight", draw.lin(n_embd, 2 * n_embd), dtype)]
            tensors += parts.norms(draw, p, n_embd, "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm")

    a = "deepseek2"
    kv = parts.general_kv(gguf, "tiny-random-deepseek2", parts.FILE_TYPE[dtype])
    kv.update(parts.hparams_kv(a, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer + n_nextn, n_ff=n_ff,
                               n_head=n_head, n_head_kv=1, eps=eps, rope_base=rope_base))
    kv.update({f"{a}.attention.key_length": kv_lora_rank + n_rot, f"{a}.attention.value_length": kv_lora_rank,
               f"{a}.attention.key_length_mla": kq, f"{a}.attention.value_length_mla": v_head,
               f"{a}.attention.kv_lora_rank": kv_lora_rank, f"{a}.rope.dimension_count": n_rot,
               f"{a}.leading_dense_block_count": n_dense, f"{a}.expert_count": n_expert,
               f"{a}.expert_used_count": n_expert_used, f"{a}.expert_feed_forward_length": n_ff_exp,
               f"{a}.expert_shared_count": n_shared, f"{a}.expert_weights_norm": bool(weights_norm)})
    if q_lora_rank:
        kv[f"{a}.attention.q_lora_rank"] = q_lora_rank
    if gating is not None:
        kv[f"{a}.expert_gating_func"] = gating
    if weights_scale is not None:
        kv[f"{a}.expert_weights_scale"] = float(weights_scale)
    if groups is not None:
        kv[f"{a}.expert_group_count"], kv[f"{a}.expert_group_used_count"] = groups
    if yarn is not None:
        kv.update({f"{a}.rope.scaling.type": "yarn", f"{a}.rope.scaling.factor": float(yarn[0]),
                   f"{a}.rope.scaling.original_context_length": int(yarn[1]),
                   f"{a}.rope.scaling.yarn_log_multiplier": float(yarn[2])})
    if n_nextn:
        kv[f"{a}.nextn_predict_layers"] = n_nextn
    kv.update(parts.vocab_kv(a, n_vocab, *models.gpt2_byte_tokens(n_vocab)))
    kv.update(extra_kv or {})
    info = parts.write_file(gguf, path, a, kv, tensors, drop_tensors=frozenset(drop_tensors))
    return {"path": path, "arch": a, "n_vocab": n_vocab, "n_layer": n_layer, "seed": seed, "tensors": info}


def _mla(draw: parts.Draws, p: str, dtype: str, n_embd: int, n_head: int, q_lora: int, kv_lora: int, n_rot: int,
         qk_nope: int, v_head: int) -> list:
    """The attention of one layer (the module docstring lists the shapes)."""
    kq = qk_nope + n_rot
    t = parts.norms(draw, p, n_embd, "attn_norm")
    if q_lora:
        t += parts.norms(draw, p, q_lora, "attn_q_a_norm")
        t += [(p + "attn_q_a.weight", draw.lin(q_lora, n_embd), dtype),
              (p + "attn_q_b.weight", draw.lin(n_head * kq, q_lora), dtype)]
    else:
        t += [(p + "attn_q.weight", draw.lin(n_head * kq, n_embd), dtype)]
    t += parts.norms(draw, p, kv_lora, "attn_kv_a_norm")
    t += [(p + "attn_kv_a_mqa.weight", draw.lin(kv_lora + n_rot, n_embd), dtype),
          (p + "attn_k_b.weight", draw.lin(n_head, kv_lora, qk_nope), dtype),
          (p + "attn_v_b.weight", draw.lin(n_head, v_head, kv_lora), dtype),
          (p + "attn_output.weight", draw.lin(n_embd, n_head * v_head), dtype)]
    return t
