"""The parts the tiny-model writers build their files from: ``models.write_gguf`` (dense),
``models_moe.write_moe_gguf`` and ``models_qwen35.write_qwen35_gguf``.

Tensor parts return ``[(name, numpy array, dtype name)]`` (numpy shapes (n_out, n_in) or (n,),
stacked experts (n_expert, n_out, n_in)) and draw their weights from ``Draws`` in the order of
that list: a file is a pure function of its writer's arguments, and the llama.cpp fixtures of
tests/data/reference record the sha256 of files written this way. Metadata parts return
``{key: value}`` in the order the keys are written; ``write_file`` writes both.
"""
from __future__ import annotations

import pathlib
from typing import Mapping

import numpy as np

FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_K": 17}  # llama_ftype values (Q5_K_M)


def check_dtypes(allowed: tuple[str, ...], *dtypes: str) -> None:
    for d in dtypes:
        if d not in allowed:
            raise ValueError(f"dtype must be one of {allowed}, got {d!r}")


# ---- tensors ----------------------------------------------------------------------------------------


class Draws:
    """Seeded Gaussian weights: projections N(0, 1/sqrt(n_in)), embeddings N(0, 1), norm weights
    1 + N(0, 0.1) so activations stay O(1) (Gemma's GGUF norm weights hold the ``1 +`` too, so
    every architecture computes ``x_normed * w``), biases N(0, ``bias_std``)."""

    def __init__(self, seed: int, bias_std: float = 0.0):
        self.rng = np.random.default_rng(seed)
        self.bias_std = bias_std

    def normal(self, *shape: int) -> np.ndarray:
        return self.rng.standard_normal(shape)

    def lin(self, *shape: int) -> np.ndarray:
        """A projection of ``shape`` (..., n_out, n_in)."""
        return self.rng.standard_normal(shape) / np.sqrt(shape[-1])

    def norm(self, n: int) -> np.ndarray:
        return 1.0 + 0.1 * self.rng.standard_normal(n)

    def bias(self, *shape: int) -> np.ndarray:
        return self.bias_std * self.rng.standard_normal(shape)


def embeddings_and_head(draw: Draws, n_vocab: int, n_embd: int, embd_dtype: str, output_dtype: str,
                        tied: bool = False) -> list:
    """``token_embd``, ``output_norm`` and, unless ``tied``, ``output``."""
    out = [("token_embd.weight", draw.normal(n_vocab, n_embd), embd_dtype),
           ("output_norm.weight", draw.norm(n_embd), "F32")]
    if not tied:
        out.append(("output.weight", draw.lin(n_vocab, n_embd), output_dtype))
    return out


def norms(draw: Draws, p: str, n: int, *names: str) -> list:
    """``{p}{name}.weight`` for each name: F32 norm weights of length ``n``."""
    return [(f"{p}{name}.weight", draw.norm(n), "F32") for name in names]


def attention(draw: Draws, p: str, dtype: str, n_embd: int, n_q: int, n_kv: int, gated_q: bool = False) -> list:
    """``attn_{q,k,v,output}.weight``; with ``gated_q``, q has twice the rows (each head's query
    and its output gate, interleaved per head: qwen35)."""
    return [(p + "attn_q.weight", draw.lin(2 * n_q if gated_q else n_q, n_embd), dtype),
            (p + "attn_k.weight", draw.lin(n_kv, n_embd), dtype),
            (p + "attn_v.weight", draw.lin(n_kv, n_embd), dtype),
            (p + "attn_output.weight", draw.lin(n_embd, n_q), dtype)]


def qkv_biases(draw: Draws, p: str, n_q: int, n_kv: int) -> list:
    return [(p + "attn_q.bias", draw.bias(n_q), "F32"), (p + "attn_k.bias", draw.bias(n_kv), "F32"),
            (p + "attn_v.bias", draw.bias(n_kv), "F32")]


def ffn(draw: Draws, p: str, dtype: str, n_embd: int, n_ff: int, kind: str = "", n_expert: int | None = None) -> list:
    """The SwiGLU FFN ``ffn_{gate,up,down}{kind}.weight``; with ``n_expert``, that many stacked
    (numpy (n_expert, n_ff, n_embd) for gate and up, (n_expert, n_embd, n_ff) for down)."""
    lead = () if n_expert is None else (n_expert,)
    return [(p + f"ffn_gate{kind}.weight", draw.lin(*lead, n_ff, n_embd), dtype),
            (p + f"ffn_up{kind}.weight", draw.lin(*lead, n_ff, n_embd), dtype),
            (p + f"ffn_down{kind}.weight", draw.lin(*lead, n_embd, n_ff), dtype)]


# ---- metadata ---------------------------------------------------------------------------------------


def general_kv(gguf, name: str, file_type: int) -> dict:
    return {"general.name": name, "general.file_type": file_type,
            "general.quantization_version": gguf.GGML_QUANT_VERSION}


def clip_vision_kv(gguf, hp: dict, file_type: int) -> dict:
    """The keys llama.cpp's converter writes first for every vision projector (MmprojModel's), in
    its order: a projector writer adds its type's keys after them."""
    kv = {"general.type": "mmproj"}
    kv.update(general_kv(gguf, hp["name"], file_type))
    kv.update({"clip.has_vision_encoder": True, "clip.vision.projection_dim": hp["n_embd_text"],
               "clip.vision.image_size": hp["image_size"], "clip.vision.patch_size": hp["patch_size"],
               "clip.vision.embedding_length": hp["n_embd"], "clip.vision.feed_forward_length": hp["n_ff"],
               "clip.vision.block_count": hp["n_layer"], "clip.vision.attention.head_count": hp["n_head"],
               "clip.vision.image_mean": [float(v) for v in hp["mean"]],
               "clip.vision.image_std": [float(v) for v in hp["std"]]})
    return kv


def hparams_kv(a: str, *, n_ctx_train: int, n_embd: int, n_layer: int, n_ff: int, n_head: int, n_head_kv: int,
               eps: float, rope_base: float, head_dim: int | None = None) -> dict:
    """The transformer's ``{a}.*`` keys, with ``attention.key_length`` / ``value_length`` when
    ``head_dim`` is given."""
    kv = {f"{a}.context_length": n_ctx_train, f"{a}.embedding_length": n_embd, f"{a}.block_count": n_layer,
          f"{a}.feed_forward_length": n_ff, f"{a}.attention.head_count": n_head,
          f"{a}.attention.head_count_kv": n_head_kv}
    if head_dim is not None:
        kv[f"{a}.attention.key_length"] = head_dim
        kv[f"{a}.attention.value_length"] = head_dim
    kv[f"{a}.attention.layer_norm_rms_epsilon"] = float(eps)
    kv[f"{a}.rope.freq_base"] = float(rope_base)
    return kv


def vocab_kv(a: str, n_vocab: int, tokens: list[str], merges: list[str], bos_id: int = 0, eos_id: int = 1) -> dict:
    """``{a}.vocab_size`` and a byte-level BPE tokenizer (``models.gpt2_byte_tokens``)."""
    return {f"{a}.vocab_size": n_vocab, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default",
            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": [1] * n_vocab,
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": bos_id,
            "tokenizer.ggml.eos_token_id": eos_id}


# ---- the file -----------------------------------------------------------------------------------------


def encode_tensor(gguf, arr: np.ndarray, dtype: str):
    """Return (array, raw_dtype) for GGUFWriter.add_tensor."""
    if dtype == "I64":        # an index table (a draft head's d2t)
        return np.ascontiguousarray(arr, dtype=np.int64), None
    qt = gguf.GGMLQuantizationType[dtype]
    if dtype == "F32":
        return np.ascontiguousarray(arr, dtype=np.float32), None
    if dtype == "F16":
        return np.ascontiguousarray(arr, dtype=np.float16), None
    if dtype == "Q5_K":       # gguf-py quantizes no K type
        from kquants import quantize_q5_k
        return quantize_q5_k(arr), qt
    q = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qt)
    return q, qt


def write_file(gguf, path: pathlib.Path, arch: str, kv: Mapping[str, object], tensors: list, *,
               drop_keys=frozenset(), drop_tensors=frozenset()) -> dict:
    """Write ``kv`` and ``tensors`` (each encoded to its dtype) less the dropped ones; returns
    name -> (numpy shape, dtype name) of the tensors written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    if "general.architecture" in drop_keys:
        w.kv_data[0].pop("general.architecture", None)
    for key, val in kv.items():
        if key in drop_keys:
            continue
        add_kv(gguf, w, key, val)
    info = {}
    for tname, arr, tdt in tensors:
        if tname in drop_tensors:
            continue
        data, raw = encode_tensor(gguf, arr, tdt)
        if raw is None:
            w.add_tensor(tname, data)
        else:
            w.add_tensor(tname, data, raw_dtype=raw)
        info[tname] = (tuple(arr.shape), tdt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return info


def add_kv(gguf, w, key: str, val) -> None:
    """One key, its GGUF type picked by the python type: bool, int -> uint32 (int32 if negative),
    float -> float32, str, list (of str, of int -> int32, else GGUFWriter's pick)."""
    T = gguf.GGUFValueType
    if isinstance(val, bool):
        w.add_bool(key, val)
    elif isinstance(val, (int, np.integer)):
        if val < 0:
            w.add_int32(key, int(val))
        else:
            w.add_uint32(key, int(val))
    elif isinstance(val, (float, np.floating)):
        w.add_float32(key, float(val))
    elif isinstance(val, str):
        w.add_string(key, val)
    elif isinstance(val, (list, tuple)):
        if len(val) == 0:
            # GGUFWriter.add_array silently drops empty arrays; write it explicitly
            w.add_key_value(key, [], T.ARRAY, sub_type=T.STRING)
        elif all(isinstance(v, str) for v in val):
            w.add_array(key, list(val))
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in val):
            w.add_key_value(key, [int(v) for v in val], T.ARRAY, sub_type=T.INT32)
        else:
            w.add_array(key, list(val))
    else:
        raise TypeError(f"unsupported metadata value for {key}: {type(val)}")
