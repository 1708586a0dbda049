"""The drafter interface: what the Decoder's round asks of any drafter (drafters/ holds one
module per drafter).

A round: propose() a draft for the text so far; the target verifies it in one batch; accepted()
tells the drafter which tokens became text, and it rolls its own state back to them. The round
never asks which kind of drafter it holds.

Shapes a drafter may propose:
- a chain (parents None): x_1..x_k, each following the one before;
- a tree: nodes in an order where a parent comes before its children, parents[i] the index of
  node i's parent (-1: the last token of the text). Verifying a tree needs tree attention in
  the target's batch and a multi-draft acceptance rule (speculation/tree/verify.py); a draft model or
  the MTP head (tree/sampled.py, tree/draft.py) and the n-gram drafter propose one where their
  DraftParams ask for it.
A drafter that reads the target's hidden states (the MTP head, EAGLE-3, DFlash) holds the target
and has its context keep those rows while it verifies (the core keeps them: csrc/engine/mtp.h,
csrc/engine/head.h), so verification stays one target eval and the round does not change.

Drafting for several sequences at once (speculation/batch.py): propose_steps() is propose() as a
generator that yields each evaluation it needs (an Eval of a model sequence, or a Call) and is
sent back its result, so that a batch round runs the same step of every sequence's draft as one
evaluation per model. propose() drives it alone (drive()). A drafter that evaluates nothing just
returns its draft.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator

import numpy as np

if TYPE_CHECKING:
    from ..engine.model import Model
    from ..engine.sequence import ContextSequence
    from .cost_model import DraftPolicy


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


@dataclass
class Eval:
    """An evaluation a drafter needs: tokens appended to a model sequence, logits "last" or
    "none"; its result is the logits rows. Those of several drafters on one model run as one
    Model.decode."""
    seq: "ContextSequence"
    tokens: np.ndarray
    logits: str = "last"
    out: np.ndarray | None = None

    def run(self) -> np.ndarray:
        return self.seq.eval(self.tokens, logits=self.logits, out=self.out)


@dataclass
class Call:
    """Any other step a drafter needs (an MTP draft step): run alone."""
    fn: Callable[[], Any]

    def run(self) -> Any:
        return self.fn()


Steps = Generator["Eval | Call", Any, Any]


def drive(steps: Steps) -> Any:
    """Runs a drafter's steps one by one; returns what the generator returns."""
    try:
        req = next(steps)
        while True:
            req = steps.send(req.run())
    except StopIteration as e:
        return e.value


class Drafter(ABC):
    """What every drafter implements. `key` names the drafter for what is learned about it with
    a target (speculation/pair_stats.py); `draft_model` is the Model it evaluates besides the
    target, if any (a cancel interrupts it too; the decoder trims its cache with the target's)."""

    key: str = ""
    draft_model: "Model | None" = None
    cost_per_round: bool = False   # a draft costs one pass whatever its length (DraftPolicy.per_round)
    draft_seq: "ContextSequence | None" = None     # the draft model's sequence this generation holds
    # the target sequences it can follow at once: 1 for a draft head (the core keeps its
    # features for the target's sequence 0 only), refused in batched generation / parallel slots
    max_sequences: int = 1 << 30
    tree_shape: str = ""     # the shape of its last tree draft, for the stats ("" : chains)
    mode: str = ""           # how its tokens become the target's, for the stats (Stats.draft_mode)

    def open(self, prompt: list[int], fresh: bool = False, stop: "Callable[[], bool] | None" = None) -> None:
        """Takes what it evaluates in for a generation after `prompt` (a draft model's
        sequence: the one holding most of the prompt, or an empty one when fresh), before
        anything is evaluated, waiting while none is free (stop() gives up)."""

    def see_images(self, images) -> None:
        """The generation's ImagePrompt (vision/prompt.py), or None, before open(): a drafter
        that evaluates a model of its own may read the images' rows there (a draft model:
        drafters/model.py); the others see the prompt's text ids, the images as placeholders."""

    def prefill(self, prompt: list[int], target: "ContextSequence | None" = None, fresh: bool = False) -> int:
        """Prepares for a generation after `prompt` (whose last token the first round feeds) in
        the target's sequence `target`; returns how many prompt tokens it reused from an
        earlier generation (fresh: none)."""
        return 0

    def prefill_later(self, prompt: list[int], target: "ContextSequence | None" = None, fresh: bool = False) -> int:
        """prefill() where the next rounds are not expected to draft (a batch decoding plainly):
        a drafter with a model of its own may leave the prompt to its catch-up (drafts then see
        less of it; the output is the target's either way)."""
        return self.prefill(prompt, target, fresh)

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

    def propose_steps(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None,
                      batch: bool = False) -> Steps:
        """propose() as steps (see the module's docstring). batch: a batch round, whose caller
        sets k_cap (the cost model of the batch) and measures the draft's time."""
        return self.propose(seq, k_cap, policy, constraint)
        yield  # noqa: unreachable - makes this a generator that asks for nothing

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        """The round made `new` text (seq ends with it): the accepted prefix of draft and the
        target's own token. The drafter rolls back whatever else it evaluated."""

    def close(self) -> None:
        """Leaves the models it was given as they were (and gives back its sequence)."""
