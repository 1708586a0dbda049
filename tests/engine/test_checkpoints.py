"""Checkpoints of a hybrid model's recurrent state (issue 43, item 2; llama-server's context
checkpoints): a sequence cut back past its ring of states would replay its tokens from the start;
a checkpoint taken at a chat's user turn (ChatPrompt.turn_starts) lets the next question after
the same conversation resume there, on the same sequence and from the prompt cache after another
conversation took the slot. The answers are those of a fresh model, which evaluates the prompt in
the same two parts (up to the turn, then the rest): a resumed state is the very bytes."""
from __future__ import annotations

import numpy as np
import pytest

import pyllamaspec
from pyllamaspec import Model
from pyllamaspec.engine.chat_template import ChatPrompt
from pyllamaspec.errors import InvalidArgumentError, UnsupportedModelError
from models_qwen35 import write_qwen35_gguf

SYSTEM = "abcdefgh ijkl mnop qrst uvwx yz " * 8


def _model(path, **kw):
    return Model(path, n_ctx=512, n_threads=1, n_seq_max=1, **kw)


def _chat(question: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def _ask(m, question: str):
    return pyllamaspec.chat(_chat(question), m, max_tokens=6, temperature=0)


def test_the_next_question_resumes_at_the_users_turn(qwen35_path):
    with _model(qwen35_path) as fresh:
        want = _ask(fresh, "what about the second step?")
        turn = ChatPrompt.make(_chat("x")).turn_starts(fresh, want.prompt_tokens)
    assert len(turn) == 1 and 50 < turn[0] < len(want.prompt_tokens) - 5
    with _model(qwen35_path) as m:
        _ask(m, "what is the first step?")
        assert list(m.sequence(0).checkpoints) == turn
        m.perf(reset=True)
        r = _ask(m, "what about the second step?")
        assert r.stats.n_reused == turn[0]                  # without it: all of it again
        assert m.perf()["n_tokens"] <= len(r.prompt_tokens) - turn[0] + 6
        assert r.tokens == want.tokens
        # and after another conversation took the only sequence: from the prompt cache
    with _model(qwen35_path, cache_ram=64) as m:
        _ask(m, "what is the first step?")
        pyllamaspec.generate("zzzz yyyy xxxx " * 10, m, max_tokens=4, temperature=0)
        r = _ask(m, "what about the second step?")
        assert m.prompt_cache.hits == 1 and r.stats.n_reused == turn[0]
        assert r.tokens == want.tokens


def test_without_checkpoints_the_same_prompt_is_evaluated_whole(qwen35_path):
    """The negative control: a plain-text prompt takes no checkpoint, and its next question
    shares as much but reuses nothing (the ring does not reach back to it): the core evaluates
    every token of it (its perf counts replays too)."""
    with _model(qwen35_path) as m:
        a = m.tokenize(SYSTEM + "first question, at some length")
        pyllamaspec.generate(a, m, max_tokens=6, temperature=0)
        assert m.sequence(0).checkpoints == {}
        m.perf(reset=True)
        b = m.tokenize(SYSTEM + "second")
        r = pyllamaspec.generate(b, m, max_tokens=6, temperature=0)
        assert r.stats.n_reused == 0 and m.perf()["n_tokens"] >= len(b)


def test_checkpoints_are_checked(qwen35_path, smollm2_path):
    rng = np.random.default_rng(2)
    toks = rng.integers(0, 64, 40).tolist()
    with _model(qwen35_path) as m:
        s = m.sequence(0)
        s.eval(toks[:30], logits="none")
        assert s.take_checkpoint()
        blob = s.checkpoints[30]
        c = m._context
        with pytest.raises(InvalidArgumentError, match="holds 30|truncate it"):
            s.eval(toks[30:], logits="none")
            c.seq_set_checkpoint(0, blob)                      # the sequence is at 40, not 30
        s.truncate(0)
        s.eval([t ^ 1 for t in toks[:30]], logits="none")      # 30 other tokens
        with pytest.raises(InvalidArgumentError, match="other tokens"):
            c.seq_set_checkpoint(0, blob)
        for bad in (blob[:-1], blob + b"\0", b"nope" + blob[4:]):
            with pytest.raises(InvalidArgumentError):
                c.seq_set_checkpoint(0, bad)
        assert s.cached_tokens == [t ^ 1 for t in toks[:30]]
    with Model(smollm2_path, n_ctx=256, n_threads=1) as kv:
        kv.eval(kv.tokenize("hello there"), logits="none")
        assert not kv.sequence(0).take_checkpoint()            # its cache rolls back exactly
        with pytest.raises(UnsupportedModelError):
            kv._context.seq_set_checkpoint(0, blob)


def test_an_mtp_blocks_rows_follow_a_state_and_a_checkpoint(tmp_path):
    """With the MTP block drafting (qwen35 NextN), a state and a checkpoint carry the hidden rows
    its drafts read: after a load, and after a checkpoint taken back past the ring, the next
    draft step's logits are those of the sequence they came from. A state saved with MTP
    drafting does not load where it is off (its MTP cache rows would be missing)."""
    path = tmp_path / "mtp.gguf"
    write_qwen35_gguf(path, n_nextn=1, n_vocab=64, n_embd=32, n_layer=4, seed=5)
    rng = np.random.default_rng(3)
    toks = rng.integers(0, 64, 60).tolist()
    with _model(path) as a:
        a.enable_mtp()
        s = a.sequence(0)
        s.eval(toks[:20], logits="none")
        assert s.take_checkpoint()
        at20 = a.mtp_draft(toks[20], 0).copy()
        s.eval(toks[20:], logits="none")
        state, want = s.save_state(), a.mtp_draft(5, 0).copy()
        assert s.reuse_prefix(toks[:30] + [1, 2]) == 20          # 40 back: past the ring, the checkpoint
        np.testing.assert_array_equal(a.mtp_draft(toks[20], 0), at20)
    with _model(path) as b:
        b.enable_mtp()
        b.sequence(0).load_state(state)
        np.testing.assert_array_equal(b.mtp_draft(5, 0), want)
    with _model(path) as off:
        with pytest.raises(InvalidArgumentError):
            off.sequence(0).load_state(state)
