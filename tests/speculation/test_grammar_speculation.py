"""Speculation under a grammar stays exact (speculation/constraint.py): sampled output keeps the
target's masked distribution p' (chi-square, with controls that must fail), forced tokens are
free drafts that keep it too, n-gram drafts are cut where the grammar forbids them, the grammar
rolls back with the caches, and greedy output is the same with or without a drafter on the
real models."""
from __future__ import annotations

import json

import numpy as np
import pytest

import models
import pyllamaspec
from conftest import real_model
from pyllamaspec import Model
from pyllamaspec.engine.grammar import Grammar
from pyllamaspec.engine.sampling import Sampler, SamplingParams
from pyllamaspec.speculation.constraint import Constraint
from pyllamaspec.speculation.cost_model import DraftPolicy
from pyllamaspec.speculation.decoder import Decoder, DraftParams
from pyllamaspec.speculation.drafters import NgramDrafter
from test_speculative import PROMPT, chi2_pvalue

# The tiny vocabulary: " ", a-z ("a" is the end-of-generation token), A-Z, 0-2, th in er " t" the an on " the".
BRANCHY = 'root ::= [b-m]+ " " [n-z] [b-z]*'
FORCED = 'root ::= [b-m] "the" [n-z] [b-z]'


@pytest.fixture(scope="module")
def pair(synth_dir):
    t, d = synth_dir / "gs_target.gguf", synth_dir / "gs_draft.gguf"
    models.write_llama_gguf(t, n_vocab=64, n_embd=32, n_layer=2, seed=11)
    models.write_llama_gguf(d, n_vocab=64, n_embd=32, n_layer=1, seed=11)
    with Model(t, n_ctx=64, n_threads=1, type_k="f32", type_v="f32") as target, \
         Model(d, n_ctx=64, n_threads=1, type_k="f32", type_v="f32") as draft:
        yield target, draft


SP = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def masked_marginals(target: Model, grammar: str, sp: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """p' of the first two generated tokens: the target's chain after the grammar's mask."""
    g = Grammar(grammar, target)
    s = Sampler(target.n_vocab, sp)
    s.set_grammar(g)
    target.clear()
    p1 = s.probs(target.eval(PROMPT, logits="last")[0]).astype(np.float64)
    p2 = np.zeros_like(p1)
    for x1 in np.nonzero(p1)[0]:
        target.truncate(len(PROMPT))
        g.accept([int(x1)])
        p2 += p1[x1] * s.probs(target.eval([int(x1)], logits="last")[0])
        g.rewind(1)
    return p1 / p1.sum(), p2 / p2.sum()


def sample_two(target, draft, grammar: str, n: int, *, forced: bool = True, unmasked_q: bool = False,
               n_draft: int = 3) -> tuple[np.ndarray, np.ndarray, dict]:
    c1 = np.zeros(target.n_vocab, np.int64)
    c2 = np.zeros(target.n_vocab, np.int64)
    tally = dict(drafted=0, accepted=0, forced=0, forced_accepted=0)
    for seed in range(n):
        dec = Decoder(target, draft, SamplingParams(**{**SP.__dict__, "seed": seed}),
                      DraftParams(n_draft=n_draft, p_min=0.0, adaptive=False, forced=forced),
                      grammar=Grammar(grammar, target))
        if unmasked_q:      # a control: the drafter samples q without the grammar
            propose = dec.drafter.propose
            dec.drafter.propose = lambda seq, k, pol, c=None: propose(seq, k, pol, None)
        dec.prefill(PROMPT)
        out = []
        while len(out) < 2:
            out += [t for t, _ in dec.step()]
        dec.close()
        c1[out[0]] += 1
        c2[out[1]] += 1
        for k in tally:
            tally[k] += getattr(dec.stats, k)
    return c1, c2, tally


@pytest.mark.parametrize("grammar", [BRANCHY, FORCED], ids=["branching", "forced"])
def test_masked_distribution_preserved(pair, grammar):
    target, draft = pair
    p1, p2 = masked_marginals(target, grammar, SP)
    c1, c2, t = sample_two(target, draft, grammar, n=3000)
    pv1, pv2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"{grammar}: {t}; p-values {pv1:.3f} {pv2:.3f}")
    assert (c1[p1 == 0] == 0).all() and (c2[p2 == 0] == 0).all()     # never outside the grammar
    assert pv1 > 1e-3 and pv2 > 1e-3
    assert 0.05 < t["accepted"] / t["drafted"] < 0.95


def test_plain_decoding_with_forced_drafts_preserved(pair):
    """No drafter: the grammar's forced text alone is drafted (q a point mass)."""
    target, _ = pair
    p1, p2 = masked_marginals(target, FORCED, SP)
    c1, c2, t = sample_two(target, None, FORCED, n=3000)
    pv1, pv2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"plain + forced: {t}; p-values {pv1:.3f} {pv2:.3f}")
    assert t["drafted"] == 0 and t["forced"] >= 3000 and 0 < t["forced_accepted"] < t["forced"]
    assert pv1 > 1e-3 and pv2 > 1e-3


def test_controls_are_rejected(pair):
    """The test can fail: a drafter whose q ignores the grammar, and a round that forgets the
    grammar in verification, both leave p'."""
    target, draft = pair
    p1, p2 = masked_marginals(target, BRANCHY, SP)
    c1, c2, _ = sample_two(target, draft, BRANCHY, n=3000, unmasked_q=True)
    pv_q = min(chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0])
    plain = SamplingParams(**{**SP.__dict__, "seed": 0})
    counts = np.zeros(target.n_vocab, np.int64)
    s = Sampler(target.n_vocab, plain)
    target.clear()
    row = target.eval(PROMPT, logits="last")[0].copy()
    for _ in range(3000):
        counts[s.sample(row)[0]] += 1
    pv_unmasked = chi2_pvalue(counts, p1)[0]
    print(f"controls: unmasked q {pv_q:.2e}, no grammar {pv_unmasked:.2e}")
    assert pv_q < 1e-4 and pv_unmasked < 1e-6


def test_ngram_drafts_are_cut_where_the_grammar_forbids(pair):
    target, _ = pair
    tok = {target.token_to_piece(i): i for i in range(target.n_vocab)}
    seq = [tok[b"b"], tok[b"c"], tok[b" "], tok[b"x"], tok[b"b"], tok[b"c"]]
    g = Grammar('root ::= [b-c]+ "q"', target)
    g.accept(seq[4:])
    c = Constraint(g, target)
    d = NgramDrafter(DraftParams(n_draft=4, adaptive=False)).propose(seq, 4, DraftPolicy(4), c)
    assert [int(t) for t in d.tokens] == [tok[b" "], tok[b"x"], tok[b"b"], tok[b"c"]]
    cut = c.complete(d, 4)
    assert cut.n == 0 and g.n_accepted == 2                    # " " is refused; the grammar is back


def test_forced_text_is_drafted_and_rolled_back(pair):
    target, _ = pair
    g = Grammar('root ::= "b" "the" " " [c-z]', target)
    c = Constraint(g, target, keep_last=True)
    c.advance([target.tokenize("b", add_special=False)[0]])
    from pyllamaspec.speculation.drafters import NO_DRAFT
    d = c.complete(NO_DRAFT, 8)
    assert target.detokenize(d.tokens.tolist()) == "the " and d.n_forced == d.n
    assert g.n_accepted == 1                                   # drafts are not taken until verified


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "city": {"enum": ["Paris", "London", "Tokyo"]}},
          "required": ["name", "age", "city"]}


def masked_greedy(target: Model, ids: list[int], g: Grammar, n: int) -> tuple[list[int], list[float]]:
    """Plain greedy decoding under g, one token at a time, evaluated as the decoder evaluates
    (the prompt but its last token in one batch), with each step's top-2 margin among the
    allowed tokens."""
    target.clear()
    target.eval(ids[:-1], logits="none")
    row = target.eval(ids[-1:], logits="last")[0]
    out, margins = [], []
    for _ in range(n):
        allowed = g.mask()[:len(row)]
        vals = np.where(allowed, row, -np.inf)
        top2 = np.sort(vals[allowed])[-2:]
        margins.append(float(top2[-1] - top2[0]) if len(top2) == 2 else np.inf)
        out.append(int(np.argmax(vals)))
        if target.is_eog(out[-1]):
            break
        g.accept(out[-1:])
        row = target.eval(out[-1:], logits="last")[0]
    return out, margins


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_greedy_identical_with_drafters_under_a_schema(name):
    """The same greedy JSON as plain masked decoding with no drafter but forced drafts, a draft
    model (the target's own file: acceptance is high and still exact), n-gram lookup; always
    valid. SmolLM2's batched and one-token evaluations are bit-identical, so the outputs are
    identical; Gemma 3's differ by up to ~0.9 logits (tests/data/reference/README.md), so they
    must agree up to the first step whose top-2 margin is under 0.5, as in test_speculative."""
    from pyllamaspec.engine.chat_template import ChatPrompt
    from pyllamaspec.structured.formats import constraint_spec, response_content
    path = real_model(name)
    msgs = [{"role": "user", "content": "Describe a person living in a big city as JSON."}]
    rf = {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    n = 80
    with Model(path, n_ctx=1024) as target, Model(path, n_ctx=1024) as draft:
        prompt = ChatPrompt.make(msgs)
        ids, _ = prompt.render(target)
        spec = constraint_spec(response_format=rf).for_chat(prompt, target)
        plain, margins = masked_greedy(target, ids, spec.make(target), n)
        safe = next((i for i, m in enumerate(margins) if m < 0.5), n) if name == "gemma3" else n
        for label, dm, forced in [("forced", None, True), ("draft", draft, True), ("ngram", "ngram", True),
                                  ("draft-only", draft, False)]:
            r = pyllamaspec.chat(msgs, target, dm, temperature=0, max_tokens=n, response_format=rf, forced=forced)
            s = r.stats
            print(f"{name} {label}: {r.text!r} drafted {s.drafted} accepted {s.accepted}, forced {s.forced} "
                  f"accepted {s.forced_accepted}; plain agrees for {safe} steps")
            assert r.tokens[:safe] == [t for t in plain if not target.is_eog(t)][:safe], label
            if label == "draft":
                assert s.accepted > 0
            if r.finish_reason == "stop":
                json.loads(response_content(r.text))
