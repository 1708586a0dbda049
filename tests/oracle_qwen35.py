"""An independent float64 numpy forward pass of Qwen3.5 (``qwen35``) and Qwen3.5 / 3.6 MoE
(``qwen35moe``), extending the oracle of tests/oracle.py to the hybrid trunk and its routing, as
llama.cpp b11434 computes them (src/models/qwen35*.cpp, ggml's gated_delta_net):

* linear-attention layers: [q; k; v] = W_qkv x through a causal depthwise convolution of
  ``ssm.conv_kernel`` taps (zeros before the first token) and SiLU; q, k L2-normalized per head;
  v head h reads q/k head h mod n_k_heads; per v head decay g = softplus(W_alpha x + dt) * a and
  strength beta = sigmoid(W_beta x); state S (k dims x v dims, zero at first):
  S *= exp(g); d = (v - S^T k) beta; S += k d^T; o = S^T q / sqrt(d_state); then
  rms(o) * ssm_norm * silu(z) per head, z = W_gate x, and ssm_out;
* attention layers: per head q and its gate from one projection, q/k RMS norms, rope over the
  first rope.dimension_count dims (text M-RoPE: every section at the token position, section
  3 at position 0), scale 1/sqrt(head), output times sigmoid(gate);
* FFN on post_attention_norm(x): SwiGLU (qwen35) or experts (qwen35moe: softmax, top-k
  renormalized, no scale) plus a SwiGLU shared expert times sigmoid(ffn_gate_inp_shexp . x).

Conventions a test can break: ``moe_norm``, ``shared_gate``, ``head_map`` ("mod", llama.cpp's,
or "div"), ``gate_attn``.
"""
from __future__ import annotations

import copy
import pathlib

import numpy as np

from oracle import _field, blas_threads, load_matrix, rms_norm, rope, silu, softmax

__all__ = ["Qwen35Oracle"]


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class Qwen35Oracle:
    def __init__(self, path):
        import gguf

        self.path = pathlib.Path(path)
        r = gguf.GGUFReader(str(self.path))
        self.arch = a = _field(r, "general.architecture")

        def hp(name, default=None):
            return _field(r, f"{a}.{name}", default)

        self.n_nextn = int(hp("nextn_predict_layers", 0) or 0)
        self.n_layer = int(hp("block_count")) - self.n_nextn
        rec = hp("attention.recurrent_layers")
        every = int(hp("full_attention_interval", 4) or 4)
        self.recurrent = [bool(x) for x in rec][: self.n_layer] if rec is not None else \
            [(il + 1) % every != 0 for il in range(self.n_layer)]
        self.eps = float(hp("attention.layer_norm_rms_epsilon"))
        self.hd = int(hp("attention.key_length"))
        self.n_rot = int(hp("rope.dimension_count"))
        self.sections = [int(s) for s in hp("rope.dimension_sections")] + [0] * 4
        self.base = float(hp("rope.freq_base", 10000.0))
        self.d_conv, self.d_state = int(hp("ssm.conv_kernel")), int(hp("ssm.state_size"))
        self.n_v, self.n_k = int(hp("ssm.time_step_rank")), int(hp("ssm.group_count"))
        self.k = int(hp("expert_used_count", 0) or 0)
        self.moe_norm, self.shared_gate, self.head_map, self.gate_attn = True, True, "mod", True
        self.tensors = {t.name: t for t in r.tensors}
        self._cache: dict[str, np.ndarray] = {}

    def w(self, name: str) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = load_matrix(self.tensors[name]).astype(np.float64)
        return self._cache[name]

    def copy(self) -> "Qwen35Oracle":
        return copy.copy(self)

    # -- mixers --------------------------------------------------------------------------------

    def _linear(self, p: str, x: np.ndarray) -> np.ndarray:
        n, S, Hk, Hv = x.shape[0], self.d_state, self.n_k, self.n_v
        qkv = x @ self.w(p + "attn_qkv.weight").T                                  # [n, ch]
        conv_w = self.w(p + "ssm_conv1d.weight")                                  # (ch, d_conv)
        padded = np.vstack([np.zeros((self.d_conv - 1, qkv.shape[1])), qkv])
        conv = np.stack([np.einsum("kc,ck->c", padded[t:t + self.d_conv], conv_w) for t in range(n)])
        conv = silu(conv)
        kd = S * Hk
        q, k, v = conv[:, :kd].reshape(n, Hk, S), conv[:, kd:2 * kd].reshape(n, Hk, S), conv[:, 2 * kd:].reshape(n, Hv, S)
        l2 = lambda t: t / np.maximum(np.sqrt((t * t).sum(-1, keepdims=True)), self.eps)   # noqa: E731
        q, k = l2(q), l2(k)
        g = softplus(x @ self.w(p + "ssm_alpha.weight").T + self.w(p + "ssm_dt.bias")) * self.w(p + "ssm_a")
        beta = sigmoid(x @ self.w(p + "ssm_beta.weight").T)
        out = np.zeros((n, Hv, S))
        for h in range(Hv):
            hk = h % Hk if self.head_map == "mod" else h // (Hv // Hk)
            state = np.zeros((S, S))                                              # [k dim, v dim]
            for t in range(n):
                state *= np.exp(g[t, h])
                d = (v[t, h] - state.T @ k[t, hk]) * beta[t, h]
                state += np.outer(k[t, hk], d)
                out[t, h] = state.T @ q[t, hk] / np.sqrt(S)
        z = (x @ self.w(p + "attn_gate.weight").T).reshape(n, Hv, S)
        o = rms_norm(out, self.w(p + "ssm_norm.weight"), self.eps) * silu(z)
        return o.reshape(n, -1) @ self.w(p + "ssm_out.weight").T

    def _positions(self, n: int) -> np.ndarray:
        """Per rope pair, the position it turns by (text M-RoPE, interleaved): p, or 0 for
        pairs of section 3 (and past 3 x a section's size)."""
        s = self.sections
        pairs = np.arange(self.n_rot // 2)
        sector = pairs % sum(s[:4])
        uses_p = ((sector % 3 == 0) & (sector < 3 * s[0])) | ((sector % 3 == 1) & (sector < 3 * s[1])) | \
                 ((sector % 3 == 2) & (sector < 3 * s[2]))
        return uses_p

    def _attention(self, p: str, x: np.ndarray) -> np.ndarray:
        n, hd = x.shape[0], self.hd
        qg = (x @ self.w(p + "attn_q.weight").T).reshape(n, -1, 2, hd)
        q, gate = qg[:, :, 0], qg[:, :, 1]
        k = (x @ self.w(p + "attn_k.weight").T).reshape(n, -1, hd)
        v = (x @ self.w(p + "attn_v.weight").T).reshape(n, -1, hd)
        q = rms_norm(q, self.w(p + "attn_q_norm.weight"), self.eps)
        k = rms_norm(k, self.w(p + "attn_k_norm.weight"), self.eps)
        # pairs at position 0 do not turn: a frequency factor of infinity
        ff = np.where(self._positions(n), 1.0, np.inf)
        pos = np.arange(n)
        q, k = (rope(t, pos, self.n_rot, self.base, True, freq_factors=ff) for t in (q, k))
        group = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
        scores[:, pos[:, None] < pos[None, :]] = -np.inf
        o = np.einsum("hqk,khd->qhd", softmax(scores, -1), v)
        if self.gate_attn:
            o = o * sigmoid(gate)
        return o.reshape(n, -1) @ self.w(p + "attn_output.weight").T

    # -- FFN -----------------------------------------------------------------------------------

    def _swiglu(self, p: str, x: np.ndarray, kind: str = "") -> np.ndarray:
        g, u = x @ self.w(p + f"ffn_gate{kind}.weight").T, x @ self.w(p + f"ffn_up{kind}.weight").T
        return (silu(g) * u) @ self.w(p + f"ffn_down{kind}.weight").T

    def _ffn(self, p: str, x: np.ndarray) -> np.ndarray:
        if self.arch != "qwen35moe":
            return self._swiglu(p, x)
        probs = softmax(x @ self.w(p + "ffn_gate_inp.weight").T, -1)
        gate, up, down = (self.w(p + f"ffn_{k}_exps.weight") for k in ("gate", "up", "down"))
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            sel = np.argsort(-probs[t], kind="stable")[: self.k]
            wts = probs[t, sel] / (probs[t, sel].sum() if self.moe_norm else 1.0)
            for e, we in zip(sel, wts):
                out[t] += we * (down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])))
        shared = self._swiglu(p, x, "_shexp")
        if self.shared_gate:
            shared = shared * sigmoid(x @ self.w(p + "ffn_gate_inp_shexp.weight"))[:, None]
        return out + shared

    def logits(self, tokens) -> np.ndarray:
        tokens = np.asarray(list(tokens), dtype=np.int64)
        with blas_threads(1):
            x = self.w("token_embd.weight")[tokens]
            for il in range(self.n_layer):
                p = f"blk.{il}."
                h = rms_norm(x, self.w(p + "attn_norm.weight"), self.eps)
                x = x + (self._linear(p, h) if self.recurrent[il] else self._attention(p, h))
                x = x + self._ffn(p, rms_norm(x, self.w(p + "post_attention_norm.weight"), self.eps))
            head = self.w("output.weight" if "output.weight" in self.tensors else "token_embd.weight")
            return rms_norm(x, self.w("output_norm.weight"), self.eps) @ head.T
