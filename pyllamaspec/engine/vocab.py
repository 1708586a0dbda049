"""Tokenizer access for Model: tokenize, detokenize, special tokens, a streaming detokenizer.

The tokenizer lives in the core (csrc/vocab/) and is built from the GGUF metadata alone
(tokenizer.ggml.*); it splits text token for token as llama.cpp does, for SentencePiece-style
("llama": LLaMA 1/2, Mistral, Gemma) and BPE ("gpt2": Llama 3, Qwen 2, SmolLM, GPT-2, ...) models.

Id lists cross the boundary as int32 arrays (numpy buffers handed to the core), so a call costs
the same whether it carries ten tokens or a hundred thousand.
"""
from __future__ import annotations

import enum
import os
import statistics
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..errors import InvalidArgumentError, ModelNotFoundError, TokenOutOfRangeError
from . import _args, _native

__all__ = ["VocabMixin", "VocabInfo", "TokenAttr", "Detokenizer", "Tokenizer", "pretokenize",
           "tokenizer_throughput", "english_sample_text"]

_PSL_ERR_BUFFER_TOO_SMALL = 9
_VOCAB_TYPES = {1: "spm", 2: "bpe"}


class TokenAttr(enum.IntEnum):
    """GGUF token types, as the tokenizer treats each token (Model.token_attr)."""
    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


@dataclass(frozen=True)
class VocabInfo:
    """The vocabulary of a model: its kind, size, special token ids (None where absent), flags."""
    type: str                 # "spm" (SentencePiece-style) or "bpe"
    n_tokens: int
    bos: int | None
    eos: int | None
    eot: int | None           # end of turn (<|im_end|>, <end_of_turn>, ...)
    eom: int | None           # end of message (<|eom_id|>)
    unk: int | None
    pad: int | None
    sep: int | None
    nl: int | None            # the token of "\n"
    add_bos: bool             # tokenize(add_special=True) puts BOS first
    add_eos: bool             # ... and EOS last
    add_space_prefix: bool    # SentencePiece: a space is put before the text
    pre: str                  # tokenizer.ggml.pre ("" if absent)


def _opt(i: int) -> int | None:
    return None if i < 0 else int(i)


def _as_bytes(text: str | bytes | bytearray | memoryview) -> bytes:
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise InvalidArgumentError(f"text must be str or bytes, got {type(text).__name__}")


def _token(name: str, token) -> int:
    """A token id argument: an integer (range checked by the core), never a silent cast."""
    if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
        raise InvalidArgumentError(f"{name} must be an integer token id, got {token!r}")
    token = int(token)
    if not -2**31 <= token < 2**31:
        raise TokenOutOfRangeError(f"token id {token} is outside the vocabulary")
    return token


def _as_ids(ids: Iterable[int] | np.ndarray) -> np.ndarray:
    """Token ids as int32 (their range is the core's to check); floats and bools are refused."""
    if isinstance(ids, np.ndarray):
        arr = ids.reshape(-1)
    else:
        lazy = hasattr(ids, "__iter__") and not hasattr(ids, "__len__")     # a generator
        arr = _args.int_sequence("token ids", list(ids) if lazy else ids)
    if arr.size and arr.dtype.kind not in "iu":
        raise InvalidArgumentError(f"token ids must be integers, got dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < -2**31 or int(arr.max()) >= 2**31):
        raise TokenOutOfRangeError("a token id is outside the vocabulary (and the int32 range)")
    return np.ascontiguousarray(arr, dtype=np.int32)


class VocabMixin:
    """Tokenizer methods of Model (uses self._lib, self._ffi, self._model, self._check)."""

    _vocab_info_cache: VocabInfo | None = None

    # Every call on self._model runs inside `with self._users:` (see _native.Users), so that a
    # close() on another thread waits for it.

    # -- information -------------------------------------------------------------------------
    @property
    def vocab_info(self) -> VocabInfo:
        """Kind, size and special tokens of the vocabulary (NoVocabularyError without one)."""
        if self._vocab_info_cache is None:
            out = self._ffi.new("psl_vocab_info *")
            with self._users:
                self._check(self._lib.psl_vocab_get_info(self._model, out))
            self._vocab_info_cache = VocabInfo(
                type=_VOCAB_TYPES.get(out.type, str(out.type)), n_tokens=out.n_tokens,
                bos=_opt(out.bos), eos=_opt(out.eos), eot=_opt(out.eot), eom=_opt(out.eom), unk=_opt(out.unk),
                pad=_opt(out.pad), sep=_opt(out.sep), nl=_opt(out.nl), add_bos=bool(out.add_bos),
                add_eos=bool(out.add_eos), add_space_prefix=bool(out.add_space_prefix),
                pre=self._ffi.string(out.pre).decode("utf-8", "replace"))
        return self._vocab_info_cache

    @property
    def bos_token(self) -> int | None:
        return self.vocab_info.bos

    @property
    def eos_token(self) -> int | None:
        return self.vocab_info.eos

    @property
    def eot_token(self) -> int | None:
        return self.vocab_info.eot

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, end of turn, ...)."""
        self.vocab_info  # raises without a vocabulary
        token = _token("token", token)
        with self._users:
            return bool(self._lib.psl_token_is_eog(self._model, token))

    @property
    def eog_tokens(self) -> frozenset[int]:
        """All end-of-generation token ids."""
        cached = getattr(self, "_eog_cache", None)
        if cached is None:
            n = self._ffi.new("int32_t *")
            buf = np.empty(64, np.int32)
            with self._users:
                st = self._lib.psl_vocab_eog_tokens(self._model, self._ffi.from_buffer("int32_t[]", buf), len(buf), n)
                if st == _PSL_ERR_BUFFER_TOO_SMALL:
                    buf = np.empty(n[0], np.int32)
                    st = self._lib.psl_vocab_eog_tokens(self._model, self._ffi.from_buffer("int32_t[]", buf),
                                                        len(buf), n)
            self._check(st)
            cached = frozenset(int(t) for t in buf[:n[0]])
            self._eog_cache = cached
        return cached

    def token_attr(self, token: int) -> TokenAttr:
        """The GGUF token type of a token as the tokenizer treats it."""
        attr = self._ffi.new("int32_t *")
        token = _token("token", token)
        with self._users:
            self._check(self._lib.psl_token_get_attr(self._model, token, attr, self._ffi.NULL))
        return TokenAttr(attr[0]) if attr[0] in TokenAttr._value2member_map_ else attr[0]

    def token_score(self, token: int) -> float:
        score = self._ffi.new("float *")
        token = _token("token", token)
        with self._users:
            self._check(self._lib.psl_token_get_attr(self._model, token, self._ffi.NULL, score))
        return float(score[0])

    # -- text to tokens ----------------------------------------------------------------------
    def tokenize_array(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> np.ndarray:
        """Like tokenize, as an int32 numpy array."""
        data = _as_bytes(text)
        cap = len(data) + 16
        n_out = self._ffi.new("int32_t *")
        while True:
            buf = np.empty(cap, dtype=np.int32)
            with self._users:
                st = self._lib.psl_tokenize(self._model, data, len(data), bool(add_special), bool(parse_special),
                                            self._ffi.from_buffer("int32_t[]", buf), cap, n_out)
            if st == _PSL_ERR_BUFFER_TOO_SMALL and n_out[0] > cap:
                cap = n_out[0]
                continue
            self._check(st)
            return buf[:n_out[0]]

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of text, as llama.cpp's tokenizer gives them.

        add_special: BOS (and EOS) where the model asks for them. parse_special: control tokens
        written in the text (``<|im_start|>``, ``<start_of_turn>``) become their ids; otherwise
        they are tokenized as plain text. Bytes that are not UTF-8 are accepted.
        """
        return self.tokenize_array(text, add_special, parse_special).tolist()

    # -- tokens to text ----------------------------------------------------------------------
    def token_to_piece(self, token: int, render_special: bool = False) -> bytes:
        """The bytes one token stands for (b"" for control tokens unless render_special)."""
        cap = 64
        n_out = self._ffi.new("size_t *")
        token = _token("token", token)
        while True:
            buf = self._ffi.new("char[]", cap)
            with self._users:
                st = self._lib.psl_token_to_piece(self._model, token, bool(render_special), buf, cap, n_out)
            if st == _PSL_ERR_BUFFER_TOO_SMALL and n_out[0] > cap:
                cap = n_out[0]
                continue
            self._check(st)
            return self._ffi.unpack(buf, n_out[0])

    def detokenize_bytes(self, ids: Sequence[int] | np.ndarray, render_special: bool = False) -> bytes:
        """The exact bytes of a token sequence (see detokenize)."""
        arr = _as_ids(ids)
        cap = max(64, 8 * len(arr))
        n_out = self._ffi.new("size_t *")
        ids_p = self._ffi.from_buffer("int32_t[]", arr)
        while True:
            buf = self._ffi.new("char[]", cap)
            with self._users:
                st = self._lib.psl_detokenize(self._model, ids_p, len(arr), bool(render_special), buf, cap, n_out)
            if st == _PSL_ERR_BUFFER_TOO_SMALL and n_out[0] > cap:
                cap = n_out[0]
                continue
            self._check(st)
            return self._ffi.unpack(buf, n_out[0])

    def detokenize(self, ids: Sequence[int] | np.ndarray, render_special: bool = False) -> str:
        """Text of a token sequence: the token pieces joined, control tokens hidden unless
        render_special. For SentencePiece models that add a space before the text, the first
        token's leading space is dropped (after a leading BOS). Bytes that do not form UTF-8 (a
        character cut at the end) decode to U+FFFD; detokenize_bytes gives them raw.
        A token id outside the vocabulary raises TokenOutOfRangeError."""
        return self.detokenize_bytes(ids, render_special).decode("utf-8", "replace")

    def detokenizer(self, render_special: bool = False) -> "Detokenizer":
        """A streaming detokenizer: push ids one at a time, get text as it completes."""
        return Detokenizer(self, render_special)


class Detokenizer(_native.Closeable):
    """Streaming detokenization for generation loops.

    >>> with model.detokenizer() as d:
    ...     for t in tokens:
    ...         print(d.push(t), end="")
    ...     print(d.flush())

    push() returns the text that is complete so far: a UTF-8 character split across tokens is
    held back until the token that completes it arrives. flush() returns what is left (an
    incomplete character decodes to U+FFFD). The concatenation of all the returned strings equals
    model.detokenize(all ids).
    """

    def __init__(self, model: VocabMixin, render_special: bool = False):
        self._lib, self._ffi, self._check = model._lib, model._ffi, model._check
        self._d = self._ffi.NULL
        self._users = _native.Users("detokenizer")
        self._excl = _native.Exclusive(self._users)
        out = self._ffi.new("psl_detok **")
        with model._users:          # the detokenizer keeps the core model alive from here on
            self._check(self._lib.psl_detok_new(model._model, bool(render_special), out))
        self._d = out[0]
        self._text = self._ffi.new("char **")
        self._len = self._ffi.new("size_t *")

    def _result(self) -> str:
        n = self._len[0]
        return self._ffi.unpack(self._text[0], n).decode("utf-8", "replace") if n else ""

    def push(self, token: int) -> str:
        """Adds one token; returns the newly completed text (may be "")."""
        token = _token("token", token)
        with self._excl:
            self._check(self._lib.psl_detok_push(self._d, token, self._text, self._len))
            return self._result()

    def flush(self) -> str:
        """Returns the bytes held back (an incomplete character), as text."""
        with self._excl:
            self._check(self._lib.psl_detok_flush(self._d, self._text, self._len))
            return self._result()

    def close(self) -> None:
        if "_users" in self.__dict__:
            self._users.close(self._free)

    def _free(self) -> None:
        if self._d != self._ffi.NULL:
            self._lib.psl_detok_free(self._d)
            self._d = self._ffi.NULL



class Tokenizer(VocabMixin, _native.Closeable):
    """The tokenizer of a GGUF file on its own: no weights are read, any architecture.

    >>> with Tokenizer("gemma-3-270m-q4_k_m.gguf") as tok:
    ...     ids = tok.tokenize("Hello world")

    Same methods as Model's tokenizer part (tokenize, detokenize, token_to_piece, detokenizer, ...).
    """

    def __init__(self, path: str | os.PathLike):
        self._lib, self._ffi = _native.lib, _native.ffi
        self._model = self._ffi.NULL
        self._users = _native.Users("tokenizer")
        path = os.fspath(path)
        if not os.path.exists(path):
            raise ModelNotFoundError(f"model file not found: {path}")
        self.path = path
        out = self._ffi.new("psl_model **")
        self._check(self._lib.psl_vocab_load(path.encode(), out))
        self._model = out[0]

    @staticmethod
    def _check(status: int) -> None:
        _native.check(status)

    def close(self) -> None:
        if "_users" in self.__dict__:
            self._users.close(self._free)

    def _free(self) -> None:
        if self._model != self._ffi.NULL:
            self._lib.psl_model_free(self._model)
            self._model = self._ffi.NULL

    def __repr__(self) -> str:
        return f"Tokenizer({self.path!r})"


def pretokenize(pre: str, text: str | bytes) -> list[bytes]:
    """The words a BPE pre-tokenizer (a tokenizer.ggml.pre value, e.g. "llama-bpe") splits text
    into, as the core computes them (for tests and debugging). No model needed."""
    data = _as_bytes(text)
    ffi, lib = _native.ffi, _native.lib
    cap = len(data) + 1
    n_out = ffi.new("int32_t *")
    while True:
        buf = np.empty(cap, dtype=np.int32)
        st = lib.psl_pretokenize(pre.encode(), data, len(data), ffi.from_buffer("int32_t[]", buf), cap, n_out)
        if st == _PSL_ERR_BUFFER_TOO_SMALL and n_out[0] > cap:
            cap = n_out[0]
            continue
        _native.check(st)
        break
    ends = buf[:n_out[0]].tolist()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        data = llama_utf8_repair(data)   # the offsets refer to the repaired text
    words, start = [], 0
    for e in ends:
        words.append(data[start:e])
        start = e
    return words


def llama_utf8_repair(data: bytes) -> bytes:
    """Bytes as llama.cpp's BPE pre-tokenizer sees them: decoded leniently (overlong forms and
    surrogates accepted, each malformed byte becoming U+FFFD; values past U+10FFFF, which make
    llama.cpp throw, also U+FFFD) and encoded again. The identity on valid UTF-8."""
    out, i, n = [], 0, len(data)

    def cont(k: int) -> bool:
        return i + k < n and data[i + k] & 0xC0 == 0x80

    while i < n:
        c = data[i]
        if c < 0x80:
            cp, step = c, 1
        elif not c & 0x40:
            cp, step = 0xFFFD, 1
        elif not c & 0x20:
            cp, step = (((c & 0x1F) << 6) | (data[i + 1] & 0x3F), 2) if cont(1) else (0xFFFD, 1)
        elif not c & 0x10:
            cp, step = ((((c & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F), 3)
                        if cont(1) and cont(2) else (0xFFFD, 1))
        elif not c & 0x08:
            cp, step = 0xFFFD, 1
            if cont(1) and cont(2) and cont(3):
                v = ((c & 0x07) << 18) | ((data[i + 1] & 0x3F) << 12) | ((data[i + 2] & 0x3F) << 6) | (data[i + 3] & 0x3F)
                if v <= 0x10FFFF:
                    cp, step = v, 4
        else:
            cp, step = 0xFFFD, 1
        out.append(chr(cp).encode("utf-8", "surrogatepass"))
        i += step
    return b"".join(out)


def english_sample_text(min_bytes: int = 1_000_000) -> str:
    """English prose for benchmarks: CPython's own documentation topics (pydoc_data), repeated to
    at least min_bytes."""
    from pydoc_data.topics import topics  # part of the standard library
    base = "\n\n".join(topics[k] for k in sorted(topics))
    reps = max(1, -(-min_bytes // len(base.encode())))
    return "\n\n".join([base] * reps)


def tokenizer_throughput(model: VocabMixin, text: str | bytes | None = None, repeat: int = 5) -> float:
    """Tokenization speed in MB/s (10^6 bytes per second) on one thread: the median of `repeat`
    timed runs of tokenize(text) after one warm-up run. The default text is about 1 MB of
    English (english_sample_text)."""
    data = _as_bytes(english_sample_text() if text is None else text)
    if not data:
        raise InvalidArgumentError("text is empty")
    ffi, lib = model._ffi, model._lib
    cap = len(data) + 16
    buf = np.empty(cap, dtype=np.int32)
    out = ffi.from_buffer("int32_t[]", buf)
    n_out = ffi.new("int32_t *")
    times = []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        model._check(lib.psl_tokenize(model._model, data, len(data), False, False, out, cap, n_out))
        dt = time.perf_counter() - t0
        if i:
            times.append(dt)
    return len(data) / statistics.median(times) / 1e6
