"""chat(): conversations through the template, and prefix reuse across calls: a reused Model
evaluates only what follows what its cache holds, target and draft alike, and the output equals
a fresh run's exactly (greedy, CPU).

Exactness needs evaluations that do not depend on how tokens are batched. On this CPU build
they do not for batches below ~40 tokens, but a batch of 64 or more takes another matmul path in
ggml (up to 1.5 logits apart on SmolLM2): a fresh 80-token prompt is then not bit-identical to
63 cached tokens + 17 new ones (nor is it in llama.cpp's prompt cache). So the models here
evaluate in batches of 32 (n_batch), where every split gives the same bits, and what is tested
is that reuse keeps exactly the right tokens in both caches."""
from __future__ import annotations


import numpy as np
import pytest
import tolerances

import pyllamaspec
from pyllamaspec import Cancel, InvalidArgumentError, Model

from conftest import load_reference

N = 12          # tokens per answer: enough to diverge, cheap on a loaded 2-core machine


@pytest.fixture(scope="module")
def smol(smollm2_path):
    with Model(smollm2_path, n_ctx=1024, n_batch=32, n_threads=1) as m:
        yield m


@pytest.fixture(scope="module")
def smol_draft(smollm2_path):
    from pyllamaspec.files.convert import ensure_variant
    with Model(ensure_variant(smollm2_path, "q4_0"), n_ctx=1024, n_batch=32, n_threads=1, tokenizer=False) as d:
        yield d


def _fresh(messages, target, draft, **kw):
    return pyllamaspec.chat(messages, target, draft, max_tokens=N, temperature=0, cache_prompt=False, **kw)


def _reused(messages, target, draft, **kw):
    return pyllamaspec.chat(messages, target, draft, max_tokens=N, temperature=0, **kw)


def _check_cache(target: Model, draft, r) -> None:
    """The caches hold what the bookkeeping says: the target the prompt and answer (but the last
    token, or with the end token the answer left out); a draft model's ids, its cache's tokens."""
    seq = r.prompt_tokens + r.tokens
    cached = target.cached_tokens
    n = min(len(cached), len(seq))
    assert cached[:n] == seq[:n] and n >= len(r.prompt_tokens) - 1
    assert all(target.is_eog(t) for t in cached[n:])        # an accepted draft of the end token
    assert len(target.cached_tokens) == target.n_past
    if isinstance(draft, Model):
        assert len(draft.cached_tokens) == draft.n_past
        assert draft.cached_tokens[:len(r.prompt_tokens) - 1] == r.prompt_tokens[:-1]


@pytest.mark.cpu_kernels
@pytest.mark.parametrize("drafter", ["model", pytest.param("none", marks=pytest.mark.slow),
                                     pytest.param("ngram", marks=pytest.mark.slow)])
def test_multiturn_reuse_equals_fresh(smol, smol_draft, drafter):
    draft = {"none": None, "model": smol_draft, "ngram": "ngram"}[drafter]
    # fixed drafts: the cost model may find plain decoding pays here, and then the draft sees little
    kw = dict(adaptive=False, n_draft=4, p_min=0.0) if drafter == "model" else {}
    msgs = [{"role": "system", "content": "Answer in one short sentence."}]
    for turn, q in enumerate(["What is a cat?", "And a dog?", "Which one is bigger?", None]):
        if q is None:               # the history changes near its start: little to reuse, stale tails dropped
            msgs = [{"role": "system", "content": "Answer in French."}] + msgs[1:-1]
        else:
            msgs.append({"role": "user", "content": q})
        r = _reused(msgs, smol, draft, **kw)
        _check_cache(smol, draft, r)
        if q is None:
            assert 0 < r.stats.n_reused < 10
        elif turn:
            assert r.stats.n_reused > 0.5 * r.stats.n_prompt      # the earlier turns were not evaluated again
            if drafter == "model":
                assert r.stats.n_draft_reused > 0.5 * r.stats.n_prompt
        f = _fresh(msgs, smol, draft, **kw)
        assert f.stats.n_reused == 0
        assert r.tokens == f.tokens and r.message == f.message
        if drafter == "model":      # the draft saw the same text: it drafted and was accepted alike
            assert r.stats.accepted_per_round == f.stats.accepted_per_round and r.stats.drafted > 0
        msgs.append(r.message)


@pytest.mark.cpu_kernels
def test_reuse_after_stop_string_and_cancel(smol, smol_draft):
    msgs = [{"role": "user", "content": "Write the numbers from one to twenty in words."}]
    free = _reused(msgs, smol, smol_draft)
    stop = smol.detokenize(free.tokens[4:6])          # a stop string the answer is sure to reach
    r = _reused(msgs, smol, smol_draft, stop=[stop])
    assert r.finish_reason == "stop" and stop not in r.text and len(r.tokens) < len(free.tokens)
    cancel = Cancel()
    pieces = []
    for p in pyllamaspec.chat(msgs, smol, smol_draft, max_tokens=N, temperature=0, stream=True, cancel=cancel):
        pieces.append(p)
        if len(pieces) == 2:
            cancel.set()
    assert len(pieces) < N
    follow = msgs + [{"role": "assistant", "content": "".join(pieces)}, {"role": "user", "content": "Continue."}]
    r = _reused(follow, smol, smol_draft)
    assert r.stats.n_reused > 0
    assert r.tokens == _fresh(follow, smol, smol_draft).tokens


def test_stream_equals_result(smol):
    msgs = [{"role": "user", "content": "Say hello."}]
    text = "".join(pyllamaspec.chat(msgs, smol, max_tokens=N, temperature=0, stream=True))
    assert text == _reused(msgs, smol, None).message["content"]


def test_llamacpp_answers(smol):
    """Greedy answers equal llama-server's (tests/data/reference/chat_shared_*), the Model reused
    from one conversation to the next: token by token up to the first step whose reference margin
    is a near tie (tests/tolerances.py: another CPU's kernels may choose the runner-up there), the
    whole answer where there is none."""
    for case in load_reference("chat", "smollm2-135m-q4_1")[:3]:
        r = pyllamaspec.chat(case["messages"], smol, max_tokens=32, temperature=0)
        assert r.prompt_tokens == case["prompt_ids"]
        ref = [s["id"] for s in case["gen"]]
        safe = tolerances.first_near_tie(case["gen"])
        if case["finish_reason"] == "stop":
            ref = ref[:-1]                   # the end-of-generation token is not in r.tokens
        assert r.tokens[:safe] == ref[:safe]
        if safe == len(case["gen"]):
            assert r.message == {"role": "assistant", "content": case["content"]}
            assert r.finish_reason == case["finish_reason"]


@pytest.mark.cpu_kernels
def test_model_reuse_prefix(smol):
    ids = smol.tokenize("The quick brown fox jumps over the lazy dog")
    smol.clear()
    full = smol.eval(ids, logits="last").copy()
    assert smol.cached_tokens == ids
    assert smol.reuse_prefix(ids[:4] + [ids[4] + 1]) == 4
    assert smol.n_past == 4 and smol.cached_tokens == ids[:4]
    assert np.array_equal(smol.eval(ids[4:], logits="last"), full)
    smol.truncate(2)
    assert smol.cached_tokens == ids[:2]
    smol.clear()
    assert smol.cached_tokens == [] and smol.reuse_prefix(ids) == 0


@pytest.mark.parametrize("bad", ["hi", [], [{"role": "user"}], [{"role": "user", "content": 5}], [("user", "x")]])
def test_bad_messages(smol, bad):
    with pytest.raises(InvalidArgumentError):
        pyllamaspec.chat(bad, smol, max_tokens=1)


def test_bad_arguments(smol):
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(InvalidArgumentError, match="pyllamaspec.chat"):
        pyllamaspec.generate(msgs, smol, max_tokens=1)
    with pytest.raises(InvalidArgumentError, match="unexpected"):
        pyllamaspec.chat(msgs, smol, max_token=1)
    with pytest.raises(InvalidArgumentError, match="cache_prompt"):
        pyllamaspec.generate("x", smol, max_tokens=1, cache_prompt=1)
    with pytest.raises(InvalidArgumentError, match="built-in"):
        pyllamaspec.chat(msgs, smol, chat_template="nope")
    with pytest.raises(InvalidArgumentError, match="template_kwargs"):
        pyllamaspec.chat(msgs, smol, template_kwargs=[1])


def test_chatml_fallback_stops_at_im_end(gemma3_path):
    """Gemma 3 270M has no template: ChatML, whose <|im_end|> is text there, so it is a stop string."""
    from pyllamaspec.engine import chat_template
    chat_template._warned_fallback.discard(str(gemma3_path))
    with pytest.warns(UserWarning, match="no chat template"):
        r = pyllamaspec.chat([{"role": "user", "content": "Hi"}], str(gemma3_path), max_tokens=24,
                             temperature=0, n_ctx=256, n_threads=1)
    assert "<|im_end|>" not in r.text


@pytest.mark.parametrize("drafter", ["ngram", "model"])
def test_caches_end_at_the_output(smol, smol_draft, drafter):
    """A round that accepts tokens past max_tokens or a stop string leaves neither cache holding
    them: the caches end where the output ends (so the next turn reuses exactly what was said),
    and a round drafts no more than max_tokens still needs."""
    draft = smol_draft if drafter == "model" else "ngram"
    text = " ".join(["one two three four five six seven eight"] * 6)
    ids = smol.tokenize(text)
    free = pyllamaspec.generate(ids, smol, draft, max_tokens=24, temperature=0, adaptive=False, n_draft=8)
    assert free.stats.accepted > 0
    for kw in (dict(max_tokens=3), dict(max_tokens=24, stop=[smol.detokenize(free.tokens[3:5])])):
        r = pyllamaspec.generate(ids, smol, draft, temperature=0, adaptive=False, n_draft=8, **kw)
        assert len(r.tokens) < len(free.tokens) and r.tokens == free.tokens[:len(r.tokens)]
        end = len(ids) + len(r.tokens)
        assert smol.n_past <= end and smol.cached_tokens == (ids + r.tokens)[:smol.n_past]
        if drafter == "model":
            assert smol_draft.n_past <= end and smol_draft.cached_tokens == (ids + r.tokens)[:smol_draft.n_past]
    r = pyllamaspec.generate(ids, smol, draft, max_tokens=3, temperature=0, adaptive=False, n_draft=8)
    assert r.stats.drafted <= 2 * r.stats.rounds       # k <= max_tokens left - 1
