"""Checks for the numbers the public API takes, where they enter: an integer must be an integer
(no float, bool or string silently cast), and every value lies in a range the core can take,
so a bad argument raises InvalidArgumentError (or TokenOutOfRangeError) before any model is
loaded or buffer allocated, never a cffi OverflowError or a numpy MemoryError later."""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from ..errors import InvalidArgumentError, TokenOutOfRangeError

INT32_MAX = 2**31 - 1
MAX_CTX = 1 << 22          # the core's limit on n_ctx (cells of the KV cache)
MAX_DRAFT = 256            # tokens a round may draft: verification takes n_draft + 1 logit rows


def integer(name: str, value, lo: int = 0, hi: int = INT32_MAX) -> int:
    """value as an int in [lo, hi]: Python and numpy integers only."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
    v = operator.index(value)
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def boolean(name: str, value) -> bool:
    """value, which must be True or False (no truthy stand-ins)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    return value


def real(name: str, value, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> float:
    """value as a finite float in [lo, hi] (ends open as asked): ints and floats, no bools."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}")
    v = float(value)
    ok = math.isfinite(v) and (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi)
    if not ok:
        ends = ("(" if lo_open else "[") + f"{lo}, {hi}" + (")" if hi_open else "]")
        raise InvalidArgumentError(f"{name} must be in {ends}, got {value!r}")
    return v


def token_ids(name: str, ids, n_vocab: int) -> np.ndarray:
    """A 1-D int32 array of ids in [0, n_vocab) from a sequence or array of integers; the range
    is checked before the cast, so 2**32 + 5 is out of range, not token 5."""
    if isinstance(ids, np.ndarray) and ids.dtype == np.int32 and ids.ndim == 1:
        return np.ascontiguousarray(ids)        # the hot path: the core checks the range of int32 ids
    a = ids if isinstance(ids, np.ndarray) else int_sequence(name, ids)
    if a.size == 0:
        return np.zeros(0, np.int32)
    if a.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{name} must be integers, got an array of {a.dtype}")
    if a.ndim != 1:
        raise InvalidArgumentError(f"{name} must be one-dimensional, got shape {a.shape}")
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= n_vocab:
        bad = lo if lo < 0 else hi
        i = int(np.nonzero(a == bad)[0][0])
        raise TokenOutOfRangeError(f"token id {bad} at index {i} is outside the vocabulary [0, {n_vocab})")
    return np.ascontiguousarray(a, dtype=np.int32)


def int_sequence(name: str, ids) -> np.ndarray:
    """A sequence of Python or numpy integers as an int64 array (out of its range: TokenOutOfRangeError)."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise InvalidArgumentError(f"{name} must be a sequence of token ids, got {type(ids).__name__}")
    items = list(ids)
    for i, t in enumerate(items):
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Integral):
            raise InvalidArgumentError(f"{name}[{i}] must be an integer token id, got {t!r}")
    try:
        return np.array(items, dtype=np.int64) if items else np.zeros(0, np.int64)
    except OverflowError:
        big = next(t for t in items if not -2**63 <= t < 2**63)
        raise TokenOutOfRangeError(f"token id {big} is outside the vocabulary") from None
