"""DFlash drafting (llama.cpp's draft-dflash): a block-diffusion head drafts a whole block in one
pass: [the token after the cache, mask, mask, ...] attends to K/V the head made from the inputs
of the target's layers at every position (kept at every target eval, verification included)
and to the whole block at once. The block is as llama.cpp's: --draft-max masks, at most the
trained block size - 1 (the context's room may shorten it); its logits do not depend on the
drafted tokens, so a draft reads them position by position: greedy takes each argmax as
llama.cpp does, sampling draws each token from its position's adjusted distribution q (a
proposal fixed before the token is drawn, so min(1, p/q) and the residual keep the output
exact). The cost model then decides where the draft stops; the pass costs the same whatever it
keeps, so its cost is a round's, not a token's."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...engine.head import DraftHead
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import InvalidArgumentError
from ..params import DraftParams
from ..drafter import NO_DRAFT, Call, Draft
from .sampled import SampledDrafter

if TYPE_CHECKING:
    from ..cost_model import DraftPolicy

__all__ = ["DflashDrafter"]


class DflashDrafter(SampledDrafter):
    """Drafts blocks with a DFlash head attached to the target."""

    SEED_MIX = (0xD6E8FEB86659FD93, 0xC2B2AE3D27D4EB4F)
    cost_per_round = True
    max_sequences = 1                  # the core's head follows the target's sequence 0

    def __init__(self, target: Model, head: DraftHead, sampling: SamplingParams, params: DraftParams,
                 eog: frozenset[int]):
        if head.kind != "dflash":
            raise InvalidArgumentError(f"draft-dflash needs a DFlash head, {head.path} is {head.kind}")
        super().__init__(target.n_vocab, sampling, params, eog)
        target.attach_head(head)            # checked against the target here
        self.target, self.head, self.key = target, head, head.path
        self.block_max = min(params.n_draft, head.info.block_size - 1)
        self.rows = np.empty((self.block_max, target.n_vocab), np.float32)
        self.n_block = 0

    @property
    def n_max(self) -> int:
        return self.block_max

    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None) -> Draft:
        # the block's length is llama.cpp's; the cost model only cuts what is kept of it
        self.n_block = min(self.block_max, k_cap, self.target.n_ctx - self.target.n_past - 1)
        if self.n_block < 1:
            return NO_DRAFT
        return super().propose(seq, k_cap, policy, constraint)

    def next_step(self, token: int, k: int) -> Call:
        return Call(lambda: self.next_logits(token, k))

    def next_logits(self, token: int, k: int) -> np.ndarray:
        if k == 0:
            self.target.head_block(token, self.n_block, out=self.rows)
        return self.rows[k]

    def room(self) -> int:
        return self.n_block
