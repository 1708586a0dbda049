"""Speculative decoding: a draft proposes, the target verifies in one batched pass.

One round (Leviathan et al. 2023; Chen et al. 2023):
  1. the draft proposes up to k tokens x_1..x_k autoregressively, sampling from its adjusted
     distribution q (stopping early when its top probability falls below p_min);
  2. the target evaluates [last, x_1..x_k] in ONE call, giving p at k+1 positions;
  3. the core accepts x_i with probability min(1, p_i(x_i)/q_i(x_i)) (greedy: iff it is the
     target's argmax), draws the next token from norm(max(0, p_i - q_i)) at the first rejection,
     or a bonus token from p_{k+1} when all pass;
  4. both KV caches are truncated to the accepted prefix.
The tokens produced are distributed exactly as the target's own (greedy: identical).

Bookkeeping: `seq` holds every token so far. The target's cache holds seq[:-1] between rounds
(the last token is fed with the next drafts); the draft's cache holds a prefix of seq and is
brought level with the tokens it has not seen at the start of its next round.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from .errors import ContextFullError, InvalidArgumentError, NoVocabularyError
from .model import Model
from .sampling import Sampler, SamplingParams


@dataclass
class DraftParams:
    """llama.cpp's --draft-max, --draft-min, --draft-p-min."""
    n_draft: int = 16
    n_min: int = 0
    p_min: float = 0.75

    def __post_init__(self) -> None:
        if not isinstance(self.n_draft, int) or self.n_draft < 1:
            raise InvalidArgumentError(f"n_draft must be an integer >= 1, got {self.n_draft!r}")
        if not isinstance(self.n_min, int) or not 0 <= self.n_min <= self.n_draft:
            raise InvalidArgumentError(f"n_min must be in [0, n_draft], got {self.n_min!r}")
        if not isinstance(self.p_min, (int, float)) or not 0 <= self.p_min <= 1:
            raise InvalidArgumentError(f"p_min must be in [0, 1], got {self.p_min!r}")


@dataclass
class Stats:
    """What a generation did and where its time went (seconds)."""
    n_prompt: int = 0
    n_generated: int = 0
    t_prompt: float = 0.0
    t_generate: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    t_draft: float = 0.0
    t_target: float = 0.0
    accepted_per_round: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def prompt_tps(self) -> float:
        return self.n_prompt / self.t_prompt if self.t_prompt > 0 else 0.0

    @property
    def generate_tps(self) -> float:
        return self.n_generated / self.t_generate if self.t_generate > 0 else 0.0

    @property
    def t_loop(self) -> float:
        """Time in the Python loop: generation time neither model's core accounts for."""
        return max(0.0, self.t_generate - self.t_draft - self.t_target)


def _seed_for_draft(seed: int) -> int:
    return (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64


class Decoder:
    """Token-level generation from a target model, with an optional draft model.

    tokens() yields (token, from_draft) as tokens are accepted; the caller decides when to stop.
    """

    def __init__(self, target: Model, draft: Model | None, sampling: SamplingParams,
                 draft_params: DraftParams | None = None):
        self.target, self.draft = target, draft
        self.sampling = sampling
        self.dp = draft_params or DraftParams()
        V = target.n_vocab
        self.t_sampler = Sampler(V, sampling)
        k = self.dp.n_draft
        self.q: np.ndarray | None = None
        self.t_logits = np.empty((k + 1, V), np.float32)
        if draft is not None:
            if draft.n_vocab != V:
                raise InvalidArgumentError(f"draft has {draft.n_vocab} logits, target {V}")
            self.d_sampler = Sampler(V, replace(sampling, seed=_seed_for_draft(sampling.seed)))
            self.d_logits = np.empty((1, V), np.float32)
            self.q = None if sampling.greedy else np.empty((k, V), np.float32)
        self.drafts = np.empty(k, np.int32)
        try:
            self.eog = target.eog_tokens
        except NoVocabularyError:
            self.eog = frozenset()
        self.stats = Stats()
        self.seq: list[int] = []

    # -- prompt ---------------------------------------------------------------------------
    def prefill(self, prompt: list[int]) -> None:
        """Evaluate the prompt (all but its last token, which the first round feeds)."""
        if not prompt:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        for m in (self.target, self.draft):
            if m is not None and len(prompt) >= m.n_ctx:
                raise ContextFullError(f"the prompt has {len(prompt)} tokens; the context holds {m.n_ctx} "
                                       f"(raise n_ctx / -c)")
        t0 = time.perf_counter()
        self.seq = list(prompt)
        head = np.asarray(prompt[:-1], np.int32)
        self.target.clear()
        self.target.eval(head, logits="none")
        if self.draft is not None:
            self.draft.clear()
            self.draft.eval(head, logits="none")
        self.stats.n_prompt = len(prompt)
        self.stats.t_prompt = time.perf_counter() - t0

    # -- rounds ---------------------------------------------------------------------------
    def room(self) -> int:
        """Tokens the target can still take (the pending last token included)."""
        return self.target.n_ctx - len(self.seq) + 1

    def _propose(self, k_max: int) -> int:
        """Draft up to k_max tokens into self.drafts; returns how many."""
        d, dp, st = self.draft, self.dp, self.stats
        pending = self.seq[d.n_past:]           # tokens the draft has not seen, ending with the last
        k_max = min(k_max, d.n_ctx - d.n_past - len(pending) + 1)
        t0 = time.perf_counter()
        k = 0
        toks = np.asarray(pending, np.int32)
        while k < k_max:
            logits = d.eval(toks, logits="last", out=self.d_logits)
            tok, p_max = self.d_sampler.sample(logits[0], None if self.q is None else self.q[k])
            if k >= dp.n_min and p_max < dp.p_min:
                break
            self.drafts[k] = tok
            k += 1
            if tok in self.eog:          # nothing worth drafting after the end
                break
            toks = self.drafts[k - 1:k]
        st.t_draft += time.perf_counter() - t0
        return k

    def step(self) -> list[tuple[int, bool]]:
        """One round: returns the new tokens, each with whether the draft proposed it."""
        room = self.room()
        if room < 1:
            raise ContextFullError(f"context full: {len(self.seq)} tokens, n_ctx {self.target.n_ctx}")
        k = self._propose(min(self.dp.n_draft, room - 1)) if self.draft is not None else 0

        t0 = time.perf_counter()
        n_before = self.target.n_past
        batch = np.empty(k + 1, np.int32)
        batch[0] = self.seq[-1]
        batch[1:] = self.drafts[:k]
        logits = self.target.eval(batch, logits="all", out=self.t_logits)
        n_acc, nxt = self.t_sampler.verify(logits, self.drafts[:k], None if self.q is None else self.q[:k])
        self.target.truncate(n_before + 1 + n_acc)
        self.stats.t_target += time.perf_counter() - t0

        new = [(int(t), True) for t in self.drafts[:n_acc]] + [(int(nxt), False)]
        self.seq.extend(t for t, _ in new)
        if self.draft is not None:
            # keep what the draft saw of the accepted prefix; the rest it evaluates next round
            self.draft.truncate(min(self.draft.n_past, len(self.seq) - 1))
            self.stats.rounds += 1
            self.stats.drafted += k
            self.stats.accepted += n_acc
            self.stats.accepted_per_round.append(n_acc)
        return new

    def tokens(self) -> Iterator[tuple[int, bool]]:
        """Yields (token, from_draft) forever (until the context is full)."""
        while True:
            yield from self.step()
