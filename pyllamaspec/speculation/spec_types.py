"""llama.cpp's speculative types (--spec-type, common/speculative.cpp) and what each is here.

Several types chain: each round the n-gram kinds are asked first, then the drafts, in llama.cpp's
order of preference whatever the order given, and the first that proposes a non-empty draft wins
the round. Our own prompt lookup (draft_model="ngram", --lookup) keeps a name of its own,
"ngram-lookup", and comes after llama.cpp's n-gram kinds; our suffix drafting ("suffix": earlier
requests' text too) after it."""
from __future__ import annotations

from typing import Sequence

from ..errors import InvalidArgumentError, UnsupportedModelError

NGRAM_KINDS = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
DRAFTS = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash")
# llama.cpp's order of preference (common_speculative_init), with ours after its n-gram kinds
ORDER = NGRAM_KINDS + ("ngram-lookup", "suffix") + DRAFTS
REFUSED = {"draft-dspark": "DSpark heads (DFlash with a Markov head) are not supported"}


def parse(spec: "str | Sequence[str]") -> tuple[str, ...]:
    """Type names from "a,b" or a sequence, in llama.cpp's order of preference, each once; "none"
    anywhere means none (as in llama.cpp). Unknown names are refused."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    if not all(isinstance(n, str) for n in names):
        raise InvalidArgumentError(f"speculative types are names, got {spec!r}")
    names = [n.strip() for n in names if n.strip()]
    if "none" in names:
        return ()
    for n in names:
        if n in REFUSED:
            raise UnsupportedModelError(f"speculative type {n}: {REFUSED[n]}")
        if n not in ORDER:
            raise InvalidArgumentError(f"unknown speculative type {n!r} (known: {', '.join(ORDER)}, none)")
    return tuple(t for t in ORDER if t in names)
