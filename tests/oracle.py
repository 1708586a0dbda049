"""An independent float64 numpy forward pass of llama-family architectures.

``Oracle(path).logits(tokens)`` (``LlamaOracle`` is the same class) reads a
GGUF with ``gguf.GGUFReader``, dequantizes every weight with
``gguf.quants.dequantize`` (once, cached) and runs the full causal pass from
position 0 in float64, following the ggml / llama.cpp conventions for
``general.architecture`` in ``llama``, ``qwen2``, ``qwen3`` and ``gemma3``:

* GGUF/ggml shapes are ``ne0`` first: a weight of ggml shape ``[n_in, n_out]``
  is the numpy matrix ``W`` of shape ``(n_out, n_in)`` with ``y = W @ x``.
* RMSNorm: ``x / sqrt(mean(x**2) + eps) * w`` (Gemma's GGUF norm weights
  already hold the ``1 +``, so the same formula serves every architecture).
* RoPE: ``rope(x, pos, n_rot, base, neox=...)``. Arch ``llama`` uses ggml's
  NORMAL mode (adjacent pairs ``x[2i], x[2i+1]``; llama.cpp's converter permutes
  Q/K so this matches the HF model); ``qwen2``, ``qwen3`` and ``gemma3`` use
  NEOX mode, rotating ``x[i], x[i + n_rot/2]``.
  Angle ``pos * freq_scale * base**(-2i/n_rot)``, divided by ``rope_freqs[i]``
  when the model has that tensor; dims past ``n_rot`` are untouched.
* Grouped-query attention: head ``h`` reads kv head ``h // (n_head // n_head_kv)``,
  scores scaled by ``1/sqrt(head_dim)`` (``head_dim`` = ``attention.key_length``,
  default ``n_embd / n_head``), causal mask, softmax.
* FFN: ``down(act(gate x) * up x)`` with ``act`` = SiLU (GELU, tanh
  approximation, for gemma3); logits from ``output.weight`` or, when absent,
  the tied ``token_embd.weight``.

Per architecture (what llama.cpp's graphs do):

* ``llama``: the above; q/k/v biases are added when the file has them.
* ``qwen2``: llama + q/k/v biases (``blk.N.attn_{q,k,v}.bias``) after the
  projections; NEOX rope.
* ``qwen3``: llama + per-head RMSNorm of q and k (``attn_q_norm`` /
  ``attn_k_norm``, length ``head_dim``) before rope; NEOX rope.
* ``gemma3``: embeddings times ``sqrt(n_embd)``; per-head q/k RMSNorm before
  rope; ``post_attention_norm`` on the attention output and ``post_ffw_norm``
  on the FFN output before each residual add; GELU(tanh) FFN. When
  ``gemma3.attention.sliding_window`` (``n_swa``) is > 0, layer ``il`` is a
  sliding-window layer iff ``il % 6 < 5`` (llama.cpp's ``set_swa_pattern(6)``:
  layers 5, 11, 17, ... are global). Sliding layers let query ``p`` see key
  ``j`` only if ``p - j < n_swa`` and rope with base 10000 (llama.cpp hard-codes
  ``rope_freq_base_train_swa = 10000`` for gemma3; this oracle also honours an
  optional ``gemma3.rope.freq_base_swa`` key, which real Gemma 3 files do not
  carry) and freq_scale 1 (linear rope scaling applies to global layers only).
  Scores scale ``1/sqrt(key_length)`` (``1/sqrt(n_embd/n_head)`` for the
  62-layer 27B, as llama.cpp). Files without a sliding window are all-global
  and get final-logit soft-capping ``c*tanh(logit/c)`` when
  ``gemma3.final_logit_softcapping`` > 0 (llama.cpp's non-iSWA gemma3 graph).

Mixture of experts (``qwen3moe``, ``qwen2moe``, ``gpt-oss``; what llama.cpp's graphs do):

* ``qwen3moe``: the qwen3 attention; FFN = router softmax over all experts, the top
  ``expert_used_count``, weights renormalized to sum 1, each expert a SwiGLU.
* ``qwen2moe``: the qwen2 attention; the same routing without renormalization, plus a
  shared SwiGLU expert times ``sigmoid(ffn_gate_inp_shexp . h)``.
* ``gpt-oss``: q/k/v/output biases, a sink logit per head in each softmax row, even layers
  windowed (``attention.sliding_window``), YaRN rope (``yarn_theta``), the FFN pre-norm is
  ``post_attention_norm``; the router (with bias) takes the top-k raw logits and softmaxes
  over them; experts (with biases) use ``swiglu_oai``.

Issue 24 (Gemma 4, MLA and Qwen3.5 have oracles of their own: oracle_gemma4.py, oracle_mla.py,
oracle_qwen35.py):

* ``glm4moe``: q/k/v biases and per-head q/k norms where the file has them, NEOX rope over
  ``rope.dimension_count``; ``post_attention_norm`` is the FFN's pre-norm; the first
  ``leading_dense_block_count`` layers dense, then sigmoid scores, selection on scores +
  ``exp_probs_b``, weights renormalized / scaled as the file says, plus always-on shared experts.
* ``mistral3``: llama's layer with optional biases, ``rope_freqs`` divisors, YaRN with the file's
  betas and log multiplier, and q times 1 + temperature_scale * ln(floor(pos / n_ctx_orig) + 1).

The big output matrix (Gemma 3: 262144 x 640) is kept as float32 (the exact
dequantized values) and multiplied chunk by chunk in float64;
``logits(tokens, rows=..., vocab=...)`` computes the output projection only
for the positions and token ids asked.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import pathlib

import numpy as np

__all__ = ["Oracle", "LlamaOracle", "cached_oracle", "rope", "rms_norm", "softmax", "gelu_tanh", "silu", "swiglu_oai",
           "load_matrix", "blas_threads", "ARCHS", "ROPE_NEOX"]


# ggml's rope mode per architecture: False = NORMAL (adjacent pairs), True = NEOX
ROPE_NEOX = {
    "llama": False,
    "qwen2": True,
    "qwen3": True,
    "gemma3": True,
    "qwen3moe": True,
    "qwen2moe": True,
    "gpt-oss": True,
    "glm4moe": True,
    "mistral3": False,
}

# the architectures the oracle runs
ARCHS = tuple(ROPE_NEOX)

# gemma3: every 6th layer (il % 6 == 5) is global, the others use the sliding window
GEMMA3_SWA_PATTERN = 6
# gemma3: rope base of the sliding-window layers when no key gives one (llama.cpp's constant)
GEMMA3_ROPE_BASE_SWA = 10000.0

# output matrices with more elements than this stay float32 in memory (values exact)
_BIG_TABLE = 1 << 25
_CHUNK_ROWS = 8192


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


_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (ggml_gelu / HF ``gelu_pytorch_tanh``)."""
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def swiglu_oai(g: np.ndarray, u: np.ndarray, alpha: float = 1.702, limit: float = 7.0) -> np.ndarray:
    """gpt-oss's clamped SwiGLU (ggml_swiglu_oai): g clamped above, u both sides, u + 1."""
    g = np.minimum(g, limit)
    u = np.clip(u, -limit, limit)
    return g / (1.0 + np.exp(-alpha * g)) * (u + 1.0)


def yarn_theta(theta_extrap: np.ndarray, i: np.ndarray, freq_scale: float, n_rot: int, n_ctx_orig: int,
               base: float, beta_fast: float = 32.0, beta_slow: float = 1.0) -> tuple[np.ndarray, float]:
    """ggml's YaRN (ext_factor 1): per pair ``i`` the angle mixes interpolation and
    extrapolation by a ramp over the correction dims; returns (theta, the magnitude scale
    1 + 0.1 ln(1/freq_scale) that ggml applies to cos and sin)."""
    def corr_dim(n_rot_beta):
        return n_rot * np.log(n_ctx_orig / (n_rot_beta * 2 * np.pi)) / (2 * np.log(base))
    low = max(0.0, float(np.floor(corr_dim(beta_fast))))
    high = min(n_rot - 1.0, float(np.ceil(corr_dim(beta_slow))))
    ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
    theta = theta_extrap * freq_scale * (1.0 - ramp) + theta_extrap * ramp
    return theta, 1.0 + 0.1 * np.log(1.0 / freq_scale)


def rope(
    x: np.ndarray,
    pos,
    n_rot: int,
    base: float,
    neox: bool,
    freq_scale: float = 1.0,
    freq_factors: np.ndarray | None = None,
    yarn: tuple | None = None,
) -> np.ndarray:
    """Rotary position embedding as ggml computes it (YaRN when ``yarn`` = (n_ctx_orig,
    attn_factor[, beta_fast, beta_slow]) is given: see ``yarn_theta``).

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
    if yarn is None:
        theta = (pos * freq_scale)[:, None] * inv[None, :]  # [n_pos, half]
        mscale = 1.0
    else:
        theta, mscale = yarn_theta(pos[:, None] * inv[None, :], np.arange(half, dtype=np.float64)[None, :],
                                   freq_scale, n_rot, yarn[0], base, *yarn[2:])
        mscale *= yarn[1]
    # broadcast over the head axis when x is [n_pos, n_heads, head_dim]
    bshape = (theta.shape[0],) + (1,) * (x.ndim - 2) + (half,)
    cos = (np.cos(theta) * mscale).reshape(bshape)
    sin = (np.sin(theta) * mscale).reshape(bshape)

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


class Oracle:
    """Exact (float64) forward pass over a GGUF's dequantized weights, for the
    architectures in ``ARCHS`` (see the module docstring for the conventions).

    ``rope_neox`` overrides the rope mode the architecture implies (with it, an
    unknown architecture runs as ``llama``); ``blas_threads`` is the OpenBLAS
    thread count used during a forward pass (None leaves numpy's setting alone).

    The conventions are plain attributes (``rope_neox``, ``rope_base``,
    ``rope_base_swa``, ``freq_scale``, ``freq_scale_swa``, ``swa_layers``,
    ``n_swa``, ``attn_scale``, ``embd_scale``, ``eps``, ``act``, ``qk_norm``,
    ``post_norms``, ``final_logit_softcap``), so a test can ``copy.copy`` an
    oracle (sharing its weight cache) and break one on purpose; ``hparams()``
    lists them.
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
        # which graph runs: an unknown architecture (only with rope_neox given) runs as llama
        self.layout = arch if arch in ROPE_NEOX else "llama"
        self.rope_neox = bool(rope_neox)
        self.blas_threads = blas_threads

        def hp(name, default=None):
            return _field(r, f"{arch}.{name}", default)

        self.n_embd = int(hp("embedding_length"))
        self.n_layer = int(hp("block_count")) - int(hp("nextn_predict_layers", 0) or 0)   # the trunk
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
        self.yarn: tuple[int, float] | None = None  # (n_ctx_orig, attn_factor) when YaRN
        if scaling_type == "yarn" and factor is not None and float(factor) > 0:
            self.freq_scale = 1.0 / float(factor)
            self.yarn = (int(hp("rope.scaling.original_context_length", self.n_ctx_train)),
                         float(hp("rope.scaling.attn_factor", 1.0)))
        elif factor is not None and float(factor) > 0 and scaling_type in (None, "linear"):
            self.freq_scale = 1.0 / float(factor)
        elif hp("rope.scale_linear") is not None:  # legacy key
            self.freq_scale = 1.0 / float(hp("rope.scale_linear"))
        elif scaling_type not in (None, "none", "linear"):
            raise NotImplementedError(f"rope scaling {scaling_type!r} not modelled")
        self.attn_temp = 0.0
        if arch == "mistral3":
            self._mistral3_rope(hp)

        # defaults: plain causal attention with one rope for every layer
        self.attn_scale = 1.0 / float(np.sqrt(self.head_dim))
        self.embd_scale: float | None = None
        self.n_swa = 0
        self.swa_pattern = 0
        self.rope_base_swa = self.rope_base
        self.freq_scale_swa = self.freq_scale
        self.final_logit_softcap = 0.0
        self.qk_norm = self.layout in ("qwen3", "gemma3", "qwen3moe")
        self.post_norms = self.layout == "gemma3"
        self.act = gelu_tanh if self.layout == "gemma3" else silu
        if self.layout == "gemma3":
            self.embd_scale = float(np.sqrt(self.n_embd))
            self.n_swa = int(hp("attention.sliding_window", 0) or 0)
            if self.n_swa > 0:
                self.swa_pattern = GEMMA3_SWA_PATTERN
                self.rope_base_swa = float(hp("rope.freq_base_swa", GEMMA3_ROPE_BASE_SWA))
                self.freq_scale_swa = 1.0
            else:
                # llama.cpp's non-iSWA gemma3 graph soft-caps the logits
                self.final_logit_softcap = float(hp("final_logit_softcapping", 0.0) or 0.0)
            if self.n_layer == 62:  # Gemma 3 27B: llama.cpp scales by n_embd / n_head
                self.attn_scale = 1.0 / float(np.sqrt(self.n_embd // self.n_head))
        self._moe_conventions(hp)
        if self.layout == "gpt-oss":  # every other layer windowed (even ones), one rope for all
            self.n_swa = int(hp("attention.sliding_window"))
            self.swa_pattern = int(hp("attention.sliding_window_pattern", 2))
            self.rope_base_swa = float(hp("rope.freq_base_swa", self.rope_base))
        self.swa_layers = [self.n_swa > 0 and self.swa_pattern > 0 and il % self.swa_pattern < self.swa_pattern - 1
                           for il in range(self.n_layer)]

        self.tensors = {t.name: t for t in r.tensors}
        self._cache: dict[str, np.ndarray] = {}
        self._cache32: dict[str, np.ndarray] = {}

        emb = self.tensors["token_embd.weight"]
        self.n_vocab = int(emb.shape[1])
        self.tied = "output.weight" not in self.tensors
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head not a multiple of n_head_kv")

    def _moe_conventions(self, hp) -> None:
        """Mixture of experts (0 experts: dense FFN); gating "softmax" = softmax over all experts
        then top-k, "softmax_topk" = top-k of the raw logits then softmax over them (gpt-oss),
        "sigmoid" (glm4moe: with the selection bias, after its dense leading layers)."""
        self.n_expert = int(hp("expert_count", 0) or 0)
        self.n_expert_used = int(hp("expert_used_count", 0) or 0)
        self.moe_gating = "softmax_topk" if self.layout == "gpt-oss" else "softmax"
        self.moe_norm = self.layout == "qwen3moe"  # llama.cpp renormalizes qwen3moe's weights
        self.moe_scale = float(hp("expert_weights_scale", 0.0) or 0.0)
        self.moe_act = swiglu_oai if self.layout == "gpt-oss" else (lambda g, u: silu(g) * u)
        self.n_dense = int(hp("leading_dense_block_count", 0) or 0) if self.layout == "glm4moe" else 0
        if self.layout == "glm4moe":
            self.moe_gating = "sigmoid" if int(hp("expert_gating_func", 2) or 2) == 2 else "softmax"
            self.moe_norm = bool(hp("expert_weights_norm", False))
        self.probs_bias = True

    def _mistral3_rope(self, hp) -> None:
        """mistral3's YaRN betas and log multiplier (llama.cpp's context: the attention factor
        mscale(f, 1) / mscale(f, log_mul), ggml's own 1 + 0.1 ln f cancelled) and attention
        temperature (its floor the YaRN original context)."""
        n_orig = int(hp("rope.scaling.original_context_length", self.n_ctx_train))
        if self.yarn is not None:
            f = 1.0 / self.freq_scale
            lm = float(hp("rope.scaling.yarn_log_multiplier", 0.0) or 0.0)
            ms = lambda m: 1.0 if f <= 1 else 0.1 * m * np.log(f) + 1.0   # noqa: E731
            attn = (ms(1.0) / ms(lm) if lm else ms(1.0)) / (1.0 + 0.1 * np.log(f)) * self.yarn[1]
            self.yarn = (self.yarn[0], attn, float(hp("rope.scaling.yarn_beta_fast", 32.0)),
                         float(hp("rope.scaling.yarn_beta_slow", 1.0)))
        self.attn_temp = float(hp("attention.temperature_scale", 0.0) or 0.0)
        self.attn_temp_floor = n_orig

    # -- description --------------------------------------------------------

    def is_swa(self, il: int) -> bool:
        """Whether layer ``il`` uses the sliding window (and the local rope)."""
        return bool(self.swa_layers[il])

    def layer_rope(self, il: int) -> tuple[float, float]:
        """(freq_base, freq_scale) of layer ``il``."""
        if self.is_swa(il):
            return self.rope_base_swa, self.freq_scale_swa
        return self.rope_base, self.freq_scale

    def hparams(self) -> dict:
        """The hyper-parameters and conventions this oracle runs with."""
        return {
            "arch": self.arch, "layout": self.layout, "n_vocab": self.n_vocab, "n_embd": self.n_embd,
            "n_layer": self.n_layer, "n_ff": self.n_ff, "n_head": self.n_head, "n_head_kv": self.n_head_kv,
            "head_dim": self.head_dim, "head_dim_v": self.head_dim_v, "n_rot": self.n_rot, "eps": self.eps,
            "rope_neox": self.rope_neox, "rope_base": self.rope_base, "freq_scale": self.freq_scale,
            "rope_base_swa": self.rope_base_swa, "freq_scale_swa": self.freq_scale_swa,
            "n_swa": self.n_swa, "swa_layers": [il for il in range(self.n_layer) if self.is_swa(il)],
            "attn_scale": self.attn_scale, "embd_scale": self.embd_scale, "tied": self.tied,
            "qk_norm": self.qk_norm, "post_norms": self.post_norms, "act": self.act.__name__,
            "final_logit_softcap": self.final_logit_softcap, "n_ctx_train": self.n_ctx_train,
        }

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

    def _opt(self, name: str):
        return self.weight(name) if self.has(name) else 0.0

    def _table(self, name: str) -> np.ndarray:
        """An embedding / output matrix: float64 when small, else the exact
        float32 dequantized values (Gemma 3's 262144 x 640 would be 1.3 GB in
        float64); cached."""
        w = self._cache.get(name)
        if w is not None:
            return w
        t = self.tensors[name]
        if int(np.prod([int(n) for n in t.shape])) <= _BIG_TABLE:
            return self.weight(name)
        w = self._cache32.get(name)
        if w is None:
            w = self._cache32[name] = load_matrix(t)
        return w

    def _bias(self, name: str) -> np.ndarray | None:
        if self.layout in ("qwen2", "qwen2moe", "gpt-oss"):
            return self._vec(name)  # required
        if self.layout in ("llama", "glm4moe", "mistral3") and self.has(name):
            return self._vec(name)  # optional in llama.cpp's graphs
        return None

    @staticmethod
    def _lin(w: np.ndarray, x: np.ndarray) -> np.ndarray:
        # x: [n, n_in], w: (n_out, n_in) -> [n, n_out], float64
        return x @ w.T

    def _project(self, h: np.ndarray, vocab: np.ndarray | None = None) -> np.ndarray:
        """``h [m, n_embd]`` (float64) times the output matrix -> ``[m, n_vocab]``
        float64, or ``[m, len(vocab)]`` for the token ids ``vocab`` only."""
        w = self._table("token_embd.weight" if self.tied else "output.weight")
        if vocab is not None:
            return self._lin(w[vocab].astype(np.float64), h)
        if w.dtype == np.float64:
            return self._lin(w, h)
        out = np.empty((h.shape[0], w.shape[0]), dtype=np.float64)
        for c0 in range(0, w.shape[0], _CHUNK_ROWS):
            out[:, c0:c0 + _CHUNK_ROWS] = h @ w[c0:c0 + _CHUNK_ROWS].astype(np.float64).T
        return out

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
        dist = pos[:, None] - pos[None, :]  # query pos - key pos
        causal = dist < 0  # True = masked
        swa_mask = causal | (dist >= self.n_swa) if self.n_swa > 0 else causal

        x = self._table("token_embd.weight")[tokens].astype(np.float64)  # [n, n_embd]
        if self.embd_scale is not None:
            x = x * self.embd_scale
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = rms_norm(x, self._vec(p + "attn_norm.weight"), self.eps)
            q = self._lin(self.weight(p + "attn_q.weight"), h)
            k = self._lin(self.weight(p + "attn_k.weight"), h)
            v = self._lin(self.weight(p + "attn_v.weight"), h)
            for name, t in (("attn_q.bias", q), ("attn_k.bias", k), ("attn_v.bias", v)):
                b = self._bias(p + name)
                if b is not None:
                    t += b
            q = q.reshape(n, H, D)
            k = k.reshape(n, Hkv, D)
            v = v.reshape(n, Hkv, Dv)
            if self.qk_norm or (self.layout == "glm4moe" and self.has(p + "attn_q_norm.weight")):
                q = rms_norm(q, self._vec(p + "attn_q_norm.weight"), self.eps)   # each head's vector
                k = rms_norm(k, self._vec(p + "attn_k_norm.weight"), self.eps)
            base, fscale = self.layer_rope(il)
            q = rope(q, pos, self.n_rot, base, self.rope_neox, fscale, freq_factors, self.yarn)
            k = rope(k, pos, self.n_rot, base, self.rope_neox, fscale, freq_factors, self.yarn)
            if self.attn_temp:
                q = q * (np.log(np.floor(pos / self.attn_temp_floor) + 1.0) * self.attn_temp + 1.0)[:, None, None]

            # expand kv heads: head h uses kv head h // group
            k_full = np.repeat(k, group, axis=1).transpose(1, 2, 0)  # [H, D, n]
            v_full = np.repeat(v, group, axis=1).transpose(1, 0, 2)  # [H, n, Dv]
            scores = np.matmul(q.transpose(1, 0, 2), k_full) * self.attn_scale  # [H, n_q, n_k]
            scores[:, swa_mask if self.is_swa(il) else causal] = -np.inf
            probs = self._attn_probs(scores, p)
            attn = np.matmul(probs, v_full).transpose(1, 0, 2).reshape(n, H * Dv)
            a = self._lin(self.weight(p + "attn_output.weight"), attn)
            if self.has(p + "attn_output.bias"):
                a = a + self._vec(p + "attn_output.bias")
            if self.post_norms:
                a = rms_norm(a, self._vec(p + "post_attention_norm.weight"), self.eps)
            x = x + a

            pre = "post_attention_norm.weight" if self.layout in ("gpt-oss", "glm4moe") else "ffn_norm.weight"
            h = rms_norm(x, self._vec(p + pre), self.eps)
            if self.n_expert and il >= self.n_dense:
                f = self._moe(p, h)
            else:
                g = self._lin(self.weight(p + "ffn_gate.weight"), h) + self._opt(p + "ffn_gate.bias")
                u = self._lin(self.weight(p + "ffn_up.weight"), h) + self._opt(p + "ffn_up.bias")
                # (optional FFN biases: mistral3's)
                f = self._lin(self.weight(p + "ffn_down.weight"), self.act(g) * u) + self._opt(p + "ffn_down.bias")
            if self.post_norms:
                f = rms_norm(f, self._vec(p + "post_ffw_norm.weight"), self.eps)
            x = x + f

        return rms_norm(x, self._vec("output_norm.weight"), self.eps)

    def _attn_probs(self, scores: np.ndarray, p: str) -> np.ndarray:
        """Softmax over the keys; gpt-oss adds one sink logit per head to each row's
        denominator (llama.cpp's attn_sinks), which takes part of the mass and no value."""
        if not self.has(p + "attn_sinks.weight"):
            return softmax(scores, axis=-1)
        sink = np.broadcast_to(self._vec(p + "attn_sinks.weight")[:, None, None], scores.shape[:2] + (1,))
        return softmax(np.concatenate([scores, sink], axis=-1), axis=-1)[..., :-1]

    def _moe(self, p: str, h: np.ndarray) -> np.ndarray:
        """The mixture-of-experts FFN, token by token: route, run the chosen experts, mix;
        plus qwen2moe's shared expert times its sigmoid gate."""
        logits = self._lin(self.weight(p + "ffn_gate_inp.weight"), h)
        if self.has(p + "ffn_gate_inp.bias"):
            logits = logits + self._vec(p + "ffn_gate_inp.bias")
        mats = {n: self.weight(p + f"ffn_{n}_exps.weight") for n in ("gate", "up", "down")}
        bias = {n: self._vec(p + f"ffn_{n}_exps.bias") if self.has(p + f"ffn_{n}_exps.bias") else None
                for n in ("gate", "up", "down")}
        out = np.zeros_like(h)
        sel_bias = self._vec(p + "exp_probs_b.bias") if self.probs_bias and self.has(p + "exp_probs_b.bias") else 0.0
        for t in range(h.shape[0]):
            probs = {"softmax": softmax, "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z))}.get(
                self.moe_gating, lambda z: z)(logits[t])
            # glm4moe / DeepSeek V3: the selection bias picks the experts, not their weights
            sel = np.argsort(-(probs + sel_bias), kind="stable")[: self.n_expert_used]
            w = softmax(probs[sel]) if self.moe_gating == "softmax_topk" else probs[sel]
            if self.moe_norm:
                w = w / w.sum()
            if self.moe_scale not in (0.0, 1.0):
                w = w * self.moe_scale
            for e, we in zip(sel, w):
                g, u = mats["gate"][e] @ h[t], mats["up"][e] @ h[t]
                if bias["gate"] is not None:
                    g, u = g + bias["gate"][e], u + bias["up"][e]
                d = mats["down"][e] @ self.moe_act(g, u)
                if bias["down"] is not None:
                    d = d + bias["down"][e]
                out[t] += we * d
        if self.has(p + "ffn_up_shexp.weight"):
            g = self._lin(self.weight(p + "ffn_gate_shexp.weight"), h)
            u = self._lin(self.weight(p + "ffn_up_shexp.weight"), h)
            shared = self._lin(self.weight(p + "ffn_down_shexp.weight"), silu(g) * u)
            if self.has(p + "ffn_gate_inp_shexp.weight"):   # qwen2moe's gate; glm4moe's is always on
                shared = shared * (1.0 / (1.0 + np.exp(-(h @ self._vec(p + "ffn_gate_inp_shexp.weight")))))[:, None]
            out = out + shared
        return out

    def logits(self, tokens, rows=None, vocab=None) -> np.ndarray:
        """Logits ``[n, n_vocab]`` (float64) after each prefix ``tokens[:i+1]``.

        ``rows``: positions (indices into ``tokens``, e.g. ``[-1]``) whose logits
        are wanted; ``vocab``: token ids whose logits are wanted. The result is
        then ``[len(rows), len(vocab)]`` (either may be left out) and the output
        projection, the big cost for Gemma's 262144-token vocabulary, runs for
        those rows and ids only.
        """
        with blas_threads(self.blas_threads):
            h = self.hidden(tokens)
            if rows is not None:
                h = h[np.atleast_1d(np.asarray(rows, dtype=np.int64))]
            if vocab is not None:
                vocab = np.atleast_1d(np.asarray(vocab, dtype=np.int64))
                if vocab.ndim != 1 or (vocab.size and (vocab.min() < 0 or vocab.max() >= self.n_vocab)):
                    raise ValueError("vocab ids out of range")
            out = self._project(h, vocab)
            if self.final_logit_softcap > 0:
                c = self.final_logit_softcap
                out = c * np.tanh(out / c)
            return out


# the name the llama-only oracle had; same class
LlamaOracle = Oracle

_ORACLES: dict[tuple[str, float], Oracle] = {}


def cached_oracle(path) -> Oracle:
    """One shared ``Oracle`` per (path, mtime) for the whole test session."""
    p = pathlib.Path(path).resolve()
    key = (str(p), os.stat(p).st_mtime)
    o = _ORACLES.get(key)
    if o is None:
        o = _ORACLES[key] = Oracle(p)
    return o


def distances_to_exact(model, path, refs) -> tuple[float, float]:
    """Median |logit - exact| over the reference prompts' top-5 entries at every position:
    ours (``model`` evaluating each prompt) and llama.cpp's (the logits stored in ``refs``),
    both against float64 maths on the dequantized weights of ``path``."""
    ex = cached_oracle(path)
    ours, theirs = [], []
    for r in refs:
        model.clear()
        lg = model.eval(r["ids"])
        exact = ex.logits(r["ids"])
        for i, top in enumerate(r["prompt_top"]):
            for t, v in top:
                ours.append(abs(float(lg[i, t]) - exact[i, t]))
                theirs.append(abs(v - exact[i, t]))
    return float(np.median(ours)), float(np.median(theirs))


def prompt_distances_to_exact(model, path, prompts, k: int = 5) -> list[float]:
    """Per prompt: the median |logit - exact| over the exact top-k entries at every position,
    ``model`` evaluating each prompt against float64 maths on the dequantized weights of ``path``."""
    ex = cached_oracle(path)
    out = []
    for p in prompts:
        model.clear()
        lg = model.eval(p)
        exact = ex.logits(p)
        top = np.argsort(exact, axis=1)[:, -k:]
        out.append(float(np.median(np.abs(np.take_along_axis(lg, top, 1) - np.take_along_axis(exact, top, 1)))))
    return out
