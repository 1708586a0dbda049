"""An independent float64 numpy forward pass of ``gemma4`` (the numpy oracle of tests/oracle.py,
extended to Gemma 4's attention and routing), following llama.cpp b11434's graph
(src/models/gemma4.cpp):

* embeddings times sqrt(n_embd); RMS pre-norms; post-attention and post-FFN norms before each
  residual add; GELU (tanh) gated FFN; final norm, head (tied unless ``output.weight``), logits
  soft-capped c * tanh(l / c) (c = ``final_logit_softcapping``, 30 when absent);
* layer ``il`` attends over a window of ``attention.sliding_window`` keys when
  ``attention.sliding_window_pattern[il]``, with the window layers' head size
  (``key_length_swa``), kv-head count (``head_count_kv[il]``), rope width
  (``rope.dimension_count_swa``) and base (``rope.freq_base_swa``, no scaling); other layers
  rope with the frequency factors ``rope_freqs`` (NEOX everywhere);
* q and k RMS-normed with weights, v RMS-normed without; v = k's projection when a layer has no
  ``attn_v``; scores scaled by 1; the last ``attention.shared_kv_layers`` layers use the k and v
  of layer n_kv - 2 (window) or n_kv - 1 (full), n_kv = n_layer - shared;
* a layer with a router (``ffn_gate_inp``): dense branch normed by ``post_ffw_norm_1``, experts
  on ``pre_ffw_norm_2(x)``, routed by softmax(W_r (rms(x) / sqrt(n_embd) * scale)), top-k
  renormalized, GELU-gated experts times ``ffn_down_exps.scale[e]``, normed by
  ``post_ffw_norm_2``; the two branches summed;
* per-layer inputs (``embedding_length_per_layer_input`` > 0):
  inp = (rms(W_proj x / sqrt(n_embd)) + table[token] * sqrt(width)) / sqrt(2), layer il's slice
  gating x += rms(W_p (gelu(W_g x) * inp_il)); then x times ``layer_output_scale`` if present.

GELU: ggml's CPU kernels look GELU up in a table of FP16 inputs and outputs (GGML_GELU_FP16:
x rounded to FP16, gelu in FP16, |x| >= 10 passed through or zeroed); ``gelu16`` (default on)
does the same, so that the oracle measures our graph rather than that table (with exact GELU
the logits move by ~1e-3 relative).

The conventions are attributes (``softcap``, ``v_norm``, ``router_scale``, ``shared_kv``,
``embd_scale``, ``gelu16``), so a test can break one on a copy and see the logits move.
"""
from __future__ import annotations

import copy
import pathlib

import numpy as np

from oracle import _field, blas_threads, gelu_tanh, load_matrix, rms_norm, rope, softmax

__all__ = ["Gemma4Oracle", "gelu_fp16_table"]


def gelu_fp16_table(x: np.ndarray) -> np.ndarray:
    """ggml's CPU GELU: gelu of x rounded to FP16, rounded to FP16; x outside (-10, 10) is
    passed through (x >= 10) or zeroed."""
    x16 = np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)
    y = gelu_tanh(x16).astype(np.float16).astype(np.float64)
    return np.where(x >= 10.0, x, np.where(x <= -10.0, 0.0, y))


class Gemma4Oracle:
    def __init__(self, path):
        import gguf

        self.path = pathlib.Path(path)
        r = gguf.GGUFReader(str(self.path))
        a = "gemma4"

        def hp(name, default=None):
            return _field(r, f"{a}.{name}", default)

        def per_layer(name, default=None):
            v = hp(name, default)
            return [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)] * self.n_layer

        self.n_embd = int(hp("embedding_length"))
        self.n_layer = int(hp("block_count"))
        self.n_head = per_layer("attention.head_count")
        self.n_head_kv = per_layer("attention.head_count_kv")
        self.swa = [bool(s) for s in hp("attention.sliding_window_pattern")]
        self.hd_full, self.hd_swa = int(hp("attention.key_length")), int(hp("attention.key_length_swa"))
        self.rot_full = int(hp("rope.dimension_count", self.hd_full))
        self.rot_swa = int(hp("rope.dimension_count_swa", self.rot_full))
        self.base, self.base_swa = float(hp("rope.freq_base", 10000.0)), float(hp("rope.freq_base_swa", 10000.0))
        self.n_swa = int(hp("attention.sliding_window"))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        self.softcap = float(hp("final_logit_softcapping", 30.0))
        self.n_expert_used = int(hp("expert_used_count", 0) or 0)
        shared = int(hp("attention.shared_kv_layers", 0) or 0)
        self.shared_kv = self.n_layer - shared if shared else None
        self.n_pl = int(hp("embedding_length_per_layer_input", 0) or 0)
        self.embd_scale, self.v_norm, self.router_scale, self.gelu16 = True, True, True, True
        self.tensors = {t.name: t for t in r.tensors}
        self._cache: dict[str, np.ndarray] = {}

    def w(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = load_matrix(self.tensors[name]).astype(np.float64)
        return self._cache[name]

    def has(self, name: str) -> bool:
        return name in self.tensors

    def copy(self) -> "Gemma4Oracle":
        return copy.copy(self)   # shares the weight cache

    def source(self, il: int) -> int:
        if self.shared_kv is None or il < self.shared_kv:
            return il
        return self.shared_kv - (2 if self.swa[il] else 1)

    def _kv(self, p: str, h: np.ndarray, il: int, pos: np.ndarray, hd: int, rope_kw: dict):
        n = h.shape[0]
        kraw = h @ self.w(p + "attn_k.weight").T
        v = h @ self.w(p + "attn_v.weight").T if self.has(p + "attn_v.weight") else kraw
        k = rope(rms_norm(kraw.reshape(n, -1, hd), self.w(p + "attn_k_norm.weight"), self.eps), pos, **rope_kw)
        v = v.reshape(n, -1, hd)
        return k, rms_norm(v, None, self.eps) if self.v_norm else v

    def _attention(self, p: str, h: np.ndarray, il: int, kv: dict) -> np.ndarray:
        n = h.shape[0]
        pos = np.arange(n)
        swa = self.swa[il]
        hd = self.hd_swa if swa else self.hd_full
        ff = None if swa else self.w("rope_freqs.weight")
        rope_kw = dict(n_rot=self.rot_swa if swa else self.rot_full, base=self.base_swa if swa else self.base,
                       neox=True, freq_factors=ff)
        q = rope(rms_norm((h @ self.w(p + "attn_q.weight").T).reshape(n, -1, hd), self.w(p + "attn_q_norm.weight"),
                          self.eps), pos, **rope_kw)
        if self.source(il) == il:
            kv[il] = self._kv(p, h, il, pos, hd, rope_kw)
        k, v = kv[self.source(il)]
        group = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k)   # scale 1
        dist = pos[:, None] - pos[None, :]
        masked = (dist < 0) | (swa & (dist >= self.n_swa))
        scores[:, masked] = -np.inf
        out = np.einsum("hqk,khd->qhd", softmax(scores, -1), v).reshape(n, -1)
        return out @ self.w(p + "attn_output.weight").T

    def _geglu(self, p: str, x: np.ndarray, kind: str = "") -> np.ndarray:
        g = x @ self.w(p + f"ffn_gate{kind}.weight").T
        u = x @ self.w(p + f"ffn_up{kind}.weight").T
        return (self.gelu(g) * u) @ self.w(p + f"ffn_down{kind}.weight").T

    def gelu(self, x: np.ndarray) -> np.ndarray:
        return gelu_fp16_table(x) if self.gelu16 else gelu_tanh(x)

    def _experts(self, p: str, x: np.ndarray) -> np.ndarray:
        r = rms_norm(x, None, self.eps) / np.sqrt(self.n_embd)
        if self.router_scale:
            r = r * self.w(p + "ffn_gate_inp.scale")
        probs = softmax(r @ self.w(p + "ffn_gate_inp.weight").T, -1)
        h = rms_norm(x, self.w(p + "pre_ffw_norm_2.weight"), self.eps)
        gate, up, down = (self.w(p + f"ffn_{k}_exps.weight") for k in ("gate", "up", "down"))
        scale = self.w(p + "ffn_down_exps.scale") if self.has(p + "ffn_down_exps.scale") else None
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            sel = np.argsort(-probs[t], kind="stable")[: self.n_expert_used]
            wts = probs[t, sel] / probs[t, sel].sum()
            for e, we in zip(sel, wts):
                y = down[e] @ (self.gelu(gate[e] @ h[t]) * (up[e] @ h[t]))
                out[t] += we * y * (scale[e] if scale is not None else 1.0)
        return rms_norm(out, self.w(p + "post_ffw_norm_2.weight"), self.eps)

    def _ffn(self, p: str, x: np.ndarray) -> np.ndarray:
        f = self._geglu(p, rms_norm(x, self.w(p + "ffn_norm.weight"), self.eps))
        if self.has(p + "ffn_gate_inp.weight"):
            f = rms_norm(f, self.w(p + "post_ffw_norm_1.weight"), self.eps) + self._experts(p, x)
        return rms_norm(f, self.w(p + "post_ffw_norm.weight"), self.eps)

    def _per_layer_inputs(self, tokens: np.ndarray, x: np.ndarray) -> np.ndarray:
        n, L, w = len(tokens), self.n_layer, self.n_pl
        tok = self.w("per_layer_token_embd.weight")[tokens].reshape(n, L, w) * np.sqrt(w)
        proj = (x @ self.w("per_layer_model_proj.weight").T / np.sqrt(self.n_embd)).reshape(n, L, w)
        return (rms_norm(proj, self.w("per_layer_proj_norm.weight"), self.eps) + tok) / np.sqrt(2.0)

    def logits(self, tokens) -> np.ndarray:
        tokens = np.asarray(list(tokens), dtype=np.int64)
        with blas_threads(1):
            x = self.w("token_embd.weight")[tokens]
            if self.embd_scale:
                x = x * np.sqrt(self.n_embd)
            inp_pl = self._per_layer_inputs(tokens, x) if self.n_pl else None
            kv: dict = {}
            for il in range(self.n_layer):
                p = f"blk.{il}."
                a = self._attention(p, rms_norm(x, self.w(p + "attn_norm.weight"), self.eps), il, kv)
                x = x + rms_norm(a, self.w(p + "post_attention_norm.weight"), self.eps)
                x = x + self._ffn(p, x)
                if inp_pl is not None:
                    g = self.gelu(x @ self.w(p + "inp_gate.weight").T) * inp_pl[:, il]
                    x = x + rms_norm(g @ self.w(p + "proj.weight").T, self.w(p + "post_norm.weight"), self.eps)
                if self.has(p + "layer_output_scale.weight"):
                    x = x * self.w(p + "layer_output_scale.weight")[0]
            head = self.w("output.weight" if self.has("output.weight") else "token_embd.weight")
            out = rms_norm(x, self.w("output_norm.weight"), self.eps) @ head.T
            return self.softcap * np.tanh(out / self.softcap) if self.softcap > 0 else out
