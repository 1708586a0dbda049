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

import numpy as np

import models

__all__ = ["MOE_ARCHS", "sha256", "write_moe_gguf"]

MOE_ARCHS = ("qwen3moe", "qwen2moe", "gpt-oss")
_DTYPES = ("F32", "F16", "Q8_0", "MXFP4")


def sha256(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _encode(gguf, arr: np.ndarray, dtype: str):
    if dtype == "F32":
        return np.ascontiguousarray(arr, dtype=np.float32), None
    if dtype == "F16":
        return np.ascontiguousarray(arr, dtype=np.float16), None
    qt = gguf.GGMLQuantizationType[dtype]
    return gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qt), qt


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
    for d in (dtype, expert_dtype):
        if d not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {d!r}")
    if not 0 < n_expert_used <= n_expert:
        raise ValueError("need 0 < n_expert_used <= n_expert")
    path = pathlib.Path(path)
    rng = np.random.default_rng(seed)
    n_q, n_kv = head_dim * n_head, head_dim * n_head_kv

    def lin(*shape):
        return rng.standard_normal(shape) / np.sqrt(shape[-1])

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    def bias(*shape):
        return bias_std * rng.standard_normal(shape)

    tensors: list[tuple[str, np.ndarray, str]] = [
        ("token_embd.weight", rng.standard_normal((n_vocab, n_embd)), dtype),
        ("output_norm.weight", norm(n_embd), "F32"),
        ("output.weight", lin(n_vocab, n_embd), dtype),
    ]
    for i in range(n_layer):
        p = f"blk.{i}."
        t = [
            (p + "attn_norm.weight", norm(n_embd), "F32"),
            (p + "attn_q.weight", lin(n_q, n_embd), dtype),
            (p + "attn_k.weight", lin(n_kv, n_embd), dtype),
            (p + "attn_v.weight", lin(n_kv, n_embd), dtype),
            (p + "attn_output.weight", lin(n_embd, n_q), dtype),
            (p + ("post_attention_norm.weight" if arch == "gpt-oss" else "ffn_norm.weight"), norm(n_embd), "F32"),
            (p + "ffn_gate_inp.weight", lin(n_expert, n_embd), "F32"),
            (p + "ffn_gate_exps.weight", lin(n_expert, n_ff_exp, n_embd), expert_dtype),
            (p + "ffn_up_exps.weight", lin(n_expert, n_ff_exp, n_embd), expert_dtype),
            (p + "ffn_down_exps.weight", lin(n_expert, n_embd, n_ff_exp), expert_dtype),
        ]
        if arch == "qwen3moe":
            t += [(p + "attn_q_norm.weight", norm(head_dim), "F32"), (p + "attn_k_norm.weight", norm(head_dim), "F32")]
        if arch in ("qwen2moe", "gpt-oss"):
            t += [(p + "attn_q.bias", bias(n_q), "F32"), (p + "attn_k.bias", bias(n_kv), "F32"),
                  (p + "attn_v.bias", bias(n_kv), "F32")]
        if arch == "qwen2moe":
            t += [(p + "ffn_gate_inp_shexp.weight", lin(n_embd), "F32"),
                  (p + "ffn_gate_shexp.weight", lin(n_ff_shexp, n_embd), dtype),
                  (p + "ffn_up_shexp.weight", lin(n_ff_shexp, n_embd), dtype),
                  (p + "ffn_down_shexp.weight", lin(n_embd, n_ff_shexp), dtype)]
        if arch == "gpt-oss":
            t += [(p + "attn_output.bias", bias(n_embd), "F32"),
                  (p + "attn_sinks.weight", rng.standard_normal(n_head), "F32"),
                  (p + "ffn_gate_inp.bias", bias(n_expert), "F32"),
                  (p + "ffn_gate_exps.bias", bias(n_expert, n_ff_exp), "F32"),
                  (p + "ffn_up_exps.bias", bias(n_expert, n_ff_exp), "F32"),
                  (p + "ffn_down_exps.bias", bias(n_expert, n_embd), "F32")]
        tensors += t

    tokens, merges = models.gpt2_byte_tokens(n_vocab)
    a = arch
    kv: dict[str, object] = {
        "general.name": f"tiny-random-{arch}",
        "general.file_type": 0,
        "general.quantization_version": gguf.GGML_QUANT_VERSION,
        f"{a}.context_length": n_ctx_train,
        f"{a}.embedding_length": n_embd,
        f"{a}.block_count": n_layer,
        f"{a}.feed_forward_length": n_ff_exp * n_expert_used,
        f"{a}.attention.head_count": n_head,
        f"{a}.attention.head_count_kv": n_head_kv,
        f"{a}.attention.key_length": head_dim,
        f"{a}.attention.value_length": head_dim,
        f"{a}.attention.layer_norm_rms_epsilon": float(eps),
        f"{a}.rope.freq_base": float(rope_base),
        f"{a}.expert_count": n_expert,
        f"{a}.expert_used_count": n_expert_used,
        f"{a}.expert_feed_forward_length": n_ff_exp,
    }
    if arch == "qwen2moe":
        kv[f"{a}.expert_shared_feed_forward_length"] = n_ff_shexp
    if arch == "gpt-oss":
        kv[f"{a}.attention.sliding_window"] = int(sliding_window)
        if yarn_factor is not None:
            kv[f"{a}.rope.scaling.type"] = "yarn"
            kv[f"{a}.rope.scaling.factor"] = float(yarn_factor)
            kv[f"{a}.rope.scaling.original_context_length"] = int(yarn_orig_ctx)
    kv.update({
        f"{a}.vocab_size": n_vocab,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * n_vocab,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
    })

    kv.update(extra_kv or {})

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    for key, val in kv.items():
        models._add_kv(gguf, w, key, val)
    info = {}
    for name, arr, dt in tensors:
        if name in drop_tensors:
            continue
        data, raw = _encode(gguf, arr, dt)
        if raw is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=raw)
        info[name] = (tuple(arr.shape), dt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"path": path, "arch": arch, "n_vocab": n_vocab, "n_embd": n_embd, "n_layer": n_layer,
            "n_expert": n_expert, "n_expert_used": n_expert_used, "n_ff_exp": n_ff_exp, "dtype": dtype,
            "expert_dtype": expert_dtype, "seed": seed, "tensors": info}
