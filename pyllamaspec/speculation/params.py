"""Parameters of speculation (llama.cpp's --draft-* flags), shared by the decoder and the drafters."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine import _args
from ..errors import InvalidArgumentError


@dataclass
class DraftParams:
    """llama.cpp's --draft-max, --draft-min, --draft-p-min; `adaptive` lets the cost model pick
    the draft length (up to n_draft) each round and, token by token, where a draft model's draft
    stops; p_min (a draft stops where its top probability is below it) then defaults to none,
    else to llama.cpp's 0.75; `ngram` is the n-gram drafter's longest match;
    `draft_vocab`: a draft model with more than twice as many tokens computes logits for this
    many common ones only (Model.common_token_ids; 0 = all of them); `forced`: under a grammar,
    the text it forces is drafted for free (speculation/constraint.py)."""
    n_draft: int = 16
    n_min: int = 0
    p_min: float | None = None
    adaptive: bool = True
    ngram: int = 3
    draft_vocab: int = 32768
    forced: bool = True

    def __post_init__(self) -> None:
        _args.integer("n_draft", self.n_draft, 1, _args.MAX_DRAFT)
        _args.integer("n_min", self.n_min, 0, self.n_draft)
        if self.p_min is not None:
            _args.real("p_min", self.p_min, 0.0, 1.0)
        if not isinstance(self.adaptive, (bool, np.bool_)):
            raise InvalidArgumentError(f"adaptive must be True or False, got {self.adaptive!r}")
        _args.integer("ngram", self.ngram, 1, 64)
        _args.integer("draft_vocab", self.draft_vocab)
        if not isinstance(self.forced, (bool, np.bool_)):
            raise InvalidArgumentError(f"forced must be True or False, got {self.forced!r}")

    @property
    def stop_p(self) -> float:
        """The fixed confidence below which a draft stops: p_min, else none with the cost model
        and llama.cpp's 0.75 without it."""
        return self.p_min if self.p_min is not None else 0.0 if self.adaptive else 0.75
