"""The text a suffix drafter learns from (suffix.py): earlier prompts and answers of the process,
kept per target Model (a server's slots share one), oldest text dropped first past a token bound,
and searched through a suffix array of the reversed text.

Reversed, the longest suffix of the current text that occurs in the corpus is the longest prefix
of the current text read backwards: one token at a time, the range of sorted suffixes that share
it narrows (a binary search within the range, since the next token of those suffixes is sorted),
down to the longest match, its occurrences the range's positions. The array is sorted on the first
`depth` tokens of each suffix only (prefix doubling, log2(depth) sorts), which bounds a match at
`depth` tokens; it is rebuilt, lazily, at the first search after a text is added (a request's end).

The walk (`walk`) drafts from a set of occurrences: at each step the token that most of them
continue with, its empirical probability the share of the occurrences that go on with it (an
occurrence that ends, at a document's end, counts against every token), the draft's probability
the product; the occurrences that disagree are dropped (a suffix tree's descent along its most
frequent child). SuffixDecoding (Oliaro et al., 2025) drafts so, each draft as long as its match
allows (factor x match length) and while its probability stays above a floor."""
from __future__ import annotations

import threading
import weakref
from collections import deque

import numpy as np

SEP = -1          # between documents (and past the end of a text): never a token, never matched
PAD = -2          # past the end of the reversed corpus


def suffix_array(v: np.ndarray, depth: int) -> np.ndarray:
    """Start positions of v's suffixes sorted by their first `depth` values (numerically; past the
    end lowest), ties by position."""
    n = len(v)
    if n == 0:
        return np.empty(0, np.int64)
    rank = np.unique(v, return_inverse=True)[1].astype(np.int64).reshape(-1) + 1   # 0: past the end
    h = 1
    while h < depth:
        after = np.zeros(n, np.int64)
        after[:n - h] = rank[h:]
        key = rank * (n + 2) + after
        order = np.argsort(key, kind="stable")
        sk = key[order]
        rank = np.empty(n, np.int64)
        rank[order] = np.cumsum(np.concatenate(([1], sk[1:] != sk[:-1])))
        if rank[order[-1]] == n:          # all distinct already
            break
        h *= 2
    return np.argsort(rank, kind="stable")


def longest_match(text: np.ndarray, n: int, depth: int) -> tuple[int, np.ndarray]:
    """The longest suffix of text[:n] (at most depth tokens) that also ends earlier in text[:n]:
    (its length, the positions after its earlier ends, where their continuations start)."""
    if n < 2:
        return 0, np.empty(0, np.int64)
    ends = np.nonzero(text[:n - 1] == text[n - 1])[0]
    m = 1 if len(ends) else 0
    while len(ends) and m < min(depth, n - 1):
        ok = ends >= m
        keep = ends[ok][text[ends[ok] - m] == text[n - 1 - m]]
        if not len(keep):
            break
        ends, m = keep, m + 1
    return m, ends + 1


def walk(text: np.ndarray, starts: np.ndarray, k_max: int, min_prob: float) -> tuple[list[int], list[float]]:
    """The most frequent continuation of the occurrences starting at `starts` in text (SEP past
    its end), up to k_max tokens, while its probability stays at least min_prob: (tokens, the
    probability of the draft up to each)."""
    out: list[int] = []
    probs: list[float] = []
    p = 1.0
    starts = starts[starts < len(text)]
    for d in range(k_max):
        if not len(starts):
            break
        nxt = text[np.minimum(starts + d, len(text) - 1)]
        nxt = np.where(starts + d < len(text), nxt, SEP)
        valid = nxt >= 0
        if not valid.any():
            break
        vals, counts = np.unique(nxt[valid], return_counts=True)
        top = np.nonzero(counts == counts.max())[0]
        if len(top) == 1:
            tok = int(vals[top[0]])
        else:                              # a tie: the one continued most recently
            tok = int(vals[max(top, key=lambda i: int(starts[nxt == vals[i]].max()))])
        share = counts.max() / len(starts)
        if p * share < min_prob:
            break
        p *= share
        out.append(tok)
        probs.append(p)
        starts = starts[nxt == tok]
    return out, probs


class SuffixCorpus:
    """Earlier prompts and answers (documents), at most max_tokens of them (the oldest dropped
    first), searched by a suffix array of their reversed concatenation."""

    def __init__(self, max_tokens: int, depth: int):
        self.max_tokens, self.depth = max_tokens, depth
        self.docs: deque[np.ndarray] = deque()
        self.n_tokens = 0
        self.lock = threading.Lock()
        self._built = False
        self.flat = np.empty(0, np.int32)          # the documents, SEP after each
        self._rev = np.empty(0, np.int32)
        self._sa = np.empty(0, np.int64)

    def configure(self, max_tokens: int, depth: int) -> None:
        with self.lock:
            if depth != self.depth:
                self.depth, self._built = depth, False
            self.max_tokens = max_tokens
            self._evict()

    def add(self, tokens) -> None:
        """A finished request's text (its prompt and answer). The next turn of a conversation,
        which begins with the last document whole, replaces it."""
        doc = np.asarray(tokens, np.int32)[-self.max_tokens:]
        if not len(doc):
            return
        with self.lock:
            last = self.docs[-1] if self.docs else None
            if last is not None and len(last) <= len(doc) and np.array_equal(doc[:len(last)], last):
                self.docs.pop()
                self.n_tokens -= len(last)
            self.docs.append(doc)
            self.n_tokens += len(doc)
            self._evict()
            self._built = False

    def clear(self) -> None:
        with self.lock:
            self.docs.clear()
            self.n_tokens = 0
            self._built = False

    def _evict(self) -> None:
        while self.n_tokens > self.max_tokens and self.docs:
            self.n_tokens -= len(self.docs.popleft())
        self._built = False

    def _build(self) -> None:
        parts = []
        for d in self.docs:
            parts += [d, np.array([SEP], np.int32)]
        self.flat = np.concatenate(parts) if parts else np.empty(0, np.int32)
        self._rev = np.concatenate((self.flat[::-1], np.full(self.depth + 1, PAD, np.int32)))
        self._sa = suffix_array(self.flat[::-1].astype(np.int64), self.depth)
        self._built = True

    def match(self, context: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """The longest suffix of `context` (at most depth tokens) found in the corpus: (its length,
        the positions where its occurrences' continuations start, in the text they index: the
        documents as they stood, SEP after each)."""
        with self.lock:
            if not self._built:
                self._build()
            sa, rev, n = self._sa, self._rev, len(self.flat)
            lo, hi, m = 0, len(sa), 0
            for j in range(min(self.depth, len(context))):
                keys = rev[sa[lo:hi] + j]
                t = context[len(context) - 1 - j]
                a, b = np.searchsorted(keys, t, "left"), np.searchsorted(keys, t, "right")
                if a == b:
                    break
                lo, hi, m = lo + a, lo + b, j + 1
            if m == 0:
                return 0, np.empty(0, np.int64), self.flat
            return m, (n - 1 - sa[lo:hi]) + 1, self.flat


_corpora: "weakref.WeakKeyDictionary[object, SuffixCorpus]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def corpus_of(target, max_tokens: int, depth: int) -> SuffixCorpus:
    """The corpus every suffix drafter of `target` shares (a server's slots, a process's
    generate() calls), made on first use and living as long as the target; with no target, a
    corpus of one's own."""
    if target is None:
        return SuffixCorpus(max_tokens, depth)
    with _lock:
        c = _corpora.get(target)
        if c is None:
            c = _corpora[target] = SuffixCorpus(max_tokens, depth)
    if (c.max_tokens, c.depth) != (max_tokens, depth):
        c.configure(max_tokens, depth)
    return c


def forget(target) -> None:
    """Drops what the target's suffix drafters learned (a benchmark's next round starts afresh)."""
    with _lock:
        c = _corpora.get(target)
    if c is not None:
        c.clear()
