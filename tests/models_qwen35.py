"""Tiny random Qwen3.5 (``qwen35``: Gated DeltaNet + gated attention) GGUFs, laid out as
llama.cpp's converter writes them, so that llama.cpp and pyllamaspec load the same file. A file
is a pure function of the arguments (seeded numpy draws): tests/data/reference/qwen35_*.json
were computed on files written by this function."""
from __future__ import annotations

import pathlib
from typing import Mapping

import numpy as np

import models
import models_parts as parts

__all__ = ["write_qwen35_gguf"]


def write_qwen35_gguf(
    path,
    *,
    n_vocab: int = 64,
    n_embd: int = 32,
    n_layer: int = 4,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 16,
    n_rot: int = 8,
    rope_sections: tuple = (2, 1, 1, 0),
    n_ff: int = 48,
    d_conv: int = 4,
    d_state: int = 16,
    n_k_heads: int = 2,
    n_v_heads: int = 2,
    full_attention_interval: int | None = 2,
    recurrent_layers: list | None = None,
    n_ctx_train: int = 256,
    rope_base: float = 10000.0,
    eps: float = 1e-6,
    seed: int = 0,
    dtype: str = "F32",
    n_nextn: int = 0,
    nextn_embed: bool = False,
    name: str | None = None,
    n_expert: int = 0,
    n_expert_used: int = 2,
    n_ff_exp: int = 32,
    n_ff_shexp: int = 48,
    extra_kv: Mapping[str, object] | None = None,
    edit=None,
) -> dict:
    """Write a tiny random ``qwen35`` GGUF (hybrid Gated DeltaNet + gated attention) with
    llama.cpp's tensor names and keys, and return its hyper-parameters.

    Layer il is linear attention when ``recurrent_layers[il]`` (written as
    ``qwen35.attention.recurrent_layers``), else, when that is None, unless
    ``(il + 1) % full_attention_interval == 0`` (written as ``full_attention_interval``).
    Linear layers: ``attn_qkv`` (q, k: ``n_k_heads * d_state`` each, v: ``n_v_heads *
    d_state``), ``attn_gate`` (z), ``ssm_conv1d`` (F32 [d_conv, channels]), ``ssm_dt.bias``,
    ``ssm_a`` (negative: -exp(.)), ``ssm_beta``, ``ssm_alpha``, ``ssm_norm``, ``ssm_out``.
    Attention layers: ``attn_q`` of 2 * head_dim per head (q and its gate interleaved per head),
    ``attn_k``, ``attn_v``, ``attn_output``, q/k norms. Every layer: ``attn_norm``,
    ``post_attention_norm`` (the FFN pre-norm) and the SwiGLU FFN. Seeded as ``write_gguf``.
    ``n_nextn`` MTP blocks follow the trunk (``block_count`` counts them, ``nextn_predict_layers``
    names them): attention, ``nextn.eh_proj``, ``nextn.enorm``, ``nextn.hnorm``, ``nextn.shared_head_norm``
    (the head is the model's); with ``nextn_embed`` their own ``nextn.embed_tokens`` (drawn last).
    ``edit({name: weights})``, if given, may change the weights in place before they are written.
    ``n_expert`` > 0 writes ``qwen35moe`` (Qwen3.5 / 3.6 MoE): each layer's FFN (the MTP
    block's too) is ``ffn_gate_inp`` and stacked experts of width ``n_ff_exp`` plus a shared
    expert of width ``n_ff_shexp`` with its gate vector ``ffn_gate_inp_shexp``.
    """
    import gguf

    path = pathlib.Path(path)
    if recurrent_layers is None:
        recurrent = [(il + 1) % full_attention_interval != 0 for il in range(n_layer)]
    else:
        recurrent = [bool(r) for r in recurrent_layers]
    recurrent = recurrent + [False] * n_nextn   # MTP blocks are attention layers

    draw = parts.Draws(seed)
    tensors = parts.embeddings_and_head(draw, n_vocab, n_embd, dtype, dtype)
    for i in range(n_layer + n_nextn):
        p = f"blk.{i}."
        tensors += parts.norms(draw, p, n_embd, "attn_norm", "post_attention_norm")
        if recurrent[i]:
            tensors += _gated_delta_net(draw, p, dtype, n_embd, d_conv=d_conv, d_state=d_state, n_k_heads=n_k_heads,
                                        n_v_heads=n_v_heads)
        else:
            tensors += parts.attention(draw, p, dtype, n_embd, head_dim * n_head, head_dim * n_head_kv, gated_q=True)
            tensors += parts.norms(draw, p, head_dim, "attn_q_norm", "attn_k_norm")
        tensors += _moe_ffn(draw, p, dtype, n_embd, n_expert, n_ff_exp, n_ff_shexp) if n_expert else \
            parts.ffn(draw, p, dtype, n_embd, n_ff)
        if i >= n_layer:
            tensors += [(p + "nextn.eh_proj.weight", draw.lin(n_embd, 2 * n_embd), dtype)]
            tensors += parts.norms(draw, p, n_embd, "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm")
    tensors += [(f"blk.{i}.nextn.embed_tokens.weight", draw.normal(n_vocab, n_embd), dtype)   # drawn last
                for i in range(n_layer, n_layer + n_nextn * nextn_embed)]

    a = "qwen35moe" if n_expert else "qwen35"
    kv = parts.general_kv(gguf, name or f"tiny-random-{a}", parts.FILE_TYPE[dtype])
    kv.update(parts.hparams_kv(a, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer + n_nextn, n_ff=n_ff,
                               n_head=n_head, n_head_kv=n_head_kv, eps=eps, rope_base=rope_base, head_dim=head_dim))
    kv.update({f"{a}.rope.dimension_count": n_rot, f"{a}.rope.dimension_sections": [int(s) for s in rope_sections],
               f"{a}.ssm.conv_kernel": d_conv, f"{a}.ssm.inner_size": n_v_heads * d_state,
               f"{a}.ssm.state_size": d_state, f"{a}.ssm.time_step_rank": n_v_heads, f"{a}.ssm.group_count": n_k_heads})
    kv.update(parts.vocab_kv(a, n_vocab, *models.gpt2_byte_tokens(n_vocab)))
    if n_expert:
        kv.update({f"{a}.expert_count": n_expert, f"{a}.expert_used_count": n_expert_used,
                   f"{a}.expert_feed_forward_length": n_ff_exp, f"{a}.expert_shared_feed_forward_length": n_ff_shexp})
    kv.update({f"{a}.nextn_predict_layers": n_nextn} if n_nextn else {})
    kv.update({f"{a}.full_attention_interval": full_attention_interval} if recurrent_layers is None
              else {f"{a}.attention.recurrent_layers": [bool(r) for r in recurrent]})
    kv.update(extra_kv or {})
    if edit is not None:                        # edit({name: array}) changes weights in place
        edit({name: w for name, w, _ in tensors})
    parts.write_file(gguf, path, a, kv, tensors)
    return {"path": path, "arch": a, "n_vocab": n_vocab, "n_layer": n_layer, "recurrent": recurrent, "seed": seed}


def _gated_delta_net(draw: parts.Draws, p: str, dtype: str, n_embd: int, *, d_conv: int, d_state: int, n_k_heads: int,
                     n_v_heads: int) -> list:
    """A linear-attention layer's tensors (the docstring of ``write_qwen35_gguf`` lists them)."""
    key_dim, d_inner = n_k_heads * d_state, n_v_heads * d_state
    return [
        (p + "attn_qkv.weight", draw.lin(2 * key_dim + d_inner, n_embd), dtype),
        (p + "attn_gate.weight", draw.lin(d_inner, n_embd), dtype),
        (p + "ssm_conv1d.weight", draw.lin(2 * key_dim + d_inner, d_conv), "F32"),
        (p + "ssm_dt.bias", 0.5 * draw.normal(n_v_heads), "F32"),
        (p + "ssm_a", -np.exp(0.5 * draw.normal(n_v_heads)), "F32"),
        (p + "ssm_beta.weight", draw.lin(n_v_heads, n_embd), dtype),
        (p + "ssm_alpha.weight", draw.lin(n_v_heads, n_embd), dtype),
        (p + "ssm_norm.weight", draw.norm(d_state), "F32"),
        (p + "ssm_out.weight", draw.lin(n_embd, d_inner), dtype),
    ]


def _moe_ffn(draw: parts.Draws, p: str, dtype: str, n_embd: int, n_expert: int, n_ff_exp: int, n_ff_shexp: int) -> list:
    """qwen35moe's FFN: the router, the stacked experts, the gated shared expert."""
    t = [(p + "ffn_gate_inp.weight", draw.lin(n_expert, n_embd), "F32")]
    t += parts.ffn(draw, p, dtype, n_embd, n_ff_exp, kind="_exps", n_expert=n_expert)
    t += [(p + "ffn_gate_inp_shexp.weight", draw.lin(n_embd), "F32")]
    t += parts.ffn(draw, p, dtype, n_embd, n_ff_shexp, kind="_shexp")
    return t
