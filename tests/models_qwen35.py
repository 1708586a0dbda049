"""Tiny random Qwen3.5 (``qwen35``: Gated DeltaNet + gated attention) GGUFs, laid out as
llama.cpp's converter writes them, so that llama.cpp and pyllamaspec load the same file. A file
is a pure function of the arguments (seeded numpy draws): tests/data/reference/qwen35_*.json
were computed on files written by this function."""
from __future__ import annotations

import pathlib
from typing import Mapping

import numpy as np

import models

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
    name: str = "tiny-random-qwen35",
    extra_kv: Mapping[str, object] | None = None,
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
    ``n_nextn`` MTP blocks follow the trunk (``block_count`` counts them,
    ``nextn_predict_layers`` names them): an attention layer plus ``nextn.eh_proj``,
    ``nextn.enorm``, ``nextn.hnorm`` and ``nextn.shared_head_norm`` (the head is the model's).
    """
    import gguf

    path = pathlib.Path(path)
    rng = np.random.default_rng(seed)
    if recurrent_layers is None:
        recurrent = [(il + 1) % full_attention_interval != 0 for il in range(n_layer)]
    else:
        recurrent = [bool(r) for r in recurrent_layers]
    recurrent = recurrent + [False] * n_nextn   # MTP blocks are attention layers

    def lin(n_out, n_in):
        return rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    key_dim, d_inner = n_k_heads * d_state, n_v_heads * d_state
    tensors: list[tuple[str, np.ndarray, str]] = [
        ("token_embd.weight", rng.standard_normal((n_vocab, n_embd)), dtype),
        ("output_norm.weight", norm(n_embd), "F32"),
        ("output.weight", lin(n_vocab, n_embd), dtype),
    ]
    for i in range(n_layer + n_nextn):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", norm(n_embd), "F32"),
                    (p + "post_attention_norm.weight", norm(n_embd), "F32")]
        if recurrent[i]:
            tensors += [
                (p + "attn_qkv.weight", lin(2 * key_dim + d_inner, n_embd), dtype),
                (p + "attn_gate.weight", lin(d_inner, n_embd), dtype),
                (p + "ssm_conv1d.weight", rng.standard_normal((2 * key_dim + d_inner, d_conv)) / np.sqrt(d_conv), "F32"),
                (p + "ssm_dt.bias", 0.5 * rng.standard_normal(n_v_heads), "F32"),
                (p + "ssm_a", -np.exp(0.5 * rng.standard_normal(n_v_heads)), "F32"),
                (p + "ssm_beta.weight", lin(n_v_heads, n_embd), dtype),
                (p + "ssm_alpha.weight", lin(n_v_heads, n_embd), dtype),
                (p + "ssm_norm.weight", norm(d_state), "F32"),
                (p + "ssm_out.weight", lin(n_embd, d_inner), dtype),
            ]
        else:
            tensors += [
                (p + "attn_q.weight", lin(2 * head_dim * n_head, n_embd), dtype),
                (p + "attn_k.weight", lin(head_dim * n_head_kv, n_embd), dtype),
                (p + "attn_v.weight", lin(head_dim * n_head_kv, n_embd), dtype),
                (p + "attn_output.weight", lin(n_embd, head_dim * n_head), dtype),
                (p + "attn_q_norm.weight", norm(head_dim), "F32"),
                (p + "attn_k_norm.weight", norm(head_dim), "F32"),
            ]
        tensors += [
            (p + "ffn_gate.weight", lin(n_ff, n_embd), dtype),
            (p + "ffn_up.weight", lin(n_ff, n_embd), dtype),
            (p + "ffn_down.weight", lin(n_embd, n_ff), dtype),
        ]
        if i >= n_layer:
            tensors += [
                (p + "nextn.eh_proj.weight", lin(n_embd, 2 * n_embd), dtype),
                (p + "nextn.enorm.weight", norm(n_embd), "F32"),
                (p + "nextn.hnorm.weight", norm(n_embd), "F32"),
                (p + "nextn.shared_head_norm.weight", norm(n_embd), "F32"),
            ]

    tokens, merges = models.gpt2_byte_tokens(n_vocab)
    a = "qwen35"
    kv: dict[str, object] = {
        "general.name": name,
        "general.file_type": models._FILE_TYPE[dtype],
        "general.quantization_version": gguf.GGML_QUANT_VERSION,
        f"{a}.context_length": n_ctx_train,
        f"{a}.embedding_length": n_embd,
        f"{a}.block_count": n_layer + n_nextn,
        f"{a}.feed_forward_length": n_ff,
        f"{a}.attention.head_count": n_head,
        f"{a}.attention.head_count_kv": n_head_kv,
        f"{a}.attention.key_length": head_dim,
        f"{a}.attention.value_length": head_dim,
        f"{a}.attention.layer_norm_rms_epsilon": float(eps),
        f"{a}.rope.freq_base": float(rope_base),
        f"{a}.rope.dimension_count": n_rot,
        f"{a}.rope.dimension_sections": [int(s) for s in rope_sections],
        f"{a}.ssm.conv_kernel": d_conv,
        f"{a}.ssm.inner_size": d_inner,
        f"{a}.ssm.state_size": d_state,
        f"{a}.ssm.time_step_rank": n_v_heads,
        f"{a}.ssm.group_count": n_k_heads,
        f"{a}.vocab_size": n_vocab,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * n_vocab,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
    }
    if n_nextn:
        kv[f"{a}.nextn_predict_layers"] = n_nextn
    if recurrent_layers is None:
        kv[f"{a}.full_attention_interval"] = full_attention_interval
    else:
        kv[f"{a}.attention.recurrent_layers"] = [bool(r) for r in recurrent]
    if extra_kv:
        kv.update(extra_kv)

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), a)
    for key, val in kv.items():
        models._add_kv(gguf, w, key, val)
    for tname, arr, tdt in tensors:
        data, raw = models._encode_tensor(gguf, arr, tdt)
        if raw is None:
            w.add_tensor(tname, data)
        else:
            w.add_tensor(tname, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"path": path, "arch": a, "n_vocab": n_vocab, "n_layer": n_layer, "recurrent": recurrent, "seed": seed}
