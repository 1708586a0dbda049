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
