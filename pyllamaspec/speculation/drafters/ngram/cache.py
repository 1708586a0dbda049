"""llama.cpp's ngram-cache (common/ngram-cache.cpp, common/speculative.cpp): counts of the
token after every 1- to 4-gram of the text (the context cache), and optionally of a corpus
(-lcs, the static cache) and of earlier generations (-lcd, the dynamic cache, loaded only). A
draft grows token by token, up to 8: the longest n-gram whose counts are frequent and dominant
enough (lax thresholds for the context cache, strict for the dynamic one) gives the next token,
weighted by the static cache's counts of what follows the last 2 tokens; else the static cache
alone. Like llama.cpp, the context cache learns only the n-grams within each new stretch of
accepted tokens, and a tie between counts goes to the token first in C++'s hash-map order
(hash_order.py)."""
from __future__ import annotations

import struct

from ....errors import ModelFormatError, ModelIOError
from ...params import DraftParams
from .hash_order import CountMap
from .base import LlamaNgramDrafter

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2
N_DRAFT = 8
NULL = -1
# by n-gram length - 1: the fewest observations, and the least share in percent, of a draft
MIN_SAMPLES_LAX, MIN_PERCENT_LAX = (2, 2, 1, 1), (66, 50, 50, 50)
MIN_SAMPLES_STRICT, MIN_PERCENT_STRICT = (4, 3, 2, 2), (75, 66, 66, 66)

Cache = dict[tuple[int, ...], CountMap]


def ngram_key(tokens: list[int], start: int, size: int) -> tuple[int, ...]:
    return tuple(tokens[start:start + size]) + (NULL,) * (NGRAM_MAX - size)


def update(cache: Cache, tokens: list[int]) -> None:
    """Counts the token after every n-gram lying within `tokens` (llama.cpp's
    common_ngram_cache_update with all of them new)."""
    for size in range(NGRAM_MIN, NGRAM_MAX + 1):
        for i in range(size, len(tokens)):
            part = cache.get(key := ngram_key(tokens, i - size, size))
            if part is None:
                cache[key] = part = CountMap()
            part.add(tokens[i])


def load(path: str) -> Cache:
    """A cache file written by llama.cpp (common_ngram_cache_save): per n-gram its 4 ids, the
    number of tokens, then (token, count) pairs, all int32."""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        raise ModelIOError(f"cannot read the lookup cache {path}: {e}") from None
    cache: Cache = {}
    off = 0
    while off < len(data):
        if off + 20 > len(data):
            raise ModelFormatError(f"{path}: truncated lookup cache at byte {off}")
        *ngram, n = struct.unpack_from("<5i", data, off)
        off += 20
        if n <= 0 or off + 8 * n > len(data):
            raise ModelFormatError(f"{path}: bad lookup cache entry at byte {off - 20}")
        part = CountMap()
        for j in range(n):
            tok, cnt = struct.unpack_from("<2i", data, off + 8 * j)
            part.add(tok, cnt)
        cache.setdefault(tuple(ngram), part)      # a repeated n-gram: the first stays (emplace)
        off += 8 * n
    return cache


def _dominant(part: CountMap, static: CountMap | None, size: int, samples, percent) -> int:
    """The most frequent next token (weighted by the static counts) when frequent and dominant
    enough, else NULL; on a tie the first in the map's order."""
    best, best_p, best_s, total = NULL, 0, 0, 0
    for tok, cnt in part.items():
        s = 100 * static.get(tok) if static is not None and static.get(tok) else 1
        if cnt * s > best_p * best_s:
            best, best_p, best_s = tok, cnt, s
        total += cnt
    if total < samples[size - 1] or 100 * best_p < percent[size - 1] * total:
        return NULL
    return best


def _from_static(part: CountMap | None) -> int:
    if part is None:
        return NULL
    best, best_c, total = NULL, 0, 0
    for tok, cnt in part.items():
        if cnt > best_c:
            best, best_c = tok, cnt
        total += cnt
    i = NGRAM_STATIC - 1
    if total < MIN_SAMPLES_LAX[i] or 100 * best_c < MIN_PERCENT_LAX[i] * total:
        return NULL
    return best


def draft(inp: list[int], context: Cache, dynamic: Cache, static: Cache) -> list[int]:
    """llama.cpp's common_ngram_cache_draft after the text `inp` (its last token included)."""
    out: list[int] = []
    if len(inp) < NGRAM_STATIC:
        return out
    while len(out) < N_DRAFT:
        seq = inp + out
        static_part = static.get(ngram_key(seq, len(seq) - NGRAM_STATIC, NGRAM_STATIC))
        tok = NULL
        for cache, samples, percent in ((context, MIN_SAMPLES_LAX, MIN_PERCENT_LAX),
                                        (dynamic, MIN_SAMPLES_STRICT, MIN_PERCENT_STRICT)):
            for size in range(min(NGRAM_MAX, len(seq)), NGRAM_MIN - 1, -1):   # the longest first
                part = cache.get(ngram_key(seq, len(seq) - size, size))
                if part is not None:
                    tok = _dominant(part, static_part, size, samples, percent)
                    if tok != NULL:
                        break
            if tok != NULL:
                break
        if tok == NULL:
            tok = _from_static(static_part)
        if tok == NULL:
            break
        out.append(tok)
    return out


class NgramCacheDrafter(LlamaNgramDrafter):
    """--spec-type ngram-cache (-lcs / -lcd: llama.cpp's lookup cache files)."""

    key = "ngram-cache"

    def __init__(self, params: DraftParams):
        super().__init__(params, N_DRAFT)
        p = params.ngrams
        self.static = load(p.cache_static) if p.cache_static else {}
        self.dynamic = load(p.cache_dynamic) if p.cache_dynamic else {}
        self.context: Cache = {}
        self.n_cached = 0        # tokens of the text the context cache has seen

    def draft_tokens(self, history: list[int], last: int) -> list[int]:
        if self.n_cached < len(history) + 1:
            update(self.context, history[self.n_cached:] + [last])
            self.n_cached = len(history) + 1
        return draft(history + [last], self.context, self.dynamic, self.static)
