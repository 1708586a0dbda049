"""Many generations on one Model (issue 23): threads sharing a Model each get a sequence of
their own (never mixed, never an exception), interleaved streams in one thread, a cancel that
stops its own generation only, and generate([...]) decoding several prompts together with the
output of one at a time (greedy: the same tokens; sampled with a seed: the same text) and the
batch's cost model choosing shorter drafts when more sequences share a round.

Exactness: the tiny models here are Q4_1, whose CPU kernels give a sequence the same logits in
a batch of a few tokens as alone (test_sequences.py), so one at a time and together compare
token for token.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import models
import pyllamaspec
from pyllamaspec import Cancel, Model, generate, stream_generate
from pyllamaspec.errors import InvalidArgumentError
from pyllamaspec.speculation.batch import BatchRound
from pyllamaspec.speculation.batch_policy import BatchPolicy
from pyllamaspec.speculation.cost_model import DraftPolicy, cost_at
from pyllamaspec.speculation.decoder import Decoder
from pyllamaspec.speculation.pair_stats import PairStats, registry

Q = dict(dtype="Q4_1", n_embd=64, n_ff=96, n_vocab=64)
PROMPTS = [[1, 5, 9, 2], [3, 3, 7], [8, 1, 4, 4, 6, 2], [2, 9], [7, 7, 7, 1, 5], [4, 6, 8]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("parallel")
    models.write_llama_gguf(d / "t.gguf", n_layer=2, seed=11, **Q)
    models.write_llama_gguf(d / "d.gguf", n_layer=1, seed=11, **Q)   # agrees often, not always
    return d / "t.gguf", d / "d.gguf"


def _models(files, n_ctx=512):
    return Model(files[0], n_ctx=n_ctx, n_threads=1), Model(files[1], n_ctx=n_ctx, n_threads=1)


def _alone(files, prompts, drafter="model", **kw):
    """Each prompt on freshly loaded models, one at a time."""
    out = []
    for p in prompts:
        t, d = _models(files)
        with t, d:
            out.append(generate(p, t, d if drafter == "model" else drafter, **kw).tokens)
    return out


GREEDY = dict(max_tokens=24, temperature=0, n_draft=4)


def test_threads_sharing_a_model_never_mix(files):
    """4 threads x 20 generations on one target and one draft Model: every output equals the
    same prompt's output alone, no errors."""
    want = _alone(files, PROMPTS, **GREEDY)
    target, draft = _models(files)
    errors, wrong = [], []

    def worker(w: int) -> None:
        for j in range(20):
            i = (w + j) % len(PROMPTS)
            try:
                r = generate(PROMPTS[i], target, draft, **GREEDY)
                if r.tokens != want[i]:
                    wrong.append((w, j, i))
            except Exception as e:          # noqa: BLE001 - counted, the test says which
                errors.append(repr(e))

    with target, draft:
        ts = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors[:3]
        assert not wrong, wrong[:5]
        assert not any(s.leased for s in target._pool.all() + draft._pool.all())
        assert draft.output_ids is None                    # the shared head given back by the last


def test_interleaved_streams_in_one_thread(files):
    want = _alone(files, PROMPTS[:2], **GREEDY)
    target, draft = _models(files)
    with target, draft:
        a = stream_generate(PROMPTS[0], target, draft, **GREEDY)
        b = stream_generate(PROMPTS[1], target, draft, **GREEDY)
        got = [[], []]
        live = [a, b]
        while live:
            for i, g in enumerate([a, b]):
                if g in live:
                    r = next(g, None)
                    if r is None:
                        live.remove(g)
                    elif r.finish_reason is None:
                        got[i].append(r.token)
        assert got == want


def test_a_cancel_stops_its_own_generation_only(files):
    want = _alone(files, [PROMPTS[2]], max_tokens=200, temperature=0, n_draft=4)[0]
    target, draft = _models(files)
    with target, draft:
        cancel = Cancel()
        res = {}

        def long_one():
            res["a"] = generate(PROMPTS[0], target, draft, max_tokens=400, temperature=0, cancel=cancel)

        t = threading.Thread(target=long_one)
        t.start()
        threading.Timer(0.05, cancel.set).start()
        b = generate(PROMPTS[2], target, draft, max_tokens=200, temperature=0, n_draft=4)
        t.join()
        assert res["a"].finish_reason in ("cancelled", "length")
        assert b.tokens == want and b.finish_reason == "length"


def test_batch_equals_one_at_a_time_greedy(files):
    want = _alone(files, PROMPTS, **GREEDY)
    target, draft = _models(files)
    with target, draft:
        rs = generate(PROMPTS, target, draft, **GREEDY)
        assert [r.tokens for r in rs] == want
        assert all(r.stats.mean_batch > 1.5 for r in rs)   # their rounds shared evaluations
        # fewer at once: the others wait their turn, the same output
        rs = generate(PROMPTS, target, draft, n_parallel=2, **GREEDY)
        assert [r.tokens for r in rs] == want


@pytest.mark.parametrize("drafter", ["ngram", None])
def test_batch_equals_one_at_a_time_other_drafters(files, drafter):
    want = _alone(files, PROMPTS[:4], drafter=drafter, **GREEDY)
    target = Model(files[0], n_ctx=512, n_threads=1)
    with target:
        rs = generate(PROMPTS[:4], target, drafter, **GREEDY)
        assert [r.tokens for r in rs] == want


def test_batch_sampled_with_a_seed_equals_one_at_a_time(files):
    """A seed with sampling fixes the draft lengths (as for one prompt): each prompt's text is
    the one its own call gives with that seed."""
    kw = dict(max_tokens=20, temperature=0.9, seed=7, n_draft=3)
    want = _alone(files, PROMPTS[:4], **kw)
    target, draft = _models(files)
    with target, draft:
        rs = generate(PROMPTS[:4], target, draft, **kw)
    assert [r.tokens for r in rs] == want
    assert len({tuple(w) for w in want}) > 1


def test_batch_of_text_prompts_and_arguments(files):
    target, draft = _models(files)
    with target, draft:
        with pytest.raises(InvalidArgumentError, match="stream"):
            generate(["a", "b"], target, draft, stream=True)
        with pytest.raises(InvalidArgumentError, match="n_parallel"):
            generate([[1, 2], [3, 4]], target, n_parallel=0)
        one = generate([1, 2, 3], target, max_tokens=4, temperature=0)     # a flat list: one prompt
        assert isinstance(one, pyllamaspec.GenerationResult)
        rs = generate([[1, 2, 3], [4, 5]], target, max_tokens=4, temperature=0)
        assert [len(r.tokens) for r in rs] == [4, 4] and rs[0].tokens == one.tokens


def test_prefix_copied_from_another_sequence(files):
    """A prompt that another (busy) sequence holds a prefix of is not evaluated again: the
    cells are shared."""
    target, draft = _models(files)
    with target, draft:
        base = [1, 5, 9, 2, 8, 3, 3, 6, 1, 2]
        s = target.lease(base)
        s.eval(base, logits="none")                          # held by a running generation
        r = generate(base + [4, 4], target, draft, max_tokens=4, temperature=0)
        s.release()
        assert r.stats.n_reused == len(base)


def test_batch_policy_speculates_less_as_the_batch_grows():
    """More sequences per round, less room to speculate: with a target whose cost grows with
    the tokens it verifies (a CPU), the chosen draft length falls as the batch grows, to plain
    decoding; with a flat cost (a GPU at these sizes) it drafts at every size, longer."""
    def k_for(n_seq: int, per_token: float) -> int:
        st = PairStats(target_costs={n: 0.010 + per_token * (n - 1) for n in range(1, 400)},
                       draft_step_costs={s: 0.002 + 0.0003 * (s - 1) for s in range(1, 17)})
        return BatchPolicy(st, 16).best_k([0.8] * n_seq, [16] * n_seq, 0)
    cpu = [k_for(s, 0.002) for s in (1, 2, 4, 8, 16)]
    assert cpu == sorted(cpu, reverse=True) and cpu[0] > cpu[2] > cpu[-1] == 0, cpu   # [2, 2, 1, 0, 0]
    gpu = [k_for(s, 0.00001) for s in (1, 2, 4, 8, 16)]
    assert min(gpu) >= 1 and all(g > c for g, c in zip(gpu, cpu)), gpu   # [4, 4, 3, 2, 1]


def test_cost_estimates_never_make_fewer_tokens_dearer():
    """A slow outlier measured at n (a busy machine) is capped by what a larger batch measured:
    plain decoding of 4 sequences (n = 4), never chosen while its estimate is 289 ms, would
    never be measured again (seen: a -np 4 server drafting with a draft as dear as its target)."""
    costs = {1: 0.006, 4: 0.289, 5: 0.0345, 8: 0.0434}
    assert cost_at(costs, 4) == pytest.approx(0.0345)
    assert cost_at(costs, 3) <= 0.0345 and cost_at(costs, 8) == pytest.approx(0.0434)
    assert cost_at({1: 0.006, 4: 0.289}, 4) == pytest.approx(0.289)     # negative control: nothing larger
    st = PairStats(target_costs=costs, draft_step_costs={4: 0.03})
    p = BatchPolicy(st, 16)
    p.n_step_obs = BatchPolicy.CONFIDENT
    assert p.choose([0.9] * 4, [16] * 4) == 0


def _ref_best_k(st: PairStats, alphas, caps, n_plain: int, pending: int, c_up: float) -> int:
    """The draft length with the most expected tokens per second, searched from the module
    docstring's formulas (cost_at on the measurements, no memo)."""
    def rate(k: int) -> float:
        ks = [min(k, c) for c in caps]
        tokens = n_plain + sum(j + 1.0 if a >= 1 else (1 - a ** (j + 1)) / (1 - a) for a, j in zip(alphas, ks))
        n_draft = sum(j > 0 for j in ks)
        cost = cost_at(st.target_costs, n_plain + sum(j + 1 for j in ks))
        if n_draft:
            cost += max(ks) * cost_at(st.draft_step_costs, n_draft) + pending * c_up
        return tokens / cost
    best = 0
    for k in range(1, min(16, max(caps)) + 1):
        if rate(k) > rate(best) * (1 + 1e-9):
            best = k
    return best


def test_batch_policy_choose_equals_an_exhaustive_search():
    """choose() looks each cost up once a round (a memo) and skips the search with the real
    acceptance when drafts always right could not pay: its pick is the exhaustive search's over
    random measurements, and a change of the measurements between rounds changes it (a memo
    kept across rounds would not)."""
    rng = np.random.default_rng(7)
    picked = set()
    for _ in range(300):
        per_row, base = rng.uniform(0.00001, 0.004), rng.uniform(0.004, 0.02)
        st = PairStats(target_costs={n: base + per_row * (n - 1) * rng.uniform(0.9, 1.1)
                                     for n in sorted(rng.choice(np.arange(1, 80), 6, replace=False))},
                       draft_step_costs={s: rng.uniform(0.0005, 0.01) * s ** 0.5 for s in range(1, 9)})
        n_seq = int(rng.integers(1, 8))
        alphas = [float(a) for a in rng.uniform(0.2, 1.0, n_seq)]
        caps = [int(c) for c in rng.integers(0, 17, n_seq)]
        n_plain, pending = int(rng.integers(0, 3)), int(rng.integers(0, 64))
        p = BatchPolicy(st, 16)
        p.n_step_obs = BatchPolicy.CONFIDENT
        p.observe_catch_up(64, 64 * rng.uniform(0.0001, 0.002))
        want = _ref_best_k(st, alphas, caps, n_plain, pending, p.c_catch_up)
        got = p.choose(alphas, caps, n_plain, pending)
        if want > 0 or _ref_best_k(st, [1.0] * n_seq, caps, n_plain, 0, 0.0) == 0:
            assert got == want, (st, alphas, caps, n_plain, pending)
        else:
            assert 0 <= got <= BatchPolicy.PROBE_K       # plain, or a probe
        picked.add(want)
        st.target_costs.update({n: 0.010 for n in range(1, 200)})     # verification now flat
        st.draft_step_costs.update({s: 0.0001 for s in range(1, 9)})
        if max(caps) > 0:
            assert p.choose(alphas, caps, n_plain, 0) == _ref_best_k(st, alphas, caps, n_plain, 0, p.c_catch_up) > 0
    assert len(picked) >= 4, picked                       # the draws reach several lengths


def _cpu_pair(step: float) -> PairStats:
    return PairStats(target_costs={n: 0.010 + 0.002 * (n - 1) for n in range(1, 200)},
                     draft_step_costs={s: step * (1 + 0.5 * (s - 1)) for s in range(1, 9)})


def test_plain_sure_follows_the_cost_model():
    """A draft as dear as the target (SmolLM2 Q8_0 for its Q4_1): a batch of 4 surely decodes
    plainly once the draft's cost is believed; a cheap draft (or one not measured enough) keeps
    drafting possible."""
    dear, cheap = BatchPolicy(_cpu_pair(0.010), 16), BatchPolicy(_cpu_pair(0.0005), 16)
    assert not dear.plain_sure(4, 16)                    # not measured CONFIDENT times yet
    dear.n_step_obs = cheap.n_step_obs = BatchPolicy.CONFIDENT
    assert dear.plain_sure(4, 16) and not cheap.plain_sure(4, 16)
    assert dear.choose([1.0] * 4, [16] * 4) == 0 and cheap.choose([0.8] * 4, [16] * 4) > 0


def _draft_later_flags(monkeypatch) -> list[bool]:
    """Each Decoder.prefill's draft_later from now on (the list fills as generations start)."""
    flags: list[bool] = []
    prefill = Decoder.prefill

    def spy(self, prompt, fresh=False, progress=None, draft_later=False, target_later=False, **kw):
        flags.append(draft_later)
        return prefill(self, prompt, fresh, progress, draft_later, target_later, **kw)
    monkeypatch.setattr(Decoder, "prefill", spy)
    return flags


def test_joining_a_plain_batch_leaves_the_drafts_prompt_for_later(files, monkeypatch):
    """A generation joining a batch its cost model surely decodes plainly does not evaluate its
    prompt in the draft model (Drafter.prefill_later): rounds that draft after all catch up
    first (the last tokens of the prompt), and the output is the target's, token for token."""
    want = _alone(files, PROMPTS, **GREEDY)
    flags = _draft_later_flags(monkeypatch)
    target, draft = _models(files)
    with target, draft:
        rs = generate(PROMPTS, target, draft, **GREEDY)          # negative control: nothing measured yet
        assert [r.tokens for r in rs] == want and not any(flags)
        flags.clear()
        monkeypatch.setattr(BatchRound, "draft_later", lambda self, dec, n_seq: n_seq > 1)
        rs = generate(PROMPTS, target, draft, cache_prompt=False, adaptive=False, **GREEDY)   # drafts n_draft
        assert [r.tokens for r in rs] == want                    # drafted anyway: after the catch-up
        assert flags == [False] + [True] * (len(PROMPTS) - 1)
        assert sum(r.stats.drafted for r in rs) > 0


def test_prompts_joining_a_batch_are_evaluated_with_its_round(files, monkeypatch):
    """A short prompt joining running generations is evaluated in the next plain round's target
    evaluation (llama-server's continuous batching): no evaluation of its own, the rows of its
    round only, and the output of one at a time. A round that verifies drafts evaluates it
    alone first (that evaluation is the cost model's measurement of n verified tokens)."""
    plain = dict(max_tokens=24, temperature=0)
    want = _alone(files, PROMPTS, drafter=None, **plain)
    target, draft = _models(files)
    parts = []
    decode = Model.decode
    monkeypatch.setattr(Model, "decode", lambda self, ps, out=None: parts.append([p[2] for p in ps]) or decode(self, ps, out))
    with target, draft:
        rs = generate(PROMPTS, target, None, n_parallel=2, **plain)      # pairs: the second joins the first
        assert [r.tokens for r in rs] == want
        merged = [lg for ps in parts for lg in ps if not isinstance(lg, str)]
        assert len(merged) >= len(PROMPTS) // 2 and set(merged) == {1}, parts
        parts.clear()
        rs = generate(PROMPTS, target, draft, n_parallel=2, adaptive=False, **GREEDY)   # every round drafts
        assert [r.tokens for r in rs] == _alone(files, PROMPTS, **GREEDY)
        assert not [lg for ps in parts for lg in ps if not isinstance(lg, str)]
        with target.lease() as a, target.lease() as b:
            a.clear(), b.clear()
            rows = target.decode([(a, [1, 2, 3, 4], 2)])[0]           # an int: rows of the last n tokens
            assert rows.shape == (2, target.n_vocab)
            assert np.array_equal(rows, target.decode([(b, [1, 2, 3, 4], "all")])[0][2:])
            with pytest.raises(InvalidArgumentError):
                target.decode([(a, [1, 2], 3)])


def test_batch_policy_counts_the_drafts_catch_up():
    """Drafting after plain rounds first costs the draft models' catch-up on what those rounds
    decoded: a draft that pays in steady drafting (k > 0 without catch-up) does not pay for a
    round that must first catch up 32 tokens a sequence, so plain and drafting rounds do not
    alternate where drafting barely pays."""
    st = PairStats(target_costs={n: 0.016 + 0.0015 * (n - 4) for n in range(1, 200)},
                   draft_step_costs={s: 0.001 * s for s in range(1, 9)})
    p = BatchPolicy(st, 16)
    p.n_step_obs = BatchPolicy.CONFIDENT
    p.observe_catch_up(64, 0.032)                 # 0.5 ms a token
    assert p.choose([0.9] * 4, [16] * 4) > 0      # nothing to catch up on: drafting pays
    assert p.choose([0.9] * 4, [16] * 4, pending=4 * 32) == 0
    assert not p.plain_sure(4, 16)                # it would pay once caught up: probes go on


def _probing_pair() -> BatchPolicy:
    """A cheap draft with poor acceptance at 4 sequences: plain decoding wins, yet drafts
    always right would pay, so the policy probes now and then."""
    p = BatchPolicy(_cpu_pair(0.0005), 16)
    p.n_step_obs = BatchPolicy.CONFIDENT
    p.observe_catch_up(64, 0.032)                 # 0.5 ms a token
    return p


def test_batch_probes_pay_for_their_catch_up_and_back_off():
    """A probe of a batch decoding plainly costs its drafting, its extra rows and the draft
    models' catch-up on what plain rounds decoded (4 sequences x 32 tokens at 0.5 ms: 64 ms,
    several plain rounds' worth); it comes once plain rounds took probe / (EXPLORE / backoff),
    and each probe that plain decoding wins again doubles the wait, so probing costs at most
    EXPLORE of the time. Without the catch-up in its cost (pending 0, the negative control),
    the first probe comes more than twice as early."""
    alphas, caps = [0.3] * 4, [16] * 4

    def probes(pending: int) -> tuple[list[int], float]:
        p = _probing_pair()
        assert p.best_k(alphas, caps, 0, pending) == 0
        picks = [p.choose(alphas, caps, pending=pending) for _ in range(4000)]
        k = max(picks)
        return [i for i, x in enumerate(picks) if x], p.probe_cost(k, 4, 0, pending)

    with_catch_up, cost = probes(4 * 32)
    without, cost0 = probes(0)
    assert abs(cost - cost0 - 4 * 32 * 0.0005) < 1e-12
    plain_round = cost_at(_cpu_pair(0.0005).target_costs, 4)
    gaps = np.diff([-1] + with_catch_up)
    first = int(np.ceil(cost / BatchPolicy.EXPLORE / plain_round - 1e-9))
    for i, mult in enumerate((1, 2, 4)):                    # (+-1: float sums of round times)
        assert abs(gaps[i] - mult * first) <= 1
    assert len(with_catch_up) * cost <= BatchPolicy.EXPLORE * plain_round * 4000
    assert 0 < 2 * without[0] <= with_catch_up[0] and len(without) > len(with_catch_up)


def test_a_batch_decoding_plainly_leaves_a_joining_drafts_prompt_for_later(files):
    """BatchRound.draft_later: a generation joining a batch whose last round decoded plainly
    leaves its draft model's prompt to the catch-up; one joining a drafting batch, or a batch
    not measured yet, evaluates it at once."""
    target, draft = _models(files)
    with target, draft:
        rnd = BatchRound(target)
        dec = Decoder(target, draft, pyllamaspec.SamplingParams(temperature=0), pyllamaspec.DraftParams(n_draft=4))
        try:
            pol = rnd.policy(dec)
            assert not rnd.draft_later(dec, 2)                           # nothing chosen yet
            pol.stats.target_costs.update({n: 0.010 + 0.002 * n for n in range(1, 40)})
            pol.stats.draft_step_costs.update({2: 0.0005})
            assert pol.choose([0.9, 0.9], [4, 4]) > 0 and not rnd.draft_later(dec, 2)
            assert pol.choose([0.01, 0.01], [4, 4]) == 0 and rnd.draft_later(dec, 2)
        finally:
            dec.close()


def test_a_generation_alone_after_plain_rounds_leaves_its_drafts_prompt_for_later(files, monkeypatch):
    """One slot (the server's -np 1, generate([...], n_parallel=1)): once the pair's last round
    alone chose plain decoding by measured costs, the next generation leaves its draft model's
    prompt to a catch-up (PairStats.plain_now), and its output is still the target's. Before
    any round has chosen, the prompt is evaluated at once (the negative control)."""
    want = _alone(files, PROMPTS, **GREEDY)
    flags = _draft_later_flags(monkeypatch)
    target, draft = _models(files)
    with target, draft:
        st = registry.lookup(target, draft.path)
        assert not st.plain_now
        st.draft_cost.seconds, st.target_costs[1] = 1.0, 0.001      # a draft far too slow
        st.draft_cost.n_obs = DraftPolicy.CONFIDENT
        rs = generate(PROMPTS, target, draft, n_parallel=1, **GREEDY)
        assert [r.tokens for r in rs] == want
        assert flags == [False] + [True] * (len(PROMPTS) - 1) and st.plain_now
        assert sum(r.stats.drafted for r in rs) == 0


def _sure_pair(target_costs: dict[int, float], c_draft: float) -> DraftPolicy:
    """A one-sequence cost model with the target's costs given, a draft cost believed (8
    measurements) and an acceptance of 0.99 (one model at two precisions)."""
    st = PairStats(target_costs=target_costs)
    st.draft_cost.seconds, st.draft_cost.n_obs = c_draft, 8
    p = DraftPolicy(16, stats=st)
    p.acc, p.rej = 99.0, 1.0
    return p


def test_drafting_rounds_leave_room_for_a_plain_one():
    """c_target(1) is measured by plain rounds only: one slow plain round (a busy machine: 8.3 ms
    where the target takes 5.4) made a draft as dear as SmolLM2's Q8_0 look worth drafting, and
    with no plain round left to correct it, a -np 1 server drafted in every round. While drafting
    wins, a plain round comes once drafting rounds took c_target(1) / EXPLORE; its measurement
    (believed at once, being faster) ends the drafting."""
    p = _sure_pair({1: 0.0083, 3: 0.0145, 4: 0.0166, 5: 0.0203, 17: 0.0463}, 0.0054)
    st = p.stats
    assert p.choose(16) == 0                               # a generation's first round is plain
    p.observe_target(1, 0.0083)                            # ... and measures the slow pace
    picks = [p.choose(16) for _ in range(200)]
    k = picks[0]
    assert k > 0 and set(picks) == {0, k}
    every = int(np.ceil(0.0083 / DraftPolicy.EXPLORE / (p.draft_cost(k) + p.target_cost(k + 1)) - 1e-9))
    plain = [i for i, x in enumerate(picks) if x == 0]
    assert plain[0] == every - 1 and set(np.diff(plain)) == {every}     # EXPLORE of the drafting time
    p.observe_target(1, 0.0054)                            # the plain round: the target's true pace
    assert p.choose(16) == 0 and st.plain_now


def test_a_generation_measures_the_targets_pace_before_drafting():
    """A token's cost grows with the context (SmolLM2 on 2 cores: 7 ms at 10 tokens, 18 at 300):
    the c_target(1) a generation leaves at its end, 17 ms, would make a draft as dear as the
    target (its Q8_0) look worth drafting with at the next one's start. Its first round is plain
    and measures 6 ms (believed at once), and plain decoding stays. Negative control: without that
    round it drafts."""
    def policy() -> DraftPolicy:
        return _sure_pair({1: 0.017, 5: 0.0203, 17: 0.0463}, 0.0054)
    p = policy()
    assert p.choose(16) == 0
    p.observe_target(1, 0.006)
    assert [p.choose(16) for _ in range(20)] == [0] * 20
    control = policy()
    control.recheck = False
    assert control.choose(16) > 0


def test_batch_drafting_rounds_leave_room_for_a_plain_one():
    """A batch's plain cost measured high once (a busy moment: 4 sequences' plain round at 30 ms
    where it takes 12) made a draft as dear as the target look worth drafting with, and only
    plain rounds measure it: a -np 4 server drafted for good. While drafting wins, a plain round
    comes once drafting rounds took its cost / EXPLORE; its measurement ends the drafting.
    Negative control: without those rounds (EXPLORE 0) it never decodes plainly."""
    def policy() -> BatchPolicy:
        st = PairStats(target_costs={4: 0.030, 8: 0.034, 20: 0.046, 24: 0.050},
                       draft_step_costs={4: 0.006})
        p = BatchPolicy(st, 16)
        p.n_step_obs = BatchPolicy.CONFIDENT
        return p
    p = policy()
    picks = [p.choose([0.99] * 4, [16] * 4) for _ in range(300)]
    k = picks[0]
    assert k > 0 and set(picks) == {0, k}
    plain = [i for i, x in enumerate(picks) if x == 0]
    every = int(np.ceil(0.030 / BatchPolicy.EXPLORE / p.round_cost(k, [16] * 4, 0) - 1e-9))
    assert plain[0] == every - 1 and set(np.diff(plain)) == {every}
    p.observe_target(4, 0.012)                             # the plain round: the batch's true pace
    assert p.choose([0.99] * 4, [16] * 4) == 0
    control = policy()
    control.EXPLORE = 0.0
    assert 0 not in [control.choose([0.99] * 4, [16] * 4) for _ in range(300)]


def test_a_slow_plain_round_is_measured_again_before_drafting_on_its_word():
    """A plain round 8x slower than the target's pace (a busy machine: 50 ms where SmolLM2 takes
    6) lifts c_target(1) enough that a draft as dear as the target looks worth drafting with;
    the next round is plain instead, and its measurement (believed at once, being faster) keeps
    plain decoding. A sustained slowdown is believed (the recheck is slow too). Negative
    control: without the recheck, that slow round would start drafting."""
    def policy() -> DraftPolicy:
        return _sure_pair({1: 0.0060, 4: 0.0190, 17: 0.0520}, 0.0053)
    p = policy()
    assert p.choose(16) == 0
    p.observe_target(1, 0.050)
    assert p.recheck and p.choose(16) == 0
    p.observe_target(1, 0.0061)
    assert not p.recheck and p.choose(16) == 0 and p.target_cost(1) == pytest.approx(0.0061)
    control = policy()
    control.observe_target(1, 0.050)
    control.recheck = False
    assert control.choose(16) > 0
    for _ in range(12):
        p.observe_target(1, 0.050)                          # slow, and staying slow: believed, slowly
    assert not p.recheck and p.c_target[1] > 0.040          # (target_cost caps it at c_target(4))


@pytest.mark.cpu_kernels
@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_a_sequences_logits_do_not_depend_on_what_shares_its_evaluation(files, kv):
    """ggml's CPU flash attention goes row by row (F16 queries) below 64 query rows and tiled
    (F32 queries, blocks of 64 cells) from 64 on: 8 prompts of 10 tokens in one evaluation (80
    rows) would not round as each alone (seen: a -np 8 server answering one question two ways).
    The core then attends in chunks below 64 rows: every row bit for bit as alone, in a prompt
    wave and in a verify round of 8 x 9 rows. Negative control: a prompt of 70 tokens is tiled
    alone too, and after another sequence's 30 cells its blocks of 64 shift: its logits move
    (with an F16 cache; on F32 ggml's two paths gave the same sums here)."""
    rng = np.random.default_rng(3)
    target = Model(files[0], n_ctx=1024, n_threads=1, n_seq_max=9, type_k=kv, type_v=kv)

    def alone(toks: list[int]) -> np.ndarray:
        with target.lease() as s:
            s.clear()
            return target.decode([(s, toks, "all")])[0].copy()

    with target:
        prompts = [[int(t) for t in rng.integers(2, 64, 10)] for _ in range(8)]
        rounds = [[int(t) for t in rng.integers(2, 64, 9)] for _ in range(8)]
        want = [alone(p) for p in prompts]
        want_round = [alone(p + r)[len(p):] for p, r in zip(prompts, rounds)]
        seqs = [target.lease() for _ in range(8)]
        for s in seqs:
            s.clear()
        got = target.decode([(s, p, "all") for s, p in zip(seqs, prompts)])
        assert all(np.array_equal(w, g) for w, g in zip(want, got))
        got = target.decode([(s, r, "all") for s, r in zip(seqs, rounds)])
        assert all(np.array_equal(w, g) for w, g in zip(want_round, got))
        for s in seqs:
            s.release()
        long = [int(t) for t in rng.integers(2, 64, 70)]
        if kv == "f16":
            assert not np.array_equal(alone(long)[:63], alone(long[:63]))   # tiled vs row by row


@pytest.mark.cpu_kernels
def test_a_long_prompt_after_anothers_cells_gives_its_logits_alone():
    """A prompt of 64 tokens or more takes ggml's tiled CPU attention alone too, which reads
    cells in blocks of 64: its cells sit at their positions mod 64, in pages of their own
    (KvCells::find_free), so after another sequence's 30 or 100 cells its blocks are those it
    has alone (real SmolLM2: before, 0.92 apart at most over 70 tokens). Negative control: on this
    model the tiled path and the row-by-row one round apart (the first 63 of 70 tokens)."""
    model = Model(models.real_model_or_skip("smollm2"), n_ctx=2048, n_threads=2, n_seq_max=4)
    rng = np.random.default_rng(1)

    def alone(toks: list[int]) -> np.ndarray:
        model.clear()
        with model.lease() as s:
            s.clear()
            return model.decode([(s, toks, "all")])[0].copy()

    with model:
        for before, n in ((30, 70), (100, 200)):
            long = [int(t) for t in rng.integers(100, 40000, n)]
            want = alone(long)
            model.clear()
            with model.lease() as a, model.lease() as b:
                a.clear(), b.clear()
                model.decode([(a, [int(t) for t in rng.integers(100, 40000, before)], "last")])
                assert np.array_equal(model.decode([(b, long, "all")])[0], want), (before, n)
        assert not np.array_equal(alone(long)[:63], alone(long[:63]))


_ONE_ROW = """
import sys
import numpy as np
from pyllamaspec import Model

rng = np.random.default_rng(5)
toks = lambda n: [int(t) for t in rng.integers(2, 64, n)]
m = Model(sys.argv[1], n_ctx=2048, n_threads=2, n_seq_max=2, type_k=sys.argv[2], type_v=sys.argv[2])

def steps(seq, ids):                          # one token an evaluation: a decoding sequence's rows
    return np.stack([m.decode([(seq, [t], "all")])[0][0] for t in ids])

def alone(prompt, ids):                       # the prompt in the same two evaluations as beside's
    m.clear()
    with m.lease() as b:
        m.decode([(b, prompt[:60], "none")])
        m.decode([(b, prompt[60:], "none")])
        return steps(b, ids)

def beside(prompt, ids):                      # another's 440 cells between its first 60 and the rest
    m.clear()
    with m.lease() as b, m.lease() as a:
        m.decode([(b, prompt[:60], "none")])
        m.decode([(a, toks(440), "none")])
        m.decode([(b, prompt[60:], "none")])
        return steps(b, ids)

with m:
    for n in (70, 300):
        prompt, ids = toks(n), toks(12)
        print(n, int(np.array_equal(alone(prompt, ids), beside(prompt, ids))))
"""


@pytest.mark.cpu_kernels
@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_a_decoding_rows_logits_do_not_depend_on_the_caches_other_cells(files, kv):
    """One query row: ggml's CPU flash attention splits its cells over the threads from 512 on,
    whose partial sums then depend on where its cells sit. A sequence of up to 256 tokens alone
    reads 256 cells, row by row; beside another sequence's 440 cells it read 768 and split, and
    its greedy text parted from one at a time's (real SmolLM2, 4 chats x 64 tokens, 2 threads:
    token 51 of the first). A second, fully masked row keeps the row-by-row path (the core's
    Graph::FA_ROW_ALONE): the same rows bit for bit. Negative control: a sequence of 300 tokens
    reads 512 cells alone, split too, and beside the other its cells sit elsewhere: its rows move.
    2 threads whatever the machine's load (with one, nothing splits). The control moves with an
    F16 cache; on F32 the split sums came out the same here."""
    env = dict(os.environ, PYLLAMASPEC_THREAD_CAP="0")
    out = subprocess.run([sys.executable, "-c", _ONE_ROW, str(files[0]), kv], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    same = dict(line.split() for line in out.stdout.splitlines())
    assert same["70"] == "1", out.stdout
    if kv == "f16":
        assert same["300"] == "0", out.stdout
