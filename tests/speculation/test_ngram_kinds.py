"""llama.cpp's n-gram speculative kinds (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod,
ngram-cache), alone and chained: on recorded token streams every round's draft equals the one
llama.cpp b11434's common_speculative proposed (tests/data/reference/ngram_llamacpp.json, made by
scripts/ngram_reference.py with scripts/llamacpp_ngram.cpp). Drafts are token ids, compared
exactly: these kinds are integer lookups, the same on every machine. Also: the C++ hash-map
order ngram-cache breaks ties by, the flags, and exactness in generation."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from ngram_streams import synthetic_stream, write_lookup_cache
from test_speculative import pair  # noqa: F401  (the tiny synthetic pair, a fixture)
from pyllamaspec.errors import InvalidArgumentError, UnsupportedModelError
from pyllamaspec.speculation.cost_model import DraftPolicy
from pyllamaspec.speculation.drafters import ChainDrafter, make_drafter
from pyllamaspec.speculation.drafters.ngram.hash_order import CountMap
from pyllamaspec.speculation.params import DraftParams, NgramMapParams, NgramModParams, NgramParams
from pyllamaspec.speculation.spec_types import parse

REF = json.loads((pathlib.Path(__file__).parents[1] / "data" / "reference" / "ngram_llamacpp.json").read_text())


def ngram_params(params: dict, static: str | None) -> NgramParams:
    """The probe's key=value parameters as NgramParams (llama.cpp's defaults for the rest)."""
    g = params.get
    return NgramParams(simple=NgramMapParams(g("simple.n", 12), g("simple.m", 48)),
                       map_k=NgramMapParams(g("mapk.n", 12), g("mapk.m", 48), g("mapk.hits", 1)),
                       map_k4v=NgramMapParams(g("k4v.n", 12), g("k4v.m", 48), g("k4v.hits", 1)),
                       mod=NgramModParams(g("mod.match", 24), g("mod.max", 64), g("mod.min", 48)),
                       cache_static=static if "lcs" in params else None)


def replay(types: str, params: dict, stream: dict, static: str | None) -> list[list[int]]:
    """llama-server's rounds over the stream with our drafters: [c, n_accepted, draft...] each."""
    dp = DraftParams(adaptive=False, spec_type=types, ngrams=ngram_params(params, static))
    d = make_drafter(None, None, None, dp, frozenset())
    text = stream["prompt"] + stream["gen"]
    c = len(stream["prompt"])
    d.prefill(text[:c + 1])
    policy = DraftPolicy(1024)
    rounds = []
    while c + 1 < len(text):
        draft = d.propose(text[:c + 1], 1 << 20, policy)
        toks = [int(t) for t in draft.tokens]
        n = 0
        while n < len(toks) and c + 1 + n < len(text) and toks[n] == text[c + 1 + n]:
            n += 1
        rounds.append([c, n] + toks)
        d.accepted(text[:c + 2 + n], text[c + 1:c + 2 + n], draft)
        c += n + 1
    return rounds


@pytest.fixture(scope="module")
def static_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("ngram") / "static.bin"
    write_lookup_cache(path, sum(synthetic_stream(25, 0, 4000, order_seed=26), []))
    return str(path)


@pytest.mark.parametrize("run", REF["runs"], ids=lambda r: f"{r['types']}-{r['stream']}-{'small' if r['params'] else 'default'}")
def test_drafts_equal_llamacpp(run, static_cache):
    got = replay(run["types"], run["params"], REF["streams"][run["stream"]], static_cache)
    for g, want in zip(got, run["rounds"]):
        assert g == want, f"round at {want[0]}: ours {g[2:]}, llama.cpp {want[2:]}"
    assert len(got) == len(run["rounds"])


def test_fixture_exercises_every_kind():
    """A fixture that never drafts would pass whatever we propose."""
    drafted = {}
    for r in REF["runs"]:
        drafted[r["types"]] = drafted.get(r["types"], 0) + sum(len(x) - 2 for x in r["rounds"])
    for kind in ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"):
        assert drafted[kind] > 100, kind


def test_a_changed_rule_is_caught(static_cache):
    """The negative control: ngram-map-k4v with its two-to-one dominance rule dropped drafts
    what llama.cpp does not."""
    from pyllamaspec.speculation.drafters.ngram import map as ngram_map
    run = next(r for r in REF["runs"] if r["types"] == "ngram-map-k4v" and r["params"] and r["stream"] == "synthetic")
    ok = replay(run["types"], run["params"], REF["streams"][run["stream"]], static_cache)
    assert ok == run["rounds"]
    orig = ngram_map.NgramMap._count_values
    try:
        def no_rival(self, inp, key, k, pos):
            orig(self, inp, key, k, pos)
            for v in k.values[1:]:
                v.num = 0
        ngram_map.NgramMap._count_values = no_rival
        assert replay(run["types"], run["params"], REF["streams"][run["stream"]], static_cache) != run["rounds"]
    finally:
        ngram_map.NgramMap._count_values = orig


def test_hash_order_is_libstdcxx():
    """std::unordered_map<int, int> iteration order after these insertions, printed by a GCC 12
    build (the order decides ngram-cache's ties): a rehash at 14 elements included."""
    m = CountMap()
    for t in (45, 39, 24, 18, 13, 13, 41, 41, 9, 32):
        m.add(t)
    assert [t for t, _ in m.items()] == [9, 41, 18, 24, 13, 39, 32, 45]
    m = CountMap()
    for t in range(100, 0, -7):
        m.add(t)
    assert [t for t, _ in m.items()] == [2, 9, 100, 93, 86, 79, 72, 65, 58, 51, 44, 37, 30, 23, 16]


def test_spec_type_names():
    assert parse("ngram-mod,ngram-simple") == ("ngram-simple", "ngram-mod")      # llama.cpp's order
    assert parse(["draft-mtp", "ngram-cache"]) == ("ngram-cache", "draft-mtp")
    assert parse("ngram-mod,none") == ()
    with pytest.raises(InvalidArgumentError, match="unknown speculative type 'ngram-foo'"):
        parse("ngram-foo")
    with pytest.raises(UnsupportedModelError, match="DSpark"):
        parse("draft-dspark")


def test_kinds_are_capped_by_their_own_size():
    dp = DraftParams(adaptive=False, spec_type="ngram-simple,ngram-mod",
                     ngrams=NgramParams(simple=NgramMapParams(3, 30), mod=NgramModParams(4, 40, 2)))
    d = make_drafter(None, None, None, dp, frozenset())
    assert isinstance(d, ChainDrafter) and d.n_max == 40
    assert make_drafter(None, "ngram-cache", None, DraftParams(), frozenset()).n_max == 8


SMALL = NgramParams(simple=NgramMapParams(3, 8), map_k=NgramMapParams(3, 8), map_k4v=NgramMapParams(2, 6, 2),
                    mod=NgramModParams(4, 16, 2))


@pytest.fixture(scope="module")
def smollm2_plain(smollm2_path):
    from pyllamaspec import Model, generate
    with Model(smollm2_path, n_ctx=1024, n_threads=1) as m:
        plain = {s: generate(REF["streams"][s]["prompt"], m, temperature=0, max_tokens=64, cache_prompt=False)
                 for s in ("code", "synthetic")}
        yield m, plain


# the chain of two kinds in the README's command, each kind alone in the slow set (~3 s each)
@pytest.mark.parametrize("kind", ["ngram-mod,ngram-simple"] + [pytest.param(k, marks=pytest.mark.slow) for k in (
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")])
def test_greedy_generation_is_plain(kind, smollm2_plain):
    """Through the decoder: greedy output is the target's own. With fixed draft lengths every
    kind drafts and has drafts accepted on the code stream, whose greedy text is the same with
    ggml's native (AVX-512), AVX2 and generic kernels (measured, drafted/accepted: simple 85/51,
    map-k 66/53, map-k4v 2/2, mod 83/55, cache 56/54); the synthetic stream's text depends on the
    kernels (a period-2 loop on AVX2, where ngram-simple, whose latest match leaves fewer than
    size_n tokens after it, never drafts). With the cost model on, whether a kind drafts follows
    measured times and what earlier generations taught it (pair_stats): only the output is checked."""
    from pyllamaspec import generate
    m, plain = smollm2_plain
    prompt = REF["streams"]["code"]["prompt"]
    spec = generate(prompt, m, temperature=0, max_tokens=64, cache_prompt=False, spec_type=kind,
                    ngram_params=SMALL, adaptive=False)
    assert spec.tokens == plain["code"].tokens
    assert spec.stats.drafted > 0 and spec.stats.accepted > 0
    print(f"{kind}: drafted {spec.stats.drafted}, accepted {spec.stats.accepted}, rounds {spec.stats.rounds}")
    for s in ("code", "synthetic"):
        adaptive = generate(REF["streams"][s]["prompt"], m, temperature=0, max_tokens=64, cache_prompt=False,
                            spec_type=kind, ngram_params=SMALL)
        assert adaptive.tokens == plain[s].tokens


TINY = NgramParams(simple=NgramMapParams(2, 3), map_k=NgramMapParams(2, 3), map_k4v=NgramMapParams(2, 3),
                   mod=NgramModParams(2, 4, 1))


@pytest.mark.parametrize("kind", ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                                  "ngram-mod,ngram-simple"])
def test_sampling_preserves_the_distribution(pair, kind):
    """A deterministic draft (q a point mass) verified under sampling: the first two tokens keep
    the target's distribution; the negative control (every draft token taken) does not."""
    from pyllamaspec.engine.sampling import SamplingParams
    from test_speculative import chi2_pvalue, exact_marginals, sample_first_two
    target, _ = pair
    sp = SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    # the target's greedy text after [1, 7, 3] (23 8 48 29 36 56 22 11 43 ...), then its start again:
    # the kinds draft the continuation it had, which the target takes often enough (p = 0.56)
    prompt = [1, 7, 3, 23, 8, 48, 29, 36, 56, 22, 11, 43, 1, 7, 3, 23, 8, 48]
    p1, p2 = exact_marginals(target, sp, prompt)
    c1, c2, rate = sample_first_two(target, None, sp, n=1500, prompt=prompt, spec_type=kind, ngrams=TINY)
    pv1, pv2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"{kind} under sampling: acceptance {rate:.2f}; p-values {pv1:.3f}, {pv2:.3f}")
    assert rate > 0.05
    assert pv1 > 1e-3 and pv2 > 1e-3
    c1, c2, _ = sample_first_two(target, None, sp, n=1500, prompt=prompt, spec_type=kind, ngrams=TINY,
                                 accept_all=True)
    assert min(chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]) < 1e-6
