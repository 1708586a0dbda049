"""Drafters, one module each: a draft model (model.py), one of another vocabulary (cross_vocab.py),
our prompt lookup (ngram/lookup.py) and suffix drafting over earlier requests too (ngram/suffix.py),
llama.cpp's n-gram kinds (ngram/: simple.py, map.py, mod.py, cache.py), the target's MTP head
(mtp.py), EAGLE-3 and DFlash heads and Gemma 4's assistant (eagle3.py, dflash.py, assistant.py),
and several chained (chain.py).
base.py is the interface the Decoder's round uses; sampled.py the drafting loop of the drafters
with a distribution of their own."""
from __future__ import annotations

from ...engine.head import DraftHead
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import InvalidArgumentError, NoVocabularyError
from ..params import DraftParams
from ..spec_types import parse as parse_spec_types
from .assistant import AssistantDrafter
from ..drafter import NO_DRAFT, Draft, Drafter
from .chain import ChainDrafter
from .cross_vocab import MODE as CROSS_VOCAB, CrossVocabDrafter
from .dflash import DflashDrafter
from .eagle3 import Eagle3Drafter
from .model import DraftModelDrafter
from .mtp import MtpDrafter
from .ngram.lookup import NgramDrafter
from .ngram.cache import NgramCacheDrafter
from .ngram.map import NgramMapDrafter
from .ngram.mod import NgramModDrafter
from .ngram.simple import NgramSimpleDrafter
from .ngram.suffix import SuffixDrafter

__all__ = ["Draft", "Drafter", "NO_DRAFT", "DraftModelDrafter", "MtpDrafter", "NgramDrafter", "Eagle3Drafter",
           "DflashDrafter", "AssistantDrafter", "ChainDrafter", "CrossVocabDrafter", "SuffixDrafter", "make_drafter",
           "spec_types_of"]

_HEAD_NAMES = {"eagle3": "an EAGLE-3", "dflash": "a DFlash"}
# what draft_model= names stand for, as --spec-type names
_SHORT = {"ngram": ("ngram-lookup",), "mtp": ("draft-mtp",)}


def spec_types_of(draft: "Model | DraftHead | str | None") -> tuple[str, ...]:
    """The speculative types a draft stands for when none are given: a draft model drafts
    (draft-simple), a head by its kind (draft-eagle3, draft-dflash); "ngram" is our lookup,
    "mtp" the target's MTP layers, other strings are --spec-type names."""
    if draft is None:
        return ()
    if isinstance(draft, Model):
        return ("draft-simple",)
    if isinstance(draft, DraftHead):
        return (draft.spec_type,)
    if isinstance(draft, str):
        try:
            return _SHORT.get(draft) or parse_spec_types(draft)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"draft must be a Model, a DraftHead, 'ngram', 'mtp' or speculative type "
                                       f"names: {e}") from None
    raise InvalidArgumentError(f"draft must be a Model, a DraftHead, 'ngram', 'mtp' or speculative type "
                               f"names, got {draft!r}")


def make_drafter(target: Model, draft: "Model | DraftHead | str | Drafter | None", sampling: SamplingParams,
                 params: DraftParams, eog: frozenset[int]) -> Drafter | None:
    """The drafter for `draft` and params.spec_type (else the types the draft stands for):
    one drafter, several chained, a Drafter made by the caller, or None (plain decoding)."""
    if isinstance(draft, Drafter):
        return draft
    types = params.spec_type if params.spec_type is not None else spec_types_of(draft)
    drafters = [_one(t, target, draft, sampling, params, eog) for t in types]
    if not drafters:
        return None
    return drafters[0] if len(drafters) == 1 else ChainDrafter(drafters, params.n_draft)


def _draft_mode(target: Model, draft: Model) -> str:
    """Model.check_draft's mode; "same" where no token texts tell (ids only, as given: the draft
    model's drafter checks the sizes)."""
    try:
        target.vocab_difference(draft)
    except NoVocabularyError:
        return "same"
    return target.check_draft(draft)


def _one(kind: str, target: Model, draft, sampling: SamplingParams, params: DraftParams,
         eog: frozenset[int]) -> Drafter:
    if kind == "ngram-simple":
        return NgramSimpleDrafter(params)
    if kind in ("ngram-map-k", "ngram-map-k4v"):
        return NgramMapDrafter(params, key_only=kind == "ngram-map-k")
    if kind == "ngram-mod":
        return NgramModDrafter(params)
    if kind == "ngram-cache":
        return NgramCacheDrafter(params)
    if kind == "ngram-lookup":
        return NgramDrafter(params)
    if kind == "suffix":         # shares what it learns with the target's other suffix drafters
        return SuffixDrafter(params, target)
    if kind == "draft-mtp":      # the target's own MTP layers, or a Gemma 4 assistant
        if isinstance(draft, DraftHead) and draft.kind == "gemma4-assistant":
            return AssistantDrafter(target, draft, sampling, params, eog)
        if isinstance(draft, (Model, DraftHead)):
            raise InvalidArgumentError("draft-mtp drafts with the target's own MTP layers or a Gemma 4 assistant "
                                       f"(gemma4-assistant); got {draft!r}")
        return MtpDrafter(target, sampling, params, eog)
    if kind == "draft-simple":
        if not isinstance(draft, Model):
            raise InvalidArgumentError(f"draft-simple drafts with a draft model: give one (-md), got {draft!r}")
        if _draft_mode(target, draft) == CROSS_VOCAB:      # another tokenizer: text re-tokenized
            return CrossVocabDrafter(draft, target, params)
        return DraftModelDrafter(draft, sampling, params, eog, target)
    head_kind = "eagle3" if kind == "draft-eagle3" else "dflash"
    if not isinstance(draft, DraftHead) or draft.kind != head_kind:
        got = f"a {draft.kind} head" if isinstance(draft, DraftHead) else repr(draft)
        raise InvalidArgumentError(f"{kind} drafts with {_HEAD_NAMES[head_kind]} head (a GGUF of architecture "
                                   f"{head_kind}) as the draft model; got {got}")
    cls = Eagle3Drafter if head_kind == "eagle3" else DflashDrafter
    return cls(target, draft, sampling, params, eog)
