"""Suffix drafting (--spec-type suffix, speculation/drafters/ngram/suffix.py over suffix_index.py):
the reversed suffix array and its matches against brute force, the walk's frequencies, the corpus's
bound (the oldest text dropped first), one corpus per target shared by its drafters, a second
request drafting from the first's answer, exactness (greedy == plain on SmolLM2, the target's
distribution under sampling) and the flags."""
from __future__ import annotations

import numpy as np
import pytest

from test_speculative import pair  # noqa: F401  (the tiny synthetic pair, a fixture)
from pyllamaspec.speculation.cost_model import DraftPolicy
from pyllamaspec.speculation.drafters import NO_DRAFT, ChainDrafter, SuffixDrafter, make_drafter
from pyllamaspec.speculation.drafters.ngram.suffix_index import (SuffixCorpus, corpus_of, longest_match,
                                                                 suffix_array, walk)
from pyllamaspec.speculation.params import DraftParams, NgramParams, SuffixParams
from pyllamaspec.speculation.spec_types import parse


def test_suffix_array_sorts_by_the_first_depth_tokens():
    rng = np.random.default_rng(1)
    for depth in (1, 3, 8, 64):
        v = rng.integers(-1, 4, 700).astype(np.int64)
        sa = suffix_array(v, depth)
        keys = [list(v[i:i + depth]) + [-9] * (depth - len(v[i:i + depth])) for i in sa]
        assert sorted(range(len(v))) == sorted(sa.tolist())
        assert keys == sorted(keys), depth


def _brute_longest(docs: list[list[int]], ctx: list[int], depth: int) -> tuple[int, list[int]]:
    flat = [t for d in docs for t in d + [-1]]
    for m in range(min(depth, len(ctx)), 0, -1):
        pat = ctx[-m:]
        hits = [i + m for i in range(len(flat) - m + 1) if flat[i:i + m] == pat]
        if hits:
            return m, hits
    return 0, []


def test_corpus_match_is_the_longest_suffix_found():
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 3, int(rng.integers(5, 40))).tolist() for _ in range(12)]
    c = SuffixCorpus(10_000, 6)
    for d in docs:
        c.add(d)
    for _ in range(200):
        ctx = rng.integers(0, 3, int(rng.integers(1, 9))).tolist()
        m, starts, _ = c.match(np.asarray(ctx))
        want_m, want = _brute_longest(docs, ctx, 6)
        assert m == want_m and sorted(starts.tolist()) == want, ctx


def test_longest_match_in_the_request():
    text = np.array([5, 1, 2, 3, 9, 2, 3, 7, 1, 2, 3, -1, -1], np.int32)
    m, starts = longest_match(text, 11, 64)
    assert m == 3 and starts.tolist() == [4]           # "1 2 3" once before, followed by 9
    m, starts = longest_match(text, 11, 2)             # depth 2: "2 3" twice
    assert m == 2 and starts.tolist() == [4, 7]


def test_walk_follows_the_most_frequent_continuation():
    text = np.array([1, 2, 3, -1, 1, 2, 3, -1, 1, 2, 4, -1, 1, -1], np.int32)
    toks, probs = walk(text, np.array([1, 5, 9, 13]), 5, 0.1)
    # after "1": 2 three times in four (one ends), then 3 two times in three
    assert toks == [2, 3] and probs == pytest.approx([0.75, 0.5])
    toks, _ = walk(text, np.array([1, 5, 9, 13]), 5, 0.6)
    assert toks == [2]                                 # 0.5 < min_prob: stops
    assert walk(text, np.array([1, 5, 9, 13]), 1, 0.1)[0] == [2]


def test_memory_bound_evicts_the_oldest():
    c = SuffixCorpus(10, 8)
    c.add([1, 2, 3, 4])
    c.add([5, 6, 7, 8])
    assert c.match(np.array([1, 2]))[0] == 2
    c.add([9, 10, 11, 12])                             # 12 tokens: the first goes
    assert c.n_tokens == 8 and c.match(np.array([1, 2]))[0] == 0
    assert c.match(np.array([6, 7]))[0] == 2 and c.match(np.array([10, 11]))[0] == 2
    c.add(list(range(100, 130)))                       # longer than the bound: its tail only
    assert c.n_tokens == 10 and c.match(np.array([120]))[0] == 1 and c.match(np.array([119]))[0] == 0
    assert c.match(np.array([6, 7]))[0] == 0


def test_a_conversations_next_turn_replaces_its_last():
    c = SuffixCorpus(1000, 8)
    c.add([1, 2, 3])
    c.add([1, 2, 3, 4, 5])
    assert c.n_tokens == 5 and len(c.docs) == 1
    c.add([7, 8])
    assert len(c.docs) == 2


class _Target:
    """Stands for a Model: what the corpus is kept by (weakly)."""


def test_drafters_of_one_target_share_a_corpus():
    t = _Target()
    a = make_drafter(t, "suffix", None, DraftParams(adaptive=False), frozenset())
    b = make_drafter(t, "suffix", None, DraftParams(adaptive=False), frozenset())
    other = make_drafter(_Target(), "suffix", None, DraftParams(adaptive=False), frozenset())
    assert isinstance(a, SuffixDrafter) and a.corpus is b.corpus and a.corpus is not other.corpus
    assert make_drafter(None, "suffix", None, DraftParams(), frozenset()).corpus is not \
        make_drafter(None, "suffix", None, DraftParams(), frozenset()).corpus
    # the first request's answer, then a second request's prompt that ends as it began
    a.prefill([40, 41, 10, 11, 12])
    a.accepted([40, 41, 10, 11, 12, 13, 14, 15, 16], [13, 14, 15, 16], NO_DRAFT)
    policy = DraftPolicy(16)
    b.prefill([50, 51, 10, 11, 12])
    assert b.propose([50, 51, 10, 11, 12], 16, policy).tokens.tolist() == []      # not yet: a is running
    a.close()
    got = b.propose([50, 51, 10, 11, 12], 16, policy)
    assert got.tokens.tolist() == [13, 14, 15] and b.source == "corpus"       # factor 1: 3 matched, 3 drafted
    assert other.propose([50, 51, 10, 11, 12], 16, policy).n == 0


def test_spec_type_and_chain():
    assert parse("draft-simple,suffix") == ("suffix", "draft-simple")
    assert parse("suffix,ngram-lookup") == ("ngram-lookup", "suffix")
    d = make_drafter(None, None, None, DraftParams(spec_type="suffix,ngram-mod"), frozenset())
    assert isinstance(d, ChainDrafter) and [x.key for x in d.drafters] == ["ngram-mod", "suffix"]
    with pytest.raises(Exception, match="draft-simple drafts with a draft model"):
        make_drafter(None, None, None, DraftParams(spec_type="suffix,draft-simple"), frozenset())


def test_flags():
    from pyllamaspec.frontends.flags.args import ngram_params, parse_args, resolve_spec_type
    from pyllamaspec.frontends.server.main import build_parser
    a = parse_args(build_parser(), ["-m", "x.gguf", "--spec-type", "suffix", "--spec-suffix-max-tokens", "4096",
                                    "--spec-suffix-factor", "2", "--spec-suffix-min-prob", "0.3"])
    resolve_spec_type(a)
    assert a.spec_types == ("suffix",)
    assert ngram_params(a).suffix == SuffixParams(max_tokens=4096, factor=2.0, min_prob=0.3)
    # a suffix flag without suffix drafting: a warning
    from pyllamaspec.frontends.flags import args as cli_args
    from pyllamaspec.frontends.flags.checks import Setup, ineffective_flags
    setup = Setup(drafter="ngram", conversing=False, has_template=True, n_ctx_train=8192, n_ctx=4096)
    a, b = (cli_args.parse_args(cli_args.build_parser(), ["-m", "x.gguf", *f, "--spec-suffix-factor", "2"])
            for f in (["--spec-type", "suffix"], ["--lookup"]))
    resolve_spec_type(a)
    resolve_spec_type(b)
    assert not [m for m in ineffective_flags(a, setup) if "suffix" in m]
    assert [m for m in ineffective_flags(b, setup) if "suffix" in m] == \
        ["--spec-suffix-factor has no effect without --spec-type suffix"]


CUSTOMERS = ["Alice Martin", "Bob Chen", "Carla Diaz"]


def _ask(name: str) -> list[dict]:
    return [{"role": "user", "content": f"Write a JSON record for the customer {name}: fields name, email, phone, "
                                        f"city, orders (a list of 2 orders with id and total). Output only JSON."}]


def test_greedy_is_plain_and_later_requests_draft_from_earlier_answers(smollm2_path):
    """Greedy output equals plain decoding's, request after request; the third request drafts
    (and has accepted) more with the first two's answers in the corpus than with it empty. Each
    prompt is evaluated whole (cache_prompt=False): resumed from another prompt's prefix, the
    first token is a near-tie that the batch's split decides (plain decoding's too)."""
    from pyllamaspec import Model, chat, generate
    with Model(smollm2_path, n_ctx=1024, n_threads=2) as m:
        corpus = corpus_of(m, SuffixParams().max_tokens, SuffixParams().max_depth)
        plain = [chat(_ask(n), m, max_tokens=64, temperature=0, cache_prompt=False) for n in CUSTOMERS]
        corpus.clear()
        spec = [chat(_ask(n), m, "suffix", max_tokens=64, temperature=0, cache_prompt=False, adaptive=False)
                for n in CUSTOMERS]
        assert [s.tokens for s in spec] == [p.tokens for p in plain]
        assert corpus.n_tokens > 0
        corpus.clear()
        alone = chat(_ask(CUSTOMERS[2]), m, "suffix", max_tokens=64, temperature=0, cache_prompt=False, adaptive=False)
        assert alone.tokens == plain[2].tokens
        print(f"third request: accepted {spec[2].stats.accepted} of {spec[2].stats.drafted} after two, "
              f"{alone.stats.accepted} of {alone.stats.drafted} alone")
        assert spec[2].stats.accepted > alone.stats.accepted + 10
        # the cost model on: still the plain output
        adaptive = chat(_ask(CUSTOMERS[1]), m, "suffix", max_tokens=64, temperature=0, cache_prompt=False)
        assert adaptive.tokens == plain[1].tokens
        # several at once (a server's slots: batch rounds), one corpus: each answer is plain's
        texts = [f"Customer record of {n} as JSON:\n" for n in CUSTOMERS[:2]]
        alone = [generate(t, m, max_tokens=32, temperature=0, cache_prompt=False) for t in texts]
        together = generate(texts, m, "suffix", max_tokens=32, temperature=0, cache_prompt=False, adaptive=False)
        assert [r.tokens for r in together] == [r.tokens for r in alone]
        assert sum(r.stats.drafted for r in together) > 0


TINY = NgramParams(suffix=SuffixParams(factor=4.0))


@pytest.mark.parametrize("kind", ["suffix", pytest.param("suffix,draft-simple", marks=pytest.mark.slow)])
def test_sampling_preserves_the_distribution(pair, kind):
    """A deterministic draft (q a point mass) verified under sampling: the first two tokens keep
    the target's distribution, the corpus of earlier samples drafting too (chained with a draft
    model: its rounds with a q of its own where suffix finds nothing); the negative control
    (every draft token taken) does not."""
    from pyllamaspec.engine.sampling import SamplingParams
    from test_speculative import chi2_pvalue, exact_marginals, sample_first_two
    target, draft = pair
    draft = draft if "draft-simple" in kind else None
    sp = SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    prompt = [1, 7, 3, 23, 8, 48, 29, 36, 56, 22, 11, 43, 1, 7, 3, 23, 8, 48]
    p1, p2 = exact_marginals(target, sp, prompt)
    corpus_of(target, TINY.suffix.max_tokens, TINY.suffix.max_depth).clear()
    c1, c2, rate = sample_first_two(target, draft, sp, n=1500, prompt=prompt, spec_type=kind, ngrams=TINY)
    pv1, pv2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"{kind} under sampling: acceptance {rate:.2f}; p-values {pv1:.3f}, {pv2:.3f}")
    assert rate > 0.05
    assert pv1 > 1e-3 and pv2 > 1e-3
    c1, c2, _ = sample_first_two(target, draft, sp, n=1500, prompt=prompt, spec_type=kind, ngrams=TINY,
                                 accept_all=True)
    assert min(chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]) < 1e-6
