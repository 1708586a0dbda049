"""Suffix drafting (--spec-type suffix, draft_model="suffix"; SuffixDecoding, Oliaro et al. 2025):
drafts what most often followed the longest match of the text's end, in the current request's
text (its prompt and answer so far) and in the earlier requests' prompts and answers of the
process (suffix_index.py: one corpus per target Model, shared by a server's slots, bounded, the
oldest text dropped first). Each source gives the most frequent continuation of its longest match
(a walk down its occurrences, suffix_index.walk), at most factor x the match's length and while
the draft's empirical probability stays above min_prob; the draft with the larger expected
number of accepted tokens (the sum of those probabilities) wins the round. A request's text joins
the corpus when it ends (Drafter.close), so later requests draft from it; it reaches another's
output only as the target verifies it.

Deterministic given the text, so q is a point mass, as the other n-gram kinds': greedy output is
the target's, sampled output keeps its distribution. Drafts are chains (on a CPU token trees do
not pay for a model-free drafter: tree/policy.py). The cost model sizes them like the n-gram
drafters', its acceptance kept per (match length's octave, first token's probability >= 0.8)."""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from ...drafter import Draft, Drafter
from ...params import DraftParams
from .suffix_index import SEP, corpus_of, longest_match, walk

if TYPE_CHECKING:
    from ...cost_model import DraftPolicy


class SuffixDrafter(Drafter):
    """See the module's docstring."""

    key = "suffix"

    def __init__(self, params: DraftParams, target=None):
        self.params = params
        sp = params.ngrams.suffix
        self.sp = sp
        self.corpus = corpus_of(target, sp.max_tokens, sp.max_depth)
        self.text = np.full(256, SEP, np.int32)      # this request's text, SEP past its end
        self.n = 0
        self.match = 0                                # the last draft's match length
        self.source = ""                              # "request" or "corpus": where it came from

    # -- this request's text ---------------------------------------------------------------
    def _sync(self, seq: list[int]) -> None:
        if len(seq) < self.n or (self.n and int(self.text[self.n - 1]) != seq[self.n - 1]):
            self.n = 0                                # another text: start over
        if len(seq) + self.params.n_draft + 1 > len(self.text):
            grown = np.full(2 * (len(seq) + self.params.n_draft + 1), SEP, np.int32)
            grown[:self.n] = self.text[:self.n]
            self.text = grown
        if len(seq) > self.n:
            self.text[self.n:len(seq)] = seq[self.n:]
            self.n = len(seq)

    def prefill(self, prompt: list[int], target=None, fresh: bool = False) -> int:
        self.n = 0
        self._sync(prompt)
        return 0

    # -- drafting ----------------------------------------------------------------------------
    def lookup(self, seq: list[int], k_max: int) -> tuple[list[int], list[float]]:
        """The better of the two sources' drafts (see the module's docstring)."""
        self._sync(seq)
        best: tuple[list[int], list[float]] = ([], [])
        best_score, self.match, self.source = 0.0, 0, ""
        depth = self.sp.max_depth
        ctx = self.text[max(0, self.n - depth):self.n]
        for source, (m, starts, text) in (
                ("request", (*longest_match(self.text, self.n, depth), self.text[:self.n])),
                ("corpus", self.corpus.match(ctx))):
            if not m:
                continue
            cap = min(k_max, max(1, math.floor(self.sp.factor * m)))
            toks, probs = walk(text, starts, cap, self.sp.min_prob)
            score = sum(probs)
            if score > best_score:
                best, best_score, self.match, self.source = (toks, probs), score, m, source
        return best

    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None) -> Draft:
        t0 = time.perf_counter()
        toks, probs = self.lookup(seq, k_cap) if k_cap > 0 else ([], [])
        found = k = len(toks)
        if found and self.params.adaptive:
            policy.select(("suffix", min(self.match.bit_length(), 6), probs[0] >= 0.8))
            k = min(found, policy.choose(found))
        policy.observe_draft(time.perf_counter() - t0, max(found, 1))
        return Draft(np.asarray(toks[:k], np.int32))

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        self._sync(seq)

    def close(self) -> None:
        """The request's text joins the corpus the later requests draft from."""
        if self.n > 1:
            self.corpus.add(self.text[:self.n].copy())
        self.n = 0
