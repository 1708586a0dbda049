"""Drafters, one module each: a draft model (model.py), prompt lookup (ngram.py), the target's
MTP head (mtp.py). base.py is the interface the Decoder's round uses; sampled.py the drafting
loop of the drafters with a distribution of their own."""
from __future__ import annotations

from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import InvalidArgumentError
from ..params import DraftParams
from .base import NO_DRAFT, Draft, Drafter
from .model import ModelDrafter
from .mtp import MtpDrafter
from .ngram import NgramDrafter

__all__ = ["Draft", "Drafter", "NO_DRAFT", "ModelDrafter", "MtpDrafter", "NgramDrafter", "make_drafter"]


def make_drafter(target: Model, draft: "Model | str | Drafter | None", sampling: SamplingParams,
                 params: DraftParams, eog: frozenset[int]) -> Drafter | None:
    """The drafter for `draft`: a draft Model, "ngram" (prompt lookup), "mtp" (the target's MTP
    layers), a Drafter made by the caller, or None (plain decoding)."""
    if draft is None or isinstance(draft, Drafter):
        return draft
    if isinstance(draft, Model):
        return ModelDrafter(draft, sampling, params, eog, target)
    if draft == "ngram":
        return NgramDrafter(params)
    if draft == "mtp":
        return MtpDrafter(target, sampling, params, eog)
    raise InvalidArgumentError(f"draft must be a Model, 'ngram' or 'mtp', got {draft!r}")
