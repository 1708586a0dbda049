"""What llama.cpp's n-gram kinds share (simple.py, map.py, mod.py,
cache.py): a deterministic lookup on the text that proposes what llama.cpp's kind of the
same name proposes, given the tokens in the target's cache and the last one; each is capped by
its own size (as llama.cpp's are, not by --draft-max), then cut by our cost model; what the
target accepted goes back to it (the kinds that learn from it)."""
from __future__ import annotations

import time
from abc import abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from ...params import DraftParams
from ...drafter import Draft, Drafter

if TYPE_CHECKING:
    from ...cost_model import DraftPolicy


class LlamaNgramDrafter(Drafter):
    """A llama.cpp n-gram kind; see the module's docstring."""

    def __init__(self, params: DraftParams, n_max: int):
        self.params = params
        self.own_max = n_max

    @property
    def n_max(self) -> int:
        return self.own_max

    def begin(self, history: list[int]) -> None:
        """A generation starts after `history` (llama.cpp's begin)."""

    @abstractmethod
    def draft_tokens(self, history: list[int], last: int) -> list[int]:
        """llama.cpp's draft after `history` and the token `last` (not yet in the cache)."""

    def on_accept(self, n_accepted: int) -> None:
        """The target took the first n_accepted tokens of the last non-empty draft."""

    def prefill(self, prompt: list[int], target=None, fresh: bool = False) -> int:
        self.begin(list(prompt[:-1]))
        return 0

    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None) -> Draft:
        # point-mass drafts: under a grammar the round cuts them before a forbidden token
        t0 = time.perf_counter()
        toks = self.draft_tokens(seq[:-1], seq[-1])
        found = k = min(len(toks), k_cap)
        if found and self.params.adaptive:
            policy.select(self.key)
            k = min(found, policy.choose(found))
        policy.observe_draft(time.perf_counter() - t0, max(found, 1))
        return Draft(np.asarray(toks[:k], np.int32))

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        if draft.n:
            self.on_accept(len(new) - 1)
