"""An independent float64 numpy forward pass of ``deepseek2`` (DeepSeek V2/V3 multi-head latent
attention and its routing), extending the oracle of tests/oracle.py. It computes attention the
un-absorbed way, head by head (keys and values decompressed from the latent), which is
algebraically what llama.cpp's absorbed graph computes:

* q = W_q h, or W_qb rms(W_qa h) (q_lora_rank); per head a no-rope part and a rope part;
* [latent; k_rope] = W_kva h, latent RMS-normed; k_rope (one for all heads) and q's rope part
  roped NORMAL with YaRN (ggml's ramp and magnitude, factor and attention factor as
  llama.cpp's context sets them up, the log multiplier included);
* per head: k_nope = W_kb^T latent (attn_k_b: (lat, nope)), v = W_vb latent (attn_v_b:
  (v_head, lat)); score = (q_nope . k_nope + q_rope . k_rope) * mscale^2 / sqrt(key_length_mla);
* FFN: dense SwiGLU on the first ``leading_dense_block_count`` layers; then scores softmax or
  sigmoid (``expert_gating_func``), selection on scores + ``exp_probs_b``, limited to the best
  ``expert_group_used_count`` groups (a group scores the sum of its two best), top-k, weights
  the unbiased scores renormalized (``expert_weights_norm``) and scaled, plus the shared
  experts.

``logits(tokens)``; ``mtp_logits(tokens, h_prev)`` runs the NextN block. Conventions are
attributes (``absorb_check``, ``use_bias``, ``use_groups``, ``yarn_log_mul``) a test can break.
"""
from __future__ import annotations

import copy
import pathlib

import numpy as np

from oracle import _field, blas_threads, load_matrix, rms_norm, rope, silu, softmax

__all__ = ["MlaOracle"]


class MlaOracle:
    def __init__(self, path):
        import gguf

        self.path = pathlib.Path(path)
        r = gguf.GGUFReader(str(self.path))
        a = "deepseek2"

        def hp(name, default=None):
            return _field(r, f"{a}.{name}", default)

        self.n_nextn = int(hp("nextn_predict_layers", 0) or 0)
        self.n_layer = int(hp("block_count")) - self.n_nextn
        self.n_embd = int(hp("embedding_length"))
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        self.n_rot = int(hp("rope.dimension_count"))
        self.kq = int(hp("attention.key_length_mla"))
        self.lat = int(hp("attention.kv_lora_rank"))
        self.base = float(hp("rope.freq_base", 10000.0))
        self.n_dense = int(hp("leading_dense_block_count", 0) or 0)
        self.k = int(hp("expert_used_count"))
        self.gating = int(hp("expert_gating_func", 1) or 1)
        self.norm_w = bool(hp("expert_weights_norm", False))
        self.scale_w = float(hp("expert_weights_scale", 0.0) or 0.0)
        self.groups = (int(hp("expert_group_count", 0) or 0), int(hp("expert_group_used_count", 0) or 0))
        factor = float(hp("rope.scaling.factor", 0.0) or 0.0) if hp("rope.scaling.type") == "yarn" else 0.0
        self.fs = 1.0 / factor if factor > 0 else 1.0
        self.n_ctx_orig = int(hp("rope.scaling.original_context_length", hp("context_length")))
        self.yarn_log_mul = float(hp("rope.scaling.yarn_log_multiplier", 0.0) or 0.0) / 0.1
        self.use_bias, self.use_groups, self.yarn = True, True, factor > 0
        self.tensors = {t.name: t for t in r.tensors}
        self._cache: dict[str, np.ndarray] = {}

    def w(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = load_matrix(self.tensors[name]).astype(np.float64)
        return self._cache[name]

    def has(self, name: str) -> bool:
        return name in self.tensors

    def copy(self) -> "MlaOracle":
        return copy.copy(self)

    # -- attention ----------------------------------------------------------------------------

    def _rope_args(self) -> tuple[dict, float]:
        """rope keyword arguments and the attention scale's mscale (llama.cpp's context and
        deepseek2 graph, [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX])."""
        if not self.yarn:
            return dict(freq_scale=1.0), 1.0
        factor = 1.0 / self.fs
        ms = lambda s, m: 1.0 if s <= 1 else 0.1 * m * np.log(s) + 1.0   # noqa: E731
        lm = self.yarn_log_mul
        if lm != 0:
            attn = ms(factor, lm if lm != 1.0 else 1.0) / ms(factor, lm)
        else:
            attn = ms(factor, 1.0)
        attn /= 1.0 + 0.1 * np.log(factor)
        mscale = attn * (1.0 + 0.1 * np.log(factor)) * (1.0 + 0.1 * lm * np.log(factor))
        return dict(freq_scale=self.fs, yarn=(self.n_ctx_orig, attn)), mscale

    def _attention(self, p: str, h: np.ndarray, pos: np.ndarray) -> np.ndarray:
        n, lat, rot = h.shape[0], self.lat, self.n_rot
        nope = self.kq - rot
        if self.has(p + "attn_q.weight"):
            q = h @ self.w(p + "attn_q.weight").T
        else:
            q = rms_norm(h @ self.w(p + "attn_q_a.weight").T, self.w(p + "attn_q_a_norm.weight"), self.eps)
            q = q @ self.w(p + "attn_q_b.weight").T
        q = q.reshape(n, -1, self.kq)
        kv = h @ self.w(p + "attn_kv_a_mqa.weight").T
        latent = rms_norm(kv[:, :lat], self.w(p + "attn_kv_a_norm.weight"), self.eps)
        rkw, mscale = self._rope_args()
        k_pe = rope(kv[:, lat:], pos, rot, self.base, False, **rkw)                # [n, rot]
        q_pe = rope(q[..., nope:], pos, rot, self.base, False, **rkw)              # [n, H, rot]
        wkb, wvb = self.w(p + "attn_k_b.weight"), self.w(p + "attn_v_b.weight")   # (H, lat, nope), (H, v, lat)
        k_nope = np.einsum("hln,tl->thn", wkb, latent)                             # [n, H, nope]
        v = np.einsum("hvl,tl->thv", wvb, latent)                                  # [n, H, v]
        scores = np.einsum("qhd,khd->hqk", q[..., :nope], k_nope) + np.einsum("qhd,kd->hqk", q_pe, k_pe)
        scores = scores * mscale * mscale / np.sqrt(self.kq)
        scores[:, pos[:, None] < pos[None, :]] = -np.inf
        out = np.einsum("hqk,khv->qhv", softmax(scores, -1), v).reshape(n, -1)
        return out @ self.w(p + "attn_output.weight").T

    # -- FFN ----------------------------------------------------------------------------------

    def _swiglu(self, p: str, x: np.ndarray, kind: str = "") -> np.ndarray:
        g, u = x @ self.w(p + f"ffn_gate{kind}.weight").T, x @ self.w(p + f"ffn_up{kind}.weight").T
        return (silu(g) * u) @ self.w(p + f"ffn_down{kind}.weight").T

    def _select(self, sel_scores: np.ndarray) -> np.ndarray:
        n_g, used = self.groups
        if self.use_groups and n_g > 1:
            grp = sel_scores.reshape(n_g, -1)
            gscore = np.sort(grp, axis=1)[:, -2:].sum(1)
            keep = np.argsort(-gscore, kind="stable")[:used]
            masked = np.full_like(grp, -np.inf)
            masked[keep] = grp[keep]
            sel_scores = masked.reshape(-1)
        return np.argsort(-sel_scores, kind="stable")[: self.k]

    def _moe(self, p: str, x: np.ndarray) -> np.ndarray:
        logits = x @ self.w(p + "ffn_gate_inp.weight").T
        scores = softmax(logits, -1) if self.gating == 1 else 1.0 / (1.0 + np.exp(-logits))
        bias = self.w(p + "exp_probs_b.bias") if self.use_bias and self.has(p + "exp_probs_b.bias") else 0.0
        gate, up, down = (self.w(p + f"ffn_{k}_exps.weight") for k in ("gate", "up", "down"))
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            sel = self._select(scores[t] + bias)
            wts = scores[t, sel]
            if self.norm_w:
                wts = wts / wts.sum()
            if self.scale_w not in (0.0, 1.0):
                wts = wts * self.scale_w
            for e, we in zip(sel, wts):
                out[t] += we * (down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])))
        return out + self._swiglu(p, x, "_shexp")

    def _block(self, il: int, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        p = f"blk.{il}."
        x = x + self._attention(p, rms_norm(x, self.w(p + "attn_norm.weight"), self.eps), pos)
        h = rms_norm(x, self.w(p + "ffn_norm.weight"), self.eps)
        return x + (self._swiglu(p, h) if il < self.n_dense else self._moe(p, h))

    # -- forward ------------------------------------------------------------------------------

    def hidden(self, tokens) -> np.ndarray:
        """The trunk's final-normed hidden rows (the MTP block's h)."""
        tokens = np.asarray(list(tokens), dtype=np.int64)
        pos = np.arange(len(tokens))
        with blas_threads(1):
            x = self.w("token_embd.weight")[tokens]
            for il in range(self.n_layer):
                x = self._block(il, x, pos)
            return rms_norm(x, self.w("output_norm.weight"), self.eps)

    def logits(self, tokens) -> np.ndarray:
        head = self.w("output.weight" if self.has("output.weight") else "token_embd.weight")
        return self.hidden(tokens) @ head.T

    def mtp_logits(self, tokens) -> np.ndarray:
        """The NextN block at every position p of tokens, fed (x_p, h_{p-1}) with h the trunk's
        normed rows (h_{-1} = 0): the logits of its guesses for x_{p+2}."""
        tokens = np.asarray(list(tokens), dtype=np.int64)
        h = self.hidden(tokens)
        h_prev = np.vstack([np.zeros((1, h.shape[1])), h[:-1]])
        il = self.n_layer
        p = f"blk.{il}."
        with blas_threads(1):
            e = rms_norm(self.w("token_embd.weight")[tokens], self.w(p + "nextn.enorm.weight"), self.eps)
            y = np.concatenate([e, rms_norm(h_prev, self.w(p + "nextn.hnorm.weight"), self.eps)], 1)
            y = self._block(il, y @ self.w(p + "nextn.eh_proj.weight").T, np.arange(len(tokens)))
            y = rms_norm(y, self.w(p + "nextn.shared_head_norm.weight"), self.eps)
            head = self.w("output.weight" if self.has("output.weight") else "token_embd.weight")
            return y @ head.T
