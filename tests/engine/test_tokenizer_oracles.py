"""The tokenizer against independent oracles (tests/tokenizer_helpers.py): Hugging Face
`tokenizers` on the same BPE vocabulary, merges and pre-tokenizer; the pre-tokenizers against the
`regex` module; Gemma's SentencePiece-style merges against a Python re-implementation."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenizer_helpers import (FUZZ, PRE_EXPRESSIONS, PySpm, corpus_documents, first_difference, hf_bpe_tokenizer,
                               regex_split, write_tokenizer_gguf)
from tokenizer_helpers import gemma, gemma_fields, smollm, smollm_fields  # noqa: F401 - the fixtures

from pyllamaspec.errors import UnsupportedModelError
from pyllamaspec.engine.vocab import TokenAttr, Tokenizer, pretokenize


# ---- oracle: Hugging Face tokenizers on the same vocabulary, merges and pre-tokenizer -------------------

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



# ---- oracle: the pre-tokenizers against the regex module -------------------------------------------------

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

@pytest.fixture(scope="module")
def py_spm(gemma, gemma_fields):
    types = gemma_fields["tokenizer.ggml.token_type"]
    user = [i for i, ty in enumerate(types) if ty == 4 and gemma.token_attr(i) == TokenAttr.USER_DEFINED]
    return PySpm(gemma_fields, user)


SPM_ALPHABET = list("ab cd  e>f<g/.,'x\n\t") + ["é", "日本", "Ж", "🤖", "\u2581", "</", "> </", "ā ", "Á ", "  ", "the ",
                                                "ing ", "<b>", "\xc0"]


@pytest.mark.slow
@FUZZ
@given(text=st.lists(st.sampled_from(SPM_ALPHABET), max_size=40).map("".join))
def test_spm_matches_python_reimplementation(gemma, py_spm, text):
    assert gemma.tokenize(text, add_special=False) == py_spm.tokenize(text.encode())


@pytest.mark.slow   # ~10 s: the pure-Python SentencePiece oracle builds its tables
def test_spm_matches_python_reimplementation_corpus(gemma, py_spm):
    for doc in corpus_documents(120_000):
        for chunk in [doc[i:i + 2000] for i in range(0, len(doc), 2000)]:
            assert gemma.tokenize(chunk, add_special=False) == py_spm.tokenize(chunk.encode())
