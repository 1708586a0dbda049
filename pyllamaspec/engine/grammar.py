"""GBNF grammars (llama.cpp's syntax), matched in the core against a model's vocabulary.

A Grammar follows one generation: which tokens may come next (mask, allows), the tokens it has
taken (accept; rewind rolls them back, as a rejected draft is rolled back), and the text every
continuation starts with (forced). A Sampler given the grammar samples from the target's
distribution with the forbidden tokens removed first, as llama.cpp's grammar-first chain does.
All per-vocabulary work (the mask is one walk of a trie of the vocabulary's token texts) runs in
the core; nothing here loops over the vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable

import numpy as np

from ..errors import GrammarError, InvalidArgumentError
from . import _native
from ._native import ffi, lib


@dataclass(frozen=True)
class GrammarLimits:
    """What compiling and following one grammar may cost (0: no bound). The defaults admit every
    grammar llama.cpp's JSON-schema converter writes for real schemas with room to spare, and
    refuse within about a second the texts that would exhaust the stack, the memory or the time
    of the process: 100,000 nested parentheses, a chain of 300,000 rules, repetitions nested so
    that the parser's states multiply (`a ::= b{0,2000}`, `b ::= c{0,2000}`, ...)."""
    max_rules: int = 100_000           # rules, repetitions expanded
    max_depth: int = 1000              # nested parentheses
    max_elements: int = 1 << 22        # grammar elements, repetitions expanded
    max_stacks: int = 1 << 18          # distinct parser stacks, ever
    max_set: int = 1 << 16             # parser stacks alive at once
    max_set_storage: int = 1 << 23     # stack ids held by every state met
    timeout_ms: int = 1000             # compiling: parsing, checks and the first state


class CompileCancel:
    """A flag another thread sets to stop a grammar's compile (PSL_ERR_INTERRUPTED): the core
    reads it while it works, so a shutdown need not wait for a hostile compile to time out."""

    def __init__(self):
        self.flag = ffi.new("int32_t *")

    def set(self) -> None:
        self.flag[0] = 1


def _limits(limits: GrammarLimits | None, cancel: CompileCancel | None):
    """A psl_grammar_limits * for the core (it keeps a pointer to cancel's flag: hold cancel)."""
    c = ffi.new("psl_grammar_limits *")
    c[0] = lib.psl_grammar_default_limits()
    for f in fields(GrammarLimits):
        v = getattr(limits or GrammarLimits(), f.name)
        if not isinstance(v, int) or v < 0:
            raise InvalidArgumentError(f"GrammarLimits.{f.name} must be an int >= 0 (0: no bound), got {v!r}")
        setattr(c, f.name, v)
    if cancel is not None:
        c.cancel = cancel.flag
    return c


def _text(grammar: str) -> bytes:
    if not isinstance(grammar, str):
        raise InvalidArgumentError(f"a grammar is GBNF text (str), got {type(grammar).__name__}")
    if not grammar.strip():
        raise InvalidArgumentError("the grammar is empty")
    try:
        return grammar.encode("utf-8")
    except UnicodeEncodeError as e:       # a lone surrogate ("\ud800" in JSON) has no UTF-8
        raise GrammarError(f"the grammar is not valid Unicode text: {e.reason} (U+{ord(e.object[e.start]):04X}) "
                           f"at character {e.start}") from None


def _new(model, text: bytes, root: str, limits: GrammarLimits | None = None, cancel: CompileCancel | None = None):
    out = ffi.new("psl_grammar **")
    lim = _limits(limits, cancel)
    try:
        if model is None:
            _native.check(lib.psl_grammar_new(ffi.NULL, text, len(text), root.encode(), lim, out))
        else:
            with model._users:
                _native.check(lib.psl_grammar_new(model._model, text, len(text), root.encode(), lim, out))
    except InvalidArgumentError as e:
        raise GrammarError(str(e), e.status) from None
    return ffi.gc(out[0], lib.psl_grammar_free)


def check_grammar(grammar: str, root: str = "root", limits: GrammarLimits | None = None,
                  cancel: CompileCancel | None = None) -> None:
    """Checks a grammar's syntax without a vocabulary (GrammarError naming the problem and
    where); whether a <text> token reference names one token waits for the model."""
    _new(None, _text(grammar), root, limits, cancel)


class Grammar:
    """A GBNF grammar bound to `model`'s vocabulary (GrammarError for a bad grammar, naming the
    problem, its line and column, or the limit it passes). root: the start rule. limits: what it
    may cost (GrammarLimits(): the defaults); cancel: stops the compile from another thread."""

    def __init__(self, grammar: str, model, root: str = "root", limits: GrammarLimits | None = None,
                 cancel: CompileCancel | None = None):
        if not isinstance(root, str) or not root:
            raise InvalidArgumentError(f"root must be a rule name, got {root!r}")
        self.text = grammar
        self.root = root
        self.n_vocab = int(model.n_vocab)
        self._g = _new(model, _text(grammar), root, limits, cancel)
        self._n = ffi.new("int32_t *")
        self._ok = ffi.new("bool *")

    @property
    def handle(self):
        return self._g

    def accept(self, tokens: Iterable[int] | np.ndarray) -> int:
        """Takes tokens in order while the grammar allows them; returns how many it took."""
        a = np.ascontiguousarray(np.asarray(tokens, np.int64), np.int32)
        if not a.size:
            return 0
        _native.check(lib.psl_grammar_accept(self._g, ffi.from_buffer("int32_t[]", a), a.size, self._n))
        return int(self._n[0])

    def rewind(self, n: int) -> None:
        """Back to the state before the last n accepted tokens."""
        if n:
            _native.check(lib.psl_grammar_rewind(self._g, int(n)))

    @property
    def n_accepted(self) -> int:
        return int(lib.psl_grammar_n_accepted(self._g))

    def mask(self) -> np.ndarray:
        """bool[n_vocab]: the tokens allowed now."""
        out = np.empty(self.n_vocab, np.uint8)
        _native.check(lib.psl_grammar_mask(self._g, ffi.from_buffer("uint8_t[]", out), self.n_vocab))
        return out.view(bool)

    def allows(self, token: int) -> bool:
        _native.check(lib.psl_grammar_allows(self._g, int(token), self._ok))
        return bool(self._ok[0])

    @property
    def may_end(self) -> bool:
        """Whether an end-of-generation token is allowed now."""
        return bool(lib.psl_grammar_may_end(self._g))

    @property
    def dead_end(self) -> bool:
        """No token of the vocabulary continues the text now: only an end-of-generation token
        is allowed (the generation ends here rather than failing)."""
        _native.check(lib.psl_grammar_dead_end(self._g, self._ok))
        return bool(self._ok[0])

    @property
    def failure(self) -> str | None:
        """Why the grammar stopped at run time (a mask or an accept passed one of its limits), or
        None. It then stands at a dead end: its generation ends there with this as its error."""
        msg = lib.psl_grammar_failure(self._g)
        return None if msg == ffi.NULL else ffi.string(msg).decode("utf-8", "replace")

    def forced(self, max_bytes: int = 64) -> bytes:
        """The bytes every continuation starts with (none where the grammar branches)."""
        buf = ffi.new("char[]", max(1, max_bytes))
        n = ffi.new("size_t *")
        _native.check(lib.psl_grammar_forced(self._g, buf, max_bytes, n))
        return ffi.buffer(buf, n[0])[:]


__all__ = ["Grammar", "GrammarLimits", "CompileCancel", "check_grammar"]
