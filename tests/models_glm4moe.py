"""Tiny random GLM-4.5 (``glm4moe``) GGUFs, laid out as llama.cpp's converter writes them
(conversion/glm.py; tensor names and keys of src/models/glm4-moe.cpp), so that llama.cpp and
pyllamaspec load the same file. A file is a pure function of the arguments (seeded numpy draws):
tests/data/reference/glm4moe_llamacpp.json records the sha256 of each file.

Per layer: ``attn_norm``, q/k/v with biases (``qkv_bias``), per-head q/k norms (``qk_norm``:
GLM-4.5's 355B), ``attn_output``, ``post_attention_norm`` (the FFN's pre-norm); the first
``n_dense`` layers a dense SwiGLU FFN, the others ``ffn_gate_inp``, ``exp_probs_b.bias``, the
stacked experts and ``n_shared`` shared experts. ``n_rot`` < head_dim is GLM's partial rope;
``n_nextn`` MTP blocks follow the trunk.
"""
from __future__ import annotations

import pathlib
from typing import Mapping

import models
import models_parts as parts

__all__ = ["write_glm4moe_gguf"]

_DTYPES = ("F32", "F16", "Q8_0")


def write_glm4moe_gguf(
    path,
    *,
    n_vocab: int = 64,
    n_embd: int = 64,
    n_layer: int = 3,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 32,
    n_rot: int = 16,
    n_ff: int = 96,
    n_dense: int = 1,
    n_expert: int = 8,
    n_expert_used: int = 2,
    n_ff_exp: int = 32,
    n_shared: int = 1,
    qkv_bias: bool = True,
    qk_norm: bool = False,
    weights_norm: bool = True,
    weights_scale: float | None = 2.5,
    rope_sections: tuple | None = None,
    n_nextn: int = 0,
    n_ctx_train: int = 256,
    rope_base: float = 1_000_000.0,
    eps: float = 1e-5,
    dtype: str = "F32",
    seed: int = 0,
    extra_kv: Mapping[str, object] | None = None,
    drop_tensors: tuple[str, ...] = (),
) -> dict:
    """Write a tiny random ``glm4moe`` GGUF; returns its description."""
    import gguf

    parts.check_dtypes(_DTYPES, dtype)
    path = pathlib.Path(path)
    draw = parts.Draws(seed, 0.3)
    tensors = parts.embeddings_and_head(draw, n_vocab, n_embd, dtype, dtype)
    n_q, n_kv = head_dim * n_head, head_dim * n_head_kv
    for il in range(n_layer + n_nextn):
        p = f"blk.{il}."
        t = parts.norms(draw, p, n_embd, "attn_norm")
        t += parts.attention(draw, p, dtype, n_embd, n_q, n_kv)
        if qkv_bias:
            t += parts.qkv_biases(draw, p, n_q, n_kv)
        if qk_norm:
            t += parts.norms(draw, p, head_dim, "attn_q_norm", "attn_k_norm")
        t += parts.norms(draw, p, n_embd, "post_attention_norm")
        if il < n_dense:
            t += parts.ffn(draw, p, dtype, n_embd, n_ff)
        else:
            t += [(p + "ffn_gate_inp.weight", draw.lin(n_expert, n_embd), "F32"),
                  (p + "exp_probs_b.bias", draw.bias(n_expert), "F32")]
            t += parts.ffn(draw, p, dtype, n_embd, n_ff_exp, kind="_exps", n_expert=n_expert)
            if n_shared:
                t += parts.ffn(draw, p, dtype, n_embd, n_ff_exp * n_shared, kind="_shexp")
        if il >= n_layer:
            t += [(p + "nextn.eh_proj.weight", draw.lin(n_embd, 2 * n_embd), dtype)]
            t += parts.norms(draw, p, n_embd, "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm")
        tensors += t

    a = "glm4moe"
    kv = parts.general_kv(gguf, "tiny-random-glm4moe", parts.FILE_TYPE[dtype])
    kv.update(parts.hparams_kv(a, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer + n_nextn, n_ff=n_ff,
                               n_head=n_head, n_head_kv=n_head_kv, eps=eps, rope_base=rope_base, head_dim=head_dim))
    kv.update({f"{a}.rope.dimension_count": n_rot, f"{a}.leading_dense_block_count": n_dense,
               f"{a}.expert_count": n_expert, f"{a}.expert_used_count": n_expert_used,
               f"{a}.expert_feed_forward_length": n_ff_exp, f"{a}.expert_shared_count": n_shared,
               f"{a}.expert_weights_norm": bool(weights_norm), f"{a}.expert_gating_func": 2})
    if weights_scale is not None:
        kv[f"{a}.expert_weights_scale"] = float(weights_scale)
    if rope_sections is not None:
        kv[f"{a}.rope.dimension_sections"] = [int(s) for s in rope_sections]
    if n_nextn:
        kv[f"{a}.nextn_predict_layers"] = n_nextn
    kv.update(parts.vocab_kv(a, n_vocab, *models.gpt2_byte_tokens(n_vocab)))
    kv.update(extra_kv or {})
    info = parts.write_file(gguf, path, a, kv, tensors, drop_tensors=frozenset(drop_tensors))
    return {"path": path, "arch": a, "n_vocab": n_vocab, "n_layer": n_layer, "seed": seed, "tensors": info}
