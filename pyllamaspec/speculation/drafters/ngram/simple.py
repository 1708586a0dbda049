"""llama.cpp's ngram-simple (common/ngram-map.cpp, common_ngram_simple_draft): the last size_n
tokens (the last one included) looked up in the history, latest occurrence first; what
followed it, size_m tokens at most and at least size_n, is the draft."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...params import DraftParams
from .base import LlamaNgramDrafter


def simple_draft(tokens: list[int], last: int, n: int, m: int) -> list[int]:
    cur = len(tokens)
    if cur <= n + m + 1:
        return []
    pattern = np.asarray(tokens[cur - n + 1:] + [last], np.int64)
    # windows starting at 1 .. cur - n - 1 (position 0 means "no match" there)
    hist = np.asarray(tokens[:cur - 1], np.int64)
    hits = np.nonzero((sliding_window_view(hist, n)[1:] == pattern).all(axis=1))[0]
    if not len(hits):
        return []
    pos = int(hits[-1]) + 1
    k = min(m, cur - (pos + n))
    return tokens[pos + n:pos + n + k] if k >= n else []


class NgramSimpleDrafter(LlamaNgramDrafter):
    """--spec-type ngram-simple (--spec-ngram-simple-size-n / -size-m)."""

    key = "ngram-simple"

    def __init__(self, params: DraftParams):
        super().__init__(params, params.ngrams.simple.size_m)
        self.n, self.m = params.ngrams.simple.size_n, params.ngrams.simple.size_m

    def draft_tokens(self, history: list[int], last: int) -> list[int]:
        return simple_draft(history, last, self.n, self.m)
