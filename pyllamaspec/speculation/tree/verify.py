"""Token trees verified in one target evaluation, exactly (the token-trees issue).

A tree draft (drafter.py: tokens, parents; parents before children) is scored in ONE
target call: every root-to-leaf path gets a spare sequence of the target that starts as a copy
of the generation's sequence (ContextSequence.copy_from: shared KV cells), and each node is put in the
batch once, in the sequences of all the branches through it: it attends as the first of them,
to its ancestors and the text (csrc/engine/batch.h: a tree attention mask for free). A hybrid
target (a recurrent state per sequence), or one whose MTP block is enabled (its hidden rows by
sequence), takes one sequence per token: there every branch is laid out whole (the shared nodes
repeated; exact, more rows). Then the longest accepted path is copied back into the generation's sequence and the branches dropped: both caches hold the text.

Acceptance, walking down from the root, with p the target's adjusted distribution at the node
(penalized by the history and the path to it), runs in the core (psl_sampler_verify_tree,
csrc/engine/sampling_tree.cpp) on the target's rows, with the sampler's seeded stream:
- greedy: follow the child equal to the target's argmax; else emit the argmax (plain greedy's
  token, so the text is plain greedy's, token for token);
- sampled, the children x_1..x_m drawn from q WITHOUT replacement (Gumbel-top-k, drafters/
  tree/draft.py): recursive rejection sampling (Jeon et al. 2024, "Recursive Speculative
  Decoding: Accelerating LLM Inference via Sampling Without Replacement", Thm. 3.1; the same
  rule as SpecTr's k-sequential selection for one draft per step, Sun et al. 2023, and
  SpecInfer's multi-step speculative sampling, Miao et al. 2024): p_1 = p, q_1 = q; accept
  x_i with probability min(1, p_i(x_i) / q_i(x_i)); on rejection p_{i+1} = norm(max(0, p_i - q_i))
  and q_{i+1} = q_i without x_i, renormalized (the law of the next draw without replacement);
  all rejected: a token from p_{m+1}. Each step is one ordinary speculative step (exact for any
  draft distribution) whose residual target is served by the next sibling, so the token is
  distributed as p; a deterministic drafter (q: point masses) makes this "draw y ~ p, follow
  the child y if there is one". Which siblings a tree holds may not depend on their own drawn
  tokens (tree/draft.py's priorities see to it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...engine.model import Model
from ...engine.sampling import Sampler
from ...engine.sequence import ContextSequence
from ..drafter import Draft
from .draft import children


def depths(parents: np.ndarray) -> np.ndarray:
    d = np.zeros(len(parents), np.int32)
    for i, p in enumerate(parents.tolist()):
        d[i] = 1 if p < 0 else d[p] + 1
    return d


def leaves(parents: np.ndarray) -> list[int]:
    has_kid = np.zeros(len(parents), bool)
    has_kid[parents[parents >= 0]] = True
    return [i for i in range(len(parents)) if not has_kid[i]]


def main_chain(draft: Draft) -> Draft:
    """The tree's first branch as a chain (each node's first child): what is verified when no
    spare sequence is free."""
    idx, node, kids = [], -1, children(draft.parents)
    while kids[node + 1]:
        node = kids[node + 1][0]
        idx.append(node)
    sel = np.asarray(idx, np.int64)
    return Draft(draft.tokens[sel], None if draft.q is None else draft.q[sel], None,
                 None if draft.p_max is None else draft.p_max[sel])


def prune(draft: Draft, m: int) -> Draft:
    """The tree cut to m branches: the chain's draft's and the m - 1 first others (node order:
    best-first). Greedy only: in a sampled round which siblings stay must not depend on the
    draws (module docstring), and which branches are first does."""
    node, kids = -1, children(draft.parents)
    while kids[node + 1]:                    # the chain's draft's leaf
        node = kids[node + 1][0]
    chosen = [node] + [x for x in leaves(draft.parents) if x != node][:m - 1]
    keep = sorted({i for x in chosen for i in path_of(draft.parents, x)})
    new_id = {old: i for i, old in enumerate(keep)}
    sel = np.asarray(keep, np.int64)
    parents = np.asarray([new_id.get(int(draft.parents[i]), -1) for i in keep], np.int32)
    return Draft(draft.tokens[sel], None if draft.q is None else draft.q[sel], parents,
                 None if draft.p_max is None else draft.p_max[sel])


def path_of(parents: np.ndarray, node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = int(parents[node])
    return out[::-1]


@dataclass
class TreeRound:
    """What a verified tree leaves for the round's bookkeeping."""
    path: list[int]        # the accepted nodes, root first
    branch: int            # the leaf index (in leaves()) of the branch kept, -1: none
    nodes: int             # nodes verified
    rows: int              # target rows evaluated (a hybrid's repeated nodes count)


class TreeVerifier:
    """Scores tree drafts for one generation's target sequence (see the module's docstring)."""

    def __init__(self, target: Model, sampler: Sampler):
        self.target, self.sampler = target, sampler
        self.branches: list[ContextSequence] = []
        self.leaf_seq: dict[int, ContextSequence] = {}
        self.rows = 0
        self.kept: list[int] = []      # the nodes of the branch kept by the last round

    @property
    def hybrid(self) -> bool:
        """A token takes one sequence: a recurrent state per sequence, or MTP hidden rows by
        sequence (enabled at any time): every branch is laid out whole."""
        return self.target.memory.get("recurrent_bytes", 0) > 0 or self.target.mtp_enabled

    def lease(self, draft: Draft, greedy: bool) -> Draft | None:
        """Spare sequences for the tree's branches: the tree to verify (greedy: cut to the
        branches there are sequences for, prune()), or None (none taken) when too few are free."""
        n = len(leaves(draft.parents))
        got = self.target.lease_spare(n)
        if len(got) < n and greedy and len(got) >= 2:
            draft = prune(draft, len(got))
        elif len(got) < n:
            for s in got:
                s.release()
            return None
        self.branches = got
        return draft

    def score(self, tseq: ContextSequence, last: int, draft: Draft) -> np.ndarray:
        """The target's rows for the tree: row 0 the root's (scoring its children), row i + 1
        node i's. The branches hold the text and the tree afterwards."""
        lv = leaves(draft.parents)
        n_past = tseq.n_past
        for s in self.branches:
            s.copy_from(tseq, n_past)
        self.leaf_seq = dict(zip(lv, self.branches))
        toks, seqs, node_row = self._layout(draft, lv, last)
        out = self.target.decode_batch(np.asarray(toks, np.int32), seqs)
        self.rows = len(toks)
        return np.ascontiguousarray(out[node_row])

    def _layout(self, draft: Draft, lv: list[int], last: int):
        """The batch: tokens, each one's sequences, and the row of the root and of each node."""
        t = draft.tokens.tolist()
        if self.hybrid:                          # one sequence per token: every branch whole
            toks, seqs, node_row = [], [], np.zeros(draft.n + 1, np.int64)
            seen = np.zeros(draft.n + 1, bool)
            for leaf, s in zip(lv, self.branches):
                for node in [-1] + path_of(draft.parents, leaf):
                    if not seen[node + 1]:
                        seen[node + 1], node_row[node + 1] = True, len(toks)
                    toks.append(last if node < 0 else t[node])
                    seqs.append(s)
            return toks, seqs, node_row
        through: list[list[ContextSequence]] = [[] for _ in range(draft.n)]
        for leaf, s in zip(lv, self.branches):
            for node in path_of(draft.parents, leaf):
                through[node].append(s)
        return [last] + t, [list(self.branches)] + through, np.arange(draft.n + 1)

    def accept(self, p: np.ndarray, draft: Draft) -> tuple[list[int], int]:
        """(the accepted nodes, the next token) for the target's rows p (score()'s layout): the
        walk of the module's docstring, in the core (Sampler.verify_tree) with the sampler's
        seeded stream; the sampler's history is left as found."""
        tokens, parents = (np.ascontiguousarray(a, np.int32) for a in (draft.tokens, draft.parents))
        return self.sampler.verify_tree(p, tokens, parents, draft.q)

    def finish(self, tseq: ContextSequence, draft: Draft, path: list[int], n_past: int) -> TreeRound:
        """The generation's sequence takes the text and the accepted path; the branches go."""
        lv = list(self.leaf_seq)
        deepest = path[-1] if path else -1
        leaf = next((x for x in lv if deepest < 0 or deepest in path_of(draft.parents, x)), lv[0])
        tseq.copy_from(self.leaf_seq[leaf], n_past + 1 + len(path))
        self.release()
        self.kept = path_of(draft.parents, leaf)
        return TreeRound(path, lv.index(leaf), draft.n, self.rows)

    def release(self) -> None:
        for s in self.branches:
            try:
                if not s.closed:
                    s.clear()
            finally:
                s.release()
        self.branches, self.leaf_seq = [], {}
