"""Q5_K blocks for the tiny-model writers (gguf-py quantizes no K type). A valid encoding of
ggml's block_q5_K, not ggml's quantizer (whose rounding search, make_qkx2, it does not
reproduce): per 32 values a 6-bit scale and min under the block's F16 d and dmin, 5-bit values.
The kernels' tests compare products of the same bytes, so any valid block serves; the round trip
through gguf-py's dequantizer is checked by tests/engine/test_matmul_rows.py."""
from __future__ import annotations

import numpy as np

QK_K = 256
Q5_K_BYTES = 176       # d, dmin (F16), scales[12], qh[32], qs[128]


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """Rows (..., k), k a multiple of 256 -> uint8 (..., k // 256 * 176)."""
    x = np.asarray(x, np.float32)
    lead, k = x.shape[:-1], x.shape[-1]
    if k % QK_K:
        raise ValueError(f"Q5_K rows must be a multiple of {QK_K} long, got {k}")
    sub = x.reshape(-1, 8, 32).astype(np.float64)           # super-blocks x sub-blocks x values
    lo = np.minimum(sub.min(axis=2), 0.0)                   # x = d * sc * q - dmin * m, m >= 0
    step = (sub.max(axis=2) - lo) / 31
    d = (step.max(axis=1) / 63).astype(np.float16)
    dmin = ((-lo).max(axis=1) / 63).astype(np.float16)
    sc = _six_bits(step, d)
    m = _six_bits(-lo, dmin)
    scale = d.astype(np.float64)[:, None] * sc
    offset = dmin.astype(np.float64)[:, None] * m
    q = np.where(scale[..., None] > 0, np.rint((sub + offset[..., None]) / np.where(scale > 0, scale, 1)[..., None]), 0)
    q = np.clip(q, 0, 31).astype(np.uint8).reshape(-1, 4, 2, 32)       # chunk c: sub-blocks 2c, 2c + 1
    out = np.zeros((sub.shape[0], Q5_K_BYTES), np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = _pack_scales(sc, m)
    qh = np.zeros((sub.shape[0], 32), np.uint8)
    for c in range(4):
        qh |= ((q[:, c, 0] >> 4) & 1) << (2 * c)
        qh |= ((q[:, c, 1] >> 4) & 1) << (2 * c + 1)
    out[:, 16:48] = qh
    out[:, 48:176] = ((q[:, :, 0] & 0xF) | ((q[:, :, 1] & 0xF) << 4)).reshape(-1, 128)
    return out.reshape(*lead, k // QK_K * Q5_K_BYTES)


def _six_bits(v: np.ndarray, unit: np.ndarray) -> np.ndarray:
    u = unit.astype(np.float64)[:, None]
    return np.clip(np.rint(np.where(u > 0, v / np.where(u > 0, u, 1), 0)), 0, 63).astype(np.uint8)


def _pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """ggml's 12-byte packing of 8 six-bit scales and mins (get_scale_min_k4 reads it back)."""
    out = np.zeros((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return out
