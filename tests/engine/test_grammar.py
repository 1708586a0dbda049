"""The GBNF engine (csrc/grammar/): the tokens a grammar allows equal llama.cpp's on both real
vocabularies (tests/data/reference/grammar_masks_llamacpp.json, scripts/grammar_reference.py),
parse errors say where, the state rolls back, forced text, and the sampler under a grammar."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from conftest import real_model, reference_dir
from pyllamaspec import Model
from pyllamaspec.engine.grammar import Grammar, check_grammar
from pyllamaspec.engine.sampling import Sampler, SamplingParams
from pyllamaspec.errors import GrammarError, InvalidArgumentError

FIXTURE = reference_dir() / "grammar_masks_llamacpp.json"


@pytest.fixture(scope="module")
def fixture() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def smol():
    with Model(real_model("smollm2"), n_ctx=128) as m:
        yield m


def _allowed_ids(g: Grammar, n_tokens: int) -> np.ndarray:
    return np.nonzero(g.mask()[:n_tokens])[0].astype("<i4")


def _digest(ids: np.ndarray) -> str:
    return hashlib.sha256(ids.astype("<i4").tobytes()).hexdigest()


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_masks_match_llamacpp(fixture, name):
    """Every case: same refusal, same prefix acceptance, the same allowed set to the token."""
    ref = fixture["models"][name]
    with Model(real_model(name), n_ctx=64) as m:
        assert m.vocab_info.n_tokens == ref["n_tokens"]
        checked = 0
        for c in ref["cases"]:
            text = fixture["grammars"][c["grammar"]]
            if c.get("error") == "refused":
                with pytest.raises(GrammarError):
                    Grammar(text, m)
                continue
            g = Grammar(text, m)
            n = g.accept(c["prefix"])
            if "error" in c:                  # llama.cpp's grammar refused a prefix token
                assert n < len(c["prefix"]), c
                continue
            assert n == len(c["prefix"]), c
            ids = _allowed_ids(g, ref["n_tokens"])
            assert (len(ids), _digest(ids)) == (c["n_allowed"], c["sha256"]), (c["grammar"], c["prefix"])
            checked += 1
        assert checked >= 50


def test_mask_comparison_can_fail(fixture, smol):
    """Negative control: a neighbouring state's mask does not pass for the reference's."""
    cases = [c for c in fixture["models"]["smollm2"]["cases"] if c["grammar"] == "json" and "sha256" in c]
    g = Grammar(fixture["grammars"]["json"], smol)
    g.accept(cases[1]["prefix"])
    ids = _allowed_ids(g, fixture["models"]["smollm2"]["n_tokens"])
    assert _digest(ids) == cases[1]["sha256"]
    assert _digest(ids) != cases[2]["sha256"] and _digest(ids[1:]) != cases[1]["sha256"]


@pytest.mark.parametrize("text, where", [
    ('root ::= "a" b', "rule 'b' is used but not defined"),
    ('root ::= "a"\nroot2 ::= [a-', "line 2"),
    ('root ::= "a" |\n  "b" ) ', "line 2, column 7"),
    ('root ::= root "x" | "y"', "left-recursive"),
    ('start ::= "a"', "no rule named 'root'"),
    ('root ::= "\\q"', "unknown escape"),
    ('root ::= "a"{2001}', "more than 2000"),
    ('root ::= (("a"){0,50}){0,50}', "2000 rules"),
    ('root ::= <[99999999]>', None),
])
def test_parse_errors_say_where(smol, text, where):
    with pytest.raises(GrammarError) as e:
        Grammar(text, smol)
    if where:
        assert where in str(e.value)


def test_check_without_a_model():
    check_grammar('root ::= "a" <|im_end|> [0-9]{1,3}')        # a token by text: looked up later
    with pytest.raises(GrammarError, match="line 1"):
        check_grammar('root ::= "a')
    with pytest.raises(InvalidArgumentError):
        check_grammar("")


def test_token_references(smol):
    im_start = smol.tokenize("<|im_start|>", add_special=False, parse_special=True)[0]
    g = Grammar('root ::= "x" <|im_start|> "y"', smol)
    assert g.accept(smol.tokenize("x", add_special=False)) == 1
    assert np.nonzero(g.mask())[0].tolist() == [im_start]
    with pytest.raises(GrammarError, match="not one token"):
        Grammar('root ::= <nonexistent token text>', smol)


def test_accept_rewind_and_end(smol):
    g = Grammar('root ::= "{" [0-9]+ "}"', smol)
    ids = smol.tokenize("{12}", add_special=False)
    first = g.mask().copy()
    assert not g.may_end and not g.mask()[smol.eos_token]
    assert g.accept(ids) == len(ids) and g.may_end
    assert g.mask()[list(smol.eog_tokens)].all() and g.mask().sum() == len(smol.eog_tokens)
    assert g.accept([smol.eos_token]) == 1                  # an ended grammar takes the end
    g.rewind(g.n_accepted)
    assert g.n_accepted == 0 and np.array_equal(g.mask(), first)
    assert g.accept(smol.tokenize("{1a", add_special=False)) < 3
    with pytest.raises(Exception):
        g.rewind(99)


def test_forced_text(smol):
    g = Grammar('root ::= "{\\"name\\": " ("\\"x\\"" | "1") "}"', smol)
    assert g.forced() == b'{"name": '
    assert g.forced(3) == b'{"n'
    g.accept(smol.tokenize('{"name": ', add_special=False))
    assert g.forced() == b""                                  # a branch
    g.accept(smol.tokenize('"', add_special=False))
    assert g.forced() == b'x"}'
    g.accept(smol.tokenize('x"}', add_special=False))
    assert g.forced() == b""                                  # may end


def _masked(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    out = logits.copy()
    out[~allowed] = -np.inf
    return out


def test_sampler_under_a_grammar(smol):
    """Greedy picks the best allowed token; a sampled distribution is the chain of the masked
    logits (llama.cpp's grammar-first order); verify leaves the grammar where it was."""
    V = smol.n_vocab
    rng = np.random.default_rng(3)
    g = Grammar('root ::= [a-z]+ " " [0-9]', smol)
    allowed = g.mask()
    for temp in (0.0, 0.7):
        params = SamplingParams(temperature=temp, top_k=0 if temp else 40, top_p=0.9, min_p=0.0, seed=1)
        s, plain = Sampler(V, params), Sampler(V, params)
        s.set_grammar(g)
        for _ in range(5):
            logits = rng.normal(0, 3, V).astype(np.float32)
            assert np.allclose(s.probs(logits), plain.probs(_masked(logits, allowed)), atol=1e-6)
            tok, _ = s.sample(logits)
            assert allowed[tok]
        rows = rng.normal(0, 3, (3, V)).astype(np.float32)
        n0 = g.n_accepted
        s.verify(rows, np.array(smol.tokenize("ab", add_special=False), np.int32)[:2], None)
        assert g.n_accepted == n0
    s.set_grammar(None)


def test_greedy_fallback_finds_a_low_token(smol):
    """The only allowed token far down the row: the greedy pick still finds it (the whole mask)."""
    V = smol.n_vocab
    g = Grammar('root ::= "Zebra"', smol)
    only = np.nonzero(g.mask())[0]
    logits = np.linspace(5, -5, V).astype(np.float32)
    s = Sampler(V, SamplingParams(temperature=0))
    s.set_grammar(g)
    tok, _ = s.sample(logits)
    assert tok == only[np.argmax(logits[only])]


def test_mask_is_fast_on_a_large_vocabulary():
    """Gemma 3's 262k tokens inside a JSON string: a mask is a walk of the vocabulary's trie in
    the core (no Python loop); generous bound, rerun alone if the machine is loaded."""
    import time
    with Model(real_model("gemma3"), n_ctx=64) as m:
        g = Grammar('root ::= "\\"" [^"\\\\]* "\\""', m)
        g.accept(m.tokenize('"ab', add_special=False))
        t0 = time.perf_counter()
        mask = g.mask()
        dt = time.perf_counter() - t0
        assert mask.sum() > 200_000
        assert dt < 1.0
