"""The core's own pass over a GGUF header (csrc/gguf/gguf_check.cpp): every field ggml's parser would
cast to an enum or multiply is checked first, and a bad one is a ModelFormatError that names it
(issue 11: nothing reachable from Python may reach undefined behaviour in ggml)."""
from __future__ import annotations

import struct
import subprocess
import sys

import pytest

import models
import pyllamaspec
from models import raw_gguf, raw_kv, raw_string, raw_tensor_info

U32, U64, STR, ARR, F32, Q4_0 = 4, 10, 8, 9, 0, 2
ARCH = raw_kv("general.architecture", STR, raw_string("llama"))
W = raw_tensor_info("w", [32], F32, 0)        # 128 bytes of F32


def u32(v: int) -> bytes:
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def _array(elem_type: int, n: int, body: bytes = b"") -> bytes:
    return u32(elem_type) + u64(n) + body


# (id, raw_gguf arguments, the message it must give)
BAD = [
    ("version-0", dict(version=0), r"unsupported GGUF version 0 "),
    ("version-1", dict(version=1), r"unsupported GGUF version 1 "),
    ("version-4", dict(version=4), r"unsupported GGUF version 4 "),
    ("version-byte-order", dict(version=0x03000000), r"unsupported GGUF version 50331648 .*other byte order"),
    ("n-tensors", dict(n_tensors=1 << 40), r"tensor count 1099511627776 cannot fit in the file"),
    ("n-kv", dict(n_kv=1 << 40), r"key/value count 1099511627776 cannot fit in the file"),
    ("key-length", dict(kvs=[raw_string("a.b", length=10**6) + u32(U32) + u32(1)]),
     r"key 0: length 1000000 at byte 24 passes the end of the file"),
    ("key-empty", dict(kvs=[raw_kv("", U32, u32(1))]), r"key 0 is empty"),
    ("key-duplicate", dict(kvs=[raw_kv("a.b", U32, u32(1)), raw_kv("a.b", U32, u32(2))]),
     r"duplicate key 'a\.b'"),
    ("value-type-13", dict(kvs=[raw_kv("a.b", 13, u32(1))]), r"key 'a\.b': value type 13 is not a GGUF type"),
    ("value-type-negative", dict(kvs=[raw_kv("a.b", -1, u32(1))]), r"key 'a\.b': value type -1 is not a GGUF type"),
    ("array-element-type", dict(kvs=[raw_kv("a.b", ARR, _array(99, 1, u32(0)))]),
     r"key 'a\.b': array element type 99 is not a GGUF type"),
    ("array-nested", dict(kvs=[raw_kv("a.b", ARR, _array(ARR, 1, _array(U32, 1, u32(0))))]),
     r"key 'a\.b': array of arrays \(nested arrays are not supported\)"),
    ("array-length-huge", dict(kvs=[raw_kv("a.b", ARR, _array(U64, 1 << 62))]),
     r"key 'a\.b': array of 4611686018427387904 elements \(at most"),
    ("array-past-end", dict(kvs=[raw_kv("a.b", ARR, _array(U64, 10**6, u64(1)))]),
     r"key 'a\.b': array of 1000000 u64 elements passes the end of the file"),
    ("string-past-end", dict(kvs=[raw_kv("a.b", STR, u64(10**6) + b"x")]),
     r"key 'a\.b': string length 1000000 passes the end of the file"),
    ("string-array-count", dict(kvs=[raw_kv("a.b", ARR, _array(STR, 10**9))]),
     r"key 'a\.b': array of 1000000000 strings passes the end of the file"),
    ("string-array-element", dict(kvs=[raw_kv("a.b", ARR, _array(STR, 2, raw_string("x") + raw_string("y", 10**6)))]),
     r"key 'a\.b': string 1 of the array has length 1000000, past the end of the file"),
    ("alignment-type", dict(kvs=[raw_kv("general.alignment", U64, u64(32))]),
     r"key 'general\.alignment' has type u64, not u32"),
    ("alignment-value", dict(kvs=[raw_kv("general.alignment", U32, u32(48))]),
     r"key 'general\.alignment': 48 is not a power of 2"),
    ("tensor-name-long", dict(tensors=[raw_tensor_info("x" * 64, [32], F32)]),
     r"tensor 0: name of 64 bytes is too long"),
    ("tensor-name-past-end", dict(tensors=[raw_string("w", length=10**6) + bytes(40)]),
     r"tensor 0 name: length 1000000 at byte \d+ passes the end of the file"),
    ("tensor-duplicate", dict(tensors=[W, raw_tensor_info("w", [32], F32, 128)], data=bytes(256)),
     r"duplicate tensor name 'w'"),
    ("n-dims-0", dict(tensors=[raw_tensor_info("w", [], F32)]), r"tensor 'w': n_dims 0 outside \[1, 4\]"),
    ("n-dims-5", dict(tensors=[raw_tensor_info("w", [1] * 5, F32)]), r"tensor 'w': n_dims 5 outside \[1, 4\]"),
    ("dim-zero", dict(tensors=[raw_tensor_info("w", [32, 0], F32)]), r"tensor 'w': dimension 1 is 0 \(must be > 0\)"),
    ("dim-negative", dict(tensors=[raw_tensor_info("w", [-5], F32)]), r"tensor 'w': dimension 0 is -5"),
    ("elements-overflow", dict(tensors=[raw_tensor_info("w", [1 << 32, 1 << 32], F32)]),
     r"tensor 'w': element count overflows int64"),
    ("ggml-type-count", dict(tensors=[raw_tensor_info("w", [32], 43)]), r"tensor 'w': ggml type 43 is not a ggml type"),
    ("ggml-type-negative", dict(tensors=[raw_tensor_info("w", [32], -1)]), r"tensor 'w': ggml type -1 is not a ggml type"),
    ("ggml-type-removed", dict(tensors=[raw_tensor_info("w", [32], 4)]), r"tensor 'w': ggml type 4 is no longer supported"),
    ("ggml-type-removed-repack", dict(tensors=[raw_tensor_info("w", [32], 31)]),
     r"tensor 'w': ggml type 31 is no longer supported"),
    ("block-size", dict(tensors=[raw_tensor_info("w", [33], Q4_0)]),
     r"tensor 'w': rows of 33 elements are not a multiple of the q4_0 block size 32"),
    ("bytes-overflow", dict(tensors=[raw_tensor_info("w", [1 << 31, 1 << 31], F32)]),
     r"tensor 'w': byte size overflows int64"),
    ("offset", dict(tensors=[raw_tensor_info("w", [32], F32, 64)], data=bytes(256)),
     r"tensor 'w': data offset 64, expected 0"),
    ("offset-unpadded", dict(tensors=[raw_tensor_info("a", [4], F32, 0), raw_tensor_info("b", [4], F32, 16)],
                             data=bytes(64)),
     r"tensor 'b': data offset 16, expected 32 \(.*padded to 32 bytes\)"),
    ("cut-in-tensor-info", dict(tensors=[W[:-4]], pad=False), r"tensor data offset .* passes the end of the file"),
]


@pytest.fixture(params=["Tokenizer", "Model"])
def load(request):
    return getattr(pyllamaspec, request.param)


@pytest.mark.parametrize("args, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_header_field_is_named(tmp_path, load, args, message):
    path = raw_gguf(tmp_path / "bad.gguf", **{"kvs": [ARCH], **args})
    with pytest.raises(pyllamaspec.ModelFormatError, match="invalid GGUF header: " + message):
        load(path)


@pytest.mark.parametrize("args", [
    dict(tensors=[W], data=bytes(128)),
    # a larger alignment moves the second tensor's data to 64
    dict(kvs=[ARCH, raw_kv("general.alignment", U32, u32(64))],
         tensors=[raw_tensor_info("a", [4], F32, 0), raw_tensor_info("b", [4], F32, 64)], data=bytes(128)),
    dict(kvs=[ARCH, raw_kv("a.b", ARR, _array(STR, 2, raw_string("x") + raw_string("")))], tensors=[W],
         data=bytes(128)),
    dict(tensors=[raw_tensor_info("w", [64, 2], Q4_0, 0)], data=bytes(72)),
], ids=["plain", "alignment", "string-array", "quantized"])
def test_good_headers_pass(tmp_path, args):
    """The same kind of files, well formed, get past the check (to the missing vocabulary)."""
    path = raw_gguf(tmp_path / "good.gguf", **{"kvs": [ARCH], **args})
    with pytest.raises(pyllamaspec.NoVocabularyError):
        pyllamaspec.Tokenizer(path)


def test_real_and_synthetic_models_pass(synth_model, smollm2_path, gemma3_path):
    for path in (synth_model(dtype="Q4_0", n_embd=64, n_ff=96), smollm2_path, gemma3_path):
        with pyllamaspec.Tokenizer(path) as t:
            assert t.tokenize("Hello", add_special=False)


def test_tokenizer_first_gets_ggmls_reason(tmp_path):
    """A Tokenizer loaded before any Model used to leave ggml's logger unset: ggml printed its
    reason to stderr and the error had none. (A fresh process: the logger is process-wide.)
    The file ends before the padding that starts its data section, which ggml itself refuses."""
    path = raw_gguf(tmp_path / "nopad.gguf", kvs=[ARCH], tensors=[W], pad=False)
    assert path.stat().st_size % 32
    script = ("import sys, pyllamaspec\n"
              "try:\n    pyllamaspec.Tokenizer(sys.argv[1])\n"
              "except pyllamaspec.ModelFormatError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "failed to seek to beginning of data section" in proc.stdout
    assert "gguf_init" not in proc.stderr


def test_corruptions_never_reach_ggml(synth_model, tmp_path):
    """The header corruptions of tests/models.py are refused by our pass, not by ggml's parser."""
    src = synth_model(dtype="F32")
    ours = {"version", "version_1", "truncated_header", "truncated_kv", "n_tensors_huge", "n_kv_huge",
            "key_len_huge", "random_header", "tensor_offset", "tensor_type", "tensor_ndims"}
    for kind in ours:
        bad = models.corrupt_copy(src, tmp_path / f"{kind}.gguf", kind)
        with pytest.raises(pyllamaspec.ModelFormatError, match="invalid GGUF header"):
            pyllamaspec.Tokenizer(bad)
