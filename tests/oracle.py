"""An independent float64 numpy forward pass of the llama architecture.

``LlamaOracle(path).logits(tokens)`` reads a GGUF with ``gguf.GGUFReader``,
dequantizes every weight with ``gguf.quants.dequantize`` (once, cached) and
runs the full causal pass from position 0 in float64, following the
ggml / llama.cpp conventions:

* GGUF/ggml shapes are ``ne0`` first: a weight of ggml shape ``[n_in, n_out]``
  is the numpy matrix ``W`` of shape ``(n_out, n_in)`` with ``y = W @ x``.
* RMSNorm: ``x / sqrt(mean(x**2) + eps) * w``.
* RoPE: ``rope(x, pos, n_rot, base, neox=...)``. Arch ``llama`` uses ggml's
  NORMAL mode (adjacent pairs ``x[2i], x[2i+1]``; llama.cpp's converter permutes
  Q/K so this matches the HF model); NEOX mode rotates ``x[i], x[i + n_rot/2]``.
  Angle ``pos * freq_scale * base**(-2i/n_rot)``, divided by ``rope_freqs[i]``
  when the model has that tensor; dims past ``n_rot`` are untouched.
* Grouped-query attention: head ``h`` reads kv head ``h // (n_head // n_head_kv)``,
  scores scaled by ``1/sqrt(head_dim)``, causal mask, softmax.
* FFN: ``down(silu(gate x) * up x)``; logits from ``output.weight`` or, when
  absent, the tied ``token_embd.weight``.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pathlib

import numpy as np

__all__ = ["LlamaOracle", "cached_oracle", "rope", "rms_norm", "softmax", "load_matrix", "blas_threads"]


# ggml's rope mode per architecture: False = NORMAL (adjacent pairs), True = NEOX
ROPE_NEOX = {
    "llama": False,
}


def rms_norm(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    """RMSNorm over the last axis, then scale by ``w`` (if given)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def silu(x: np.ndarray) -> np.ndarray:
    # x * sigmoid(x), with sigmoid written via tanh so large |x| cannot overflow
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))


def rope(
    x: np.ndarray,
    pos,
    n_rot: int,
    base: float,
    neox: bool,
    freq_scale: float = 1.0,
    freq_factors: np.ndarray | None = None,
) -> np.ndarray:
    """Rotary position embedding as ggml computes it (no YaRN).

    ``x``: ``[..., n_pos, n_heads, head_dim]`` (or ``[n_pos, head_dim]``);
    ``pos``: integer positions, length ``n_pos``. Only the first ``n_rot``
    dims of each head rotate. Pair ``i`` (``i < n_rot/2``) rotates by
    ``pos * freq_scale * base**(-2i/n_rot) / freq_factors[i]``; NORMAL mode
    pairs ``(x[2i], x[2i+1])``, NEOX mode pairs ``(x[i], x[i + n_rot/2])``.
    """
    x = np.asarray(x, dtype=np.float64)
    pos = np.asarray(pos, dtype=np.float64)
    if n_rot % 2 or n_rot > x.shape[-1]:
        raise ValueError(f"bad n_rot {n_rot} for head_dim {x.shape[-1]}")
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
    if freq_factors is not None:
        inv = inv / np.asarray(freq_factors, dtype=np.float64)[:half]
    theta = (pos * freq_scale)[:, None] * inv[None, :]  # [n_pos, half]
    # broadcast over the head axis when x is [n_pos, n_heads, head_dim]
    bshape = (theta.shape[0],) + (1,) * (x.ndim - 2) + (half,)
    cos = np.cos(theta).reshape(bshape)
    sin = np.sin(theta).reshape(bshape)

    out = x.copy()
    if neox:
        x0 = x[..., :half]
        x1 = x[..., half:n_rot]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    else:
        x0 = x[..., 0:n_rot:2]
        x1 = x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


def _openblas_thread_api():
    """(get, set) for the OpenBLAS bundled with numpy wheels, or None.

    The oracle's matmuls are small (a few rows times a weight matrix); on a
    busy 2-core machine OpenBLAS's threads then spin against each other and a
    forward pass gets 5-10x slower, so the oracle runs them single-threaded.
    """
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for lib in sorted(glob.glob(os.path.join(libdir, "*openblas*"))):
        try:
            h = ctypes.CDLL(lib)
        except OSError:
            continue
        for get, set_ in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                          ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                          ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                          ("openblas_get_num_threads", "openblas_set_num_threads")):
            if hasattr(h, get) and hasattr(h, set_):
                g, st = getattr(h, get), getattr(h, set_)
                g.restype = ctypes.c_int
                st.argtypes = [ctypes.c_int]
                return g, st
    return None


_BLAS_API: object = False  # not looked up yet


@contextlib.contextmanager
def blas_threads(n: int | None):
    """Temporarily set numpy's OpenBLAS thread count (best effort; no-op when
    ``n`` is None or the library cannot be found)."""
    global _BLAS_API
    if _BLAS_API is False:
        try:
            _BLAS_API = _openblas_thread_api()
        except Exception:  # pragma: no cover - exotic numpy builds
            _BLAS_API = None
    if n is None or _BLAS_API is None:
        yield
        return
    get, set_ = _BLAS_API
    old = get()
    set_(int(n))
    try:
        yield
    finally:
        set_(old)


def load_matrix(tensor) -> np.ndarray:
    """Dequantize a ``gguf.ReaderTensor`` to a float32 numpy array in
    numpy order: ggml shape ``[ne0, ne1, ...]`` -> numpy ``(..., ne1, ne0)``."""
    import gguf

    data = gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)
    ne = [int(n) for n in tensor.shape]
    return np.asarray(data, dtype=np.float32).reshape(tuple(reversed(ne)))


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


class LlamaOracle:
    """Exact (float64) llama forward pass over a GGUF's dequantized weights.

    ``rope_neox`` overrides the rope mode the architecture implies;
    ``blas_threads`` is the OpenBLAS thread count used during a forward pass
    (None leaves numpy's setting alone).
    """

    def __init__(self, path, *, rope_neox: bool | None = None, blas_threads: int | None = 1):
        import gguf

        self.path = pathlib.Path(path)
        self.reader = r = gguf.GGUFReader(str(self.path))
        arch = _field(r, "general.architecture")
        if arch is None:
            raise ValueError(f"{self.path}: no general.architecture")
        self.arch = arch
        if rope_neox is None:
            if arch not in ROPE_NEOX:
                raise NotImplementedError(f"oracle does not know architecture {arch!r}")
            rope_neox = ROPE_NEOX[arch]
        self.rope_neox = bool(rope_neox)
        self.blas_threads = blas_threads

        def hp(name, default=None):
            return _field(r, f"{arch}.{name}", default)

        self.n_embd = int(hp("embedding_length"))
        self.n_layer = int(hp("block_count"))
        self.n_ff = int(hp("feed_forward_length"))
        self.n_head = int(hp("attention.head_count"))
        self.n_head_kv = int(hp("attention.head_count_kv", self.n_head))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        self.head_dim = int(hp("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(hp("attention.value_length", self.head_dim))
        self.n_rot = int(hp("rope.dimension_count", self.head_dim))
        self.rope_base = float(hp("rope.freq_base", 10000.0))
        self.n_ctx_train = int(hp("context_length", 0))

        # rope scaling (linear only; yarn etc. are not modelled)
        scaling_type = hp("rope.scaling.type")
        factor = hp("rope.scaling.factor")
        self.freq_scale = 1.0
        if factor is not None and float(factor) > 0 and scaling_type in (None, "linear"):
            self.freq_scale = 1.0 / float(factor)
        elif hp("rope.scale_linear") is not None:  # legacy key
            self.freq_scale = 1.0 / float(hp("rope.scale_linear"))
        elif scaling_type not in (None, "none", "linear"):
            raise NotImplementedError(f"rope scaling {scaling_type!r} not modelled")

        self.tensors = {t.name: t for t in r.tensors}
        self._cache: dict[str, np.ndarray] = {}

        emb = self.tensors["token_embd.weight"]
        self.n_vocab = int(emb.shape[1])
        self.tied = "output.weight" not in self.tensors
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head not a multiple of n_head_kv")

    # -- weights ------------------------------------------------------------

    def weight(self, name: str) -> np.ndarray:
        """Dequantized weight as float64 (the float32 dequantized values,
        exactly), numpy order ``(n_out, n_in)``; cached."""
        w = self._cache.get(name)
        if w is None:
            w = load_matrix(self.tensors[name]).astype(np.float64)
            self._cache[name] = w
        return w

    def has(self, name: str) -> bool:
        return name in self.tensors

    def _vec(self, name: str) -> np.ndarray:
        return self.weight(name)

    @staticmethod
    def _lin(w: np.ndarray, x: np.ndarray) -> np.ndarray:
        # x: [n, n_in], w: (n_out, n_in) -> [n, n_out], float64
        return x @ w.T

    # -- forward ------------------------------------------------------------

    def hidden(self, tokens) -> np.ndarray:
        """Final-normed hidden states ``[n, n_embd]`` (float64)."""
        tokens = np.asarray(list(tokens), dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range")
        n = tokens.size
        pos = np.arange(n)
        H, Hkv, D, Dv = self.n_head, self.n_head_kv, self.head_dim, self.head_dim_v
        group = H // Hkv
        freq_factors = self._vec("rope_freqs.weight") if self.has("rope_freqs.weight") else None
        causal = np.triu(np.ones((n, n), dtype=bool), k=1)  # True above the diagonal = masked

        x = self.weight("token_embd.weight")[tokens]  # [n, n_embd]
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = rms_norm(x, self._vec(p + "attn_norm.weight"), self.eps)
            q = self._lin(self.weight(p + "attn_q.weight"), h).reshape(n, H, D)
            k = self._lin(self.weight(p + "attn_k.weight"), h).reshape(n, Hkv, D)
            v = self._lin(self.weight(p + "attn_v.weight"), h).reshape(n, Hkv, Dv)
            q = rope(q, pos, self.n_rot, self.rope_base, self.rope_neox, self.freq_scale, freq_factors)
            k = rope(k, pos, self.n_rot, self.rope_base, self.rope_neox, self.freq_scale, freq_factors)

            # expand kv heads: head h uses kv head h // group
            k_full = np.repeat(k, group, axis=1)  # [n, H, D]
            v_full = np.repeat(v, group, axis=1)  # [n, H, Dv]
            scores = np.einsum("qhd,khd->hqk", q, k_full) / np.sqrt(D)
            scores[:, causal] = -np.inf
            probs = softmax(scores, axis=-1)
            attn = np.einsum("hqk,khd->qhd", probs, v_full).reshape(n, H * Dv)
            x = x + self._lin(self.weight(p + "attn_output.weight"), attn)

            h = rms_norm(x, self._vec(p + "ffn_norm.weight"), self.eps)
            g = self._lin(self.weight(p + "ffn_gate.weight"), h)
            u = self._lin(self.weight(p + "ffn_up.weight"), h)
            x = x + self._lin(self.weight(p + "ffn_down.weight"), silu(g) * u)

        return rms_norm(x, self._vec("output_norm.weight"), self.eps)

    def logits(self, tokens) -> np.ndarray:
        """Logits ``[n, n_vocab]`` (float64) after each prefix ``tokens[:i+1]``."""
        with blas_threads(self.blas_threads):
            h = self.hidden(tokens)
            out = self.weight("token_embd.weight" if self.tied else "output.weight")
            return self._lin(out, h)


_ORACLES: dict[tuple[str, float], LlamaOracle] = {}


def cached_oracle(path) -> LlamaOracle:
    """One shared ``LlamaOracle`` per (path, mtime) for the whole test session."""
    p = pathlib.Path(path).resolve()
    key = (str(p), os.stat(p).st_mtime)
    o = _ORACLES.get(key)
    if o is None:
        o = _ORACLES[key] = LlamaOracle(p)
    return o
