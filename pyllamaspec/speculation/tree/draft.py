"""A token tree drafted best-first (SpecExec, Sequoia): the most probable nodes are expanded
first, several in one draft evaluation, until the node budget is spent. TreeBuilder is the shape
and the priorities, whatever evaluates a node; TreeDraft evaluates them in a draft model's
sequences, the MTP drafter (mtp.py) in its target's MTP block.

Where the nodes live in the draft model's cache: the root (the text's last token) is evaluated
in the drafter's own sequence; a node's first evaluated child continues its parent's sequence,
every other one a spare sequence that starts as a copy of the parent's path (shared KV cells,
ContextSequence.copy_from). After verification, keep() makes the drafter's sequence hold the accepted
path and gives the spares back.

The chain's draft (every first child, to the full depth) is always in the tree, so that a tree
round never yields less than the chain's; the rest of the budget goes best-first. Which nodes a
tree holds must not depend on a node's own drawn token (nor on tokens drawn after it), or the
multi-draft acceptance rule of a sampled round stops being exact (speculation/tree/verify.py): node v's
children are drawn at once from q_v without replacement (Gumbel-top-k) and enter in their draw
order, the r-th with priority cum(v) * (the r-th largest q_v): a property of the distribution,
not of the draw. (Greedy: the r-th child is the r-th most probable token.)
"""
from __future__ import annotations

import heapq
import itertools
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from ...engine.model import Model
from ...engine.sampling import top_softmax
from ...engine.sequence import ContextSequence
from ..drafter import Draft


@dataclass
class TreeShape:
    """depth: the longest branch (n_draft); nodes: the node budget; a node at depth < levels
    gets up to `width` children, deeper ones 1 (the root is depth 0); batch: the nodes
    expanded per draft evaluation (best-first)."""
    depth: int
    nodes: int
    width: int = 2
    levels: int = 2
    batch: int = 4

    def kids(self, depth: int) -> int:
        return self.width if depth < self.levels else 1

    @property
    def is_chain(self) -> bool:
        return self.width <= 1 or self.levels <= 0 or self.nodes <= self.depth


@dataclass
class _Expanded:
    """A node whose children are drawn: their tokens in draw order, their probabilities, the
    priorities they enter with, the q they were drawn from."""
    node: int
    depth: int
    cum: float
    tokens: np.ndarray
    probs: np.ndarray
    ranked: np.ndarray
    q: np.ndarray | None
    p_max: float
    main: bool                  # on the chain's draft (the root, or a first child of one)


_MAIN = -math.inf               # the priority of the chain's next node: taken first


@dataclass
class _Tree:
    """The nodes so far (parents before children) and the candidates (a heap of (-priority,
    tie, expanded node, rank))."""
    toks: list = field(default_factory=list)
    parents: list = field(default_factory=list)
    qrows: list = field(default_factory=list)
    pmax: list = field(default_factory=list)
    exp: list = field(default_factory=list)
    heap: list = field(default_factory=list)
    tie: "itertools.count" = field(default_factory=itertools.count)


class TreeBuilder(ABC):
    """One round's tree, best-first (see the module's docstring); a subclass evaluates nodes."""

    def __init__(self, sampler, greedy: bool, rng: np.random.Generator, eog: frozenset[int]):
        self.sampler, self.greedy, self.rng, self.eog = sampler, greedy, rng, eog
        self.expansions: list[tuple[int, float]] = []   # (nodes, seconds) of each draft evaluation

    @abstractmethod
    def _eval(self, grow: list, toks: list[int]) -> list[np.ndarray | None]:
        """The draft logits after each node of grow ((node, its parent's _Expanded, rank)), in
        one draft evaluation where it can; None: the node stays a leaf. Appends (nodes,
        seconds) to self.expansions."""

    def keep(self, path: list[int]) -> None:
        """After verification: the drafter keeps what it evaluated of the accepted path."""
        self.release()

    def release(self) -> None:
        """Gives back what the tree took."""

    # -- children of an evaluated node -------------------------------------------------------
    def _children(self, row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """(tokens in draw order, their q, the sorted top-k q, q or None for greedy)."""
        if self.greedy:                          # the top k of the softmax, in the core
            top, pr = top_softmax(row, k)
            return top, pr, pr, None
        q = self.sampler.probs(row)
        support = np.flatnonzero(q > 0)
        k = min(k, len(support))
        # Gumbel-top-k: the k largest log q + G are k draws from q without replacement, in order
        keys = np.log(q[support].astype(np.float64)) + self.rng.gumbel(size=len(support))
        pick = support[np.argsort(-keys, kind="stable")[:k]]
        ranked = np.sort(q[support])[::-1][:k].astype(np.float64)
        return pick.astype(np.int32), q[pick].astype(np.float64), ranked, q

    # -- the tree ------------------------------------------------------------------------------
    def build(self, first: int, shape: TreeShape, row0: np.ndarray) -> Draft:
        """The tree after `first` (whose draft logits are row0: the drafter just evaluated it in
        its own sequence), at most shape.nodes nodes, no branch deeper than shape.depth. The
        chain's draft comes first (each main node's first child, to the full depth: the tree
        holds what the chain would, so it never yields less); the other nodes, best-first, take
        what the budget leaves."""
        t = _Tree()
        self._expand(-1, 0, 1.0, True, row0, shape, t)
        main_taken = 0
        while t.heap and len(t.toks) < shape.nodes:
            main_open = any(k == _MAIN for k, *_ in t.heap)
            reserve = shape.depth - main_taken if main_open else 0
            new = []
            while t.heap and len(new) < shape.batch and len(t.toks) < shape.nodes:
                is_main = t.heap[0][0] == _MAIN
                if not is_main and len(t.toks) + reserve >= shape.nodes:
                    break                        # what is left belongs to the chain's draft
                new.append(self._take(t))
                if is_main:
                    main_taken, reserve = main_taken + 1, reserve - 1
            if not new or len(t.toks) >= shape.nodes:
                break
            grow = [(i, e, r) for i, e, r in new if e.depth + 1 < shape.depth and t.toks[i] not in self.eog]
            rows = self._eval(grow, t.toks)
            for (i, e, r), row in zip(grow, rows):
                if row is not None:
                    self._expand(i, e.depth + 1, e.cum * float(e.probs[r]), e.main and r == 0, row, shape, t)
        q = None if self.greedy or not t.toks else np.stack(t.qrows).astype(np.float32)
        return Draft(np.asarray(t.toks, np.int32), q, np.asarray(t.parents, np.int32),
                     np.asarray(t.pmax, np.float32))

    def _take(self, t: "_Tree") -> tuple[int, _Expanded, int]:
        """The best candidate joins the tree; its next sibling (in draw order) becomes one."""
        _, _, e_i, r = heapq.heappop(t.heap)
        e = t.exp[e_i]
        t.toks.append(int(e.tokens[r]))
        t.parents.append(e.node)
        t.qrows.append(e.q)
        t.pmax.append(e.p_max)
        if r + 1 < len(e.tokens):
            heapq.heappush(t.heap, (-e.cum * e.ranked[r + 1], next(t.tie), e_i, r + 1))
        return len(t.toks) - 1, e, r

    def _expand(self, node: int, depth: int, cum: float, main: bool, row: np.ndarray, shape: TreeShape,
                t: "_Tree") -> None:
        tokens, probs, ranked, q = self._children(row, shape.kids(depth))
        if not len(tokens):
            return
        t.exp.append(_Expanded(node, depth, cum, tokens, probs, ranked, q, float(ranked[0]), main))
        heapq.heappush(t.heap, (_MAIN if main else -cum * ranked[0], next(t.tie), len(t.exp) - 1, 0))


class TreeDraft(TreeBuilder):
    """One round's tree in a draft model's sequences (see the module's docstring)."""

    def __init__(self, model: Model, main: ContextSequence, sampler, greedy: bool, rng: np.random.Generator,
                 eog: frozenset[int]):
        super().__init__(sampler, greedy, rng, eog)
        self.model, self.main = model, main
        self.spares: list[ContextSequence] = []
        self.node_seq: dict[int, tuple[ContextSequence, int]] = {}    # an evaluated node: where its path is
        self.root_n = 0

    def build(self, first: int, shape: TreeShape, row0: np.ndarray) -> Draft:
        self.root_n = len(self.main._cache_ids)
        return super().build(first, shape, row0)

    def _path_seq(self, node: int) -> tuple[ContextSequence, int]:
        """A draft sequence holding the path to node (root: the drafter's own), and its length."""
        return (self.main, self.root_n) if node < 0 else self.node_seq[node]

    def _eval(self, grow: list, toks: list[int]) -> list[np.ndarray | None]:
        """Evaluates the nodes to expand in one draft call, each in a sequence holding its
        parent's path; a node that gets no sequence (none free) stays a leaf (None)."""
        seqs, batch, keep = [], [], []
        used: set[int] = set()
        for i, e, r in grow:
            s, n = self._path_seq(e.node)
            if len(s._cache_ids) != n or s.id in used:
                spare = self.model.lease_spare(1)
                if not spare:
                    keep.append(False)
                    continue
                self.spares.append(spare[0])
                spare[0].copy_from(s, n)
                s = spare[0]
            used.add(s.id)
            self.node_seq[i] = (s, n + 1)
            seqs.append(s)
            batch.append(toks[i])
            keep.append(True)
        if not batch:
            return [None] * len(grow)
        t0 = time.perf_counter()
        rows = self.model.decode_batch(np.asarray(batch, np.int32), seqs)
        self.expansions.append((len(batch), time.perf_counter() - t0))
        out, j = [], 0
        for k in keep:
            out.append(rows[j] if k else None)
            j += k
        return out

    # -- after verification ------------------------------------------------------------------
    def keep(self, path: list[int]) -> None:
        """The drafter's sequence takes the accepted path's evaluated part; the spares go back."""
        deepest = next((i for i in reversed(path) if i in self.node_seq), None)
        if deepest is not None:
            s, n = self.node_seq[deepest]
            if s is not self.main:
                self.main.copy_from(s, n)
        self.release()

    def release(self) -> None:
        for s in self.spares:
            try:
                if not s.closed:
                    s.clear()
            finally:
                s.release()
        self.spares = []


def children(parents: np.ndarray) -> list[list[int]]:
    """kids[v + 1]: the children of node v (v = -1: the root), in node order (draw order)."""
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents.tolist()):
        kids[p + 1].append(i)
    return kids


def accepted_path(draft: Draft, new: list[int]) -> list[int]:
    """The nodes of the tree that became text: new[:-1] followed from the root."""
    path, node = [], -1
    for t in new[:-1]:
        nxt = next((i for i in range(draft.n) if draft.parents[i] == node and draft.tokens[i] == t), None)
        if nxt is None:
            break
        path.append(nxt)
        node = nxt
    return path
