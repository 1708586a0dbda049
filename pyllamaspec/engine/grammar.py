"""GBNF grammars (llama.cpp's syntax), matched in the core against a model's vocabulary.

A Grammar follows one generation: which tokens may come next (mask, allows), the tokens it has
taken (accept; rewind rolls them back, as a rejected draft is rolled back), and the text every
continuation starts with (forced). A Sampler given the grammar samples from the target's
distribution with the forbidden tokens removed first, as llama.cpp's grammar-first chain does.
All per-vocabulary work (the mask is one walk of a trie of the vocabulary's token texts) runs in
the core; nothing here loops over the vocabulary.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..errors import GrammarError, InvalidArgumentError
from . import _native
from ._native import ffi, lib


def _text(grammar: str) -> bytes:
    if not isinstance(grammar, str):
        raise InvalidArgumentError(f"a grammar is GBNF text (str), got {type(grammar).__name__}")
    if not grammar.strip():
        raise InvalidArgumentError("the grammar is empty")
    return grammar.encode("utf-8")


def _new(model, text: bytes, root: str):
    out = ffi.new("psl_grammar **")
    handle = ffi.NULL if model is None else model._model
    try:
        if model is None:
            _native.check(lib.psl_grammar_new(handle, text, len(text), root.encode(), out))
        else:
            with model._users:
                _native.check(lib.psl_grammar_new(model._model, text, len(text), root.encode(), out))
    except InvalidArgumentError as e:
        raise GrammarError(str(e), e.status) from None
    return ffi.gc(out[0], lib.psl_grammar_free)


def check_grammar(grammar: str, root: str = "root") -> None:
    """Checks a grammar's syntax without a vocabulary (GrammarError naming the problem and
    where); whether a <text> token reference names one token waits for the model."""
    _new(None, _text(grammar), root)


class Grammar:
    """A GBNF grammar bound to `model`'s vocabulary (GrammarError for a bad grammar, naming the
    problem, its line and column). root: the start rule."""

    def __init__(self, grammar: str, model, root: str = "root"):
        if not isinstance(root, str) or not root:
            raise InvalidArgumentError(f"root must be a rule name, got {root!r}")
        self.text = grammar
        self.root = root
        self.n_vocab = int(model.n_vocab)
        self._g = _new(model, _text(grammar), root)
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

    def forced(self, max_bytes: int = 64) -> bytes:
        """The bytes every continuation starts with (none where the grammar branches)."""
        buf = ffi.new("char[]", max(1, max_bytes))
        n = ffi.new("size_t *")
        _native.check(lib.psl_grammar_forced(self._g, buf, max_bytes, n))
        return ffi.buffer(buf, n[0])[:]


__all__ = ["Grammar", "check_grammar"]
