"""Speculative decoding: a draft proposes, the target verifies in one batched pass.

One round (Leviathan et al. 2023; Chen et al. 2023):
  1. the drafter proposes up to k tokens x_1..x_k: a draft model samples them from its adjusted
     distribution q (stopping early where the next token is not worth its cost, see
     cost_model.py, or below a fixed p_min); an n-gram
     drafter copies what followed the last n tokens earlier in the text (q: a point mass); the
     target's MTP head drafts from its own hidden state (drafters/);
  2. the target evaluates [last, x_1..x_k] in ONE call, giving p at k+1 positions;
  3. the core accepts x_i with probability min(1, p_i(x_i)/q_i(x_i)) (greedy: iff it is the
     target's argmax), draws the next token from norm(max(0, p_i - q_i)) at the first rejection,
     or a bonus token from p_{k+1} when all pass;
  4. the caches roll back to the accepted prefix (the target's here, a drafter's in accepted()).
The tokens produced are distributed exactly as the target's own (greedy: identical), whatever
k is, so k is free to optimize: a cost model picks it each round from the measured costs and
the running acceptance rate, and picks k = 0 (plain decoding) when speculation would not pay.

Bookkeeping: `seq` holds every token so far. The target's sequence (one of the target Model's,
leased for this generation: generations sharing a Model never mix) holds seq[:-1] between rounds
(the last token is fed with the next drafts); a drafter keeps whatever state it needs in step
(drafters/base.py). Which drafter it is never matters to the round. Several decoders' rounds
made together, verified in one target evaluation: batch.py.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..engine import _args
from ..engine.model import Model
from ..engine.sequence import Sequence
from ..engine.sampling import MAX_LOGPROBS, Sampler, SamplingParams, TokenLogprobs, logprobs as core_logprobs
from ..errors import ContextFullError, InvalidArgumentError, NoVocabularyError, PyllamaspecError
from .cost_model import DraftPolicy
from .drafters import NO_DRAFT, Draft, Drafter, make_drafter
from .pair_stats import registry
from .params import DraftParams

__all__ = ["Decoder", "DraftParams", "Stats"]


@dataclass
class Stats:
    """What a generation did and where its time went (seconds)."""
    n_prompt: int = 0
    n_generated: int = 0
    t_prompt: float = 0.0
    n_reused: int = 0            # prompt tokens the target's cache already held (not evaluated)
    n_draft_reused: int = 0      # the same for a draft model
    t_generate: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    t_draft: float = 0.0
    t_target: float = 0.0
    accepted_per_round: list[int] = field(default_factory=list)
    batch_rounds: int = 0        # rounds verified together with other sequences' (batch.py)
    batch_seqs: int = 0          # the sequences those rounds' evaluations carried, summed
    batch_plain: int = 0         # of them, rounds the batch's cost model decoded plainly

    @property
    def mean_batch(self) -> float:
        """Sequences per target evaluation, on average (1: alone)."""
        return self.batch_seqs / self.batch_rounds if self.batch_rounds else 1.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens gained per round: the accepted drafts plus the target's own token."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def prompt_tps(self) -> float:
        return self.n_prompt / self.t_prompt if self.t_prompt > 0 else 0.0

    @property
    def generate_tps(self) -> float:
        return self.n_generated / self.t_generate if self.t_generate > 0 else 0.0

    def record_round(self, drafted: int, accepted: int) -> None:
        self.rounds += 1
        self.drafted += drafted
        self.accepted += accepted
        self.accepted_per_round.append(accepted)

    @property
    def t_loop(self) -> float:
        """Time in the Python loop: generation time neither model's core accounts for."""
        return max(0.0, self.t_generate - self.t_draft - self.t_target)


class Decoder:
    """Token-level generation from a target model, with an optional drafter: a draft Model,
    "ngram" (prompt lookup), "mtp" (the target's own MTP layers) or a Drafter (drafters/).
    tokens() yields (token, from_draft) as tokens are accepted. With `logprobs` (0..20), each
    round's TokenLogprobs (the token's and the top n) are in round_logprobs, read from the
    verification's logits rows (no extra evaluation)."""

    def __init__(self, target: Model, draft: "Model | str | Drafter | None", sampling: SamplingParams,
                 draft_params: DraftParams | None = None, logprobs: int | None = None):
        self.target = target
        self.sampling = sampling
        if logprobs is not None:
            _args.integer("logprobs", logprobs, 0, MAX_LOGPROBS)
        self.n_logprobs = logprobs
        self.round_logprobs: list[TokenLogprobs] = []
        self.dp = draft_params or DraftParams()
        V = target.n_vocab
        self.t_sampler = Sampler(V, sampling)
        self.t_logits = np.empty((self.dp.n_draft + 1, V), np.float32)
        self.batch = np.empty(self.dp.n_draft + 1, np.int32)
        try:
            eog = target.eog_tokens
        except NoVocabularyError:
            eog = frozenset()
        self.drafter = make_drafter(target, draft, sampling, self.dp, eog)
        # what earlier generations learned of this target and drafter (pair_stats.py)
        self.policy = DraftPolicy(self.dp.n_draft,
                                  stats=registry.lookup(target, self.drafter.key if self.drafter else None))
        self.stats = Stats()
        self.seq: list[int] = []
        self.tseq: Sequence | None = None        # the target's sequence this generation holds

    @property
    def draft(self) -> Model | None:
        """The draft model the drafter evaluates, if it has one."""
        return self.drafter.draft_model if self.drafter is not None else None

    def sequences(self) -> list[Sequence]:
        """The model sequences this generation holds (the target's, a draft model's)."""
        d = self.drafter.draft_seq if self.drafter is not None else None
        return [s for s in (self.tseq, d) if s is not None]

    # -- prompt ---------------------------------------------------------------------------
    def open(self, prompt: list[int], fresh: bool = False, stop=None) -> None:
        """Takes a sequence of the target (and the drafter its own) for a generation after
        prompt: the one holding most of it (fresh: an empty one), waiting while every sequence
        is taken (stop() gives up, EvaluationInterrupted). prefill() opens if not done yet."""
        if self.tseq is None:
            self.tseq = self.target.lease(None if fresh else prompt[:-1], stop=stop)
        if self.drafter is not None:
            self.drafter.open(prompt, fresh, stop)

    def prefill(self, prompt: list[int], fresh: bool = False) -> None:
        """Evaluate the prompt (all but its last token, which the first round feeds). What a
        model's cache already holds of it (its longest common prefix with the cached ids: the
        previous turns of a chat) is kept, not evaluated again (fresh: nothing is kept); on
        the CPU the result is bit-identical to a fresh evaluation where the model's batched and
        one-token evaluations are (SmolLM2: yes; Gemma 3: not quite, as in llama.cpp)."""
        if not prompt:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        for m in (self.target, self.draft):
            if m is not None and len(prompt) >= m.n_ctx:
                raise ContextFullError(f"the prompt has {len(prompt)} tokens; the context holds {m.n_ctx} "
                                       f"(raise n_ctx / -c)")
        t0 = time.perf_counter()
        self.open(prompt, fresh)
        self.seq = list(prompt)
        head = np.asarray(prompt[:-1], np.int32)
        if self.sampling.penalized:              # llama.cpp penalizes repeats of the prompt too
            self.t_sampler.reset(prompt)
        if fresh:
            self.tseq.clear()
        n_keep = self.tseq.reuse_prefix(prompt[:-1])
        if n_keep < len(head):
            self.tseq.eval(head[n_keep:], logits="none")
        if self.drafter is not None:
            self.stats.n_draft_reused = self.drafter.prefill(self.seq, self.tseq, fresh)
        self.stats.n_prompt = len(prompt)
        self.stats.n_reused = n_keep
        self.stats.t_prompt = time.perf_counter() - t0

    # -- rounds ---------------------------------------------------------------------------
    def room(self) -> int:
        """Tokens the target can still take (the pending last token included)."""
        return self.target.n_ctx - len(self.seq) + 1

    def step(self, want: int | None = None) -> list[tuple[int, bool]]:
        """One round: draft, verify in one batch, accept or resample, roll back. Returns the new
        tokens, each with whether the drafter proposed it. `want`: how many more tokens the
        caller will take (max_tokens left); a round drafts no more than that needs, so nothing
        is verified only to be dropped."""
        k_cap = self._draft_cap(want)
        t_round = time.perf_counter()
        draft = self.drafter.propose(self.seq, k_cap, self.policy) if self.drafter and k_cap else NO_DRAFT
        t0 = time.perf_counter()
        self.stats.t_draft += t0 - t_round
        # the target scores [last, x_1..x_k] in one batch: p_1..p_{k+1}
        n_past = self.tseq.n_past
        p = self._score(draft)
        return self.settle(draft, p, n_past, t0, t_round)

    def settle(self, draft: Draft, p: np.ndarray, n_past: int, t0: float, t_round: float,
               batch: int = 1) -> list[tuple[int, bool]]:
        """The round after the target scored the draft (rows p, its sequence at n_past before
        them): the acceptance test, the rollback, the bookkeeping. batch: the sequences the
        target's evaluation carried (its cost is the batch's, observed by batch.py)."""
        # x_i is accepted with probability min(1, p_i(x_i)/q_i(x_i)) (greedy: iff it is the
        # argmax); the first rejection draws from norm(max(0, p_i - q_i)), else a bonus from p_{k+1}
        n_acc, nxt = self.t_sampler.verify(p, draft.tokens, draft.q)
        self.tseq.truncate(n_past + 1 + n_acc)             # roll back the rejected drafts
        dt = time.perf_counter() - t0
        self.stats.t_target += dt
        if batch == 1:
            self.policy.observe_target(draft.n + 1, dt)
        new = [int(t) for t in draft.tokens[:n_acc]] + [int(nxt)]
        self._extend(new, p)
        if self.drafter is not None:
            self.drafter.accepted(self.seq, new, draft)      # the drafter rolls back its own state
            self.policy.observe_verified(draft.n, n_acc, draft.p_max, (time.perf_counter() - t_round) / batch)
            self.stats.record_round(draft.n, n_acc)
        return [(t, i < n_acc) for i, t in enumerate(new)]

    def _draft_cap(self, want: int | None) -> int:
        """The longest draft this round may verify: n_draft, the context's room, what the caller
        still wants, and how far the target (a hybrid's recurrent snapshot ring) and the drafter
        roll back in O(1)."""
        room = self.room()
        if room < 1:
            raise ContextFullError(f"context full: {len(self.seq)} tokens, n_ctx {self.target.n_ctx}")
        k_cap = min(self.dp.n_draft, room - 1, max(0, want - 1) if want is not None else room,
                    self.target.max_rollback)
        return min(k_cap, self.drafter.max_draft) if self.drafter is not None else 0

    def batch_tokens(self, draft: Draft) -> np.ndarray:
        """The round's batch: the last token, then the draft (a chain)."""
        n = draft.n + 1
        self.batch[0] = self.seq[-1]
        self.batch[1:n] = draft.tokens
        return self.batch[:n]

    def _score(self, draft: Draft) -> np.ndarray:
        """The target's logits for the round's batch."""
        return self.tseq.eval(self.batch_tokens(draft), logits="all", out=self.t_logits)

    def _extend(self, new: list[int], rows: np.ndarray) -> None:
        """Appends a round's tokens to the text, the penalties' history and the logprobs (row i
        scored the i-th new token)."""
        if self.n_logprobs is not None:
            self.round_logprobs = core_logprobs(rows, new, self.n_logprobs)
        if self.sampling.penalized:
            self.t_sampler.push(new)
        self.seq.extend(new)

    def keep(self, n: int) -> None:
        """Drops from both caches what lies past the first n tokens of the sequence: tokens a
        round accepted beyond the output (a stop string, max_tokens), so that the caches hold
        what the caller saw and the next call's prefix reuse starts from it."""
        for s in self.sequences():
            try:
                if not s.closed and s.n_past > n:
                    s.truncate(n)
            except PyllamaspecError:      # a model that failed (a lost RPC server): its error stands
                pass

    def close(self) -> None:
        """Leaves the models as they were given (a draft model's head restored, the sequences
        given back with what they hold for the next prompt), keeping the acceptance estimates
        for the next generation with the same pair."""
        if self.drafter is not None and self.dp.adaptive and self.stats.rounds:
            self.policy.save()
        if self.drafter is not None:
            self.drafter.close()
        self._release()

    def _release(self) -> None:
        if self.tseq is not None:
            self.tseq.release()
            self.tseq = None

    def __del__(self) -> None:                # a decoder dropped without close(): its sequences go back
        try:
            self._release()
            d = self.drafter.draft_seq if self.drafter is not None else None
            if d is not None:
                d.release()
        except Exception:
            pass

    def tokens(self) -> Iterator[tuple[int, bool]]:
        """Yields (token, from_draft) forever (until the context is full)."""
        while True:
            yield from self.step()
