"""Tiny random Mistral Small 3.x / Ministral 3 (``mistral3``) GGUFs, laid out as llama.cpp's
converter writes them (conversion/mistral3.py; src/models/mistral3.cpp), so that llama.cpp and
pyllamaspec load the same file. A file is a pure function of the arguments (seeded numpy draws):
tests/data/reference/mistral3_llamacpp.json records the sha256 of each file.

The llama layer (``attn_norm``, q/k/v/output, ``ffn_norm``, SwiGLU) with optional q/k/v/output
biases (``bias``), ``rope_freqs`` (frequency divisors, one per rope pair), YaRN with
``yarn_beta_fast`` / ``yarn_beta_slow`` / ``yarn_log_multiplier`` (``yarn``) and Llama-4
attention temperature scaling (``temperature_scale``: its floor is the YaRN original context).
"""
from __future__ import annotations

import pathlib
from typing import Mapping

import models
import models_parts as parts

__all__ = ["write_mistral3_gguf"]

_DTYPES = ("F32", "F16", "Q8_0")


def write_mistral3_gguf(
    path,
    *,
    n_vocab: int = 64,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 32,
    n_ff: int = 96,
    bias: bool = False,
    rope_freqs: bool = True,
    yarn: dict | None = None,
    temperature_scale: float | None = None,
    n_ctx_train: int = 256,
    rope_base: float = 1_000_000.0,
    eps: float = 1e-5,
    dtype: str = "F32",
    seed: int = 0,
    extra_kv: Mapping[str, object] | None = None,
) -> dict:
    """Write a tiny random ``mistral3`` GGUF; ``yarn``: {factor, original_context_length,
    beta_fast, beta_slow, log_multiplier} (the last three optional)."""
    import gguf

    parts.check_dtypes(_DTYPES, dtype)
    path = pathlib.Path(path)
    draw = parts.Draws(seed, 0.3)
    tensors = parts.embeddings_and_head(draw, n_vocab, n_embd, dtype, dtype)
    if rope_freqs:
        tensors.append(("rope_freqs.weight", 1.0 + 3.0 * draw.rng.random(head_dim // 2), "F32"))
    n_q, n_kv = head_dim * n_head, head_dim * n_head_kv
    for il in range(n_layer):
        p = f"blk.{il}."
        tensors += parts.norms(draw, p, n_embd, "attn_norm")
        tensors += parts.attention(draw, p, dtype, n_embd, n_q, n_kv)
        if bias:
            tensors += parts.qkv_biases(draw, p, n_q, n_kv) + [(p + "attn_output.bias", draw.bias(n_embd), "F32")]
        tensors += parts.norms(draw, p, n_embd, "ffn_norm")
        tensors += parts.ffn(draw, p, dtype, n_embd, n_ff)

    a = "mistral3"
    kv = parts.general_kv(gguf, "tiny-random-mistral3", parts.FILE_TYPE[dtype])
    kv.update(parts.hparams_kv(a, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head,
                               n_head_kv=n_head_kv, eps=eps, rope_base=rope_base, head_dim=head_dim))
    kv[f"{a}.rope.dimension_count"] = head_dim
    if yarn:
        kv.update({f"{a}.rope.scaling.type": "yarn", f"{a}.rope.scaling.factor": float(yarn["factor"]),
                   f"{a}.rope.scaling.original_context_length": int(yarn["original_context_length"])})
        for k in ("beta_fast", "beta_slow"):
            if k in yarn:
                kv[f"{a}.rope.scaling.yarn_{k}"] = float(yarn[k])
        if "log_multiplier" in yarn:
            kv[f"{a}.rope.scaling.yarn_log_multiplier"] = float(yarn["log_multiplier"])
    if temperature_scale is not None:
        kv[f"{a}.attention.temperature_scale"] = float(temperature_scale)
    kv.update(parts.vocab_kv(a, n_vocab, *models.gpt2_byte_tokens(n_vocab)))
    kv.update(extra_kv or {})
    info = parts.write_file(gguf, path, a, kv, tensors)
    return {"path": path, "arch": a, "n_vocab": n_vocab, "n_layer": n_layer, "seed": seed, "tensors": info}
