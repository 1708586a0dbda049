"""The tokenizer (issue 3): llama.cpp's reference tokenizations, round trips, independent oracles
(Hugging Face `tokenizers` for BPE, the `regex` module for the pre-tokenizers, a Python
re-implementation of the SentencePiece-style merges for Gemma), special tokens, streaming
detokenization, bad input and fuzzing."""
from __future__ import annotations

import functools
import heapq
import pathlib
import random
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import load_reference

from pyllamaspec import Model
from pyllamaspec.errors import (InvalidArgumentError, NoVocabularyError, PyllamaspecError, TokenOutOfRangeError,
                                UnsupportedModelError)
from pyllamaspec.engine.vocab import (TokenAttr, Tokenizer, english_sample_text, llama_utf8_repair,
                               pretokenize, tokenizer_throughput)

REPO = pathlib.Path(__file__).resolve().parent.parent
SPACE_MARK = "\u2581"
MODEL_KEYS = {"smollm2": "smollm2-135m-q4_1", "gemma3": "gemma-3-270m-q4_k_m"}

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- fixtures --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm(smollm2_path):
    with Tokenizer(smollm2_path) as t:
        yield t


@pytest.fixture(scope="module")
def gemma(gemma3_path):
    with Tokenizer(gemma3_path) as t:
        yield t


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def tok(request):
    return request.getfixturevalue({"smollm2": "smollm", "gemma3": "gemma"}[request.param]), request.param


@functools.cache
def read_gguf_tokenizer(path) -> dict:
    """The tokenizer.ggml.* fields of a GGUF file, read with the gguf package (not the core).
    Cached (Gemma's 262k tokens take the reader seconds); the dict is shared: do not modify it."""
    import gguf
    r = gguf.GGUFReader(str(path))
    out = {}
    for key, f in r.fields.items():
        if not key.startswith("tokenizer.ggml.") and key not in ("general.architecture",):
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                out[key] = [bytes(f.parts[i]) for i in f.data]
            else:
                out[key] = [f.parts[i][0].item() for i in f.data]
        elif f.types[0] == gguf.GGUFValueType.STRING:
            out[key] = bytes(f.parts[-1]).decode()
        else:
            out[key] = f.parts[-1][0].item()
    return out


@pytest.fixture(scope="module")
def smollm_fields(smollm2_path):
    return read_gguf_tokenizer(smollm2_path)


@pytest.fixture(scope="module")
def gemma_fields(gemma3_path):
    return read_gguf_tokenizer(gemma3_path)


def write_tokenizer_gguf(path, *, model: str, tokens: list, types: list | None = None, scores: list | None = None,
                         merges: list | None = None, pre: str | None = None, bos: int | None = None,
                         eos: int | None = None, unk: int | None = None, add_bos: bool | None = None,
                         add_space_prefix: bool | None = None, name: str = "tokenizer-test"):
    """A GGUF file with tokenizer metadata only (no tensors), for Tokenizer()."""
    import gguf
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(name)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list([t if isinstance(t, (bytes, str)) else bytes(t) for t in tokens])
    if types is not None:
        w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if unk is not None:
        w.add_unk_token_id(unk)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def corpus_documents(limit_bytes: int = 700_000) -> list[str]:
    """A few hundred KB of text found on every machine: CPython's documentation topics
    (pydoc_data) and some standard library sources."""
    from pydoc_data.topics import topics
    docs = [topics[k] for k in sorted(topics)]
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    for name in ["argparse.py", "inspect.py", "typing.py", "textwrap.py", "difflib.py", "calendar.py"]:
        p = stdlib / name
        if p.is_file():
            docs.append(p.read_text(encoding="utf-8", errors="replace"))
    out, total = [], 0
    for d in docs:
        if total >= limit_bytes:
            break
        out.append(d)
        total += len(d.encode())
    return out


# ---- llama.cpp's reference tokenizations ----------------------------------------------------------

@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_reference_tokenizations(name, request):
    t = request.getfixturevalue({"smollm2": "smollm", "gemma3": "gemma"}[name])
    rows = load_reference("tok", MODEL_KEYS[name])
    assert rows
    for row in rows:
        assert t.tokenize(row["text"], add_special=False, parse_special=False) == row["ids"], row["text"]


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_reference_prompts_with_special(name, request):
    t = request.getfixturevalue({"smollm2": "smollm", "gemma3": "gemma"}[name])
    rows = load_reference("gen", MODEL_KEYS[name])
    assert rows
    for row in rows:
        assert t.tokenize(row["text"], add_special=True) == row["ids"], row["text"]


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_reference_round_trip(name, request):
    t = request.getfixturevalue({"smollm2": "smollm", "gemma3": "gemma"}[name])
    for kind in ("tok", "gen"):
        for row in load_reference(kind, MODEL_KEYS[name]):
            assert t.detokenize(row["ids"]) == row["text"]
            assert t.detokenize(t.tokenize(row["text"], add_special=True)) == row["text"]


def test_model_has_the_tokenizer(smollm2_path):
    """Model inherits the tokenizer methods (VocabMixin) and agrees with the vocabulary-only handle."""
    with Model(smollm2_path, n_ctx=64) as m, Tokenizer(smollm2_path) as t:
        text = "Speculative decoding: the draft proposes, the target verifies."
        assert m.tokenize(text) == t.tokenize(text)
        assert m.detokenize(m.tokenize(text)) == text
        assert m.vocab_info == t.vocab_info
        assert m.vocab_info.n_tokens == m.n_vocab
        with m.detokenizer() as d:
            assert "".join(d.push(i) for i in m.tokenize(text)) + d.flush() == text


# ---- vocabulary information, special tokens ---------------------------------------------------------

def test_vocab_info_smollm2(smollm):
    v = smollm.vocab_info
    assert (v.type, v.n_tokens, v.pre) == ("bpe", 49152, "smollm")
    assert (v.bos, v.eos, v.unk, v.pad) == (1, 2, 0, 2)
    assert v.eot == 2                       # <|im_end|>, found by its text as llama.cpp does
    assert not v.add_bos and not v.add_eos and not v.add_space_prefix
    assert v.nl == smollm.tokenize("\n", add_special=False)[0]
    assert smollm.is_eog(2) and smollm.is_eog(0) and not smollm.is_eog(1) and not smollm.is_eog(100)
    assert smollm.token_attr(1) == TokenAttr.CONTROL
    assert smollm.token_attr(1000) == TokenAttr.NORMAL


def test_vocab_info_gemma3(gemma):
    v = gemma.vocab_info
    assert (v.type, v.n_tokens, v.pre) == ("spm", 262144, "default")
    assert (v.bos, v.eos, v.unk, v.pad, v.eot) == (2, 1, 3, 0, 106)
    assert v.add_bos and not v.add_eos and not v.add_space_prefix
    assert v.nl == 248                      # <0x0A>, as llama.cpp picks it for SentencePiece models
    assert gemma.is_eog(1) and gemma.is_eog(106) and not gemma.is_eog(2)
    assert gemma.token_attr(238) == TokenAttr.BYTE
    assert gemma.token_attr(138) == TokenAttr.USER_DEFINED    # "  "
    assert gemma.token_attr(6) == TokenAttr.CONTROL           # <unused0>
    assert gemma.token_score(236743) == -236280.0


def test_parse_special_smollm2(smollm):
    chat = "<|im_start|>user\nHi there<|im_end|>\n"
    ids = smollm.tokenize(chat, add_special=False, parse_special=True)
    assert ids == [1] + smollm.tokenize("user\nHi there", add_special=False) + [2] + smollm.tokenize("\n", False)
    plain = smollm.tokenize(chat, add_special=False, parse_special=False)
    assert 1 not in plain and 2 not in plain
    assert smollm.detokenize(plain) == chat
    assert smollm.detokenize(ids) == "user\nHi there\n"                   # control tokens hidden
    assert smollm.detokenize(ids, render_special=True) == chat


def test_parse_special_gemma3(gemma):
    chat = "<start_of_turn>user\nHi<end_of_turn>\n"
    ids = gemma.tokenize(chat, add_special=True, parse_special=True)
    assert ids == [2, 105, 2364, 107, 10979, 106, 107]
    assert gemma.detokenize(ids) == "user\nHi\n"
    assert gemma.detokenize(ids, render_special=True) == "<bos>" + chat
    plain = gemma.tokenize(chat, add_special=False, parse_special=False)
    assert 105 not in plain and 106 not in plain
    assert gemma.detokenize(plain) == chat


def test_user_defined_tokens_always_match(gemma):
    """User-defined tokens (Gemma's whitespace runs, HTML tags) are split off even without
    parse_special, as in llama.cpp; the longest one wins."""
    b_tag = gemma.tokenize("<b>", add_special=False)
    assert len(b_tag) == 1 and gemma.token_attr(b_tag[0]) == TokenAttr.USER_DEFINED
    ids = gemma.tokenize("x<b>y", add_special=False)
    assert b_tag[0] in ids
    assert gemma.tokenize("a" + " " * 5 + "b", add_special=False)[1] == 141          # five spaces
    assert gemma.tokenize("\n" * 40, add_special=False) == [137, 115]                 # 31 + 9 newlines


def test_token_to_piece(smollm, gemma):
    assert gemma.token_to_piece(238 + 0x41) == b"A"                       # <0x41>
    assert gemma.token_to_piece(1902) == b" world"                        # "▁world"
    assert gemma.token_to_piece(2) == b""
    assert gemma.token_to_piece(2, render_special=True) == b"<bos>"
    world = smollm.tokenize(" world", add_special=False)
    assert len(world) == 1 and smollm.token_to_piece(world[0]) == b" world"   # "Ġworld"
    assert smollm.token_to_piece(0, render_special=True) == b"<|endoftext|>"
    # a piece that is part of a UTF-8 character
    ids = smollm.tokenize("日本語", add_special=False)
    assert b"".join(smollm.token_to_piece(i) for i in ids) == "日本語".encode()


def test_out_of_range_ids(tok):
    t, _ = tok
    n = t.vocab_info.n_tokens
    for bad in (-1, n, n + 1000, 2**31 - 1):
        with pytest.raises(TokenOutOfRangeError, match="outside the vocabulary"):
            t.detokenize([5, bad])
        with pytest.raises(TokenOutOfRangeError):
            t.token_to_piece(bad)
        with pytest.raises(TokenOutOfRangeError):
            t.token_attr(bad)
        with t.detokenizer() as d, pytest.raises(TokenOutOfRangeError):
            d.push(bad)
        assert not t.is_eog(bad)
    with pytest.raises(TokenOutOfRangeError):        # out of range, not cast to a small id
        t.detokenize([2**40])
    with pytest.raises(InvalidArgumentError):
        t.detokenize(["a"])
    with pytest.raises(InvalidArgumentError):
        t.tokenize(12345)


def test_empty_and_add_special(tok):
    t, name = tok
    v = t.vocab_info
    assert t.tokenize("", add_special=False) == []
    assert t.tokenize("", add_special=True) == ([v.bos] if v.add_bos else [])
    assert t.detokenize([]) == ""
    ids = t.tokenize("Hello", add_special=True)
    assert (ids[0] == v.bos) == v.add_bos


def test_numpy_and_bytes_inputs(smollm):
    text = "Numbers 12345 and words."
    ids = smollm.tokenize(text, add_special=False)
    arr = smollm.tokenize_array(text.encode(), add_special=False)
    assert arr.dtype == np.int32 and arr.tolist() == ids
    assert smollm.detokenize(arr) == text
    assert smollm.detokenize(np.array(ids, dtype=np.int64)) == text
    assert smollm.detokenize(tuple(ids)) == text
    assert smollm.detokenize(iter(ids)) == text


# ---- streaming detokenization ----------------------------------------------------------------------

STREAM_TEXTS = ["Hello world", "日本語のテキストも扱えますか？", "emoji 🤖🚀👍🏽 and 🇫🇷 flags", "🧌𠀋 rare characters",
                "Ünïcödé tëxt", "mixed\ttabs\n\nand newlines  "]


@pytest.mark.parametrize("text", STREAM_TEXTS)
def test_streaming_detokenizer(tok, text):
    t, _ = tok
    ids = t.tokenize(text, add_special=True)
    with t.detokenizer() as d:
        parts = [d.push(i) for i in ids]
        tail = d.flush()
    assert "".join(parts) + tail == text == t.detokenize(ids)
    assert tail == ""
    for p in parts:
        assert "\ufffd" not in p            # an incomplete character is held back, never split
    # what has come out after k tokens is the longest complete prefix
    raw = [t.token_to_piece(i) for i in ids]
    for k in range(len(ids) + 1):
        got = "".join(parts[:k]).encode()
        so_far = b"".join(raw[:k])
        assert so_far.startswith(got) and len(so_far) - len(got) <= 3


def test_streaming_holds_back_partial_characters(gemma):
    ids = gemma.tokenize("🧌", add_special=False)      # four byte-fallback tokens
    assert len(ids) == 4 and all(gemma.token_attr(i) == TokenAttr.BYTE for i in ids)
    d = gemma.detokenizer()
    assert [d.push(i) for i in ids] == ["", "", "", "🧌"]
    assert d.push(ids[0]) == "" and d.push(ids[1]) == ""
    assert d.flush() == "\ufffd"             # an incomplete character at the end
    assert d.push(gemma.tokenize("a", add_special=False)[0]) == "a"
    d.close()
    with pytest.raises(InvalidArgumentError):
        d.push(5)


def test_streaming_invalid_bytes_pass_through(gemma):
    ids = gemma.tokenize(b"\xff\xfeA", add_special=False)
    with gemma.detokenizer() as d:
        out = "".join(d.push(i) for i in ids) + d.flush()
    assert out == b"\xff\xfeA".decode("utf-8", "replace")


def test_detokenizer_outlives_the_handle(smollm2_path):
    t = Tokenizer(smollm2_path)
    ids = t.tokenize("still works", add_special=False)
    d = t.detokenizer()
    t.close()
    assert "".join(d.push(i) for i in ids) + d.flush() == "still works"
    d.close()


def test_render_special_in_stream(gemma):
    ids = gemma.tokenize("<start_of_turn>model\nOK<end_of_turn>", add_special=True, parse_special=True)
    with gemma.detokenizer(render_special=True) as d:
        assert "".join(d.push(i) for i in ids) == "<bos><start_of_turn>model\nOK<end_of_turn>"
    with gemma.detokenizer() as d:
        assert "".join(d.push(i) for i in ids) == "model\nOK"


# ---- round trips -----------------------------------------------------------------------------------

@FUZZ
@given(text=st.text(max_size=200))
def test_round_trip_bpe_random_unicode(smollm, text):
    assume(not set(text.encode()) & SMOLLM2_MISSING_BYTES)
    assert smollm.detokenize(smollm.tokenize(text, add_special=False)) == text
    assert smollm.detokenize(smollm.tokenize(text, add_special=True)) == text


@FUZZ
@given(text=st.text(st.sampled_from(list("ab cd\n\t'sS1234567890.,!?-_()[]<>|éßЖ日本한٣²…。\u00a0\u3000🤖")), max_size=120))
def test_round_trip_bpe_dense_alphabet(smollm, text):
    assert smollm.detokenize(smollm.tokenize(text, add_special=False)) == text


@FUZZ
@given(text=st.text(max_size=200))
def test_round_trip_spm_random_unicode(gemma, text):
    # Where SentencePiece-style round trips cannot hold: U+2581 is how the format writes a space,
    # so it comes back as a space; see also test_spm_round_trip_limits.
    assume(SPACE_MARK not in text)
    assert gemma.detokenize(gemma.tokenize(text, add_special=False)) == text
    assert gemma.detokenize(gemma.tokenize(text, add_special=True)) == text


@FUZZ
@given(data=st.binary(max_size=200))
def test_round_trip_spm_bytes(gemma, data):
    """Byte fallback makes SentencePiece tokenization lossless on bytes, spaces aside (see
    test_spm_round_trip_limits)."""
    data = data.replace(b" ", b"")
    assume(SPACE_MARK.encode() not in data)
    assert gemma.detokenize_bytes(gemma.tokenize(data, add_special=False)) == data


def test_spm_round_trip_limits(gemma):
    """Where SentencePiece-style round trips cannot hold (llama.cpp gives the same tokens):
    U+2581 is how the format writes a space, so it comes back as a space; and a malformed UTF-8
    lead byte just before a space swallows part of the escaped space, which then comes back as
    bytes of U+2581."""
    assert gemma.detokenize(gemma.tokenize("a\u2581b", add_special=False)) == "a b"
    assert gemma.detokenize_bytes(gemma.tokenize(b"\xc0 x", add_special=False)) == b"\xc0\xe2\x96\x81x"


def test_round_trip_corpus(tok):
    t, _ = tok
    for doc in corpus_documents(300_000):
        assert t.detokenize(t.tokenize(doc, add_special=False)) == doc


# ---- fuzz: nothing crashes ---------------------------------------------------------------------------

@FUZZ
@given(data=st.binary(max_size=300), parse_special=st.booleans(), add_special=st.booleans())
def test_fuzz_random_bytes(tok, data, parse_special, add_special):
    t, name = tok
    ids = t.tokenize(data, add_special=add_special, parse_special=parse_special)
    assert all(0 <= i < t.vocab_info.n_tokens for i in ids)
    out = t.detokenize_bytes(ids, render_special=True)
    if name == "smollm2" and not parse_special and not set(data) & SMOLLM2_MISSING_BYTES:
        # BPE: malformed UTF-8 is repaired first, as llama.cpp does
        assert out == llama_utf8_repair(data)


# SmolLM2's byte-level vocabulary has no token for these bytes (control characters, and the lead
# bytes of U+40000..U+BFFFF and of no valid UTF-8): llama.cpp drops them, and so do we.
SMOLLM2_MISSING_BYTES = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2} | set(range(0xF5, 0x100))


def test_bytes_without_tokens_are_dropped(smollm, smollm_fields):
    from models import _gpt2_byte_to_unicode
    vocab = {t.decode() for t in smollm_fields["tokenizer.ggml.tokens"]}
    assert {b for b, c in _gpt2_byte_to_unicode().items() if c not in vocab} == SMOLLM2_MISSING_BYTES
    assert smollm.tokenize("a\x04b", add_special=False) == smollm.tokenize("a", add_special=False) + \
        smollm.tokenize("b", add_special=False)
    assert smollm.detokenize(smollm.tokenize("x\U00040000y", add_special=False)) == b"x\x80\x80\x80y".decode(
        "utf-8", "replace")


@FUZZ
@given(ids=st.lists(st.integers(0, 262143), max_size=60), render=st.booleans())
def test_fuzz_random_ids(tok, ids, render):
    t, _ = tok
    ids = [i % t.vocab_info.n_tokens for i in ids]
    whole = t.detokenize_bytes(ids, render_special=render)
    with t.detokenizer(render) as d:
        streamed = "".join(d.push(i) for i in ids) + d.flush()
    assert streamed == whole.decode("utf-8", "replace") or "\ufffd" in streamed


def test_fuzz_special_token_soup(tok):
    """Text made of special-token fragments, whitespace and bytes, with and without parse_special."""
    t, _ = tok
    rng = random.Random(1234)
    pieces = [t.token_to_piece(i, render_special=True).decode("utf-8", "replace") for i in range(0, 300)]
    pieces += ["<", ">", "|", " ", "  ", "\n", "\t", "<|im_", "start_of", "é", "🤖", "\u2581"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        for ps in (False, True):
            ids = t.tokenize(text, add_special=True, parse_special=ps)
            if ps:
                assert t.detokenize(ids, render_special=True).replace(SPACE_MARK, " ") == \
                    ("<bos>" if t.vocab_info.add_bos else "") + text.replace(SPACE_MARK, " ")


# ---- oracle: Hugging Face tokenizers on the same vocabulary, merges and pre-tokenizer -------------------

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
CONTR = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3_RE = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# tokenizer.ggml.pre -> the expressions llama.cpp applies in turn (from its llama-vocab.cpp)
PRE_EXPRESSIONS = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2_RE, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt-2": [GPT2_RE],
    "smollm": [r"\p{N}", GPT2_RE],
    "starcoder": [r"\p{N}", GPT2_RE],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2_RE, r"[0-9][0-9][0-9]"],
    "llama-bpe": [LLAMA3_RE],
    "dbrx": [LLAMA3_RE],
    "qwen2": [QWEN2_RE],
    "stablelm2": [QWEN2_RE],
    "minicpm5": [r"\p{N}{1,3}", CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "seed-coder": [CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "ufakzeka": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "bailingmoe": [r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"],
    "laguna": [r"[^\n]+|[\n]+", QWEN2_RE],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"],
    "poro-chat": [r" ?[^(\s|.,!?…。，、।۔،)]+"],
    "viking": [r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
}


def hf_bpe_tokenizer(fields: dict, pre: str):
    """A Hugging Face tokenizer from a GGUF's vocabulary and merges and the pre-tokenizer
    expressions of `pre` (each an isolating split, then GPT-2's byte-level mapping)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Regex, decoders, models, pre_tokenizers
    vocab = {}
    for i, t in enumerate(fields["tokenizer.ggml.tokens"]):
        vocab.setdefault(t.decode("utf-8"), i)
    merges = []
    for m in fields["tokenizer.ggml.merges"]:
        s = m.decode("utf-8")
        k = s.find(" ", 1)
        merges.append((s[:k], s[k + 1:]))
    kwargs = {"ignore_merges": True} if pre in ("llama-bpe", "llama3", "minicpm5") else {}
    bpe = models.BPE(vocab=vocab, merges=merges, **kwargs)
    tk = tokenizers.Tokenizer(bpe)
    splits = [pre_tokenizers.Split(Regex(e), behavior="isolated") for e in PRE_EXPRESSIONS[pre]]
    tk.pre_tokenizer = pre_tokenizers.Sequence(splits + [pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                      use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    return tk


def test_bpe_oracle_hf_tokenizers_smollm2(smollm, smollm_fields):
    hf = hf_bpe_tokenizer(smollm_fields, "smollm")
    total = 0
    for doc in corpus_documents():
        ours = smollm.tokenize(doc, add_special=False)
        theirs = hf.encode(doc, add_special_tokens=False).ids
        assert ours == theirs, first_difference(ours, theirs, smollm)
        total += len(doc.encode())
    assert total > 300_000


@pytest.mark.parametrize("pre", ["gpt-2", "default", "llama-bpe", "qwen2", "falcon", "minicpm5"])
def test_bpe_oracle_other_pre_tokenizers(pre, smollm_fields, tmp_path):
    """SmolLM2's vocabulary and merges under other pre-tokenizers, against Hugging Face."""
    f = smollm_fields
    path = write_tokenizer_gguf(tmp_path / f"{pre}.gguf", model="gpt2", pre=pre, tokens=f["tokenizer.ggml.tokens"],
                                types=f["tokenizer.ggml.token_type"], merges=f["tokenizer.ggml.merges"], bos=1, eos=2,
                                add_bos=False)
    hf = hf_bpe_tokenizer(f, pre)
    docs = corpus_documents(150_000) + ["I'M SURE THEY'LL SAY IT'S 12345678 \r\n\r\n  x  \n\n", "Ünïcödé 日本語 ٣٤٥ ²³"]
    with Tokenizer(path) as t:
        assert t.vocab_info.pre == pre
        for doc in docs:
            ours = t.tokenize(doc, add_special=False)
            theirs = hf.encode(doc, add_special_tokens=False).ids
            assert ours == theirs, first_difference(ours, theirs, t)


def first_difference(a: list[int], b: list[int], t) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"at token {i}: ours {a[i:i+8]} ({t.detokenize(a[i:i+8])!r}) vs oracle {b[i:i+8]}"
    return f"lengths {len(a)} vs {len(b)}"


# ---- oracle: the pre-tokenizers against the regex module -------------------------------------------------

def regex_split(text: str, exprs: list[str]) -> list[str]:
    """llama.cpp's unicode_regex_split semantics with a real regex engine: each expression splits
    every piece into its matches and the text between them."""
    regex = pytest.importorskip("regex")
    pieces = [text] if text else []
    for e in exprs:
        pat = regex.compile(e)
        out = []
        for p in pieces:
            pos = 0
            for m in pat.finditer(p):
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


_ALPHABET: list[str] = []


def _consistent_alphabet() -> list[str]:
    """Characters whose class (letter, number, punctuation) the regex module and our Unicode 15.1
    table agree on: assigned before Unicode 14 (the standard library's table), sampled widely."""
    import unicodedata
    if _ALPHABET:
        return _ALPHABET
    try:
        import regex
    except ImportError:
        return ["a"]   # the test using it skips without regex
    picks = list("abcXYZ sStTlLdDmMrReEvV'0123456789.,;:!?-_()[]{}<>|$+=^~`\"#%&*/\\@\t\r\n\x0b\x0c\x00\x1c")
    picks += list("éßЖжΩ日本語한글ひらカタ٣٤²³½Ⅻ…。，、।۔،«»¿¡€©∑√\u0301\u0308\u00a0\u3000\u2028\u2029\u0085\u200b\u180e\ufeff"
                  "🤖👍🏽🇫🇷\u2581Ġ一龥가\U0002000b")
    rng = random.Random(7)
    for _ in range(300):
        cp = rng.choice([rng.randrange(0x80, 0x800), rng.randrange(0x800, 0x10000), rng.randrange(0x10000, 0x30000)])
        if 0xD800 <= cp < 0xE000:
            continue
        picks.append(chr(cp))
    ok = []
    for c in picks:
        cat = unicodedata.category(c)
        if cat == "Cn":
            continue
        agree = (bool(regex.match(r"\p{L}", c)) == cat.startswith("L") and bool(regex.match(r"\p{N}", c)) == cat.startswith("N")
                 and bool(regex.match(r"\p{P}", c)) == cat.startswith("P"))
        if agree:
            ok.append(c)
    _ALPHABET.extend(ok)
    return _ALPHABET


@pytest.mark.parametrize("pre", sorted(PRE_EXPRESSIONS))
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(text=st.text(st.deferred(lambda: st.sampled_from(_consistent_alphabet())), max_size=80))
def test_pre_tokenizer_matches_regex(pre, text):
    assert [w.decode() for w in pretokenize(pre, text)] == regex_split(text, PRE_EXPRESSIONS[pre])


@pytest.mark.parametrize("pre", sorted(PRE_EXPRESSIONS))
def test_pre_tokenizer_on_corpus(pre):
    for doc in corpus_documents(60_000):
        assert [w.decode() for w in pretokenize(pre, doc)] == regex_split(doc, PRE_EXPRESSIONS[pre])


def test_pre_tokenizer_examples():
    assert pretokenize("gpt-2", "Hello world's  end") == [b"Hello", b" world", b"'s", b" ", b" end"]
    assert pretokenize("llama-bpe", "I'LL pay 12345!\n\n ok") == [b"I", b"'LL", b" pay", b" ", b"123", b"45", b"!\n\n", b" ok"]
    assert pretokenize("smollm", "x 2024") == [b"x", b" ", b"2", b"0", b"2", b"4"]
    assert pretokenize("qwen2", "a1b22") == [b"a", b"1", b"b", b"2", b"2"]
    assert pretokenize("gpt-2", b"\xffA") == ["\ufffd".encode(), b"A"]    # malformed UTF-8, repaired
    assert pretokenize("gpt-2", b"a\xc0\x80") == [b"a", b"\x00"]          # an overlong NUL, as llama.cpp reads it


def test_unknown_pre_tokenizer_is_an_error():
    with pytest.raises(UnsupportedModelError, match="unknown pre-tokenizer 'no-such-pre'"):
        pretokenize("no-such-pre", "x")
    with pytest.raises(UnsupportedModelError, match="'tekken'.*not supported"):
        pretokenize("tekken", "x")


def test_unknown_pre_in_a_model_file(smollm_fields, tmp_path):
    f = smollm_fields
    path = write_tokenizer_gguf(tmp_path / "bad.gguf", model="gpt2", pre="brand-new-pre", tokens=f["tokenizer.ggml.tokens"],
                                types=f["tokenizer.ggml.token_type"], merges=f["tokenizer.ggml.merges"])
    with pytest.raises(UnsupportedModelError, match="brand-new-pre"):
        Tokenizer(path)


# ---- oracle: SentencePiece-style merges re-implemented in Python ------------------------------------------

class PySpm:
    """llama.cpp's SPM tokenization written again, plainly, in Python (user-defined tokens split
    off longest first, then score-ordered merges of UTF-8 characters and byte fallback)."""

    def __init__(self, fields: dict, user_defined: list[int]):
        toks = fields["tokenizer.ggml.tokens"]
        self.scores = fields["tokenizer.ggml.scores"]
        self.ids: dict[bytes, int] = {}
        for i, t in enumerate(toks):
            self.ids.setdefault(t, i)
        self.user = sorted(((toks[i], i) for i in user_defined), key=lambda p: (-len(p[0]), p[1]))
        self.add_space_prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))

    def byte_token(self, b: int) -> int:
        return self.ids[b"<0x%02X>" % b]

    def merge(self, text: bytes) -> list[int]:
        syms, off = [], 0
        while off < len(text):
            n = min([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4][text[off] >> 4], len(text) - off)
            syms.append([off, n])
            off += n
        nxt = list(range(1, len(syms))) + [-1]
        prv = list(range(-1, len(syms) - 1))
        heap = []

        def add(left, right):
            if left < 0 or right < 0:
                return
            s = text[syms[left][0]: syms[left][0] + syms[left][1] + syms[right][1]]
            if s in self.ids:
                heapq.heappush(heap, (-self.scores[self.ids[s]], left, right, len(s)))

        for i in range(1, len(syms)):
            add(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if syms[left][1] == 0 or syms[right][1] == 0 or syms[left][1] + syms[right][1] != size:
                continue
            syms[left][1] += syms[right][1]
            syms[right][1] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            add(prv[left], left)
            add(left, nxt[left])
        out, i = [], 0 if syms else -1
        while i != -1:
            s = text[syms[i][0]: syms[i][0] + syms[i][1]]
            out += [self.ids[s]] if s in self.ids else [self.byte_token(b) for b in s]
            i = nxt[i]
        return out

    def tokenize(self, text: bytes) -> list[int]:
        frags: list = [text] if text else []
        for t, i in self.user:
            new = []
            for f in frags:
                if isinstance(f, int):
                    new.append(f)
                    continue
                parts = f.split(t)
                for k, p in enumerate(parts):
                    if k:
                        new.append(i)
                    if p:
                        new.append(p)
            frags = new
        out, prev_special = [], True
        for f in frags:
            if isinstance(f, int):
                out.append(f)
                prev_special = True
            else:
                s = (b" " if self.add_space_prefix and prev_special else b"") + f
                out += self.merge(s.replace(b" ", SPACE_MARK.encode()))
                prev_special = False
        return out


@pytest.fixture(scope="module")
def py_spm(gemma, gemma_fields):
    types = gemma_fields["tokenizer.ggml.token_type"]
    user = [i for i, ty in enumerate(types) if ty == 4 and gemma.token_attr(i) == TokenAttr.USER_DEFINED]
    return PySpm(gemma_fields, user)


SPM_ALPHABET = list("ab cd  e>f<g/.,'x\n\t") + ["é", "日本", "Ж", "🤖", "\u2581", "</", "> </", "ā ", "Á ", "  ", "the ",
                                                "ing ", "<b>", "\xc0"]


@FUZZ
@given(text=st.lists(st.sampled_from(SPM_ALPHABET), max_size=40).map("".join))
def test_spm_matches_python_reimplementation(gemma, py_spm, text):
    assert gemma.tokenize(text, add_special=False) == py_spm.tokenize(text.encode())


def test_spm_matches_python_reimplementation_corpus(gemma, py_spm):
    for doc in corpus_documents(120_000):
        for chunk in [doc[i:i + 2000] for i in range(0, len(doc), 2000)]:
            assert gemma.tokenize(chunk, add_special=False) == py_spm.tokenize(chunk.encode())


# ---- a small synthetic SentencePiece vocabulary (Llama-2 style, with the space prefix) ---------------------

@pytest.fixture(scope="module")
def llama2_style(tmp_path_factory):
    toks = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    normal = ["▁", "H", "e", "l", "o", "w", "r", "d", "He", "ll", "llo", "Hello", "▁Hello", "or", "wor", "ld",
              "world", "▁world", "!", "▁▁"]
    for k, t in enumerate(normal):
        toks.append(t.encode())
        types.append(1)
        scores.append(-float(k))
    path = tmp_path_factory.mktemp("spm") / "llama2-style.gguf"
    write_tokenizer_gguf(path, model="llama", tokens=toks, types=types, scores=scores, bos=1, eos=2, unk=0)
    with Tokenizer(path) as t:
        yield t


def test_spm_space_prefix(llama2_style):
    t = llama2_style
    v = t.vocab_info
    assert v.type == "spm" and v.add_space_prefix and v.add_bos and v.bos == 1
    ids = t.tokenize("Hello world!", add_special=True)
    assert [t.token_to_piece(i) for i in ids] == [b"", b" Hello", b" world", b"!"]
    assert t.detokenize(ids) == "Hello world!"               # the added space is dropped again
    assert t.detokenize(t.tokenize(" Hello", add_special=False)) == " Hello"
    # a special token restarts the space prefix, as in llama.cpp
    ids = t.tokenize("Hello</s>world", add_special=False, parse_special=True)
    assert [t.token_to_piece(i, True) for i in ids] == [b" Hello", b"</s>", b" world"]
    # characters that are not tokens fall back to bytes
    ids = t.tokenize("Hz", add_special=False)
    assert [t.token_to_piece(i) for i in ids] == [b" ", b"H", b"z"]
    assert t.token_attr(ids[2]) == TokenAttr.BYTE
    with t.detokenizer() as d:
        assert "".join(d.push(i) for i in t.tokenize("Hello world", add_special=True)) == "Hello world"


# ---- files without a tokenizer, malformed metadata ---------------------------------------------------------

def test_no_tokenizer(tmp_path, synth_model):
    import gguf
    path = tmp_path / "novocab.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(NoVocabularyError, match="no tokenizer"):
        Tokenizer(path)
    # a model without tokenizer loads; its tokenizer calls say why they cannot work
    model_path = synth_model(drop_keys=("tokenizer.ggml.model",))
    with Model(model_path, n_ctx=16) as m:
        with pytest.raises(NoVocabularyError, match="no tokenizer"):
            m.tokenize("x")
        with pytest.raises(NoVocabularyError):
            m.detokenize([1])
        with pytest.raises(NoVocabularyError):
            m.vocab_info
        with pytest.raises(NoVocabularyError):
            m.detokenizer()
        with pytest.raises(NoVocabularyError):
            m.is_eog(1)


@pytest.mark.parametrize("case", ["unknown-model", "no-tokens", "no-merges", "short-scores", "bad-add-bos"])
def test_malformed_tokenizer_metadata(tmp_path, case):
    toks = [b"a", b"b", b"ab"]
    kw = dict(model="gpt2", pre="gpt-2", tokens=toks, merges=[b"a b"], types=[1, 1, 1])
    if case == "unknown-model":
        kw["model"] = "sentencepiece-v9"
        err, msg = UnsupportedModelError, "sentencepiece-v9"
    elif case == "no-tokens":
        kw["tokens"] = []
        err, msg = PyllamaspecError, "tokens"
    elif case == "no-merges":
        kw["merges"] = None
        err, msg = PyllamaspecError, "merges"
    elif case == "short-scores":
        kw["scores"] = [0.0]
        err, msg = PyllamaspecError, "scores"
    else:
        kw.update(add_bos=True, bos=None)
        err, msg = PyllamaspecError, "add_bos_token"
    path = write_tokenizer_gguf(tmp_path / f"{case}.gguf", **kw)
    with pytest.raises(err, match=msg):
        Tokenizer(path)


def test_tiny_gpt2_vocabulary(tmp_path):
    """Byte-level BPE on a vocabulary of a few tokens: merges by rank, the rest byte by byte."""
    from models import gpt2_byte_tokens
    tokens, merges = gpt2_byte_tokens(300)
    path = write_tokenizer_gguf(tmp_path / "tiny.gguf", model="gpt2", pre="gpt-2", tokens=[t.encode() for t in tokens],
                                merges=[m.encode() for m in merges], types=[1] * len(tokens))
    with Tokenizer(path) as t:
        for text in ["hello world", "the quick brown fox", "\x00\x01 ÿ", "日本"]:
            ids = t.tokenize(text, add_special=False)
            assert t.detokenize(ids) == text


# ---- the Unicode table -------------------------------------------------------------------------------------

def test_unicode_table_is_generated_and_current():
    ud2 = pytest.importorskip("unicodedata2")
    if not ud2.unidata_version.startswith("15.1"):
        pytest.skip(f"unicodedata2 {ud2.unidata_version} installed; the table is made from 15.1")
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_unicode_data.py"), "--check"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- speed (reported, not timed against a limit here: see python -m pyllamaspec.bench) ---------------------

def test_throughput_reported(tok, capsys):
    t, name = tok
    mbs = tokenizer_throughput(t, english_sample_text(200_000), repeat=2)
    with capsys.disabled():
        print(f"\ntokenizer throughput {name}: {mbs:.1f} MB/s")
    assert mbs > 0.5


# ---- threads, handles ------------------------------------------------------------------------------------

def test_concurrent_tokenization(smollm, gemma):
    """The core releases the GIL and keeps its caches per thread: concurrent calls agree with
    sequential ones."""
    from concurrent.futures import ThreadPoolExecutor
    docs = [d[:20000] for d in corpus_documents(200_000)]
    for t in (smollm, gemma):
        want = [t.tokenize(d, add_special=False) for d in docs]
        with ThreadPoolExecutor(4) as ex:
            got = list(ex.map(lambda d: t.tokenize(d, add_special=False), docs * 2))
        assert got == want * 2


def test_tokenizer_handle(smollm2_path, tmp_path):
    t = Tokenizer(smollm2_path)
    assert "Tokenizer(" in repr(t)
    t.close()
    t.close()                                   # twice is fine
    with pytest.raises(InvalidArgumentError, match="closed"):
        t.tokenize("x")
    with pytest.raises(FileNotFoundError):
        Tokenizer(tmp_path / "missing.gguf")
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(PyllamaspecError):
        Tokenizer(bad)


def test_synthetic_model_tokenizer(synth_model):
    """The tiny random models of the core tests carry a byte-level BPE tokenizer too."""
    with Model(synth_model(), n_ctx=32) as m:
        v = m.vocab_info
        assert v.type == "bpe" and v.n_tokens == m.n_vocab
        ids = m.tokenize("hello world", add_special=False)
        assert ids and all(0 <= i < m.n_vocab for i in ids)
        assert m.detokenize(ids) == "hello world"


def test_c_buffer_protocol(smollm):
    """The C API's sizing protocol: a short buffer gives PSL_ERR_BUFFER_TOO_SMALL and the size."""
    from pyllamaspec.engine._native import ffi, lib
    text = b"Hello world, how are you?"
    n = ffi.new("int32_t *")
    assert lib.psl_tokenize(smollm._model, text, len(text), False, False, ffi.NULL, 0, n) == 9
    want = smollm.tokenize(text, add_special=False)
    assert n[0] == len(want)
    buf = ffi.new("int32_t[]", n[0])
    assert lib.psl_tokenize(smollm._model, text, len(text), False, False, buf, n[0], n) == 0
    assert list(buf) == want
    size = ffi.new("size_t *")
    ids = ffi.new("int32_t[]", want)
    assert lib.psl_detokenize(smollm._model, ids, len(want), False, ffi.NULL, 0, size) == 9
    assert size[0] == len(text)
    assert lib.psl_token_to_piece(smollm._model, want[0], False, ffi.NULL, 0, size) == 9 and size[0] == 5
    assert lib.psl_tokenize(ffi.NULL, text, len(text), False, False, buf, 1, n) == 1     # NULL model
    assert lib.psl_detokenize(smollm._model, ids, -1, False, ffi.NULL, 0, size) == 1     # negative count
    info = ffi.new("psl_vocab_info *")
    assert lib.psl_vocab_get_info(smollm._model, info) == 0 and ffi.string(info.pre) == b"smollm"
