"""Prompt lookup: proposes what followed the most recent earlier occurrence of the last n tokens
(n from `ngram` down to 1). Deterministic, so q is a point mass; under a grammar the round cuts
the copy before the first token the grammar forbids (speculation/constraint.py).

With DraftParams.tree True (and no grammar), what followed the tree_width most recent
occurrences is proposed as a token tree (their common prefixes shared, the most recent one
first: the chain's draft), verified in one target evaluation (speculation/tree/verify.py: with point
masses, the target's token decides which branch, if any, is followed)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ...params import DraftParams
from ...drafter import Draft, Drafter

if TYPE_CHECKING:
    from ...cost_model import DraftPolicy


class NgramDrafter(Drafter):
    """See the module's docstring."""

    key = "ngram"

    def __init__(self, params: DraftParams):
        self.params = params
        self.out = np.empty(params.n_draft, np.int32)
        self.match = 0                           # length of the last proposal's match
        self.copying = False                     # the last round took every drafted token
        self.depth = 0                           # the last draft's length (a tree's depth)

    def lookup(self, seq: list[int], k_max: int) -> int:
        """Writes up to k_max tokens that followed the longest recent match into self.out."""
        s = np.asarray(seq, np.int64)
        for n in range(min(self.params.ngram, len(s) - 1), 0, -1):
            tail = s[-n:]
            # windows s[i:i+n] == tail, for i with something after them (i + n < len(s))
            hits = np.ones(len(s) - n, bool)
            for j in range(n):
                hits &= s[j:len(s) - n + j] == tail[j]
            idx = np.nonzero(hits)[0]
            if len(idx):
                start = int(idx[-1]) + n
                k = min(k_max, len(s) - start)
                self.out[:k] = s[start:start + k]
                self.match = n
                return k
        self.match = 0
        return 0

    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None) -> Draft:
        """Looks the continuation up first (it costs next to nothing), then lets the cost model
        cut it, with the acceptance it has seen for matches of that length, apart for rounds
        after one that took every drafted token: inside a copied passage, a copy goes on."""
        t0 = time.perf_counter()
        found = k = self.lookup(seq, k_cap)
        if found and self.params.adaptive:
            policy.select((self.match, self.copying))
            k = min(found, policy.choose(found))
        policy.observe_draft(time.perf_counter() - t0, max(found, 1))
        self.depth = k
        if k and self.params.tree and (constraint is None or not constraint.active):
            tree = self.branches(seq, k)
            if tree is not None:
                return tree
        self.tree_shape = ""
        return Draft(self.out[:k])

    def branches(self, seq: list[int], k: int) -> Draft | None:
        """The continuations of the tree_width most recent occurrences of the match, each cut
        at depth k, as a trie (None: they all agree, a chain)."""
        s = np.asarray(seq, np.int64)
        n = self.match
        hits = np.ones(len(s) - n, bool)
        for j in range(n):
            hits &= s[j:len(s) - n + j] == s[len(s) - n + j]
        budget = max(k, self.params.tree_nodes or 2 * k)      # the chain's draft whole
        toks: list[int] = []
        parents: list[int] = []
        at: dict[tuple[int, int], int] = {}
        for i in np.nonzero(hits)[0][::-1][:self.params.tree_width]:
            node = -1
            for t in s[i + n:i + n + k].tolist():
                if (node, t) not in at:
                    if len(toks) >= budget:
                        break
                    at[(node, t)] = len(toks)
                    toks.append(t)
                    parents.append(node)
                node = at[(node, t)]
        if len(toks) <= k:
            return None
        self.tree_shape = f"n-gram trie: {self.params.tree_width} continuations, depth {k}, {len(toks)} nodes"
        return Draft(np.asarray(toks, np.int32), parents=np.asarray(parents, np.int32))

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        self.copying = draft.n > 0 and len(new) == self.depth + 1
