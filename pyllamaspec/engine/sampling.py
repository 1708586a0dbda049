"""Sampling parameters and the core's sampler (all per-vocabulary work runs in the core)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError
from . import _args, _native
from ._native import ffi, lib

# Bounds that keep penalized logits finite in float32 whatever the logits (|logit| < 1e4):
# far beyond any useful value (OpenAI takes penalties in [-2, 2], llama.cpp's users 1.0-1.5).
MAX_PENALTY = 1e4
MAX_REPEAT_PENALTY = 1e4


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen; llama.cpp's chain: penalties → top-k → top-p → min-p →
    temperature.

    temperature 0 is greedy decoding (argmax of the penalized logits). top_k 0, top_p 1 and
    min_p 0 switch those off. Penalties (llama.cpp's): over the last penalty_last_n tokens of
    the prompt and output (-1: all of them, 0: off), a token seen c > 0 times has its logit
    divided by repeat_penalty (multiplied when <= 0), then lowered by
    c * frequency_penalty + presence_penalty. repeat_penalty 1 and the others 0 switch them off.
    ignore_eos: end-of-generation tokens are never chosen (llama.cpp's --ignore-eos: their logits
    are -inf in the target's distribution, so speculation stays exact).
    """
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.ignore_eos, (bool, np.bool_)):
            raise InvalidArgumentError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        _args.real("temperature", self.temperature, 0.0, math.inf, hi_open=True)
        _args.integer("top_k", self.top_k)
        _args.real("top_p", self.top_p, 0.0, 1.0, lo_open=True)
        _args.real("min_p", self.min_p, 0.0, 1.0, hi_open=True)
        _args.integer("seed", self.seed, 0, 2**64 - 1)
        _args.real("repeat_penalty", self.repeat_penalty, 1 / MAX_REPEAT_PENALTY, MAX_REPEAT_PENALTY)
        _args.real("frequency_penalty", self.frequency_penalty, -MAX_PENALTY, MAX_PENALTY)
        _args.real("presence_penalty", self.presence_penalty, -MAX_PENALTY, MAX_PENALTY)
        _args.integer("penalty_last_n", self.penalty_last_n, -1)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalized(self) -> bool:
        """Whether the penalties change anything (llama.cpp's test): the sampler then needs the
        token history."""
        return self.penalty_last_n != 0 and (self.repeat_penalty != 1 or self.frequency_penalty != 0
                                             or self.presence_penalty != 0)


class Sampler:
    """A seeded sampler over one vocabulary size. Rows are numpy float32 arrays (logits views)."""

    def __init__(self, n_vocab: int, params: SamplingParams):
        self.n_vocab = int(n_vocab)
        self.params = params
        raw = lib.psl_sampling_default_params()
        raw.temperature, raw.top_k, raw.top_p = params.temperature, params.top_k, params.top_p
        raw.min_p, raw.seed = params.min_p, params.seed
        raw.repeat_penalty, raw.frequency_penalty = params.repeat_penalty, params.frequency_penalty
        raw.presence_penalty, raw.penalty_last_n = params.presence_penalty, params.penalty_last_n
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

    def set_grammar(self, grammar) -> None:
        """Samples under `grammar` (an engine.grammar.Grammar; None: no constraint) from now on:
        the tokens it forbids at its current state are removed before the chain, and verify()
        scores each draft position at the grammar's state after the drafts before it."""
        self._grammar = grammar               # the core only points to it: keep it alive
        _native.check(lib.psl_sampler_set_grammar(self._s, ffi.NULL if grammar is None else grammar.handle))

    # -- the history the penalties look back on ------------------------------------------
    def push(self, tokens) -> None:
        """Appends tokens (the prompt, then each accepted token) to the penalties' history."""
        a = np.ascontiguousarray(tokens, np.int32)
        if a.size:
            _native.check(lib.psl_sampler_push(self._s, ffi.from_buffer("int32_t[]", a), a.size))

    def truncate(self, n_keep: int) -> None:
        """Keeps the first n_keep tokens of the history."""
        _native.check(lib.psl_sampler_truncate(self._s, n_keep))

    def reset(self, tokens) -> None:
        self.truncate(0)
        self.push(tokens)

    @property
    def history_len(self) -> int:
        return lib.psl_sampler_history_len(self._s)

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

    def verify_tree(self, target_logits: np.ndarray, tokens: np.ndarray, parents: np.ndarray,
                    draft_probs: np.ndarray | None) -> tuple[list[int], int]:
        """Speculative acceptance of a token tree (n nodes, parents before children, -1: the
        root) against n+1 target rows (row 0 the root's, row i+1 node i's); draft_probs: the
        q row each node was drawn from (siblings share theirs), or None for a deterministic
        drafter. Returns (the accepted nodes, root first; the next token). The rule:
        psl_sampler_verify_tree in the core's header."""
        n = int(tokens.shape[0])
        for name, a in (("tokens", tokens), ("parents", parents)):
            if a.dtype != np.int32 or not a.flags.c_contiguous or a.shape != (n,):
                raise InvalidArgumentError(f"{name} must be a C-contiguous int32 array of {n}")
        q = ffi.NULL if draft_probs is None or not n else self._row(draft_probs, n)
        path = np.empty(max(n, 1), np.int32)
        t, par = (ffi.from_buffer("int32_t[]", a) if n else ffi.NULL for a in (tokens, parents))
        _native.check(lib.psl_sampler_verify_tree(self._s, self._row(target_logits, n + 1), t, par, q, n,
                                                  ffi.from_buffer("int32_t[]", path, require_writable=True),
                                                  self._nacc, self._tok))
        return path[:self._nacc[0]].tolist(), self._tok[0]


MAX_LOGPROBS = 20          # OpenAI's top_logprobs bound


@dataclass(frozen=True)
class TokenLogprobs:
    """A generated token's log-probability under the target's softmax of its raw logits at
    temperature 1 (llama-server's n_probs, OpenAI's logprobs: before penalties, truncation and
    temperature, so it says what the model thinks, not how it was sampled), and the `top` most
    likely tokens at that position as (id, logprob), best first."""
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def top_softmax(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely ids of one logits row (best first, the lowest id on ties) and their
    probabilities under its full softmax at temperature 1, computed in the core (a greedy
    token tree's children: one pass over the vocabulary, not numpy's several)."""
    row = np.ascontiguousarray(row, np.float32)
    k = max(1, min(int(k), row.shape[-1]))
    lp = np.empty(1, np.float32)
    ids = np.empty(k, np.int32)
    top = np.empty(k, np.float32)
    _native.check(lib.psl_logprobs(ffi.from_buffer("float[]", row), row.shape[-1], 1, ffi.new("int32_t[1]"), k,
                                   ffi.from_buffer("float[]", lp), ffi.from_buffer("int32_t[]", ids),
                                   ffi.from_buffer("float[]", top)))
    return ids, np.exp(top.astype(np.float64))


def logprobs(rows: np.ndarray, tokens, n_top: int) -> list[TokenLogprobs]:
    """TokenLogprobs of tokens[i] under logits row i (rows: float32, at least len(tokens) x V),
    computed in the core."""
    t = np.ascontiguousarray(tokens, np.int32)
    n, V = len(t), rows.shape[-1]
    if rows.dtype != np.float32 or not rows.flags.c_contiguous or rows.size < n * V:
        raise InvalidArgumentError(f"expected a C-contiguous float32 array of {n} x {V}")
    lp = np.empty(n, np.float32)
    ids = np.empty((n, max(n_top, 1)), np.int32)
    top = np.empty((n, max(n_top, 1)), np.float32)
    if n:
        _native.check(lib.psl_logprobs(ffi.from_buffer("float[]", rows), V, n, ffi.from_buffer("int32_t[]", t),
                                       n_top, ffi.from_buffer("float[]", lp), ffi.from_buffer("int32_t[]", ids),
                                       ffi.from_buffer("float[]", top)))
    return [TokenLogprobs(int(t[i]), float(lp[i]),
                          tuple(zip(ids[i, :n_top].tolist(), top[i, :n_top].tolist()))) for i in range(n)]
