"""The server's parallel slots (issue 23, llama-server's -np): requests decoded together, every
round's drafts of all slots verified in one target evaluation, with the answers of one slot
(greedy: the same text; SmolLM2's CPU kernels give a sequence the same logits in a batch of a
few tokens as alone), /slots and /props as llama-server shows them, and a slot's prefix kept for
the next request that extends it."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import pyllamaspec
from test_server import DRAFT_FLAGS, DRAFT_KW, MODEL_FLAGS, N, Server, _chat

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

QUESTIONS = [[{"role": "user", "content": q}] for q in
             ("Name a color.", "What is 2+2?", "Say hello.", "What is a cat?", "Name a fruit.", "Count to three.")]


@pytest.fixture(scope="module")
def draft_path(smollm2_path):
    from pyllamaspec.files.convert import ensure_variant
    return ensure_variant(smollm2_path, "q4_0")


@pytest.fixture(scope="module")
def server4(smollm2_path, draft_path):
    s = Server(["-m", str(smollm2_path), "-md", str(draft_path), "-a", "smol", "-np", "4", *MODEL_FLAGS,
                *DRAFT_FLAGS, "--slots-debug"])
    yield s
    assert s.health()["status"] == "ok"
    s.stop()


def test_parallel_answers_equal_one_at_a_time(server4, smollm2_path, draft_path):
    from pyllamaspec import Model
    with Model(smollm2_path, n_ctx=512, n_batch=32, n_threads=1) as t, \
            Model(draft_path, n_ctx=512, n_batch=32, n_threads=1, tokenizer=False) as d:
        want = [pyllamaspec.chat(q, t, d, max_tokens=N, temperature=0, **DRAFT_KW).text for q in QUESTIONS]
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda q: _chat(server4.client(), q), QUESTIONS + QUESTIONS[::-1]))
    assert [r.choices[0].message.content for r in got] == want + want[::-1]
    batched = [r.model_extra["timings"].get("batch_n", 1) for r in got]
    assert max(batched) > 1                          # some rounds carried several slots
    assert all(r.model_extra["timings"]["draft_n"] >= 0 for r in got)


def test_slots_and_props(server4):
    slots = server4.get("/slots")
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    assert all(s["n_ctx"] == 128 and s["speculative"] is True and s["is_processing"] is False for s in slots)
    props = server4.get("/props")
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 128   # -c 512 / -np 4
    # the defaults are llama.cpp's numerics: nothing of ours makes an answer depart from its
    assert props["numerics"] == {"cache_type_k": "f16", "cache_type_v": "f16", "deterministic": False,
                                 "departs_from_llama_cpp": []}
    h = server4.health()
    assert h["slots_idle"] == 4 and h["slots_processing"] == 0


def test_a_slot_keeps_its_prefix(server4):
    c = server4.client()
    msgs = [{"role": "system", "content": "Answer in one short sentence."}, *QUESTIONS[3]]
    first = _chat(c, msgs)
    msgs += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "And a dog?"}]
    t = _chat(c, msgs).model_extra["timings"]
    assert t["cache_n"] >= first.usage.prompt_tokens and t["prompt_n"] < 20


def test_np_per_slot_context(smollm2_path):
    """An explicit -np without -kvu splits the context: each slot gets -c / -np (llama-server)."""
    s = Server(["-m", str(smollm2_path), "-np", "2", *MODEL_FLAGS])
    try:
        assert s.get("/props")["default_generation_settings"]["n_ctx"] == 256
        code, err = s.post("/v1/chat/completions", {"messages": QUESTIONS[0], "max_tokens": 300})
        assert code == 400 and "max_tokens asks for" in err["error"]["message"]
    finally:
        s.stop()


def test_one_slot_with_spec_tree_verifies_trees(smollm2_path, draft_path):
    """-np 1 --spec-tree: the context holds the tree's spare sequences beside the slot
    (flags.launch.sequences_for), so rounds verify trees (the timings say how many); before, one
    slot meant one sequence and every tree shrank to its first branch, silently."""
    s = Server(["-m", str(smollm2_path), "-md", str(draft_path), "-np", "1", "--spec-tree", *MODEL_FLAGS,
                *DRAFT_FLAGS])
    try:
        t = _chat(s.client(), QUESTIONS[3]).model_extra["timings"]
        assert t.get("tree_rounds", 0) > 0, t
        assert s.get("/props")["total_slots"] == 1
    finally:
        s.stop()
