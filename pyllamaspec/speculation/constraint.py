"""A grammar as a property of the round: the constraint every distribution and every draft of a
speculative round respects, whichever drafter proposes.

Exactness. Let p' be the target's adjusted distribution with the tokens the grammar forbids
removed first (the sampler's grammar-first chain) and q' the drafter's made the same way. A
drafter that samples draws from q' (its sampler holds the grammar, advanced along its own
drafts), so its drafts are valid and min(1, p'(x)/q'(x)) with the residual norm(max(0, p' - q'))
leaves each position distributed as p' (Leviathan et al.'s argument holds for any q' the drafts
are really drawn from). A deterministic drafter (n-gram lookup: q a point mass) may propose
what the grammar forbids: the draft is cut before the first such token, a deterministic rule
of the text, so the cut draft is again a point-mass proposal. Verification scores draft row i
at the grammar's state after drafts 1..i-1, and the grammar takes the round's accepted tokens
only, so it rolls back with the caches.

Forced tokens as free drafts. Where every continuation the grammar allows starts with the same
text (a key the schema fixes, a closing brace), that text, tokenized, is appended to the draft
with q a point mass on each token, at no drafting cost. Proof that this keeps p': a token x
proposed with q = delta_x is accepted with probability min(1, p'(x)/1) = p'(x); on rejection the
next token is drawn from norm(max(0, p' - delta_x)), which is p' without x, renormalized. So
P(x) = p'(x) and P(y) = (1 - p'(x)) p'(y) / (1 - p'(x)) = p'(y) for y != x: exactly p' (greedy:
accepted iff x is the masked argmax). Where the grammar allows x alone, the mask leaves p' =
delta_x whatever the target's logits, so p'(x) = 1: accepted with probability 1. Elsewhere the
text is forced but its tokenization is not (`"name"` may come as `"`, `name`, `":`...), and the
target decides, exactly as above.

Tokens that must come next (a thinking budget's forced end of the block, as llama.cpp's
reasoning-budget sampler forces it): they are the round's draft, q a point mass, and the
target's rows that score them keep that token alone (p' = delta_x: the sampler, greedy or not,
can draw nothing else), so they are accepted with probability 1, and the row after them is
the target's own.
"""
from __future__ import annotations

import numpy as np

from ..engine.grammar import Grammar
from ..engine.model import Model
from .drafter import Draft


class Constraint:
    """The grammar of a generation (None: no constraint) and the target whose tokenizer turns
    forced text into draft tokens. forced: append forced tokens as free drafts; keep_last: keep
    a forced run's last token even where the text goes on (the model often joins it with what
    follows, `"` + `:` as `":`, so by default it is left out)."""

    def __init__(self, grammar: Grammar | None, target: Model | None = None, forced: bool = True,
                 max_forced_bytes: int = 64, keep_last: bool = False):
        self.grammar = grammar
        self.target = target
        self.forced = forced and grammar is not None and target is not None
        self.max_forced_bytes = max_forced_bytes
        self.keep_last = keep_last
        self.committed = grammar.n_accepted if grammar is not None else 0
        self.queue: list[int] = []           # tokens that must come next (force)

    @property
    def active(self) -> bool:
        return self.grammar is not None

    def force(self, tokens: list[int]) -> None:
        """The next tokens are these, whatever the models say (a thinking budget ran out)."""
        self.queue = [int(t) for t in tokens]

    def mask(self, p: np.ndarray, draft: Draft) -> None:
        """The target's rows that score forced tokens keep those tokens alone."""
        for i, t in enumerate(self.queue[:draft.n]):
            if int(draft.tokens[i]) == t:
                keep = p[i, t]
                p[i, :] = -np.inf
                p[i, t] = keep if np.isfinite(keep) else 0.0

    def attach(self, sampler) -> None:
        """Makes `sampler` sample under the grammar."""
        if self.grammar is not None:
            sampler.set_grammar(self.grammar)

    def reset(self) -> None:
        """Forgets what a drafter accepted into the grammar this round."""
        g = self.grammar
        if g is not None and g.n_accepted != self.committed:
            g.rewind(g.n_accepted - self.committed)

    def complete(self, draft: Draft, cap: int) -> Draft:
        """The round's draft: the drafter's, cut before the first token the grammar forbids, then
        the forced tokens that follow it (free drafts, q a point mass), cap tokens in all."""
        g = self.grammar
        if self.queue:
            forced = self.queue[:cap]
            if g is not None:
                self.reset()
                forced = forced[:g.accept(forced)]
                self.reset()
            return _joined(draft, 0, forced)
        if g is None:
            return draft
        self.reset()
        n = g.accept(draft.tokens[:cap])
        forced = self._forced(cap - n) if self.forced and n < cap else []
        self.reset()
        if n == draft.n and not forced:
            return draft
        return _joined(draft, n, forced)

    def _forced(self, room: int) -> list[int]:
        """Tokens of the text every continuation starts with, from the grammar's state (after the
        drafter's tokens), as many as the grammar takes and room allows."""
        text = self.grammar.forced(self.max_forced_bytes)
        if not text:
            return []
        ids = self.target.tokenize(text, add_special=False, parse_special=False)
        if b"".join(self.target.token_to_piece(t) for t in ids) != text:
            return []                        # the tokenizer added to the text (a space prefix)
        g = self.grammar
        n = g.accept(ids)
        ends = n == len(ids) and g.may_end   # nothing can join the last token
        g.rewind(n)
        if not self.keep_last and len(ids) > 1 and not ends:
            ids = ids[:-1]
        ids = ids[:room]
        return ids[:g.accept(ids)]

    def advance(self, new: list[int]) -> None:
        """The round's tokens become text: the grammar takes them."""
        n_forced = 0
        while n_forced < min(len(self.queue), len(new)) and self.queue[n_forced] == new[n_forced]:
            n_forced += 1
        del self.queue[:n_forced]
        g = self.grammar
        if g is None:
            return
        self.reset()
        n = g.accept(new)
        self.committed = g.n_accepted
        if n != len(new):
            raise RuntimeError(f"the grammar refused token {new[n]} that the round produced")




def _joined(draft: Draft, n: int, forced: list[int]) -> Draft:
    """draft[:n] followed by the forced tokens (q rows one-hot, confidence 1)."""
    f = np.asarray(forced, np.int32)
    tokens = np.concatenate([draft.tokens[:n], f]).astype(np.int32)
    q = None
    if draft.q is not None:
        q = np.zeros((n + len(f), draft.q.shape[1]), np.float32)
        q[:n] = draft.q[:n]
        q[np.arange(n, n + len(f)), f] = 1.0
    p_max = None
    if draft.p_max is not None:
        p_max = np.concatenate([draft.p_max[:n], np.ones(len(f), np.float32)]).astype(np.float32)
    return Draft(tokens, q, None, p_max, n_forced=len(f))


__all__ = ["Constraint"]
