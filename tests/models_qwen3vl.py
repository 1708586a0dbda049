"""Tiny random Qwen3-VL text models (``qwen3vl`` dense, ``qwen3vlmoe``), laid out as llama.cpp
b11434's converter writes them and its loader reads them (src/models/qwen3vl.cpp,
qwen3vlmoe.cpp): qwen3's tensors (q/k norms, no biases; the MoE's router and stacked experts),
``rope.dimension_sections`` (IMROPE) and ``n_deepstack_layers``. A file is a pure function of the
arguments (seeded numpy draws): tests/data/reference/qwen3vl_llamacpp.json and
vision_qwen3vl_deepstack.json record the sha256 of files written this way."""
from __future__ import annotations

import pathlib
from typing import Iterable, Mapping

import models
import models_parts as parts

__all__ = ["write_qwen3vl_gguf"]


def _layer(draw: parts.Draws, p: str, hp: dict) -> list:
    """One block: attention (+ q/k norms), the FFN's pre-norm, the FFN (dense SwiGLU, or the router
    and stacked experts)."""
    n_embd, dtype, hd = hp["n_embd"], hp["dtype"], hp["head_dim"]
    t = parts.norms(draw, p, n_embd, "attn_norm")
    t += parts.attention(draw, p, dtype, n_embd, hd * hp["n_head"], hd * hp["n_head_kv"])
    t += parts.norms(draw, p, hd, "attn_q_norm", "attn_k_norm")
    t += parts.norms(draw, p, n_embd, "ffn_norm")
    if hp["moe"]:
        t += [(p + "ffn_gate_inp.weight", draw.lin(hp["n_expert"], n_embd), "F32")]
        t += parts.ffn(draw, p, dtype, n_embd, hp["n_ff_exp"], kind="_exps", n_expert=hp["n_expert"])
    else:
        t += parts.ffn(draw, p, dtype, n_embd, hp["n_ff"])
    return t


def _keys(gguf, hp: dict) -> dict:
    a = hp["arch"]
    kv = parts.general_kv(gguf, hp["name"], parts.FILE_TYPE[hp["dtype"]])
    n_ff = hp["n_ff_exp"] * hp["n_expert_used"] if hp["moe"] else hp["n_ff"]
    kv.update(parts.hparams_kv(a, n_ctx_train=hp["n_ctx_train"], n_embd=hp["n_embd"], n_layer=hp["n_layer"],
                               n_ff=n_ff, n_head=hp["n_head"], n_head_kv=hp["n_head_kv"], eps=hp["eps"],
                               rope_base=hp["rope_base"], head_dim=hp["head_dim"]))
    kv[f"{a}.rope.dimension_count"] = hp["head_dim"]
    kv[f"{a}.rope.dimension_sections"] = list(hp["rope_sections"])
    if hp["n_deepstack"] is not None:
        kv[f"{a}.n_deepstack_layers"] = hp["n_deepstack"]
    if hp["moe"]:
        kv.update({f"{a}.expert_count": hp["n_expert"], f"{a}.expert_used_count": hp["n_expert_used"],
                   f"{a}.expert_feed_forward_length": hp["n_ff_exp"]})
    kv.update(parts.vocab_kv(a, hp["n_vocab"], *models.gpt2_byte_tokens(hp["n_vocab"])))
    return kv


def write_qwen3vl_gguf(path, *, moe: bool = False, n_vocab: int = 272, n_embd: int = 32, n_layer: int = 3,
                       n_head: int = 2, n_head_kv: int = 1, head_dim: int = 16, n_ff: int = 48, n_expert: int = 4,
                       n_expert_used: int = 2, n_ff_exp: int = 16, n_deepstack: int | None = 0,
                       rope_sections: Iterable[int] = (4, 2, 2, 0), rope_base: float = 10000.0, eps: float = 1e-6,
                       n_ctx_train: int = 256, dtype: str = "F32", seed: int = 0, bias_std: float = 0.3,
                       name: str | None = None, extra_kv: Mapping[str, object] | None = None,
                       drop_tensors: Iterable[str] = (), drop_keys: Iterable[str] = ()) -> dict:
    """Write a tiny random ``qwen3vl`` (``moe``: ``qwen3vlmoe``) GGUF and return its description.

    Per layer: RMS pre-norm, q/k/v/output projections with per-head q/k RMS norms (``head_dim``;
    the whole head roped, as llama.cpp asserts), the FFN's RMS pre-norm and a SwiGLU FFN of
    ``n_ff`` or ``n_expert`` stacked experts of ``n_ff_exp`` (``n_expert_used`` a token). Keys:
    ``rope.dimension_sections`` (pairs of the head per M-RoPE section: t, y, x, unused; summing to
    head_dim / 2 as Qwen3-VL's [24, 20, 20, 0] of 128) and ``n_deepstack_layers`` (None: left
    out; an image's rows are then ``n_embd * (1 + n_deepstack)`` wide). The vocabulary is
    ``models.gpt2_byte_tokens``; ``extra_kv`` adds or overrides keys (e.g.
    models_vision_qwen.qwen_image_marker_kv for the image markers). Weights: ``models_parts.Draws``.
    """
    import gguf

    arch = "qwen3vlmoe" if moe else "qwen3vl"
    hp = {"path": pathlib.Path(path), "arch": arch, "name": name or f"tiny-random-{arch}", "moe": moe,
          "n_vocab": n_vocab, "n_embd": n_embd, "n_layer": n_layer, "n_head": n_head, "n_head_kv": n_head_kv,
          "head_dim": head_dim, "n_ff": n_ff, "n_expert": n_expert, "n_expert_used": n_expert_used,
          "n_ff_exp": n_ff_exp, "n_deepstack": n_deepstack, "rope_sections": tuple(int(s) for s in rope_sections),
          "rope_base": float(rope_base), "eps": float(eps), "n_ctx_train": n_ctx_train, "dtype": dtype,
          "seed": seed}
    draw = parts.Draws(seed, bias_std)
    tensors = parts.embeddings_and_head(draw, n_vocab, n_embd, dtype, dtype)
    for i in range(n_layer):
        tensors += _layer(draw, f"blk.{i}.", hp)
    kv = _keys(gguf, hp)
    kv.update(extra_kv or {})
    hp["tensors"] = parts.write_file(gguf, hp["path"], arch, kv, tensors, drop_keys=set(drop_keys),
                                     drop_tensors=set(drop_tensors))
    return hp
