"""Gemma 4's MTP assistant (llama.cpp's draft-mtp with a gemma4-assistant draft): a few Gemma-4
layers that hold no cache of their own and attend over the target's (its last window layer's and
its last full layer's), drafting from the target's final normed hidden state, which the target
keeps at every eval (csrc/engine/head_assistant.cpp). A k-token draft is k chained steps at the
same position, each fed the previous step's token and projected state. Drafts are sampled from
the assistant's adjusted distribution q and verified exactly, as a draft model's are."""
from __future__ import annotations

from ...engine.head import DraftHead
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import InvalidArgumentError
from ..params import DraftParams
from .eagle3 import Eagle3Drafter

__all__ = ["AssistantDrafter"]


class AssistantDrafter(Eagle3Drafter):
    """Drafts with a Gemma 4 assistant attached to its gemma4 target (chained steps, like
    EAGLE-3's; the core keeps the difference)."""

    KIND = "gemma4-assistant"
    SEED_MIX = (0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3)

    def __init__(self, target: Model, head: DraftHead, sampling: SamplingParams, params: DraftParams,
                 eog: frozenset[int]):
        if head.kind != self.KIND:
            raise InvalidArgumentError(f"a Gemma 4 assistant drafts here, {head.path} is {head.kind}")
        super().__init__(target, head, sampling, params, eog)
