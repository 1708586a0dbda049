"""MTP drafting: a target whose GGUF carries NextN/MTP layers (qwen35) drafts with them, from
its own last hidden state: no draft model, no second tokenizer, the weights shared.

Each step runs the MTP block once (csrc/engine/mtp.h): step 0 takes the token after the cache and the
target's hidden state before it, step s the step s - 1 draft token and the MTP's own output
state, so a k-token draft costs k MTP-block evaluations (one attention layer, its FFN and the
output head). The core keeps the MTP cache in step with the target's (its eval fills it, its
truncation rolls it back), so this drafter holds no cache of its own. Drafts are sampled from
the MTP's adjusted distribution q, as a draft model's are, and verified exactly: greedy output
is the target's own, sampled output keeps the target's distribution.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from . import draft_loop
from .errors import UnsupportedModelError
from .model import Model
from .sampling import Sampler, SamplingParams

if TYPE_CHECKING:
    from .cost_model import DraftPolicy
    from .speculative import DraftParams

__all__ = ["MtpDrafter"]


def _seed_for_mtp(seed: int) -> int:
    return (seed * 0xD1B54A32D192ED03 + 0x8CB92BA72F3D8DD7) % 2**64


class MtpDrafter:
    """Drafts with the target's MTP block; the interface of ModelDrafter (speculative.py)."""

    def __init__(self, target: Model, sampling: SamplingParams, params: DraftParams, eog: frozenset[int]):
        if target.n_mtp_layers < 1:
            raise UnsupportedModelError(
                f"draft_model='mtp': {target.path!s} has no MTP (NextN) layers to draft with "
                f"(nextn_predict_layers is 0, or the converter left their tensors out)")
        target.enable_mtp()
        self.model = target
        self.params, self.eog = params, eog
        V = target.n_vocab
        self.sampler = Sampler(V, replace(sampling, seed=_seed_for_mtp(sampling.seed)))
        self.penalized = sampling.penalized
        self.logits = np.empty(V, np.float32)
        self.q = None if sampling.greedy else np.empty((params.n_draft, V), np.float32)
        self.p_max = np.zeros(params.n_draft, np.float32)
        self.evals = 0                           # MTP steps of the last propose()

    def prefill(self, head: np.ndarray) -> int:
        return 0                                 # the target's own prefill filled the MTP cache

    def pending(self, seq: list[int]) -> int:
        return 0

    def catch_up(self, seq: list[int]) -> int:
        return 0

    def propose(self, seq: list[int], k_max: int, out: np.ndarray, p_min: float = 0.0,
                policy: DraftPolicy | None = None) -> int:
        """Drafts up to k_max tokens after seq (the target's cache holds seq[:-1]), stopping
        where the top probability is below p_min or the cost model says stop, as
        ModelDrafter.propose does."""
        t = self.model
        k_max = min(k_max, t.n_ctx - t.n_past)
        return draft_loop.draft(self, lambda tok, k: t.mtp_draft(tok, k, out=self.logits), int(seq[-1]),
                                k_max, out, p_min, policy)

    def q_rows(self, k: int) -> np.ndarray | None:
        return None if self.q is None else self.q[:k]

    def accepted(self, seq: list[int], new: list[int], drafted: int = 0) -> None:
        if self.penalized:
            self.sampler.truncate(len(seq) - len(new))
            self.sampler.push(new)

    def close(self) -> None:
        pass
