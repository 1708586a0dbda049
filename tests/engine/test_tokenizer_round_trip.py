"""Tokenizer round trips (text -> ids -> text on random text, random bytes and a corpus) and
fuzzing (random bytes, random ids, special-token soup: nothing crashes, ids stay in the vocabulary),
on the real models' tokenizers."""
from __future__ import annotations

import random

from hypothesis import assume, given
from hypothesis import strategies as st

from tokenizer_helpers import FUZZ, SPACE_MARK, corpus_documents
from tokenizer_helpers import gemma, smollm, smollm_fields, tok  # noqa: F401 - the fixtures

from pyllamaspec.engine.vocab import llama_utf8_repair


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
