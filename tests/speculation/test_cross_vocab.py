"""Drafts from another family (issue 45): a draft model of another tokenizer drafts text, the
target verifies its own tokens for it (speculation/drafters/cross_vocab.py). The real pair:
Gemma 3 270M (262,144 ids, SentencePiece) and SmolLM2 135M (49,152 ids, byte-level BPE)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import pyllamaspec
from pyllamaspec import generate
from pyllamaspec.engine.model import Model
from pyllamaspec.engine.sampling import SamplingParams
from pyllamaspec.speculation.drafters import CrossVocabDrafter
from pyllamaspec.speculation.drafters.cross_vocab import complete_utf8

from models import write_gguf

PROMPTS = {
    "code": "def fibonacci(n):\n",
    "list": "List the first ten prime numbers:\n1.",
    "chat": "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "accents": "Voici une liste de fruits en français : pomme, poire, pêche,",
    "cjk": "日本の首都は",
}


@pytest.fixture(scope="module")
def gemma(gemma3_path):
    with Model(gemma3_path, n_ctx=1024, n_seq_max=4) as m:
        yield m


@pytest.fixture(scope="module")
def smol(smollm2_path):
    with Model(smollm2_path, n_ctx=1024, n_seq_max=4) as m:
        yield m


def test_complete_utf8():
    assert complete_utf8(b"abc") == 3
    assert complete_utf8("é".encode()) == 2
    assert complete_utf8("aé".encode()[:-1]) == 1          # a lead byte waiting for its continuation
    assert complete_utf8("a日".encode()[:-1]) == 1          # two of three bytes
    assert complete_utf8("a😀".encode()) == 5
    assert complete_utf8("a😀".encode()[:-2]) == 1
    assert complete_utf8(b"\x80\x80") == 2                 # stray continuation bytes: nothing to wait for


def test_the_pair_is_bridged_not_refused(gemma, smol):
    assert gemma.check_draft(smol) == "cross-vocabulary" and smol.check_draft(gemma) == "cross-vocabulary"
    assert gemma.check_draft(gemma) == "same"
    assert "differ in size" in gemma.vocab_difference(smol)


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_greedy_equals_plain(gemma, smol, name):
    """Token for token the target's plain greedy output, drafts accepted, the mode in the stats."""
    p = PROMPTS[name]
    plain = generate(p, gemma, max_tokens=40, temperature=0)
    spec = generate(p, gemma, smol, max_tokens=40, temperature=0, n_draft=6, adaptive=False, p_min=0.0)
    assert spec.tokens == plain.tokens
    st = spec.stats
    assert st.draft_mode == "cross-vocabulary"
    assert st.drafted > 0 and st.accepted > 0, (st.drafted, st.accepted)
    print(f"{name}: drafted {st.drafted}, accepted {st.accepted} ({st.acceptance_rate:.2f}) in {st.rounds} rounds")


@pytest.mark.parametrize("prompt", [PROMPTS["code"], "Hello"])
def test_greedy_equals_plain_the_other_way_round(gemma, smol, prompt):
    """SmolLM2 the target, Gemma 3 (a BOS of its own) the draft; "Hello" is SmolLM2's one token:
    no text before it, the draft's sequence its BOS alone (it failed so: truncate(1) of nothing)."""
    plain = generate(prompt, smol, max_tokens=40, temperature=0)
    spec = generate(prompt, smol, gemma, max_tokens=40, temperature=0, n_draft=5, adaptive=False, p_min=0.0)
    assert spec.tokens == plain.tokens and spec.stats.accepted > 0


def test_chained_and_batched(gemma, smol):
    """In a chain of types (the n-gram lookup first) and in batch rounds (two prompts verified
    in one target evaluation): the same text as plain decoding."""
    ps = [PROMPTS["code"], PROMPTS["list"]]
    plain = [generate(p, gemma, max_tokens=32, temperature=0).tokens for p in ps]
    chained = generate(ps[0], gemma, smol, max_tokens=32, temperature=0, spec_type="ngram-lookup,draft-simple",
                       adaptive=False, p_min=0.0, n_draft=4)
    assert chained.tokens == plain[0] and chained.stats.draft_mode == "cross-vocabulary"
    both = generate(ps, gemma, smol, max_tokens=32, temperature=0, n_parallel=2, adaptive=False, p_min=0.0,
                    n_draft=4)
    assert [r.tokens for r in both] == plain
    assert sum(r.stats.accepted for r in both) > 0


def test_the_draft_sequence_spells_the_target_text(gemma, smol, monkeypatch):
    """After each re-sync the draft's sequence holds its own tokens of a prefix of the target's
    text and evaluates the draft tokenizer's tokens of the rest: together, the text so far. A
    draft that kept a rejected token (or dropped an accepted one) fails this."""
    seen = []
    orig = CrossVocabDrafter._sync

    def spy(self):
        out = orig(self)
        if out is not None:
            rest, start = out
            held = self.model.detokenize_bytes(self.draft_seq.cached_tokens)
            seen.append((held, self.model.detokenize_bytes(rest), bytes(self.text[self.base:complete_utf8(self.text)]),
                         start - self.base, self.base))
        return out

    monkeypatch.setattr(CrossVocabDrafter, "_sync", spy)
    spec = generate(PROMPTS["accents"], gemma, smol, max_tokens=48, temperature=0, n_draft=8, adaptive=False,
                    p_min=0.0)
    assert spec.stats.drafted > spec.stats.accepted > 0      # rejections happened: rollbacks were made
    assert len(seen) > 3
    for held, rest, text, start, base in seen:
        assert base == 0 and len(held) == start and held + rest == text
    # a draft whose context holds a window of the text only: its tail, moved on when full
    seen.clear()
    with Model(smol.path, n_ctx=128) as small:
        prompt = "Count with me: " + ", ".join(str(i) for i in range(1, 60)) + ","
        plain = generate(prompt, gemma, max_tokens=64, temperature=0)
        spec = generate(prompt, gemma, small, max_tokens=64, temperature=0, n_draft=4, adaptive=False, p_min=0.0)
    assert spec.tokens == plain.tokens and spec.stats.accepted > 0
    bases = {b for *_, b in seen}
    assert len(bases) > 1 and min(bases) > 0                 # windows, and more than one
    for held, rest, text, start, base in seen:
        assert len(held) == start and held + rest == text


def test_a_draft_without_a_tokenizer_cannot_be_bridged(smol, tmp_path):
    path = tmp_path / "no_tokenizer.gguf"
    write_gguf(path, n_vocab=64, drop_keys=("tokenizer.ggml.model",))
    with Model(path, n_ctx=64) as draft:
        with pytest.raises(pyllamaspec.NoVocabularyError, match="the vocabularies differ .* bridged by text"):
            smol.check_draft(draft)
    # the CLI says so before any output: tests/frontends/test_cli_flags.py


def test_a_tokenizer_that_adds_a_space_cannot_be_bridged(gemma3_path, smollm2_path, monkeypatch):
    """A tokenizer that does not give text back as it read it (SentencePiece's add_space_prefix:
    Llama 2, Mistral 7B v0.1) would re-tokenize every cut with a space that is not there."""
    with Model(gemma3_path, n_ctx=64) as target, Model(smollm2_path, n_ctx=64) as draft:
        orig = draft.tokenize
        monkeypatch.setattr(draft, "tokenize", lambda text, **kw: orig(b" " + bytes(text), **kw))
        with pytest.raises(pyllamaspec.UnsupportedModelError, match="does not give text back as it read it"):
            target.check_draft(draft)


def test_cli_says_which_mode_runs(gemma3_path, smollm2_path):
    p = subprocess.run([sys.executable, "-m", "pyllamaspec.cli", "-m", str(gemma3_path), "-md", str(smollm2_path),
                        "-no-cnv", "-p", PROMPTS["code"], "-n", "24", "--temp", "0", "-t", "2", "-c", "512"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "mode      = cross-vocabulary" in p.stderr
    plain = generate(PROMPTS["code"], gemma3_path, max_tokens=24, temperature=0, n_ctx=512)
    assert p.stdout.startswith(PROMPTS["code"] + plain.text)


def test_server_drafts_across_families(gemma3_path, smollm2_path):
    from test_server import Server
    s = Server(["-m", str(gemma3_path), "-md", str(smollm2_path), "-c", "1024", "-t", "2", "-np", "1"])
    try:
        code, body = s.post("/completion", {"prompt": PROMPTS["list"], "n_predict": 32, "temperature": 0,
                                            "cache_prompt": False})
    finally:
        s.stop()
    assert code == 200, body
    plain = generate(PROMPTS["list"], gemma3_path, max_tokens=32, temperature=0, n_ctx=1024)
    assert body["content"] == plain.text
    assert body["timings"]["draft_mode"] == "cross-vocabulary", json.dumps(body["timings"])


# ---- sampling keeps the target's distribution ---------------------------------------------------

@pytest.mark.slow
def test_sampling_preserves_the_distribution(gemma, smol):
    """The first two tokens under sampling (T = 1, top-k 10) against the target's exact marginals:
    the point-mass verification passes; the negative control (every draft token taken) fails."""
    from test_speculative import chi2_pvalue, exact_marginals, sample_first_two
    sp = SamplingParams(temperature=1.0, top_k=10, top_p=1.0, min_p=0.0, seed=0)
    prompt = gemma.tokenize("The three primary colours are red,")
    p1, p2 = exact_marginals(gemma, sp, prompt)
    c1, c2, rate = sample_first_two(gemma, smol, sp, n=600, prompt=prompt)
    pv1, pv2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"cross-vocabulary under sampling: acceptance {rate:.2f}; p-values {pv1:.3f}, {pv2:.3f}")
    assert rate > 0.2
    assert pv1 > 1e-3 and pv2 > 1e-3
    c1, c2, _ = sample_first_two(gemma, smol, sp, n=600, prompt=prompt, accept_all=True)
    bad1, bad2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"accept-all control: p-values {bad1:.2e}, {bad2:.2e}")
    assert min(bad1, bad2) < 1e-6
