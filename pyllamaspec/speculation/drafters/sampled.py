"""The drafters that sample their tokens from a distribution q of their own (a draft model, the
target's MTP head) share this: each round the cost model picks how many tokens are worth
drafting, the drafter catches up on the text it has not seen, then drafts token by token, keeping
each q row for verification and stopping early where its top probability is below p_min, where
the cost model says the next token is not worth its cost, or at an end-of-generation token.
Where the logits come from is the subclass's business (next_logits)."""
from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ...engine.sampling import Sampler, SamplingParams
from ..params import DraftParams
from ..drafter import NO_DRAFT, Call, Draft, Drafter, Eval, Steps, drive

if TYPE_CHECKING:
    from ..cost_model import DraftPolicy


class SampledDrafter(Drafter):
    """A drafter with a distribution q of its own. Subclasses give next_step() (the evaluation
    that gives the logits of the next draft position) and, if they keep a cache of their own,
    pending() / catch_up_steps()."""

    SEED_MIX = (0x9E3779B97F4A7C15, 0x632BE59BD9B4E019)   # its sampler's seed, from the target's
    chosen_k: int | None = None              # the round's draft length, when chosen before propose

    def __init__(self, n_vocab: int, sampling: SamplingParams, params: DraftParams, eog: frozenset[int]):
        self.params, self.eog = params, eog
        self.greedy = sampling.greedy
        a, b = self.SEED_MIX
        self.sampler = Sampler(n_vocab, replace(sampling, seed=(sampling.seed * a + b) % 2**64))
        # penalized like the target, drafts included, so that q stays close to p
        self.penalized = sampling.penalized
        self.q = None if sampling.greedy else np.empty((params.n_draft, n_vocab), np.float32)
        self.p_max = np.zeros(params.n_draft, np.float32)
        self.out = np.empty(params.n_draft, np.int32)
        self.evals = 0                           # logits computed by the last draft()
        self.grammar = None                      # the round's grammar, if any (propose)

    @abstractmethod
    def next_step(self, token: int, k: int) -> "Eval | Call":
        """The step whose result holds the logits of draft position k, given the token before
        it (seq[-1], then each draft): one row, or a vector."""

    def next_logits(self, token: int, k: int) -> np.ndarray:
        return self._row(self.next_step(token, k).run())

    @staticmethod
    def _row(result: np.ndarray) -> np.ndarray:
        return result[0] if result.ndim == 2 else result

    def room(self) -> int:
        """Tokens its cache can still take."""
        return 1 << 30

    def pending(self, seq: list[int]) -> int:
        """Tokens catch_up() would evaluate."""
        return 0

    def catch_up_steps(self, seq: list[int]) -> Steps:
        """Evaluates the text of seq[:-1] it has not seen; returns how many tokens."""
        return 0
        yield  # noqa: unreachable - a generator

    def catch_up(self, seq: list[int]) -> int:
        return drive(self.catch_up_steps(seq))

    def prefill(self, prompt: list[int], target=None, fresh: bool = False) -> int:
        if self.penalized:                       # llama.cpp penalizes repeats of the prompt too
            self.sampler.reset(prompt)
        return 0

    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None) -> Draft:
        return drive(self.propose_steps(seq, k_cap, policy, constraint))

    def propose_steps(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None,
                      batch: bool = False) -> Steps:
        self._constrain(constraint.grammar if constraint is not None else None)
        dp = self.params
        if self.chosen_k is not None:            # chosen already this round (a tree considered)
            k_max, self.chosen_k = min(self.chosen_k, k_cap), None
        else:
            k_max = policy.choose(k_cap, self.pending(seq)) if dp.adaptive and not batch else k_cap
        if k_max <= 0:
            return NO_DRAFT
        # the cost model's first round measures a batch of START_K + 1: nothing may cut it
        first = dp.adaptive and policy.measuring
        t0 = time.perf_counter()
        n_up = yield from self.catch_up_steps(seq)
        t1 = time.perf_counter()
        # with sampling, the draft's confidence in a token tells how likely it is to be
        # accepted, and the cost model stops the draft token by token; greedy drafts carry no
        # such signal (their top probability is 1 by construction)
        per_token = dp.adaptive and not first and not self.greedy
        k = yield from self.draft_steps(int(seq[-1]), min(k_max, self.room()), 0.0 if first else dp.stop_p,
                                        policy if per_token else None)
        if not batch:                            # a batch round times its steps itself
            policy.observe_catch_up(t1 - t0, n_up)
            policy.observe_draft(time.perf_counter() - t1, self.evals)
        return Draft(self.out[:k], None if self.q is None else self.q[:k], p_max=self.p_max[:k])

    def _constrain(self, grammar) -> None:
        """Under a grammar, q is the draft's distribution with the forbidden tokens removed (its
        sampler holds the grammar, which takes each drafted token: the next row is masked at the
        state after it; the round rolls the grammar back)."""
        if grammar is not self.grammar:
            self.grammar = grammar
            self.sampler.set_grammar(grammar)

    def draft(self, first: int, k_max: int, p_min: float, policy: "DraftPolicy | None") -> int:
        """Drafts up to k_max tokens after `first` into self.out; returns how many."""
        return drive(self.draft_steps(first, k_max, p_min, policy))

    def draft_steps(self, first: int, k_max: int, p_min: float, policy: "DraftPolicy | None") -> Steps:
        k, self.evals = 0, 0
        p_all = 1.0                              # the chance that the whole draft is accepted
        tok = first
        while k < k_max:
            logits = self._row((yield self.next_step(tok, k)))
            self.evals += 1
            drafted, p_max = self.sampler.sample(logits, None if self.q is None else self.q[k])
            more = True
            if k >= self.params.n_min:
                if p_max < p_min:
                    break
                if policy is not None:
                    p_all *= policy.token_alpha(p_max)
                    keep, more = policy.keep_drafting(p_all, first=k == 0)
                    if not keep:
                        break
            self.out[k], self.p_max[k] = drafted, p_max
            k += 1
            if self.grammar is not None:
                self.grammar.accept(self.out[k - 1:k])
            if self.penalized:
                self.sampler.push(self.out[k - 1:k])
            if drafted in self.eog or not more:  # nothing worth drafting after the end
                break
            tok = int(drafted)
        return k

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        if self.penalized:                       # the history is seq again, drafts rolled back
            self.sampler.truncate(len(seq) - len(new))
            self.sampler.push(new)
