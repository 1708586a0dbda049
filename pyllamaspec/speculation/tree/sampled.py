"""Token trees from a drafter with a distribution q of its own (a draft model, the target's MTP
block): where its DraftParams ask for one (tree=True: a fixed shape, n_draft its depth; tree=None
with the cost model: a tree only where it pays, tree/policy.py), never under a grammar nor in a
batch round, the round's draft is a tree built best-first (tree_draft.TreeBuilder); the
subclass says what evaluates its nodes (new_tree). Else the chain (SampledDrafter)."""
from __future__ import annotations

import time
from abc import abstractmethod

import numpy as np

from ...engine.sampling import SamplingParams
from ..params import DraftParams
from ..drafter import Draft
from ..drafters.sampled import SampledDrafter
from .draft import TreeBuilder, TreeShape, accepted_path, children
from .policy import TreeStats, best_batch, choose as choose_tree, observe_tree


class TreeSampledDrafter(SampledDrafter):
    """A SampledDrafter that drafts token trees (see the module's docstring)."""

    pending_hint = 0             # the catch-up the round's draft needs (propose)

    def __init__(self, n_vocab: int, sampling: SamplingParams, params: DraftParams, eog: frozenset[int]):
        super().__init__(n_vocab, sampling, params, eog)
        # its own seeded draws (Gumbel-top-k)
        self.rng = np.random.default_rng([sampling.seed, 0x74726565])
        self.tree: TreeBuilder | None = None
        self.tree_draft: Draft | None = None
        self.ranks = TreeStats()             # acceptance by sibling rank, expansion cost (tree/policy.py)

    @abstractmethod
    def new_tree(self) -> TreeBuilder:
        """A builder for this round's tree, after the root's step (next_logits(seq[-1], 0))."""

    def shape(self, k_cap: int, policy, constraint) -> TreeShape | None:
        """The tree to draft this round, None for a chain: params.tree, never under a grammar
        (its state would have to follow every branch). Under penalties the children's q counts
        the text's history, not the path's: a q of its own, which the verification uses as
        drawn (exact), only less close to p."""
        dp = self.params
        if dp.tree is False or (dp.tree is None and not dp.adaptive) \
                or (constraint is not None and constraint.active) or k_cap < 1:
            return None
        k = policy.choose(k_cap, self.pending_hint) if dp.adaptive else k_cap
        self.chosen_k = k                    # a chain drafted instead does not choose again
        k = min(k, self.room() - 1)
        if k <= 0:
            return None
        if dp.tree is None:                  # the cost model decides: a tree only where it pays
            return choose_tree(policy, self.ranks, k, min(k_cap, self.room() - 1), dp.tree_width,
                               dp.tree_levels, dp.tree_nodes)
        shape = TreeShape(k, dp.tree_nodes or 2 * k, dp.tree_width, dp.tree_levels)
        return best_batch(policy, self.ranks, shape) if dp.adaptive else shape

    def propose(self, seq: list[int], k_cap: int, policy, constraint=None) -> Draft:
        self.release_tree()                  # a round that failed after drafting
        self.pending_hint = self.pending(seq)
        shape = self.shape(k_cap, policy, constraint)
        if shape is None or shape.is_chain:
            self.tree_shape = ""
            return super().propose(seq, k_cap, policy, constraint)
        self.chosen_k = None
        t0 = time.perf_counter()
        n_up = self.catch_up(seq)
        t1 = time.perf_counter()
        row0 = self.next_logits(int(seq[-1]), 0).copy()
        t2 = time.perf_counter()
        self.tree = self.new_tree()
        try:
            d = self.tree.build(int(seq[-1]), shape, row0)
        except BaseException:
            self.release_tree()
            raise
        if self.params.adaptive:             # the root is the chain's kind of step; expansions apart
            policy.observe_catch_up(t1 - t0, n_up)
            policy.observe_draft(t2 - t1, 1)
            for n, dt in self.tree.expansions:
                self.ranks.observe_expand(n, dt)
        self.tree_draft = d
        self.tree_shape = (f"depth {shape.depth}, width {shape.width} x {shape.levels} levels, {shape.nodes} nodes, "
                           f"{shape.batch} per draft evaluation")
        return d

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        if self.tree is not None:        # the tree drafted (the round may have verified its first branch)
            path = accepted_path(self.tree_draft, new)
            if draft is self.tree_draft:     # verified whole: what each sibling rank achieved
                observe_tree(self.ranks, children(draft.parents), path)
            self.tree.keep(path)
            self.tree, self.tree_draft = None, None
        super().accepted(seq, new, draft)

    def release_tree(self) -> None:
        if self.tree is not None:
            try:
                self.tree.release()
            finally:
                self.tree, self.tree_draft = None, None
