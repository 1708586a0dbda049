"""The drafter interface: what the Decoder's round asks of any drafter.

A round: propose() a draft for the text so far; the target verifies it in one batch; accepted()
tells the drafter which tokens became text, and it rolls its own state back to them. The round
never asks which kind of drafter it holds.

Shapes a drafter may propose:
- a chain (parents None): x_1..x_k, each following the one before;
- a tree: nodes in an order where a parent comes before its children, parents[i] the index of
  node i's parent (-1: the last token of the text). Verifying a tree needs tree attention in
  the target's batch and a multi-draft acceptance rule (the token-trees issue); no drafter
  proposes one yet.
A drafter that reads the target's hidden states (the MTP head, EAGLE-3, DFlash) holds the target
and has its context keep those rows while it verifies (the core keeps them: csrc/engine/mtp.h,
csrc/engine/head.h), so verification stays one target eval and the round does not change.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ...engine.model import Model
    from ..cost_model import DraftPolicy


@dataclass
class Draft:
    """One round's proposal.

    tokens: int32 [n], the drafted tokens (a chain, or a tree's nodes).
    q: float32 [n, n_vocab], the drafter's adjusted distribution each token was drawn from, for
       the min(1, p/q) test and the residual norm(max(0, p - q)); None: point masses (a
       deterministic drafter, or greedy decoding, where acceptance compares with the argmax).
    parents: int32 [n] for a tree (see the module's docstring); None: a chain.
    p_max: float32 [n], the drafter's confidence in each token (its top probability), from
       which the cost model learns acceptance by confidence; None: it has none.
    n_forced: how many of the tokens, at the end, a grammar forced (free drafts appended by
       the round's constraint, speculation/constraint.py), not proposed by the drafter.
    """
    tokens: np.ndarray
    q: np.ndarray | None = None
    parents: np.ndarray | None = None
    p_max: np.ndarray | None = None
    n_forced: int = 0

    @property
    def n(self) -> int:
        return len(self.tokens)


NO_DRAFT = Draft(np.empty(0, np.int32))


class Drafter(ABC):
    """What every drafter implements. `key` names the drafter for what is learned about it with
    a target (speculation/pair_stats.py); `draft_model` is the Model it evaluates besides the
    target, if any (a cancel interrupts it too; the decoder trims its cache with the target's)."""

    key: str = ""
    draft_model: "Model | None" = None
    cost_per_round: bool = False   # a draft costs one pass whatever its length (DraftPolicy.per_round)

    def prefill(self, prompt: list[int]) -> int:
        """Prepares for a generation after `prompt` (whose last token the first round feeds);
        returns how many prompt tokens it reused from an earlier generation."""
        return 0

    @property
    def max_draft(self) -> int:
        """The longest draft it can roll back after (a recurrent draft's snapshot ring)."""
        return 1 << 30

    @property
    def n_max(self) -> int | None:
        """The longest draft it proposes when its own size caps it (llama.cpp's n-gram kinds:
        size_m, n_max), in place of --draft-max; None: --draft-max (DraftParams.n_draft)."""
        return None

    @abstractmethod
    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy",
                constraint=None) -> Draft:
        """A draft of at most k_cap tokens to follow seq (the target's cache holds seq[:-1]).
        The cost model (policy) measures the drafter's cost and, where the decoder's params say
        adaptive, sizes the draft; the draft may be empty (plain decoding this round). Under a
        grammar (constraint: a speculation.constraint.Constraint, active) a drafter that samples its tokens must draw them from its
        distribution with the forbidden tokens removed (SampledDrafter does); the round cuts any
        draft before a token the grammar forbids (right for point-mass drafts only)."""

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        """The round made `new` text (seq ends with it): the accepted prefix of draft and the
        target's own token. The drafter rolls back whatever else it evaluated."""

    def close(self) -> None:
        """Leaves the models it was given as they were."""
