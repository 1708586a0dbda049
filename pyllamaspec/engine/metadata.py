"""GGUF metadata values read through the C API (Model.metadata, Model.meta)."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _native
from ._native import ffi, lib

_GGUF_INT = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
             10: np.uint64, 11: np.int64, 7: np.bool_}
_GGUF_FLOAT = {6: np.float32, 12: np.float64}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def meta_value(model, i: int) -> Any:
    """Metadata entry i of a psl_model as Python: int, bool, float, str, a list of str, a numpy array."""
    t, at, n = ffi.new("int32_t *"), ffi.new("int32_t *"), ffi.new("uint64_t *")
    _native.check(lib.psl_model_meta_type(model, i, t, at, n))
    t, at, n = t[0], at[0], n[0]
    if t in _GGUF_INT:
        v = ffi.new("int64_t *")
        _native.check(lib.psl_model_meta_get_int(model, i, v))
        return bool(v[0]) if t == 7 else int(v[0])
    if t in _GGUF_FLOAT:
        v = ffi.new("double *")
        _native.check(lib.psl_model_meta_get_float(model, i, v))
        return float(v[0])
    if t == _GGUF_STRING:
        s, ln = ffi.new("char **"), ffi.new("size_t *")
        _native.check(lib.psl_model_meta_get_str(model, i, s, ln))
        return ffi.unpack(s[0], ln[0]).decode("utf-8", "replace")
    if t == _GGUF_ARRAY and at == _GGUF_STRING:
        s, ln = ffi.new("char **"), ffi.new("size_t *")
        out = []
        for j in range(n):
            _native.check(lib.psl_model_meta_get_array_str(model, i, j, s, ln))
            out.append(ffi.unpack(s[0], ln[0]).decode("utf-8", "replace"))
        return out
    if t == _GGUF_ARRAY and (at in _GGUF_INT or at in _GGUF_FLOAT):
        dtype = _GGUF_INT.get(at) or _GGUF_FLOAT[at]
        p = ffi.new("void **")
        _native.check(lib.psl_model_meta_get_array(model, i, p))
        nbytes = n * np.dtype(dtype).itemsize
        return np.frombuffer(ffi.buffer(p[0], nbytes), dtype=dtype).copy() if n else np.zeros(0, dtype)
    return None   # nested arrays: not used by any model key we know



__all__ = ["meta_value"]
