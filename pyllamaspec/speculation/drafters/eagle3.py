"""EAGLE-3 drafting (llama.cpp's draft-eagle3): a head of one decoder layer drafts from the
inputs of three of the target's layers, which the target keeps at every eval (its verification
included: no extra target evaluation) and the core feeds to the head's cache right away
(csrc/engine/head.h). A k-token draft is k chained head steps: step 0 pairs the token after the
cache with the fused features of the position before it, step s the step s - 1 token with that
step's own state. Drafts are sampled from the head's adjusted distribution q and verified
exactly (greedy: its argmax, as llama.cpp's; sampled: min(1, p/q) and the residual, where
llama.cpp's server only checks that the target sampled the same token)."""
from __future__ import annotations

import numpy as np

from ...engine.head import DraftHead
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import InvalidArgumentError
from ..params import DraftParams
from ..drafter import Call
from .sampled import SampledDrafter

__all__ = ["Eagle3Drafter"]


class Eagle3Drafter(SampledDrafter):
    """Drafts with an EAGLE-3 head attached to the target."""

    SEED_MIX = (0xA24BAED4963EE407, 0x9FB21C651E98DF25)
    KIND = "eagle3"
    max_sequences = 1                  # the core's head follows the target's sequence 0

    def __init__(self, target: Model, head: DraftHead, sampling: SamplingParams, params: DraftParams,
                 eog: frozenset[int]):
        if head.kind != self.KIND:
            raise InvalidArgumentError(f"draft-eagle3 needs an EAGLE-3 head, {head.path} is {head.kind}")
        super().__init__(target.n_vocab, sampling, params, eog)
        target.attach_head(head)            # checked against the target here
        self.target, self.head, self.key = target, head, head.path
        self.logits = np.empty(target.n_vocab, np.float32)

    def room(self) -> int:
        return self.target.n_ctx - self.target.n_past

    def next_step(self, token: int, k: int) -> Call:
        return Call(lambda: self.next_logits(token, k))

    def next_logits(self, token: int, k: int) -> np.ndarray:
        return self.target.head_draft(token, k, out=self.logits)
