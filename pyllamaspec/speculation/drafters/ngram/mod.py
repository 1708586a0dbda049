"""llama.cpp's ngram-mod (common/ngram-mod.cpp, common/speculative.cpp): a fixed table of 4M
entries maps the hash of every n_match-gram of the text to the token that followed it (the last
one written wins, collisions included); a draft follows the table from the last n_match tokens
for up to n_max tokens, and is dropped when shorter than n_min. New n-grams join in chunks of
32 tokens; five drafts in a row with under a quarter accepted empty the table."""
from __future__ import annotations

import numpy as np

from ...params import DraftParams
from .base import LlamaNgramDrafter

SIZE = 4 * 1024 * 1024        # a power of two: the hash modulo it is its low bits
_MULT = 6364136223846793005 & (SIZE - 1)
EMPTY = -1


class NgramMod:
    """llama.cpp's common_ngram_mod."""

    def __init__(self, n: int):
        self.n = n
        self.entries = np.full(SIZE, EMPTY, np.int32)
        self.used = 0

    def index(self, tokens: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The table slots of the n-grams at `starts` (llama.cpp's 64-bit hash, mod SIZE)."""
        h = np.zeros(len(starts), np.int64)
        for i in range(self.n):
            h = (h * _MULT + (tokens[starts + i] & (SIZE - 1))) & (SIZE - 1)
        return h

    def add(self, tokens: np.ndarray, starts: np.ndarray) -> None:
        """Each n-gram at `starts` maps to the token after it, in order (a later one overwrites)."""
        if not len(starts):
            return
        slots = self.index(tokens, starts)
        # the last write to a slot wins: keep each slot's last n-gram
        rev_slots, first = np.unique(slots[::-1], return_index=True)
        last = len(slots) - 1 - first
        self.used += int(np.count_nonzero(self.entries[rev_slots] == EMPTY))
        self.entries[rev_slots] = tokens[starts[last] + self.n]

    def get(self, tokens: np.ndarray) -> int:
        return int(self.entries[self.index(tokens, np.zeros(1, np.int64))[0]])

    def reset(self) -> None:
        self.entries.fill(EMPTY)
        self.used = 0


class NgramModDrafter(LlamaNgramDrafter):
    """--spec-type ngram-mod (--spec-ngram-mod-n-match / -n-max / -n-min)."""

    key = "ngram-mod"

    def __init__(self, params: DraftParams):
        p = params.ngrams.mod
        super().__init__(params, p.n_max)
        self.n_min, self.n_max_ = p.n_min, p.n_max
        self.mod = NgramMod(p.n_match)
        self.i_last = 0          # the n-grams before here are in the table
        self.n_last = 0          # length of the last draft
        self.n_low = 0           # drafts in a row with under a quarter accepted

    def begin(self, history: list[int]) -> None:
        self.i_last = self.n_last = 0
        n = self.mod.n
        if len(history) < n:
            return
        toks = np.asarray(history, np.int64)
        self.mod.add(toks, np.arange(len(history) - n))
        self.i_last = len(history) - n
        if self.mod.used / SIZE > 0.25:          # llama.cpp's occupancy threshold
            self.mod.reset()

    def draft_tokens(self, history: list[int], last: int) -> list[int]:
        self.n_last = 0
        n, cur = self.mod.n, len(history)
        if cur < n:
            return []
        toks = np.asarray(history, np.int64)
        if self.i_last + 32 < cur:
            self.mod.add(toks, np.arange(self.i_last, cur - n))
            self.i_last = cur - n
        buf = np.empty(n + self.n_max_, np.int64)
        buf[:n - 1] = toks[cur - n + 1:]
        buf[n - 1] = last
        k = 0
        while k < self.n_max_:
            t = self.mod.get(buf[k:k + n])
            if t == EMPTY:
                if k < self.n_min:       # only a lookup that stops short is too short
                    return []
                break
            buf[n + k] = t
            k += 1
        self.n_last = k
        return [int(t) for t in buf[n:n + k]]

    def on_accept(self, n_accepted: int) -> None:
        if self.n_last <= 0:
            return
        if n_accepted / self.n_last < 0.25:
            self.n_low += 1
            if self.n_low >= 5:
                self.mod.reset()
                self.n_low = self.i_last = 0
        else:
            self.n_low = 0
