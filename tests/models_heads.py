"""Tiny random draft heads for a tiny target (models.write_gguf): EAGLE-3 (``write_eagle3_gguf``)
and DFlash (``write_dflash_gguf``) files as llama.cpp's converter lays them out (its tensor and
key names, d2t as an I64 table of absolute target ids, the target's tokenizer), built from
``models_parts``. A file is a pure function of the writer's arguments: the llama.cpp fixtures of
tests/data/reference/heads_llamacpp.json record the sha256 of files written this way.
"""
from __future__ import annotations

import pathlib

import numpy as np

import models_parts as parts
from models import gpt2_byte_tokens


def _keys(gguf, a: str, *, name: str, n_vocab: int, n_embd: int, n_layer: int, n_ff: int, n_head: int,
          n_head_kv: int, head_dim: int, target_layers, eps: float, rope_base: float, bos_id: int, eos_id: int) -> dict:
    kv = parts.general_kv(gguf, name, parts.FILE_TYPE["F32"])
    kv.update(parts.hparams_kv(a, n_ctx_train=256, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head,
                               n_head_kv=n_head_kv, eps=eps, rope_base=rope_base, head_dim=head_dim))
    kv[f"{a}.rope.dimension_count"] = head_dim
    kv[f"{a}.target_layers"] = [int(i) for i in target_layers]
    tokens, merges = gpt2_byte_tokens(n_vocab)
    kv.update(parts.vocab_kv(a, n_vocab, tokens, merges, bos_id, eos_id))
    return kv


def _d2t(draw: parts.Draws, n_vocab: int, n_draft_vocab: int | None) -> list:
    """A reduced draft vocabulary: n_draft_vocab distinct target ids, ascending (as converted)."""
    if n_draft_vocab is None:
        return []
    ids = np.sort(draw.rng.choice(n_vocab, n_draft_vocab, replace=False)).astype(np.int64)
    return [("d2t", ids, "I64")]


def write_eagle3_gguf(path, *, n_vocab: int = 64, n_embd: int = 32, n_embd_target: int = 32,
                      target_layers=(0, 2, 3), n_head: int = 4, n_head_kv: int = 2, head_dim: int | None = None,
                      n_ff: int = 48, eps: float = 1e-5, rope_base: float = 10000.0, seed: int = 0,
                      own_embd: bool = False, own_output: bool = True, n_draft_vocab: int | None = None,
                      norm_before_residual: bool = False, norm_before_fc: bool = False, dtype: str = "F32",
                      bos_id: int = 0, eos_id: int = 1, name: str = "tiny-random-eagle3") -> dict:
    """An EAGLE-3 head of one decoder layer reading the inputs of ``target_layers`` of a target
    ``n_embd_target`` wide. ``own_embd`` / ``own_output``: its own token_embd / output (else the
    target's serve); ``n_draft_vocab``: a reduced output with its d2t table."""
    import gguf

    path = pathlib.Path(path)
    head_dim = head_dim or n_embd // n_head
    a = "eagle3"
    draw = parts.Draws(seed)
    n_in = 3 * n_embd_target
    t = _d2t(draw, n_vocab, n_draft_vocab)
    t.append(("fc.weight", draw.lin(n_embd, n_in), dtype))
    if norm_before_fc:
        t.append(("enc.output_norm.weight", draw.norm(n_in), "F32"))
    if own_embd:
        t.append(("token_embd.weight", draw.normal(n_vocab, n_embd), dtype))
    t.append(("output_norm.weight", draw.norm(n_embd), "F32"))
    if own_output:
        t.append(("output.weight", draw.lin(n_draft_vocab or n_vocab, n_embd), dtype))
    p = "blk.0."
    t += parts.norms(draw, p, n_embd, "attn_norm", "attn_norm_2")
    t += [(p + "attn_q.weight", draw.lin(n_head * head_dim, 2 * n_embd), dtype),
          (p + "attn_k.weight", draw.lin(n_head_kv * head_dim, 2 * n_embd), dtype),
          (p + "attn_v.weight", draw.lin(n_head_kv * head_dim, 2 * n_embd), dtype),
          (p + "attn_output.weight", draw.lin(n_embd, n_head * head_dim), dtype)]
    t += parts.norms(draw, p, n_embd, "ffn_norm")
    t += parts.ffn(draw, p, dtype, n_embd, n_ff)
    kv = _keys(gguf, a, name=name, n_vocab=n_vocab, n_embd=n_embd, n_layer=1, n_ff=n_ff, n_head=n_head,
               n_head_kv=n_head_kv, head_dim=head_dim, target_layers=target_layers, eps=eps, rope_base=rope_base,
               bos_id=bos_id, eos_id=eos_id)
    kv[f"{a}.target_hidden_size"] = n_embd_target
    kv[f"{a}.norm_before_residual"] = bool(norm_before_residual)
    kv[f"{a}.norm_before_fc"] = bool(norm_before_fc)
    info = parts.write_file(gguf, path, a, kv, t)
    return {"path": path, "tensors": info, "n_vocab": n_vocab, "n_embd": n_embd, "target_layers": tuple(target_layers)}


def write_dflash_gguf(path, *, n_vocab: int = 64, n_embd: int = 32, target_layers=(1, 3), n_layer: int = 2,
                      n_head: int = 4, n_head_kv: int = 2, head_dim: int | None = None, n_ff: int = 48,
                      eps: float = 1e-5, rope_base: float = 10000.0, seed: int = 0, block_size: int = 8,
                      mask_token: int | None = None, own_embd: bool = False, own_output: bool = True,
                      n_draft_vocab: int | None = None, shared_kv: bool = False, post_norms: bool = False,
                      causal: bool | None = None, gelu: bool = False, dtype: str = "F32", bos_id: int = 0,
                      eos_id: int = 1, name: str = "tiny-random-dflash") -> dict:
    """A DFlash head of ``n_layer`` layers over the inputs of ``target_layers`` of a target as wide
    as itself. ``shared_kv``: no attn_v (V from K); ``post_norms``: post-attention and post-FFN
    norms; ``causal``: writes dflash.attention.causal; ``mask_token`` defaults to the last id."""
    import gguf

    path = pathlib.Path(path)
    head_dim = head_dim or n_embd // n_head
    a = "dflash"
    draw = parts.Draws(seed)
    t = _d2t(draw, n_vocab, n_draft_vocab)
    if own_embd:
        t.append(("token_embd.weight", draw.normal(n_vocab, n_embd), dtype))
    t.append(("fc.weight", draw.lin(n_embd, len(target_layers) * n_embd), dtype))
    t.append(("enc.output_norm.weight", draw.norm(n_embd), "F32"))
    t.append(("output_norm.weight", draw.norm(n_embd), "F32"))
    if own_output:
        t.append(("output.weight", draw.lin(n_draft_vocab or n_vocab, n_embd), dtype))
    for i in range(n_layer):
        p = f"blk.{i}."
        t += parts.norms(draw, p, n_embd, "attn_norm")
        t += [(p + "attn_q.weight", draw.lin(n_head * head_dim, n_embd), dtype),
              (p + "attn_k.weight", draw.lin(n_head_kv * head_dim, n_embd), dtype)]
        if not shared_kv:
            t.append((p + "attn_v.weight", draw.lin(n_head_kv * head_dim, n_embd), dtype))
        t.append((p + "attn_output.weight", draw.lin(n_embd, n_head * head_dim), dtype))
        t += parts.norms(draw, p, head_dim, "attn_q_norm", "attn_k_norm")
        if post_norms:
            t += parts.norms(draw, p, n_embd, "post_attention_norm", "post_ffw_norm")
        t += parts.norms(draw, p, n_embd, "ffn_norm")
        t += parts.ffn(draw, p, dtype, n_embd, n_ff)
    kv = _keys(gguf, a, name=name, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head,
               n_head_kv=n_head_kv, head_dim=head_dim, target_layers=target_layers, eps=eps, rope_base=rope_base,
               bos_id=bos_id, eos_id=eos_id)
    kv["dflash.block_size"] = block_size
    if causal is not None:
        kv["dflash.attention.causal"] = bool(causal)
    if gelu:
        kv[f"{a}.hidden_activation"] = "gelu"
    kv["tokenizer.ggml.mask_token_id"] = n_vocab - 1 if mask_token is None else mask_token
    info = parts.write_file(gguf, path, a, kv, t)
    return {"path": path, "tensors": info, "n_vocab": n_vocab, "n_embd": n_embd, "target_layers": tuple(target_layers),
            "block_size": block_size}


def overwrite_tensor(path, name: str, values) -> None:
    """Writes values into a tensor of an existing file, in place (its type and shape kept)."""
    import gguf

    r = gguf.GGUFReader(str(path), "r+")
    t = next(t for t in r.tensors if t.name == name)
    t.data[...] = np.asarray(values, t.data.dtype).reshape(t.data.shape)
    del r, t                              # the memory map writes back when released


def two_token_output(path, n_embd: int) -> None:
    """Only the first hidden dimension reaches the logits (output_norm = e0): the model picks the
    token with the largest or the smallest first column of its output head, by that dimension's
    sign. A target and a head that share the output head then agree about half the time."""
    e0 = np.zeros(n_embd, np.float32)
    e0[0] = 1.0
    overwrite_tensor(path, "output_norm.weight", e0)


def write_gemma4_assistant_gguf(path, *, n_vocab: int = 64, n_embd: int = 32, n_embd_target: int = 64,
                                swa_pattern=(True, False), n_head: int = 4, n_head_kv_swa: int = 2,
                                n_head_kv_full: int = 1, head_dim_swa: int = 16, head_dim_full: int = 32,
                                n_rot_swa: int = 16, n_rot_pairs_full: int = 4, n_ff: int = 48,
                                sliding_window: int = 4, rope_base: float = 1_000_000.0,
                                rope_base_swa: float = 10_000.0, eps: float = 1e-6, seed: int = 0,
                                name: str = "tiny-random-gemma4-assistant") -> dict:
    """A Gemma 4 assistant (llama.cpp's gemma4-assistant layout: Gemma4Model's keys plus
    embedding_length_out, the target's width, and nextn_predict_layers = its layer count) for a
    models_gemma4 target of n_embd_target with the same window/full head sizes and kv heads
    (its window layers read the target's last window layer's cache, its full ones the last full
    layer's). Its own token table serves as its tied output head."""
    import gguf

    path = pathlib.Path(path)
    a = "gemma4-assistant"
    draw = parts.Draws(seed)
    n_layer = len(swa_pattern)
    pairs = head_dim_full // 2
    t = [("token_embd.weight", draw.normal(n_vocab, n_embd), "F32"),
         ("output_norm.weight", draw.norm(n_embd), "F32"),
         ("nextn.pre_projection.weight", draw.lin(n_embd, 2 * n_embd_target), "F32"),
         ("nextn.post_projection.weight", draw.lin(n_embd_target, n_embd), "F32"),
         ("rope_freqs.weight", np.array([1.0] * n_rot_pairs_full + [1e30] * (pairs - n_rot_pairs_full)), "F32")]
    for il, swa in enumerate(swa_pattern):
        p, hd = f"blk.{il}.", head_dim_swa if swa else head_dim_full
        t += parts.norms(draw, p, n_embd, "attn_norm")
        t += [(p + "attn_q.weight", draw.lin(n_head * hd, n_embd), "F32"),
              (p + "attn_output.weight", draw.lin(n_embd, n_head * hd), "F32")]
        t += parts.norms(draw, p, hd, "attn_q_norm")
        t += parts.norms(draw, p, n_embd, "post_attention_norm", "ffn_norm")
        t += parts.ffn(draw, p, "F32", n_embd, n_ff)
        t += parts.norms(draw, p, n_embd, "post_ffw_norm")
        t.append((p + "layer_output_scale.weight", 0.5 + 0.5 * draw.rng.random(1), "F32"))
    kv = parts.general_kv(gguf, name, parts.FILE_TYPE["F32"])
    kv.update(parts.hparams_kv(a, n_ctx_train=256, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff, n_head=n_head,
                               n_head_kv=[n_head_kv_swa if s else n_head_kv_full for s in swa_pattern], eps=eps,
                               rope_base=rope_base, head_dim=head_dim_full))
    kv.update({f"{a}.attention.key_length_swa": head_dim_swa, f"{a}.attention.value_length_swa": head_dim_swa,
               f"{a}.rope.dimension_count": head_dim_full, f"{a}.rope.dimension_count_swa": n_rot_swa,
               f"{a}.rope.freq_base_swa": float(rope_base_swa), f"{a}.attention.sliding_window": sliding_window,
               f"{a}.attention.sliding_window_pattern": [bool(s) for s in swa_pattern],
               f"{a}.embedding_length_out": n_embd_target, f"{a}.nextn_predict_layers": n_layer})
    tokens, merges = gpt2_byte_tokens(n_vocab)
    kv.update(parts.vocab_kv(a, n_vocab, tokens, merges))
    info = parts.write_file(gguf, path, a, kv, t)
    return {"path": path, "tensors": info, "n_vocab": n_vocab, "n_embd": n_embd}
