"""Sampling parameters and the core's sampler (all per-vocabulary work runs in the core)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import _args, _native
from ._native import ffi, lib
from .errors import InvalidArgumentError


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen; llama.cpp's chain: top-k → top-p → min-p → temperature.

    temperature 0 is greedy decoding (argmax). top_k 0, top_p 1 and min_p 0 switch those off.
    """
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        _args.real("temperature", self.temperature, 0.0, math.inf, hi_open=True)
        _args.integer("top_k", self.top_k)
        _args.real("top_p", self.top_p, 0.0, 1.0, lo_open=True)
        _args.real("min_p", self.min_p, 0.0, 1.0, hi_open=True)
        _args.integer("seed", self.seed, 0, 2**64 - 1)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Sampler:
    """A seeded sampler over one vocabulary size. Rows are numpy float32 arrays (logits views)."""

    def __init__(self, n_vocab: int, params: SamplingParams):
        self.n_vocab = int(n_vocab)
        self.params = params
        raw = lib.psl_sampling_default_params()
        raw.temperature, raw.top_k, raw.top_p = params.temperature, params.top_k, params.top_p
        raw.min_p, raw.seed = params.min_p, params.seed
        out = ffi.new("psl_sampler **")
        _native.check(lib.psl_sampler_new(self.n_vocab, ffi.addressof(raw), out))
        self._s = ffi.gc(out[0], lib.psl_sampler_free)
        self._tok = ffi.new("int32_t *")
        self._pmax = ffi.new("float *")
        self._nacc = ffi.new("int32_t *")

    def _row(self, a: np.ndarray, rows: int = 1):
        if a.dtype != np.float32 or not a.flags.c_contiguous or a.size < rows * self.n_vocab:
            raise InvalidArgumentError(f"expected a C-contiguous float32 array of {rows} x {self.n_vocab}")
        return ffi.from_buffer("float[]", a)

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """The adjusted distribution of one logits row (dense, n_vocab)."""
        out = np.empty(self.n_vocab, np.float32)
        _native.check(lib.psl_sampler_probs(self._s, self._row(logits), ffi.from_buffer("float[]", out)))
        return out

    def sample(self, logits: np.ndarray, probs_out: np.ndarray | None = None) -> tuple[int, float]:
        """Draw a token from one logits row; returns (token, largest adjusted probability).
        probs_out, when given, receives the adjusted distribution (the draft's q)."""
        q = ffi.NULL if probs_out is None else ffi.from_buffer("float[]", probs_out, require_writable=True)
        _native.check(lib.psl_sampler_sample(self._s, self._row(logits), q, self._tok, self._pmax))
        return self._tok[0], self._pmax[0]

    def verify(self, target_logits: np.ndarray, draft: np.ndarray, draft_probs: np.ndarray | None
               ) -> tuple[int, int]:
        """Speculative acceptance of k drafted tokens against k+1 target rows; draft_probs are
        the draft's q rows, or None for a deterministic drafter (point masses).
        Returns (number accepted, next token)."""
        k = int(draft.shape[0])
        if draft.dtype != np.int32 or not draft.flags.c_contiguous:
            raise InvalidArgumentError("draft must be a C-contiguous int32 array")
        if draft_probs is None:      # a deterministic drafter: q is a point mass on each draft token
            q = ffi.NULL
        else:
            q = self._row(draft_probs, k) if k else ffi.NULL
        d = ffi.from_buffer("int32_t[]", draft) if k else ffi.NULL
        _native.check(lib.psl_sampler_verify(self._s, self._row(target_logits, k + 1), d, q, k,
                                             self._nacc, self._tok))
        return self._nacc[0], self._tok[0]
