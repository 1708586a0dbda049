"""A sequence's state as bytes (psl_context_seq_state_get / _set, engine/sequence.py, the Llama
layer's save_state / load_state; issue 43, item 4): saved after a prompt and loaded into an
emptied or another context of the same model, the next token's logits are bit-identical (the K/V
rows are the very bytes) and a completion evaluates only what its prompt adds; a truncated state,
another model's or cache type's, one too large for the context, or a hybrid's, is refused with the
sequence as it was."""
from __future__ import annotations

import numpy as np
import pytest

import pyllamaspec
from pyllamaspec import Model
from pyllamaspec.errors import ContextFullError, InvalidArgumentError, UnsupportedModelError
from models_qwen35 import write_qwen35_gguf

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


def test_a_hybrid_models_state_is_not_saved_yet(tmp_path):
    path = tmp_path / "qwen35.gguf"
    write_qwen35_gguf(path)
    with Model(path, n_ctx=64, n_threads=1, tokenizer=False) as m:
        m.eval([1, 2, 3], logits="none")
        with pytest.raises(UnsupportedModelError, match="hybrid"):
            m.sequence(0).save_state()


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
