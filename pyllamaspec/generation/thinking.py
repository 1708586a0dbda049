"""A thinking budget (llama-server's --reasoning-budget N): once a reasoning block has run N tokens
the block is closed, its end tag forced (after --reasoning-budget-message, if any), as llama.cpp
b11434's reasoning-budget sampler does: the tags are matched as token sequences of the target's
vocabulary, counting starts with the start tag (the generation prompt's own, as llama.cpp feeds
it the prefill), a block that ends by itself stops the count, a token whose text is an incomplete
UTF-8 character is finished before the end is forced, and a later start tag opens a new budget.
The generation drives it round by round: rounds never run past the budget (room), and the
forced tokens go to the decoder's constraint (speculation/constraint.py: exact, p' = delta)."""
from __future__ import annotations

IDLE, COUNTING, WAITING_UTF8, FORCING, DONE = range(5)


def _utf8_complete(b: bytes) -> bool:
    """Whether b ends on a whole UTF-8 character."""
    for back in range(1, min(4, len(b)) + 1):
        c = b[-back]
        if c & 0xC0 != 0x80:                      # the last lead byte: its sequence's length
            need = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 1
            return back >= need
    return True


class ThinkingBudget:
    """start, ends: the tags as token ids; forced: what is forced when the budget runs out; budget:
    tokens inside a block (0: the block is closed as soon as it opens); piece(id) -> bytes."""

    def __init__(self, start: list[int], ends: list[list[int]], forced: list[int], budget: int, piece):
        self.start, self.ends, self.forced = start, [e for e in ends if e], forced
        self.budget, self.piece = budget, piece
        self.state, self.remaining, self.n_forced = IDLE, budget, 0
        self.tail: list[int] = []
        self.longest = max([len(start)] + [len(e) for e in self.ends])

    def _ends_with(self, seq: list[int]) -> bool:
        return bool(seq) and len(self.tail) >= len(seq) and self.tail[-len(seq):] == seq

    def _open(self) -> None:
        self.tail.clear()
        self.state, self.remaining = COUNTING, self.budget
        if self.budget <= 0:
            self._force()

    def _force(self) -> None:
        self.state, self.n_forced = FORCING, 0
        self.tail.clear()
        if not self.forced:
            self.state = DONE

    def feed(self, tokens: list[int]) -> None:
        """The generation's next tokens (the generation prompt's first)."""
        for t in tokens:
            self.tail = (self.tail + [t])[-self.longest:]
            if self.state in (IDLE, DONE):
                if self._ends_with(self.start):
                    self._open()
            elif self.state == FORCING:
                if t != self.forced[self.n_forced]:
                    continue                          # the generation prompt's rest, before the forced text
                self.n_forced += 1
                if self.n_forced >= len(self.forced):
                    self.state = DONE
                    self.tail.clear()
            elif any(self._ends_with(e) for e in self.ends):
                self.state = DONE                    # the block ended by itself
                self.tail.clear()
            elif self.state == COUNTING:
                self.remaining -= 1
                if self.remaining <= 0:              # the text's end: a whole character first
                    if _utf8_complete(self.piece(t)):
                        self._force()
                    else:
                        self.state = WAITING_UTF8
            elif _utf8_complete(self.piece(t)):       # WAITING_UTF8
                self._force()

    @property
    def inside(self) -> bool:
        """Whether the text is in a reasoning block now."""
        return self.state in (COUNTING, WAITING_UTF8, FORCING)

    def room(self) -> int | None:
        """Tokens the next round may produce before the budget decides (None: no bound)."""
        if self.state == COUNTING:
            return max(1, self.remaining)
        if self.state == WAITING_UTF8:
            return 1
        return None

    def to_force(self) -> list[int]:
        """The tokens that must come next (empty unless the budget ran out)."""
        return self.forced[self.n_forced:] if self.state == FORCING else []


UNBOUNDED = 1 << 62


def thinking_budget(spec, model) -> ThinkingBudget | None:
    """The budget a chat's GrammarSpec asks for on model's vocabulary (None: no reasoning block;
    one that never runs out where the budget is unbounded: it tells where the block is)."""
    r, syntax = getattr(spec, "reasoning", None), getattr(spec, "think", None)
    if r is None or syntax is None:
        return None

    def ids(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=True) if text else []
    b = ThinkingBudget(ids(syntax.start), [ids(syntax.end)], ids(r.message + syntax.end),
                       r.budget if r.budget >= 0 else UNBOUNDED,
                       lambda t: model.token_to_piece(t, render_special=True))
    b.feed(ids(spec.generation_prompt))
    return b


__all__ = ["ThinkingBudget", "thinking_budget"]
