"""Chained speculative types (llama.cpp's --spec-type a,b): the drafters are asked in llama.cpp's
order of preference each round (spec_types.ORDER: the n-gram kinds first), and the first
non-empty draft wins the round; every drafter hears what the round produced, so that those that
keep a state (a draft model's cache, a penalty history) stay in step, and only the winner learns
what of its draft was accepted. Each asks the cost model under its own key."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..drafter import NO_DRAFT, Draft, Drafter

if TYPE_CHECKING:
    from ...engine.sequence import ContextSequence
    from ...engine.model import Model
    from ..cost_model import DraftPolicy


class ChainDrafter(Drafter):
    """Several drafters in order; see the module's docstring."""

    def __init__(self, drafters: list[Drafter], n_draft: int):
        self.drafters = drafters
        self.key = ",".join(d.key for d in drafters)
        self.mode = ",".join(m for m in (getattr(d, "mode", "") for d in drafters) if m)
        self.winner: Drafter | None = None
        # each member's longest draft: its own size, else --draft-max (llama.cpp's impl n_max)
        self.caps = [d.n_max if d.n_max is not None else n_draft for d in drafters]

    @property
    def draft_model(self) -> "Model | None":
        return next((d.draft_model for d in self.drafters if d.draft_model is not None), None)

    @property
    def n_max(self) -> int:
        return max(self.caps)

    @property
    def max_draft(self) -> int:
        return max(d.max_draft for d in self.drafters)

    @property
    def draft_seq(self) -> "ContextSequence | None":
        return next((d.draft_seq for d in self.drafters if d.draft_seq is not None), None)

    @property
    def max_sequences(self) -> int:
        return min(d.max_sequences for d in self.drafters)

    def see_images(self, images) -> None:
        for d in self.drafters:
            d.see_images(images)

    def open(self, prompt: list[int], fresh: bool = False, stop=None) -> None:
        for d in self.drafters:
            d.open(prompt, fresh, stop)

    def prefill(self, prompt: list[int], target: "ContextSequence | None" = None, fresh: bool = False) -> int:
        return max(d.prefill(prompt, target, fresh) for d in self.drafters)

    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None) -> Draft:
        self.winner = None
        for d, cap in zip(self.drafters, self.caps):
            policy.select(d.key)
            draft = d.propose(seq, min(k_cap, cap, d.max_draft), policy, constraint)
            if draft.n:
                self.winner = d
                return draft
        return NO_DRAFT

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        for d in self.drafters:
            d.accepted(seq, new, draft if d is self.winner else NO_DRAFT)

    def close(self) -> None:
        for d in self.drafters:
            d.close()
