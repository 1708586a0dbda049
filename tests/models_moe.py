"""Tiny random mixture-of-experts GGUFs: ``write_moe_gguf(path, arch=...)`` for ``qwen3moe``,
``qwen2moe`` and ``gpt-oss``, laid out as llama.cpp's converter writes them (tensor names,
keys, shapes), so that llama.cpp and pyllamaspec load the same file.

Expert tensors are stacked: ``blk.N.ffn_{gate,up}_exps.weight`` is the numpy array
``(n_expert, n_ff_exp, n_embd)`` (ggml ``[n_embd, n_ff_exp, n_expert]``) and
``ffn_down_exps`` ``(n_expert, n_embd, n_ff_exp)``; the router ``ffn_gate_inp.weight`` is
``(n_expert, n_embd)``. The vocabulary is ``models.gpt2_byte_tokens`` (llama.cpp loads it).

Files are a pure function of the arguments (seeded numpy draws, ``gguf``'s writer and
quantizer): the llama.cpp fixtures in tests/data/reference/moe_*.json record the sha256 of the
file they were computed on, and the tests check that it is regenerated bit-identically.
"""
from __future__ import annotations

import hashlib
import pathlib

import models
import models_parts as parts

__all__ = ["MOE_ARCHS", "sha256", "write_moe_gguf"]

MOE_ARCHS = ("qwen3moe", "qwen2moe", "gpt-oss")
_DTYPES = ("F32", "F16", "Q8_0", "MXFP4")


def sha256(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def write_moe_gguf(
    path,
    *,
    arch: str = "qwen3moe",
    n_vocab: int = 64,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 16,
    n_expert: int = 8,
    n_expert_used: int = 2,
    n_ff_exp: int = 32,
    n_ff_shexp: int = 64,
    n_ctx_train: int = 256,
    dtype: str = "F32",
    expert_dtype: str | None = None,
    rope_base: float = 10000.0,
    eps: float = 1e-6,
    sliding_window: int = 4,
    yarn_factor: float | None = None,
    yarn_orig_ctx: int = 64,
    seed: int = 0,
    bias_std: float = 0.3,
    extra_kv: dict | None = None,
    drop_tensors: tuple[str, ...] = (),
) -> dict:
    """Write a tiny random MoE GGUF of ``arch`` (one of ``MOE_ARCHS``); returns its description.

    * ``qwen3moe``: qwen3 attention (q/k norms, no biases) + MoE FFN (``ffn_norm``).
    * ``qwen2moe``: qwen2 attention (q/k/v biases) + MoE FFN + shared expert
      (``ffn_{gate,up,down}_shexp``, width ``n_ff_shexp``, and the gate vector
      ``ffn_gate_inp_shexp``).
    * ``gpt-oss``: q/k/v/output biases, ``attn_sinks`` (N(0, 1), one per head),
      ``post_attention_norm`` (the FFN's pre-norm), router and expert biases,
      ``attention.sliding_window`` = ``sliding_window``, an untied head (llama.cpp requires
      ``output.weight``), YaRN keys when ``yarn_factor`` is given.

    2-D and 3-D weights are in ``dtype`` except the stacked experts (``expert_dtype``,
    default ``dtype``; ``MXFP4`` and the other quantized types need row lengths that are
    multiples of 32); 1-D tensors and biases are F32. Weights: projections N(0, 1/sqrt(n_in)),
    embeddings N(0, 1), norms 1 + N(0, 0.1), biases N(0, ``bias_std``). ``extra_kv`` adds or
    overrides keys, ``drop_tensors`` leaves tensors out (bad-file tests).
    """
    import gguf

    if arch not in MOE_ARCHS:
        raise ValueError(f"arch must be one of {MOE_ARCHS}, got {arch!r}")
    expert_dtype = expert_dtype or dtype
    parts.check_dtypes(_DTYPES, dtype, expert_dtype)
    if not 0 < n_expert_used <= n_expert:
        raise ValueError("need 0 < n_expert_used <= n_expert")
    path = pathlib.Path(path)
    draw = parts.Draws(seed, bias_std)
    tensors = parts.embeddings_and_head(draw, n_vocab, n_embd, dtype, dtype)
    for i in range(n_layer):
        tensors += _moe_layer(draw, f"blk.{i}.", arch, dtype, expert_dtype, n_embd=n_embd, n_head=n_head,
                              n_q=head_dim * n_head, n_kv=head_dim * n_head_kv, head_dim=head_dim, n_expert=n_expert,
                              n_ff_exp=n_ff_exp, n_ff_shexp=n_ff_shexp)

    kv = parts.general_kv(gguf, f"tiny-random-{arch}", 0)
    kv.update(parts.hparams_kv(arch, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer,
                               n_ff=n_ff_exp * n_expert_used, n_head=n_head, n_head_kv=n_head_kv, eps=eps,
                               rope_base=rope_base, head_dim=head_dim))
    kv.update(_moe_kv(arch, n_expert=n_expert, n_expert_used=n_expert_used, n_ff_exp=n_ff_exp,
                      n_ff_shexp=n_ff_shexp, sliding_window=sliding_window, yarn_factor=yarn_factor,
                      yarn_orig_ctx=yarn_orig_ctx))
    kv.update(parts.vocab_kv(arch, n_vocab, *models.gpt2_byte_tokens(n_vocab)))
    kv.update(extra_kv or {})
    info = parts.write_file(gguf, path, arch, kv, tensors, drop_tensors=drop_tensors)
    return {"path": path, "arch": arch, "n_vocab": n_vocab, "n_embd": n_embd, "n_layer": n_layer,
            "n_expert": n_expert, "n_expert_used": n_expert_used, "n_ff_exp": n_ff_exp, "dtype": dtype,
            "expert_dtype": expert_dtype, "seed": seed, "tensors": info}


def _moe_layer(draw: parts.Draws, p: str, arch: str, dtype: str, expert_dtype: str, *, n_embd: int, n_head: int,
               n_q: int, n_kv: int, head_dim: int, n_expert: int, n_ff_exp: int, n_ff_shexp: int) -> list:
    """One block: attention as the dense models' (qwen3moe's q/k norms, the others' q/k/v biases),
    the FFN's pre-norm (gpt-oss: ``post_attention_norm``), the router and the stacked experts,
    then qwen2moe's shared expert or gpt-oss's biases and attention sinks."""
    ffn_norm = "post_attention_norm" if arch == "gpt-oss" else "ffn_norm"
    t = parts.norms(draw, p, n_embd, "attn_norm")
    t += parts.attention(draw, p, dtype, n_embd, n_q, n_kv)
    t += parts.norms(draw, p, n_embd, ffn_norm)
    t += [(p + "ffn_gate_inp.weight", draw.lin(n_expert, n_embd), "F32")]
    t += parts.ffn(draw, p, expert_dtype, n_embd, n_ff_exp, kind="_exps", n_expert=n_expert)
    if arch == "qwen3moe":
        t += parts.norms(draw, p, head_dim, "attn_q_norm", "attn_k_norm")
    if arch in ("qwen2moe", "gpt-oss"):
        t += parts.qkv_biases(draw, p, n_q, n_kv)
    if arch == "qwen2moe":
        t += [(p + "ffn_gate_inp_shexp.weight", draw.lin(n_embd), "F32")]
        t += parts.ffn(draw, p, dtype, n_embd, n_ff_shexp, kind="_shexp")
    if arch == "gpt-oss":
        t += [(p + "attn_output.bias", draw.bias(n_embd), "F32"),
              (p + "attn_sinks.weight", draw.normal(n_head), "F32"),
              (p + "ffn_gate_inp.bias", draw.bias(n_expert), "F32"),
              (p + "ffn_gate_exps.bias", draw.bias(n_expert, n_ff_exp), "F32"),
              (p + "ffn_up_exps.bias", draw.bias(n_expert, n_ff_exp), "F32"),
              (p + "ffn_down_exps.bias", draw.bias(n_expert, n_embd), "F32")]
    return t


def _moe_kv(a: str, *, n_expert: int, n_expert_used: int, n_ff_exp: int, n_ff_shexp: int, sliding_window: int,
            yarn_factor: float | None, yarn_orig_ctx: int) -> dict:
    """The experts' keys; qwen2moe's shared expert width; gpt-oss's sliding window and YaRN."""
    kv = {f"{a}.expert_count": n_expert, f"{a}.expert_used_count": n_expert_used,
          f"{a}.expert_feed_forward_length": n_ff_exp}
    if a == "qwen2moe":
        kv[f"{a}.expert_shared_feed_forward_length"] = n_ff_shexp
    if a == "gpt-oss":
        kv[f"{a}.attention.sliding_window"] = int(sliding_window)
        if yarn_factor is not None:
            kv[f"{a}.rope.scaling.type"] = "yarn"
            kv[f"{a}.rope.scaling.factor"] = float(yarn_factor)
            kv[f"{a}.rope.scaling.original_context_length"] = int(yarn_orig_ctx)
    return kv
