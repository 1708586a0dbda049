"""Issue 12 (part B): llama.cpp's penalties (against a numpy reference of its formula, and exact
under speculation: greedy identity, distribution preserved), logprobs from the verification
rows, stream_generate's response objects, argument checks."""
from __future__ import annotations

import math

import numpy as np
import pytest

import models
import pyllamaspec
from pyllamaspec import Model, TokenLogprobs
from pyllamaspec.engine._native import ffi, lib
from pyllamaspec.generation.generate import generate, stream_generate
from pyllamaspec.engine.sampling import Sampler, SamplingParams
from pyllamaspec.speculation.decoder import Decoder, DraftParams
from test_speculative import chi2_pvalue, smollm2_pair  # noqa: F401  (a fixture)

OFF = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)      # the bare softmax


# ---- the formula ------------------------------------------------------------------------------

def penalize_reference(logits: np.ndarray, history: list[int], last_n: int, repeat: float, freq: float,
                       present: float) -> np.ndarray:
    """llama.cpp's penalties sampler, written from its description: over the last last_n tokens
    (-1: all, 0: none), a token seen c times gets logit / repeat (logit * repeat when <= 0),
    then minus c * freq + presence; float32 arithmetic as llama.cpp's."""
    out = logits.astype(np.float32).copy()
    window = history if last_n < 0 else history[max(0, len(history) - last_n):] if last_n else []
    f32 = np.float32
    for t, c in zip(*np.unique(np.asarray(window, np.int64), return_counts=True)):
        l = out[t]
        l = l * f32(repeat) if l <= 0 else l / f32(repeat)
        out[t] = l - (f32(c) * f32(freq) + f32(1.0) * f32(present))
    return out


def softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


PENALTIES = [
    dict(repeat_penalty=1.3, frequency_penalty=0.0, presence_penalty=0.0, penalty_last_n=64),
    dict(repeat_penalty=0.7, frequency_penalty=0.0, presence_penalty=0.0, penalty_last_n=-1),
    dict(repeat_penalty=1.0, frequency_penalty=0.4, presence_penalty=0.0, penalty_last_n=5),
    dict(repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=-1.5, penalty_last_n=3),
    dict(repeat_penalty=1.5, frequency_penalty=0.25, presence_penalty=0.6, penalty_last_n=6),
    dict(repeat_penalty=1.5, frequency_penalty=0.25, presence_penalty=0.6, penalty_last_n=0),
]


@pytest.mark.parametrize("pen", PENALTIES, ids=lambda p: "-".join(f"{v}" for v in p.values()))
def test_penalties_follow_llama_cpp_formula(pen):
    rng = np.random.default_rng(3)
    V = 50
    history = [4, 9, 4, 17, 4, 9, 30, 2, 17, 4, 41]
    sp = SamplingParams(**OFF, **pen)
    s = Sampler(V, sp)
    s.push(history[:4])
    s.push(history[4:])
    assert s.history_len == len(history)
    for _ in range(5):
        logits = rng.normal(0.0, 3.0, V).astype(np.float32)
        logits[[4, 17]] = -np.abs(logits[[4, 17]])            # negative logits multiply
        logits[[9, 41]] = np.abs(logits[[9, 41]])             # positive ones divide
        ref = penalize_reference(logits, history, sp.penalty_last_n, sp.repeat_penalty,
                                 sp.frequency_penalty, sp.presence_penalty)
        np.testing.assert_allclose(s.probs(logits), softmax64(ref), rtol=2e-6, atol=1e-9)
        greedy = Sampler(V, SamplingParams(**{**OFF, "temperature": 0.0}, **pen))
        greedy.push(history)
        assert greedy.sample(logits)[0] == int(np.argmax(ref))
    # the window slides and rolls back with the history
    s.truncate(3)
    ref = penalize_reference(logits, history[:3], sp.penalty_last_n, sp.repeat_penalty,
                             sp.frequency_penalty, sp.presence_penalty)
    np.testing.assert_allclose(s.probs(logits), softmax64(ref), rtol=2e-6, atol=1e-9)


def test_penalties_change_the_distribution_and_off_changes_nothing():
    rng = np.random.default_rng(4)
    logits = rng.normal(0.0, 2.0, 40).astype(np.float32)
    plain = Sampler(40, SamplingParams(**OFF))
    pen = Sampler(40, SamplingParams(**OFF, repeat_penalty=1.2))
    off = Sampler(40, SamplingParams(**OFF, repeat_penalty=1.0, penalty_last_n=-1))
    for s in (pen, off, plain):
        s.push([1, 2, 3])
    assert np.array_equal(off.probs(logits), plain.probs(logits))
    assert np.abs(pen.probs(logits) - plain.probs(logits)).max() > 1e-3


@pytest.mark.parametrize("kwargs,match", [
    (dict(repeat_penalty=0.0), "repeat_penalty"), (dict(repeat_penalty=-1.0), "repeat_penalty"),
    (dict(repeat_penalty=math.inf), "repeat_penalty"), (dict(repeat_penalty=1e-30), "repeat_penalty"),
    (dict(frequency_penalty=math.nan), "frequency_penalty"), (dict(presence_penalty=math.inf), "presence_penalty"),
    (dict(presence_penalty=1e9), "presence_penalty"), (dict(penalty_last_n=-2), "penalty_last_n"),
    (dict(penalty_last_n=1.5), "penalty_last_n"), (dict(repeat_penalty="1.1"), "repeat_penalty"),
    (dict(logprobs=21), "logprobs"), (dict(logprobs=-1), "logprobs"), (dict(logprobs=True), "logprobs")])
def test_bad_sampling_extras_fail_before_any_work(kwargs, match):
    with pytest.raises(pyllamaspec.InvalidArgumentError, match=match):
        generate("x", "/does/not/exist.gguf", "/nor/this.gguf", **kwargs)
    with pytest.raises(pyllamaspec.InvalidArgumentError, match=match):
        stream_generate("x", "/does/not/exist.gguf", **kwargs)


def test_core_refuses_bad_penalties_and_history():
    raw = lib.psl_sampling_default_params()
    assert (raw.repeat_penalty, raw.frequency_penalty, raw.presence_penalty, raw.penalty_last_n) == (1.0, 0.0, 0.0, 64)
    out = ffi.new("psl_sampler **")
    for field, value in (("repeat_penalty", 0.0), ("repeat_penalty", math.nan), ("frequency_penalty", math.inf),
                         ("presence_penalty", -math.inf), ("penalty_last_n", -2)):
        bad = lib.psl_sampling_default_params()
        setattr(bad, field, value)
        assert lib.psl_sampler_new(10, ffi.addressof(bad), out) == lib.PSL_ERR_INVALID_ARGUMENT
        assert field in ffi.string(lib.psl_last_error()).decode()
    s = Sampler(10, SamplingParams(repeat_penalty=1.1))
    with pytest.raises(pyllamaspec.TokenOutOfRangeError):
        s.push([3, 10])
    with pytest.raises(pyllamaspec.PyllamaspecError, match="n_keep"):
        s.truncate(1)
    assert s.history_len == 0          # a failed push adds nothing


# ---- exactness under speculation ----------------------------------------------------------------

GREEDY_PEN = dict(repeat_penalty=1.3, frequency_penalty=0.3, presence_penalty=0.4, penalty_last_n=16)


def test_greedy_with_penalties_speculative_equals_plain(smollm2_pair):
    target, draft = smollm2_pair
    prompt = "Write a list of fruits, one per line:\n- apple\n- pear\n-"
    unpenalized = generate(prompt, target, max_tokens=48, temperature=0)
    plain = generate(prompt, target, max_tokens=48, temperature=0, **GREEDY_PEN)
    assert plain.tokens != unpenalized.tokens                 # the penalties do something here
    rates = []
    for k in (2, 5, 8):
        spec = generate(prompt, target, draft, max_tokens=48, temperature=0, n_draft=k, p_min=0.0,
                        adaptive=False, **GREEDY_PEN)
        assert spec.tokens == plain.tokens, f"n_draft={k}"
        rates.append(spec.stats.acceptance_rate)
    adaptive = generate(prompt, target, draft, max_tokens=48, temperature=0, **GREEDY_PEN)
    assert adaptive.tokens == plain.tokens
    print(f"greedy with penalties: acceptance {rates}")
    assert 0 < min(rates) and max(rates) < 1.0                 # drafts accepted and rejected


def test_greedy_with_penalties_ngram_equals_plain(smollm2_path):
    code = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    prompt = (f"<|im_start|>user\nRepeat this code exactly, adding a docstring to each function:\n{code}"
              f"<|im_end|>\n<|im_start|>assistant\n")
    with Model(smollm2_path, n_ctx=1024) as m:
        for pen in (GREEDY_PEN, dict(repeat_penalty=1.1, penalty_last_n=-1)):
            plain = generate(prompt, m, max_tokens=64, temperature=0, **pen)
            fixed = generate(prompt, m, "ngram", max_tokens=64, temperature=0, n_draft=8, adaptive=False, **pen)
            adaptive = generate(prompt, m, "ngram", max_tokens=64, temperature=0, n_draft=8, **pen)
            assert fixed.tokens == plain.tokens and adaptive.tokens == plain.tokens
            assert fixed.stats.accepted > 0


@pytest.fixture(scope="module")
def pair(synth_dir):
    t = synth_dir / "extras_target.gguf"
    d = synth_dir / "extras_draft.gguf"
    models.write_llama_gguf(t, n_vocab=64, n_embd=32, n_layer=2, seed=11)   # as test_speculative's pair
    models.write_llama_gguf(d, n_vocab=64, n_embd=32, n_layer=1, seed=11)
    with Model(t, n_ctx=64, n_threads=1, type_k="f32", type_v="f32") as target, \
         Model(d, n_ctx=64, n_threads=1, type_k="f32", type_v="f32") as draft:
        yield target, draft


PROMPT = [1, 7, 3, 9, 7, 3]            # "7 3" recurs: the n-gram drafter proposes after it


def penalized_marginals(target: Model, sp: SamplingParams, with_first: bool = True):
    """The penalized target's own distribution of the first two tokens, and the chance that the
    second repeats the first. with_first=False: the second token's penalties forget the first
    (what a verification that ignored earlier drafts would sample)."""
    s = Sampler(target.n_vocab, sp)
    s.push(PROMPT)
    target.clear()
    p1 = s.probs(target.eval(PROMPT, logits="last")[0]).astype(np.float64)
    p2 = np.zeros_like(p1)
    repeat = 0.0
    for x1 in np.nonzero(p1)[0]:
        target.truncate(len(PROMPT))
        if with_first:
            s.push([int(x1)])
        row = s.probs(target.eval([int(x1)], logits="last")[0]).astype(np.float64)
        if with_first:
            s.truncate(len(PROMPT))
        p2 += p1[x1] * row
        repeat += p1[x1] * row[x1]
    return p1 / p1.sum(), p2 / p2.sum(), repeat


class ForgetsDrafts:
    """A broken verifier for the negative control: each position is penalized by the history
    without the drafts before it (one position per call to the real one)."""

    def __init__(self, real: Sampler):
        self.real = real

    def verify(self, logits, draft, q):
        for i in range(len(draft)):
            n, nxt = self.real.verify(logits[i:i + 2], draft[i:i + 1], None if q is None else q[i:i + 1])
            if n == 0:
                return i, nxt
        return len(draft), self.real.verify(logits[len(draft):len(draft) + 1], draft[:0], None)[1]

    def push(self, ids):
        self.real.push(ids)

    def reset(self, ids):
        self.real.reset(ids)


def sample_pairs(target, drafter, sp: SamplingParams, n: int, broken: bool = False):
    c1 = np.zeros(target.n_vocab, np.int64)
    c2 = np.zeros(target.n_vocab, np.int64)
    repeats = drafted = accepted = 0
    for seed in range(n):
        dec = Decoder(target, drafter, SamplingParams(**{**sp.__dict__, "seed": seed}),
                      DraftParams(n_draft=3, p_min=0.0, adaptive=False, ngram=2, draft_vocab=0))
        if broken:
            dec.t_sampler = ForgetsDrafts(dec.t_sampler)
        dec.prefill(PROMPT)
        out = []
        while len(out) < 2:
            out += [t for t, _ in dec.step()]
        dec.close()
        c1[out[0]] += 1
        c2[out[1]] += 1
        repeats += out[0] == out[1]
        drafted += dec.stats.drafted
        accepted += dec.stats.accepted
    return c1, c2, repeats, accepted / max(1, drafted)


def binomial_z(k: int, n: int, p: float) -> float:
    return (k - n * p) / math.sqrt(n * p * (1 - p))


# A negative presence penalty over the last token only makes the second token repeat the first
# often (0.23 against 0.05 here), but only where the penalties see the first token: a
# verification that forgot earlier drafts repeats far less.
CONTROL_PEN = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, presence_penalty=-3.0, penalty_last_n=1)
SAMPLED_PEN = [
    CONTROL_PEN,
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, presence_penalty=-2.5, repeat_penalty=1.2,
         frequency_penalty=0.3, penalty_last_n=4),
    dict(temperature=0.8, top_k=12, top_p=0.95, min_p=0.0, presence_penalty=-2.0, repeat_penalty=0.8,
         frequency_penalty=0.0, penalty_last_n=-1),
]


@pytest.mark.parametrize("drafter", ["model", "ngram"])
@pytest.mark.parametrize("setting", SAMPLED_PEN, ids=["T1-last1", "T1-last4", "T0.8-k12-all"])
def test_sampling_with_penalties_keeps_the_penalized_distribution(pair, drafter, setting):
    target, draft = pair
    sp = SamplingParams(**setting)
    p1, p2, p_rep = penalized_marginals(target, sp)
    n = 3000
    c1, c2, reps, rate = sample_pairs(target, draft if drafter == "model" else "ngram", sp, n)
    pv1, pv2, z = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0], binomial_z(reps, n, p_rep)
    print(f"{drafter} {setting}: acceptance {rate:.2f}; p-values {pv1:.3f}, {pv2:.3f}; repeats {reps / n:.3f} "
          f"(exact {p_rep:.3f}, z {z:.2f})")
    # the draft model really disagrees and agrees; n-gram drafts (copies of the prompt) are
    # accepted less often, but they are
    assert 0.05 < rate < 0.95 if drafter == "model" else rate > 0
    assert pv1 > 1e-3 and pv2 > 1e-3 and abs(z) < 4


def test_penalized_distribution_test_rejects_a_verifier_that_forgets_drafts(pair):
    target, draft = pair
    sp = SamplingParams(**CONTROL_PEN)
    p1, p2, p_rep = penalized_marginals(target, sp)
    _, _, p_rep_forgot = penalized_marginals(target, sp, with_first=False)
    unpen = SamplingParams(**{**CONTROL_PEN, "presence_penalty": 0.0})
    assert abs(p_rep - p_rep_forgot) > 0.1                   # the case the exactness rests on
    n = 3000
    c1, c2, reps, _ = sample_pairs(target, draft, sp, n, broken=True)
    z = binomial_z(reps, n, p_rep)
    print(f"forgetful verifier: repeats {reps / n:.3f} vs exact {p_rep:.3f} (z {z:.1f}); "
          f"p-value second {chi2_pvalue(c2, p2)[0]:.2e}")
    assert abs(z) > 6 and chi2_pvalue(c2, p2)[0] < 1e-6
    assert chi2_pvalue(c1, penalized_marginals(target, unpen)[0])[0] < 1e-6   # penalties are seen


# ---- logprobs -----------------------------------------------------------------------------------

def log_softmax64(rows: np.ndarray) -> np.ndarray:
    x = rows.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def assert_logprobs_match_rows(lps: list[TokenLogprobs], tokens: list[int], rows: np.ndarray, n_top: int,
                               atol: float) -> None:
    ref = log_softmax64(rows)
    assert [lp.token for lp in lps] == tokens
    for lp, r in zip(lps, ref):
        assert abs(lp.logprob - r[lp.token]) < atol
        order = np.lexsort((np.arange(len(r)), -r))[:n_top]   # best first, lowest id on ties
        assert [i for i, _ in lp.top] == order.tolist()
        np.testing.assert_allclose([v for _, v in lp.top], r[order], atol=atol, rtol=0)


def test_core_logprobs_against_numpy():
    rng = np.random.default_rng(7)
    rows = rng.normal(0.0, 4.0, (5, 300)).astype(np.float32)
    rows[2, [10, 20, 30]] = rows[2].max() + 1.0                 # a three-way tie at the top
    tokens = [3, 299, 20, 0, 150]
    from pyllamaspec.engine.sampling import logprobs
    for n_top in (0, 1, 5, 20):
        lps = logprobs(rows, tokens, n_top)
        assert_logprobs_match_rows(lps, tokens, rows, n_top, atol=2e-6)
        assert all(len(lp.top) == n_top for lp in lps)
    assert [i for i, _ in logprobs(rows, tokens, 3)[2].top] == [10, 20, 30]


def test_logprobs_speculative_equal_plain_and_match_the_logits(smollm2_pair):
    target, draft = smollm2_pair
    prompt = "The capital of France is"
    plain = generate(prompt, target, max_tokens=24, temperature=0, logprobs=5)
    none = generate(prompt, target, max_tokens=24, temperature=0)
    assert none.logprobs is None and none.tokens == plain.tokens
    runs = [generate(prompt, target, draft, max_tokens=24, temperature=0, logprobs=5, n_draft=6, p_min=0.0,
                     adaptive=False),
            generate(prompt, target, "ngram", max_tokens=24, temperature=0, logprobs=5, n_draft=4,
                     adaptive=False)]
    assert runs[0].stats.accepted > 0
    for spec in runs:
        assert spec.tokens == plain.tokens and len(spec.logprobs) == len(plain.tokens)
        for a, b in zip(spec.logprobs, plain.logprobs):
            assert a.token == b.token and [i for i, _ in a.top] == [i for i, _ in b.top]
            np.testing.assert_allclose([a.logprob] + [v for _, v in a.top], [b.logprob] + [v for _, v in b.top],
                                       atol=1e-5, rtol=0)
    # greedy picks the top token; the logprobs are the log-softmax of Model.eval's rows
    assert all(lp.top[0][0] == lp.token for lp in plain.logprobs)
    ids = plain.prompt_tokens + plain.tokens
    target.clear()
    rows = target.eval(ids[:-1], logits="all")[len(plain.prompt_tokens) - 1:]
    assert_logprobs_match_rows(plain.logprobs, plain.tokens, rows, 5, atol=1e-4)


# ---- streamed responses -------------------------------------------------------------------------

def test_stream_generate_yields_responses(smollm2_pair):
    target, draft = smollm2_pair
    prompt = "The capital of France is"
    kw = dict(max_tokens=30, temperature=0, n_draft=4, adaptive=False)      # the same rounds twice
    full = generate(prompt, target, draft, logprobs=2, **kw)
    items = list(stream_generate(prompt, target, draft, logprobs=2, **kw))
    body, last = items[:-1], items[-1]
    assert "".join(r.text for r in items) == full.text
    assert [r.token for r in body] == full.tokens
    assert [r.logprobs for r in body] == full.logprobs
    assert all(r.finish_reason is None and r.stats is None for r in body)
    assert last.finish_reason == "length" and last.token == -1 and last.stats.n_generated == 30
    assert 0 < sum(r.from_draft for r in body) <= last.stats.accepted   # the last round may overshoot
    assert last.stats.generate_tps > 0 and last.stats.n_prompt == len(full.prompt_tokens)
    # a stop string: text held back, cut, finish "stop"; logprobs absent unless asked
    stop = full.text[8:14]
    items = list(stream_generate(prompt, target, draft, stop=stop, **kw))
    assert "".join(r.text for r in items) == full.text[:full.text.index(stop)]
    assert items[-1].finish_reason == "stop" and all(r.logprobs is None for r in items)
    assert any(r.text == "" for r in items[:-1])               # a token whose text was held back
    # the end-of-generation token ends the stream: the last response names it
    chat = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    items = list(stream_generate(chat, target, max_tokens=200, temperature=0, logprobs=0))
    assert items[-1].finish_reason == "stop" and target.is_eog(items[-1].token)
    assert items[-1].logprobs.token == items[-1].token and items[-1].logprobs.top == ()
    # stream=True keeps yielding bare strings
    pieces = list(generate(prompt, target, draft, stream=True, **kw))
    assert all(isinstance(p, str) and p for p in pieces) and "".join(pieces) == full.text


def test_stream_generate_with_no_tokens_and_bad_arguments(smollm2_pair):
    target, _ = smollm2_pair
    items = list(stream_generate("Hi", target, max_tokens=0))
    assert len(items) == 1 and items[0].finish_reason == "length" and items[0].text == ""
    with pytest.raises(pyllamaspec.InvalidArgumentError, match="stream"):
        stream_generate("Hi", target, stream=True)
    with pytest.raises(pyllamaspec.InvalidArgumentError, match="temprature"):
        stream_generate("Hi", target, temprature=0.5)


@pytest.mark.parametrize("prompt,match", [
    ([{"role": "user", "content": "hi"}], "messages"), ({"role": "user"}, "dict"), (None, "NoneType"),
    (42, "int"), ([], "non-empty"), ([1, "a"], r"prompt\[1\]"), ([1.5], r"prompt\[0\]"), (b"hi", "bytes")])
def test_wrong_prompt_types_are_our_error(prompt, match):
    with pytest.raises(pyllamaspec.InvalidArgumentError, match=match):
        generate(prompt, "/does/not/exist.gguf")
    with pytest.raises(pyllamaspec.InvalidArgumentError, match=match):
        stream_generate(prompt, "/does/not/exist.gguf")


def test_greedy_pick_is_the_first_largest_entry():
    """The core's argmax (csrc/engine/sampling.cpp: eight lanes) is the first largest entry:
    the lowest id on ties wherever they fall among the lanes and the tail, NaNs never win, a
    row of -inf gives 0; numpy's nanargmax is the reference."""
    rng = np.random.default_rng(11)
    rows = []
    for n in [1, 2, 7, 8, 9, 15, 16, 17, 31, 262144]:
        x = rng.normal(0.0, 3.0, n).astype(np.float32)
        rows.append(x)
        for a, b in [(0, n - 1), (n - 1, n // 2), (3, 11), (5, 13)]:   # ties in different lanes
            if max(a, b) < n and a != b:
                y = x.copy()
                y[a] = y[b] = x.max() + 1.0
                rows.append(y)
        y = x.copy()
        y[rng.integers(0, n, max(1, n // 5))] = np.nan
        if not np.isnan(y).all():
            rows.append(y)
    rows.append(np.full(13, -np.inf, np.float32))
    ramp = np.zeros(40, np.float32)
    ramp[[9, 17, 25]] = 2.0                                         # three ties in one lane
    rows.append(ramp)
    for x in rows:
        got = Sampler(len(x), SamplingParams(temperature=0.0)).sample(x)[0]
        assert got == int(np.nanargmax(x)), (len(x), got, int(np.nanargmax(x)))


def chain_reference(x: np.ndarray, top_k: int, top_p: float, min_p: float, temp: float) -> np.ndarray:
    """llama.cpp's default chain, written from its description (sampling.cpp's header): top-k
    (by logit, the lower id first on ties), top-p over the softmax of the kept logits (the
    shortest prefix reaching p), min-p against the best logit, then the softmax at temp."""
    order = sorted(range(len(x)), key=lambda i: (-x[i], i))
    keep = order[:top_k] if 0 < top_k < len(x) else order
    lg = x[keep].astype(np.float64)
    if top_p < 1.0:
        w = np.exp(lg - lg.max())
        cum = np.cumsum(w / w.sum())
        n = int(np.searchsorted(cum, top_p) + 1)
        keep, lg = keep[:n], lg[:n]
    if min_p > 0.0:
        ok = lg >= lg.max() + np.log(min_p)
        keep, lg = [k for k, o in zip(keep, ok) if o], lg[ok]
    e = np.exp((lg - lg.max()) / temp)
    out = np.zeros(len(x))
    out[keep] = e / e.sum()
    return out


@pytest.mark.parametrize("top_k", [1, 3, 40, 256, 257, 5000])
def test_adjusted_distribution_follows_the_chain(top_k):
    """The core's kept set and probabilities (Sampler.probs) against chain_reference, with ties
    across the top-k boundary and -inf entries; top_k up to 256 takes the one-pass selection
    (csrc/engine/sampling.cpp: top_n), larger the partial sort: both must give the same set."""
    rng = np.random.default_rng(top_k)
    for trial in range(6):
        V = [300, 1000, 6000][trial % 3]
        x = np.round(rng.normal(0.0, 2.0, V), 1).astype(np.float32)      # rounded: many ties
        x[rng.integers(0, V, V // 10)] = -np.inf
        for top_p, min_p, temp in [(1.0, 0.0, 1.0), (0.9, 0.0, 0.7), (0.95, 0.05, 0.8), (1.0, 0.2, 1.5)]:
            got = Sampler(V, SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p)).probs(x)
            want = chain_reference(x, top_k, top_p, min_p, temp)
            assert np.array_equal(got > 0, want > 0), (top_k, top_p, min_p, trial)
            assert np.abs(got - want).max() < 1e-6


def test_top_softmax_is_numpys():
    """engine.sampling.top_softmax (a greedy tree's children, speculation/tree/draft.py): the k
    likeliest ids, the lowest first on ties, and their full-softmax probabilities."""
    from pyllamaspec.engine.sampling import top_softmax
    rng = np.random.default_rng(3)
    for V, k in [(50, 1), (50, 4), (6000, 16), (7, 7), (7, 20)]:
        x = np.round(rng.normal(0.0, 2.0, V), 1).astype(np.float32)
        ids, pr = top_softmax(x, k)
        want = sorted(range(V), key=lambda i: (-x[i], i))[:min(k, V)]
        soft = np.exp(x.astype(np.float64) - x.max())
        soft /= soft.sum()
        assert ids.tolist() == want
        assert np.allclose(pr, soft[want], rtol=1e-5, atol=0)
