"""A sequence's state as bytes (psl_context_seq_state_get / _set, engine/sequence.py, the Llama
layer's save_state / load_state; issue 43, item 4): saved after a prompt and loaded into an
emptied or another context of the same model, the next token's logits are bit-identical (the K/V
rows are the very bytes) and a completion evaluates only what its prompt adds; a truncated state,
another model's or cache type's, or one too large for the context, is refused with the sequence as
it was. A hybrid's state holds its recurrent states too (as far back as it rolls back).""" 
from __future__ import annotations

import numpy as np
import pytest

import pyllamaspec
from pyllamaspec import Model
from pyllamaspec.errors import ContextFullError, InvalidArgumentError, UnsupportedModelError

PROMPT = "The quick brown fox jumps over the lazy dog. " * 12


@pytest.fixture(scope="module")
def saved(smollm2_path):
    """(state, the next token's logits, the ids) after PROMPT on SmolLM2."""
    with Model(smollm2_path, n_ctx=512, n_threads=1) as m:
        ids = m.tokenize(PROMPT)
        m.eval(ids[:-1], logits="none")
        state = m.sequence(0).save_state()
        nxt = m.eval(ids[-1:], logits="last").copy()
        return state, nxt, ids


def test_a_loaded_state_gives_the_same_logits(smollm2_path, saved):
    state, nxt, ids = saved
    with Model(smollm2_path, n_ctx=512, n_threads=1) as m:
        m.eval(m.tokenize("Something else entirely, to be replaced."), logits="none")
        m.sequence(0).load_state(state)
        assert m.cached_tokens == ids[:-1] and m.n_past == len(ids) - 1
        assert np.array_equal(m.eval(ids[-1:], logits="last"), nxt)
        m.sequence(0).load_state(state)                       # again, over itself
        assert np.array_equal(m.eval(ids[-1:], logits="last"), nxt)


def test_bad_states_are_refused_and_the_sequence_kept(smollm2_path, gemma3_path, saved):
    state, _, ids = saved
    with Model(smollm2_path, n_ctx=512, n_threads=1) as m:
        m.eval(ids[:5], logits="none")
        for bad in (state[:-1], state + b"\0", b"nope" + state[4:], state[:12], b""):
            with pytest.raises(InvalidArgumentError):
                m.sequence(0).load_state(bad)
            assert m.cached_tokens == ids[:5]
        with pytest.raises(InvalidArgumentError):
            m.sequence(0).load_state("not bytes")
    with Model(smollm2_path, n_ctx=64, n_threads=1) as small:          # more tokens than its context
        with pytest.raises(ContextFullError):
            small.sequence(0).load_state(state)
        assert small.cached_tokens == []
    with Model(smollm2_path, n_ctx=512, n_threads=1, type_k="f32", type_v="f32") as f32:
        with pytest.raises(InvalidArgumentError, match="cache type"):
            f32.sequence(0).load_state(state)
    with Model(gemma3_path, n_ctx=512, n_threads=1) as other:
        with pytest.raises(InvalidArgumentError, match="another model"):
            other.sequence(0).load_state(state)


def _hybrid(path, **kw):
    return Model(path, n_ctx=256, n_threads=1, **kw)


def test_a_hybrid_state_rolls_back_as_the_saved_sequence_did(qwen35_path):
    """A hybrid's state carries its recurrent states after its last positions (the ring of
    csrc/memory/recurrent_state.h): loaded into another context, the next logits, a rollback
    within the ring (O(1)) and one past it (a replay of the history) each give the very rows of
    the sequence it was saved from, doing the same (the bytes are the same; a prefix evaluated
    in other chunks would sum otherwise)."""
    rng = np.random.default_rng(4)
    prompt, cont = rng.integers(0, 64, 60).tolist(), rng.integers(0, 64, 6).tolist()
    with _hybrid(qwen35_path) as live:
        live.eval(prompt, logits="none")
        state = live.sequence(0).save_state()
        want = [live.eval(cont).copy()]
        for back in (5, 30):                               # within the ring of 17, then past it
            live.sequence(0).truncate(len(prompt) - back)
            want.append(live.eval(cont).copy())
    with _hybrid(qwen35_path, n_seq_max=2) as m:
        m.sequence(1).eval(rng.integers(0, 64, 9).tolist(), logits="none")   # another's cells first
        s = m.sequence(0)
        s.load_state(state)
        assert s.n_past == len(prompt) and s.cached_tokens == prompt
        got = [s.eval(cont).copy()]
        for back in (5, 30):
            s.truncate(len(prompt) - back)
            got.append(s.eval(cont).copy())
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    assert not np.array_equal(want[1], want[0])            # the rollbacks are seen


def test_hybrid_and_kv_states_are_not_mixed(qwen35_path, smollm2_path, saved):
    with _hybrid(qwen35_path) as m:
        m.eval([1, 2, 3], logits="none")
        hybrid = m.sequence(0).save_state()
        for bad in (hybrid[:-1], hybrid + b"\0"):
            with pytest.raises(InvalidArgumentError, match="truncated|header"):
                m.sequence(0).load_state(bad)
        with pytest.raises(InvalidArgumentError, match="KV-cache-only model"):
            m.sequence(0).load_state(saved[0])
        assert m.sequence(0).cached_tokens == [1, 2, 3]
    with Model(smollm2_path, n_ctx=512, n_threads=1) as other:
        with pytest.raises(InvalidArgumentError, match="hybrid model"):
            other.sequence(0).load_state(hybrid)


def test_llama_save_state_and_load_state(smollm2_path):
    with pyllamaspec.Llama(model_path=smollm2_path, n_ctx=1024, n_threads=1) as llm:
        first = llm.create_completion(PROMPT, max_tokens=8, temperature=0)
        state = llm.save_state()
        assert isinstance(state, pyllamaspec.LlamaState)
        assert state.n_tokens == len(state.input_ids) == len(llm.cached_tokens)
        assert state.llama_state_size == len(state.llama_state)
        llm.reset()
        llm.create_completion("A different prompt.", max_tokens=4, temperature=0)
        llm.load_state(state)
        r = pyllamaspec.generate(PROMPT, llm, max_tokens=8, temperature=0)
        assert r.text == first["choices"][0]["text"]
        assert r.stats.n_reused == len(r.prompt_tokens) - 1, "only the prompt's last token evaluated again"
        with pytest.raises(InvalidArgumentError):
            llm.load_state(state.llama_state)


# -- the host-memory prompt cache (engine/prompt_cache.py, --cache-ram) -------------------------

SYSTEM = "You are a meticulous assistant for a logistics company. " * 20


def _turn(question: str) -> str:
    return f"{SYSTEM}\nQuestion: {question}\nAnswer:"


@pytest.mark.parametrize("cache_ram", [64, 0])
def test_a_prompt_resumes_from_the_state_its_slot_let_go(smollm2_path, cache_ram):
    """One sequence: A, then B takes it, then A's prefix with a new question evaluates only the
    new part with the cache (and its answer equals a fresh model's), all of it again without."""
    with Model(smollm2_path, n_ctx=1024, n_threads=1, n_seq_max=1, cache_ram=cache_ram) as m:
        pyllamaspec.generate(_turn("What do you do?"), m, max_tokens=4, temperature=0)
        pyllamaspec.generate("Something about cooking pasta, " * 10, m, max_tokens=4, temperature=0)
        r = pyllamaspec.generate(_turn("And on Mondays?"), m, max_tokens=8, temperature=0)
        shared = len(m.tokenize(SYSTEM))
        if cache_ram:
            assert r.stats.n_reused >= shared - 2 and m.prompt_cache.hits == 1
            assert len(r.prompt_tokens) - r.stats.n_reused < 20
        else:
            assert r.stats.n_reused < 5 and m.prompt_cache is None
    # the oracle: the sequence still holding A (the same prefix evaluated the same way; a whole
    # fresh evaluation splits the prompt otherwise, and its logits differ by up to 0.7, measured)
    with Model(smollm2_path, n_ctx=1024, n_threads=1, n_seq_max=1) as live:
        pyllamaspec.generate(_turn("What do you do?"), live, max_tokens=4, temperature=0)
        ref = pyllamaspec.generate(_turn("And on Mondays?"), live, max_tokens=8, temperature=0)
    if cache_ram:
        assert ref.tokens == r.tokens and ref.stats.n_reused == r.stats.n_reused


def test_the_cache_keeps_the_longest_states_within_its_bytes():
    from pyllamaspec.engine.prompt_cache import PromptCache
    c = PromptCache(250)
    c.put([1, 2, 3], b"x" * 100)
    c.put([1, 2, 3, 4], b"y" * 100)            # extends the first: replaces it
    assert [e.tokens for e in c.entries] == [[1, 2, 3, 4]]
    c.put([1, 2], b"z" * 100)                  # extended by a kept one: not kept again
    assert len(c.entries) == 1
    c.put([7, 8], b"w" * 100)
    c.put([9], b"v" * 100)                     # over 250 bytes: the least recently used goes
    assert [e.tokens for e in c.entries] == [[7, 8], [9]] and c.bytes == 200
    assert c.best([7, 8, 5])[1] == 2 and c.best([5])[0] is None
    c.put([5], b"q" * 300)                     # larger than the whole cache: not kept
    assert c.bytes == 200


def test_a_hybrids_next_turn_resumes_from_the_state_its_slot_let_go(qwen35_path):
    """qwen35 (hybrid), one sequence: A, then B takes it, then A's conversation with a new turn
    evaluates only the new turn (its kept state's recurrent ring reaches the shared prefix), with
    the answer of the sequence that still holds A. A new question after A's prompt alone shares
    too early a prefix for the ring (that would take checkpoints): evaluated whole, nothing
    taken back."""
    rng = np.random.default_rng(8)
    a, b, q = (rng.integers(0, 64, n).tolist() for n in (80, 70, 5))
    with _hybrid(qwen35_path, n_seq_max=1, cache_ram=64) as m:
        ra = pyllamaspec.generate(a, m, max_tokens=6, temperature=0)
        pyllamaspec.generate(b, m, max_tokens=4, temperature=0)
        turn = a + ra.tokens + q
        r = pyllamaspec.generate(turn, m, max_tokens=8, temperature=0)
        assert m.prompt_cache.hits == 1 and len(turn) - r.stats.n_reused <= len(q) + 1
        pyllamaspec.generate(b, m, max_tokens=4, temperature=0)      # B's kept state serves it
        hits = m.prompt_cache.hits
        early = pyllamaspec.generate(a[:40] + q, m, max_tokens=4, temperature=0)
        assert m.prompt_cache.hits == hits == 2 and early.stats.n_reused == 0
    with _hybrid(qwen35_path, n_seq_max=1) as live:
        pyllamaspec.generate(a, live, max_tokens=6, temperature=0)
        ref = pyllamaspec.generate(turn, live, max_tokens=8, temperature=0)
    assert ref.tokens == r.tokens and ref.stats.n_reused == r.stats.n_reused


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_speculation_after_a_restore_equals_plain_greedy(tmp_path, drafter):
    """Item 5: after the target took a kept state back, the drafter is right for the restored
    text (a draft model evaluates what its own cache lacks; the n-gram tables are built from the
    prompt): speculative greedy equals plain greedy on a fresh model. Tiny Q4_1 models and
    prompts under 64 tokens, whose logits do not depend on how the prompt is split
    (tests/generation/test_parallel.py), so fresh and resumed compare token for token."""
    import models
    q = dict(dtype="Q4_1", n_embd=64, n_ff=96, n_vocab=64)
    models.write_llama_gguf(tmp_path / "t.gguf", n_layer=2, seed=11, **q)
    models.write_llama_gguf(tmp_path / "d.gguf", n_layer=1, seed=11, **q)
    rng = np.random.default_rng(6)
    a, b, q2 = rng.integers(2, 64, 50).tolist(), rng.integers(2, 64, 40).tolist(), rng.integers(2, 64, 4).tolist()
    turn = a[:45] + q2
    with Model(tmp_path / "t.gguf", n_ctx=256, n_threads=1, n_seq_max=1, cache_ram=16) as t, \
            Model(tmp_path / "d.gguf", n_ctx=256, n_threads=1) as d:
        draft = d if drafter == "model" else drafter
        pyllamaspec.generate(a, t, draft, max_tokens=20, temperature=0)
        pyllamaspec.generate(b, t, draft, max_tokens=20, temperature=0)
        r = pyllamaspec.generate(turn, t, draft, max_tokens=40, temperature=0, adaptive=False, n_draft=4)
        assert t.prompt_cache.hits == 1 and r.stats.n_reused == 45 and r.stats.drafted > 0
    with Model(tmp_path / "t.gguf", n_ctx=256, n_threads=1) as fresh:
        assert pyllamaspec.generate(turn, fresh, max_tokens=40, temperature=0).tokens == r.tokens
