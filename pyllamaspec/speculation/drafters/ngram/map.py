"""llama.cpp's ngram-map-k and ngram-map-k4v (common/ngram-map.cpp): the key (the last size_n
tokens) is found in the history through a hash table of n-gram starts, else by a backwards
search; statistics are kept per key seen again:
* map-k drafts the size_m tokens after the match, no more than the last draft of that key had
  accepted;
* map-k4v counts up to four different m-grams seen after the key and drafts only when the
  commonest is at least twice as common as the others together (and the key was hit min_hits
  times); like llama.cpp it then drafts the tokens after the latest match.
Indices, hashes and bounds follow llama.cpp's (uint32 hash, index 0 meaning "none")."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...params import DraftParams, NgramMapParams
from .base import LlamaNgramDrafter

MAX_VALUES = 4            # m-grams kept per key
MAX_COUNT = 16380         # counts saturate here
HASH_SIZE = 262144        # entries of the n-gram hash table
_LCG = 2654435761


def ngram_hash(tokens, start: int, n: int) -> int:
    h = 0
    for i in range(n):
        h = (h * _LCG + tokens[start + i]) & 0xFFFFFFFF
    return h


@dataclass
class Value:
    idx: int = 0              # start of this m-gram in the history (0: unused slot)
    num: int = 0              # times seen after the key
    n_accepted: int = -1      # tokens accepted of its last draft


@dataclass
class Key:
    idx: int                  # a start of the key in the history
    stat_idx: int = 0         # statistics counted up to here
    num: int = 0              # hits
    values: list[Value] = field(default_factory=list)


class NgramMap:
    """llama.cpp's common_ngram_map, for one sequence."""

    def __init__(self, p: NgramMapParams, key_only: bool):
        self.n, self.m, self.key_only, self.min_hits = p.size_n, p.size_m, key_only, p.min_hits
        self.keys: list[Key] = []
        self.key_map = np.zeros(HASH_SIZE, np.uint32)
        self.key_map_last = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last: tuple[int, int] | None = None     # (key, value) of the last draft

    def begin(self, tokens: list[int]) -> None:
        size = len(tokens)
        cleanup = self.size_last_begin
        if cleanup > size:
            cleanup = size - self.n - self.m if size > self.n + self.m else 0
        if size < self.idx_last_check:
            self._forget_from(cleanup)
        self.idx_last_check = self.size_last_begin = size

    def _forget_from(self, start: int) -> None:
        """A shorter history (a new conversation): what lies from `start` on is forgotten."""
        km = self.key_map
        km[(km != 0) & (km >= start)] = 0
        self.key_map_last = start - 1 if start > 0 else 0
        for i in range(len(self.keys) - 1, -1, -1):
            k = self.keys[i]
            if k.idx >= start:
                del self.keys[i]
                continue
            if self.key_only:
                continue
            for j in range(MAX_VALUES - 1, -1, -1):
                if k.values[j].idx != 0 and k.values[j].idx >= start:
                    del k.values[j]
                    k.values.append(Value(0, 0, k.values[-1].n_accepted))
            if k.values[0].idx == 0:
                del self.keys[i]

    def _matches(self, inp, j: int, key) -> bool:
        return all(inp[j + k] == key[k] for k in range(self.n))

    def _find(self, inp: list[int], key: list[int]) -> int:
        n, m, cur = self.n, self.m, len(inp)
        idx = int(self.key_map[ngram_hash(key, 0, n) % HASH_SIZE])
        if idx != 0 and idx < cur - n - m - 1 and self._matches(inp, idx, key):
            return idx
        if self.size_last_begin > n + m + 1:
            for j in range(self.size_last_begin - n - m - 1, self.key_map_last, -1):
                if self._matches(inp, j, key):
                    return j
        for j in range(cur - n - m - 1, max(self.size_last_begin, self.key_map_last), -1):
            if self._matches(inp, j, key):
                return j
        return 0

    def _index(self, inp: list[int]) -> None:
        """Hashes the n-gram starts not yet in the table (the first one at a hash stays)."""
        n, m, cur, km = self.n, self.m, len(inp), self.key_map
        starts = []
        if self.size_last_begin > n + m + 1:
            starts = range(self.size_last_begin - n - m - 1, self.key_map_last, -1)
        for rng in (starts, range(cur - n - m - 1, max(self.size_last_begin, self.key_map_last), -1)):
            for j in rng:
                h = ngram_hash(inp, j, n) % HASH_SIZE
                if km[h] == 0:
                    km[h] = j
        self.key_map_last = max(cur - n - m - 1, self.key_map_last)

    def draft(self, inp: list[int], last: int) -> list[int]:
        self.last = None
        n, m, cur = self.n, self.m, len(inp)
        if cur < 2 * n + m:
            return []
        self.idx_last_check = cur
        key = inp[cur - n + 1:] + [last]
        pos = self._find(inp, key)
        self._index(inp)
        if pos == 0:
            return []
        ki = next((i for i, k in enumerate(self.keys) if self._matches(inp, k.idx, key)), len(self.keys))
        if ki == len(self.keys):
            self.keys.append(Key(pos, values=[Value(0, 0, m) for _ in range(MAX_VALUES)]))
        k = self.keys[ki]
        k.num = min(k.num + 1, MAX_COUNT)
        if self.key_only:
            self.last = (ki, 0)
            return inp[pos + n:pos + n + min(m, k.values[0].n_accepted)]
        if k.num < self.min_hits:
            return []
        self._count_values(inp, key, k, pos)
        nums = [v.num for v in k.values]
        best = max(range(MAX_VALUES), key=lambda v: (nums[v], -v)) if max(nums) > 0 else 0
        others = sum(nums) - nums[best]
        if others > 0 and nums[best] < 2 * others:
            return []
        self.last = (ki, best)
        return inp[pos + n:pos + n + min(m, k.values[best].n_accepted)]

    def _count_values(self, inp: list[int], key: list[int], k: Key, pos: int) -> None:
        """The m-grams after each occurrence of the key from k.stat_idx up to pos."""
        n, m = self.n, self.m
        for i in range(k.stat_idx, pos + 1):
            if not self._matches(inp, i, key):
                continue
            start = i + n
            for v in k.values:
                if v.idx == 0:
                    v.idx, v.num, v.n_accepted = start, 0, m
                elif any(inp[start + j] != inp[v.idx + j] for j in range(m)):
                    continue
                v.num = min(v.num + 1, MAX_COUNT)
                break
        k.stat_idx = pos

    def accept(self, n_accepted: int) -> None:
        if self.last is not None:
            ki, vi = self.last
            self.keys[ki].values[vi].n_accepted = n_accepted


class NgramMapDrafter(LlamaNgramDrafter):
    """--spec-type ngram-map-k (keys only) and ngram-map-k4v (keys and four values)."""

    def __init__(self, params: DraftParams, key_only: bool):
        p = params.ngrams.map_k if key_only else params.ngrams.map_k4v
        super().__init__(params, p.size_m)
        self.key = "ngram-map-k" if key_only else "ngram-map-k4v"
        self.map = NgramMap(p, key_only)

    def begin(self, history: list[int]) -> None:
        self.map.begin(history)

    def draft_tokens(self, history: list[int], last: int) -> list[int]:
        return self.map.draft(history, last)

    def on_accept(self, n_accepted: int) -> None:
        self.map.accept(n_accepted)
