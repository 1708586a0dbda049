"""Pooling and normalization of a sequence's final hidden states into one embedding, as
llama.cpp does them (llama-server --embeddings --pooling mean|last; common_embd_normalize)."""
from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError

POOLINGS = ("mean", "last", "none")


def check_pooling(pooling: str) -> None:
    if pooling not in POOLINGS:
        raise InvalidArgumentError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")


def pool(rows: np.ndarray, pooling: str) -> np.ndarray:
    """rows [n, n_embd] -> [n_embd] (mean: over all n, last: the last row), or rows as they are."""
    check_pooling(pooling)
    if pooling == "none":
        return rows
    if pooling == "last":
        return rows[-1].copy()
    return rows.mean(axis=0, dtype=np.float64).astype(np.float32)


def normalize(v: np.ndarray, norm: int = 2) -> np.ndarray:
    """llama.cpp's embd_normalize: -1 none, 0 max absolute scaled to int16's range, 1 taxicab,
    2 Euclidean, p > 2 the p-norm; a zero vector stays zero."""
    if not isinstance(norm, int) or isinstance(norm, bool) or norm < -1:
        raise InvalidArgumentError(f"normalize must be an integer >= -1, got {norm!r}")
    x = v.astype(np.float64)
    if norm == -1:
        s = 1.0
    elif norm == 0:
        s = np.abs(x).max() / 32760.0
    elif norm == 2:
        s = np.sqrt((x * x).sum())
    else:
        s = (np.abs(x) ** norm).sum() ** (1.0 / norm)
    return (x / s if s > 0 else np.zeros_like(x)).astype(np.float32)
