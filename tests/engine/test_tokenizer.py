"""The tokenizer (issue 3): llama.cpp's reference tokenizations, vocabulary information and special
tokens, streaming detokenization, a synthetic SentencePiece vocabulary, files without a tokenizer
or with malformed metadata, the Unicode table, speed, threads and handles. Round trips and fuzzing:
tests/engine/test_tokenizer_round_trip.py; the independent oracles: tests/engine/test_tokenizer_oracles.py."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import load_reference
from tokenizer_helpers import corpus_documents, write_tokenizer_gguf
from tokenizer_helpers import gemma, smollm, tok  # noqa: F401 - the fixtures

from pyllamaspec import Model
from pyllamaspec.errors import (InvalidArgumentError, NoVocabularyError, PyllamaspecError, TokenOutOfRangeError,
                                UnsupportedModelError)
from pyllamaspec.engine.vocab import TokenAttr, Tokenizer, english_sample_text, tokenizer_throughput

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL_KEYS = {"smollm2": "smollm2-135m-q4_1", "gemma3": "gemma-3-270m-q4_k_m"}


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
