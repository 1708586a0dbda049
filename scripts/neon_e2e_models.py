#!/usr/bin/env python3
"""Tiny seeded llama GGUFs for scripts/neon_e2e.sh, one per weight type the NEON matmul_rows
kernels take: Q8_0, Q4_1 (tests/models.py quantizes them with gguf-py) and Q4_K layers with a Q6_K
head and embedding (Q4_K_M's mix). gguf-py cannot quantize K types, so their blocks are seeded
bytes with each block's scales set from the weight's rms (the values are random but well-formed
blocks; what the check compares is ours against ggml on the same bytes).
  neon_e2e_models.py OUT_DIR      prints the paths written, one a line
"""
from __future__ import annotations

import pathlib
import sys
import zlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import models  # noqa: E402
import models_parts as parts  # noqa: E402

K_TYPES = {"Q4_K": 144, "Q6_K": 210}


def _k_blocks(arr: np.ndarray, dtype: str) -> np.ndarray:
    """Seeded bytes of a K-type tensor of arr's shape, rows of arr.shape[-1] // 256 blocks."""
    n_out, n_in = arr.shape
    nb = n_in // 256
    rng = np.random.default_rng(zlib.crc32(np.ascontiguousarray(arr, np.float32).tobytes() + dtype.encode()))
    blocks = rng.integers(0, 256, (n_out * nb, K_TYPES[dtype]), dtype=np.uint8)
    rms = float(np.sqrt(np.mean(arr ** 2)))
    if dtype == "Q4_K":   # d, dmin first; w = d * sc * q - dmin * m, sc and m ~ 32, q ~ 7.5
        d = np.float16(rms / (32 * 7.5))
        blocks[:, 0:2] = np.frombuffer(d.tobytes(), np.uint8)
        blocks[:, 2:4] = np.frombuffer(np.float16(rms / 32).tobytes(), np.uint8)
    else:                 # d last; w = d * scale * (q - 32), scale ~ 64, |q - 32| ~ 16
        d = np.float16(rms / (64 * 16))
        blocks[:, 208:210] = np.frombuffer(d.tobytes(), np.uint8)
    return blocks.reshape(n_out, nb * K_TYPES[dtype])


def _encode(gguf, arr, dtype):
    if dtype in K_TYPES:
        return _k_blocks(np.asarray(arr), dtype), gguf.GGMLQuantizationType[dtype]
    return _plain_encode(gguf, arr, dtype)


_plain_encode = parts.encode_tensor
parts.encode_tensor = _encode
models._DTYPES = (*models._DTYPES, *K_TYPES)
models.parts.FILE_TYPE.setdefault("Q4_K", 15)   # llama_ftype MOSTLY_Q4_K_M
models.parts.FILE_TYPE.setdefault("Q6_K", 18)

# rows of 256 (the K types' block) everywhere: n_embd, n_ff, n_head * head_dim
SHAPE = dict(n_vocab=64, n_embd=256, n_head=4, n_head_kv=2, n_ff=256, n_layer=2, n_ctx_train=256)
MODELS = {
    "q8_0": dict(dtype="Q8_0", seed=11),
    "q4_1": dict(dtype="Q4_1", seed=12),
    "q4_k_m": dict(dtype="Q4_K", output_dtype="Q6_K", token_embd_dtype="Q6_K", seed=13),
}


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, kw in MODELS.items():
        path = out / f"{name}.gguf"
        models.write_llama_gguf(path, **SHAPE, **kw)
        print(path)


if __name__ == "__main__":
    main()
