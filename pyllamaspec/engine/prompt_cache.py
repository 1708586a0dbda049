"""A host-memory prompt cache (llama-server's --cache-ram): when a sequence is about to let go of
what it holds (a new prompt takes it, or its cells are needed), its state (tokens and K/V rows,
ContextSequence.save_state) is kept in RAM; a later prompt that shares a longer prefix with a kept
state than with anything the context holds takes that state back and evaluates only the rest.
Bounded in bytes, least recently used first out. An agent that resends a long system prompt after
another conversation took the slot evaluates its new turn only.

A hybrid model's state holds its recurrent states after its last positions only (the ring a
speculative rollback uses, csrc/memory/recurrent_state.h): a kept state serves a prompt that shares
all but the last `reach` of its tokens (an agent's next turn, resending the conversation), or,
further back, up to one of the sequence's checkpoints (kept with it: a chat's user turns, where a
new question parts from the conversation). Not over RPC.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..errors import PyllamaspecError
from .sequence import ContextSequence, common_prefix

MIN_TOKENS = 32          # a sequence shorter than this is not worth keeping (or taking back)
_clock = itertools.count(1)


@dataclass
class _Entry:
    tokens: list[int]
    state: bytes
    checkpoints: dict[int, bytes] = field(default_factory=dict)   # a hybrid's (ContextSequence's)
    used: int = field(default_factory=lambda: next(_clock))

    @property
    def size(self) -> int:
        return len(self.state) + sum(map(len, self.checkpoints.values()))


class PromptCache:
    """States of sequences, at most `limit` bytes of them."""

    def __init__(self, limit: int, reach: int | None = None):
        self.limit = limit
        self.reach = reach                      # how far a kept state rolls back (None: all the way)
        self.entries: list[_Entry] = []
        self.hits = self.saved = 0              # states taken back, kept

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.entries)

    def serves(self, kept: list[int], tokens: list[int], checkpoints=()) -> int:
        """The prefix of tokens a state holding `kept` (with those checkpoints) can be cut back
        to: 0 when it cannot."""
        k = common_prefix(kept, tokens)
        if self.reach is None or len(kept) - k <= self.reach:
            return k
        return max((p for p in checkpoints if p <= k), default=0)

    def put(self, tokens: list[int], state: bytes, checkpoints: dict[int, bytes] | None = None) -> None:
        """Keeps a state; one that a kept state serves whole is not kept again, and kept states
        that this one serves whole go."""
        e = _Entry(list(tokens), state, dict(checkpoints or {}))
        if e.size > self.limit:
            return
        for old in self.entries:
            if self.serves(old.tokens, tokens, old.checkpoints) == len(tokens):
                old.used = next(_clock)
                return
        self.entries = [old for old in self.entries if self.serves(tokens, old.tokens, e.checkpoints) < len(old.tokens)]
        self.entries.append(e)
        self.saved += 1
        self.entries.sort(key=lambda e: e.used)
        while self.bytes > self.limit:
            self.entries.pop(0)

    def best(self, prompt: list[int]) -> tuple[_Entry | None, int]:
        """The kept state serving the longest prefix of prompt, and that prefix's length."""
        best, n = None, 0
        for e in self.entries:
            k = self.serves(e.tokens, prompt, e.checkpoints)
            if k > n:
                best, n = e, k
        return best, n

    def describe(self) -> dict:
        return {"states": len(self.entries), "bytes": self.bytes, "limit": self.limit, "hits": self.hits,
                "saved": self.saved}


def keep(cache: PromptCache | None, s: ContextSequence, prompt: list[int] | None) -> None:
    """Before s lets go of its tokens for prompt (None: all of them): its state, if what goes is
    worth keeping (the caller holds the Model's lock)."""
    if cache is None:
        return
    ids = s._cache_ids
    lost = len(ids) - (common_prefix(ids, prompt) if prompt is not None else 0)
    if len(ids) < MIN_TOKENS or lost < MIN_TOKENS:
        return
    try:
        state = s.model._context.seq_state(s.id)
    except PyllamaspecError:                # a remote context's, one with a draft head: not kept
        return
    cache.put(ids, state, {p: b for p, b in s.checkpoints.items() if p <= len(ids)})


def restore(cache: PromptCache | None, s: ContextSequence, prompt: list[int]) -> None:
    """s takes back the kept state that shares the most of prompt, where it shares more than s
    holds now (truncated to the shared prefix)."""
    if cache is None or not cache.entries:
        return
    e, n = cache.best(prompt)
    have = common_prefix(s._cache_ids, prompt)
    if e is None or n < have + MIN_TOKENS:
        return
    c = s.model._context
    try:
        c.seq_set_state(s.id, e.state)
    except PyllamaspecError:                 # no room for it now: the prompt is evaluated
        return
    s._cache_ids, s.checkpoints = list(e.tokens), dict(e.checkpoints)
    s._cut(c, n)
    e.used = next(_clock)
    cache.hits += 1


__all__ = ["PromptCache", "keep", "restore", "MIN_TOKENS"]
