"""The cost model's choice between a chain and a token tree (speculation/tree/verify.py).

What is measured: the target's cost of verifying n rows (DraftPolicy.c_target, the verify cost
curve: trees add its larger batches), the draft's cost of one token (DraftPolicy.c_draft, the
root's evaluation in a tree round) and of an expansion by the number of nodes it evaluates
(TreeStats.c_expand: one draft evaluation of b nodes in their branch sequences, kept apart so
that the chain's per-token cost stays the chain's; on a CPU two nodes may cost three times one,
on a GPU about one: the batch b is chosen from it), and the acceptance by
sibling rank: a_0 is the chain's (the draft's first choice), a_r (r >= 1) the chance that the
draft's (r+1)-th choice is the target's when choices 0..r-1 were not, counted at every node a
tree round's verification walked through.

The model (the fixed shape of tree_draft.TreeShape: up to `width` children at the first `levels`
levels, chains below): a node with m children is passed with s_m = 1 - prod_{r<m} (1 - a_r); a
round of depth D yields 1 + sum_{d=1..D} prod_{j<d} s_{m_j} tokens and costs the draft's
root's evaluation and its expansions (about max(D - 1, nodes / b) of them, b nodes each) plus
c_target(nodes + 1). The tree is drafted when
its expected tokens per second beat the best chain's by MARGIN; a_r are optimistic bounds
(as for the chain's a) so an untried tree gets tried, and one that does not pay is dropped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..cost_model import cost_at, updated_cost
from .draft import TreeShape


@dataclass
class TreeStats:
    """(accepted, rejected) per sibling rank r >= 1, slowly forgetting; the seconds an expansion
    takes (None: not measured yet)."""
    FORGET = 0.97
    PRIOR = (0.6, 1.4)                   # mean 0.3, worth 2 observations: worth a try
    counts: list[tuple[float, float]] = field(default_factory=list)
    c_expand: dict[int, float] = field(default_factory=dict)

    def observe_expand(self, n_nodes: int, seconds: float) -> None:
        if n_nodes > 0:
            self.c_expand[n_nodes] = updated_cost(self.c_expand.get(n_nodes), seconds)

    def expand_cost(self, b: int, c_draft: float) -> float:
        """Seconds an expansion of b nodes takes: measured, else interpolated (cost_at), else the
        chain's per-token draft cost (optimistic: a tree untried gets tried, then measured)."""
        return cost_at(self.c_expand, b) if self.c_expand else c_draft

    def upper(self, r: int) -> float:
        a, b = self.counts[r - 1] if r - 1 < len(self.counts) else self.PRIOR
        n = a + b
        m = a / n
        return min(1.0, m + math.sqrt(m * (1 - m) / (n + 1)))

    def observe(self, r: int, ok: bool) -> None:
        while len(self.counts) < r:
            self.counts.append(self.PRIOR)
        a, b = self.counts[r - 1]
        self.counts[r - 1] = (a * self.FORGET + ok, b * self.FORGET + (not ok))


def observe_tree(stats: TreeStats, kids: list[list[int]], path: list[int]) -> None:
    """The ranks tried at each node the verification walked: the accepted child's rank (the
    ranks before it failed), or all of them failed."""
    node = -1
    for step in range(len(path) + 1):
        ch = kids[node + 1]
        won = ch.index(path[step]) if step < len(path) else len(ch)
        for r in range(1, min(won + 1, len(ch))):
            stats.observe(r, r == won)
        if step == len(path):
            return
        node = path[step]


def expected_tokens(a0: float, stats: TreeStats, shape: TreeShape) -> float:
    """Expected tokens of a round with this shape (see the module's docstring)."""
    def passed(m: int) -> float:
        miss = 1.0 - a0
        for r in range(1, m):
            miss *= 1.0 - stats.upper(r)
        return 1.0 - miss
    total, reach = 1.0, 1.0
    for d in range(shape.depth):
        reach *= passed(shape.kids(d))
        total += reach
    return total


def full_nodes(shape: TreeShape) -> int:
    """Nodes of the whole shape, before the budget."""
    n, width = 0, 1
    for d in range(shape.depth):
        width *= shape.kids(d)
        n += width
    return min(n, shape.nodes)


MARGIN = 0.03


def choose(policy, stats: TreeStats, k: int, k_cap: int, width: int, levels: int, nodes: int) -> TreeShape | None:
    """The tree for a round whose chain would draft k tokens (DraftPolicy.choose; at most k_cap),
    or None when no tree of depth k or k + 1 beats that chain (the chain is then drafted)."""
    if k < 1 or width < 2 or policy.c_draft is None or 1 not in policy.c_target:
        return None
    a0 = policy.alpha_upper
    chain = policy.expected_tokens(a0, k) / policy.round_cost(k, a0)
    best, best_rate = None, chain * (1 + MARGIN)
    for depth in sorted({k, min(k + 1, k_cap)}):
        for lv in range(1, levels + 1):
            n = full_nodes(TreeShape(depth, nodes or 2 * depth, width, lv))
            tokens = expected_tokens(a0, stats, TreeShape(depth, n, width, lv))
            rows = verify_rows(policy, TreeShape(depth, n, width, lv))
            for b in BATCHES:
                cost = (draft_seconds(policy, stats, depth, n, b) + policy.catch_up_cost(depth, a0)
                        + policy.target_cost(rows))
                if tokens / cost > best_rate:
                    best, best_rate = TreeShape(depth, n, width, lv, b), tokens / cost
    return best


BATCHES = (1, 2, 4)          # nodes per expansion the cost model weighs


def verify_rows(policy, shape: TreeShape) -> int:
    """The target's rows for a tree: its nodes and the root, or (a hybrid target) every branch
    whole, the root included."""
    if not policy.tree_whole_branches:
        return shape.nodes + 1
    return min(shape.width ** min(shape.levels, shape.depth), shape.nodes) * (shape.depth + 1)


def draft_seconds(policy, stats: TreeStats, depth: int, n: int, b: int) -> float:
    """The root's evaluation and the expansions: the chain's depth - 1 at least (each main node
    needs its parent's), n / b if more."""
    return policy.draft_cost(1) + max(depth - 1, math.ceil(n / b)) * stats.expand_cost(b, policy.c_draft)


def best_batch(policy, stats: TreeStats, shape: TreeShape) -> TreeShape:
    """A fixed shape (tree=True) with the cheapest nodes per expansion measured."""
    if policy.c_draft is None or not stats.c_expand:
        return shape
    b = min(BATCHES, key=lambda b: draft_seconds(policy, stats, shape.depth, shape.nodes, b))
    return TreeShape(shape.depth, shape.nodes, shape.width, shape.levels, b)
