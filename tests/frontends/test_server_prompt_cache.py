"""The server's host-memory prompt cache (--cache-ram, on by default as in llama-server; issue 43):
on one slot, request A (a long system prompt), then B takes the slot, then A's system prompt with a
new question evaluates only the new turn, with the answer the slot gives when it still holds A (the
same prefix, evaluated the same way: resuming from RAM changes nothing; a whole fresh evaluation
splits the prompt differently, and its logits differ by up to 0.7 on SmolLM2, measured); /metrics
and /health count the kept states. With --cache-ram 0 the third request evaluates everything."""
from __future__ import annotations

import pytest

from pyllamaspec.files.offline import real_model_path
from test_server import Server

SYSTEM = "You are a meticulous assistant for a logistics company. " * 30
A = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Summarize your role."}]
B = [{"role": "system", "content": "Another system prompt, about cooking. " * 20}, {"role": "user", "content": "Hi"}]
A2 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What do you do on Mondays?"}]


def _run(flags: list[str], requests=(A, B, A2), model=None, max_tokens: int = 8) -> tuple[list[dict], str, dict, str]:
    s = Server(["-m", str(model or real_model_path("smollm2")), "-c", "2048", "-np", "1", "-t", "1", "--temp", "0",
                "--metrics", "--slots-debug", *flags])
    try:
        out = []
        for msgs in requests:
            code, r = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": max_tokens})
            assert code == 200, r
            out.append(r)
        import urllib.request
        with urllib.request.urlopen(s.url + "/metrics", timeout=30) as f:
            metrics = f.read().decode()
        return out, out[-1]["choices"][0]["message"]["content"], s.health(), metrics
    finally:
        s.stop()


@pytest.fixture(scope="module")
def runs():
    return {"default": _run([]), "off": _run(["--cache-ram", "0"]),
            "live": _run(["--cache-ram", "0"], (A, A2))}          # the slot still holds A


def test_a_resent_system_prompt_evaluates_only_the_new_turn(runs):
    out, answer, health, metrics = runs["default"]
    third = out[2]
    assert third["timings"]["prompt_n"] < 25 and third["timings"]["cache_n"] > 280, third["timings"]
    assert health["prompt_cache"]["hits"] == 1 and health["prompt_cache"]["states"] >= 1
    assert "llamacpp:prompt_cache_hits_total 1" in metrics
    off_out, off_answer, off_health, _ = runs["off"]
    assert off_out[2]["timings"]["prompt_n"] > 280 and off_health["prompt_cache"] is None
    live_out, live_answer, _, _ = runs["live"]
    assert live_out[1]["timings"]["prompt_n"] == third["timings"]["prompt_n"] and answer == live_answer


def test_a_hybrids_new_question_resumes_at_its_turn(tmp_path):
    """qwen35 (hybrid, tiny): the recurrent state cannot be cut back to the turn, so the slot
    keeps checkpoints where a chat's user turns begin (--ctx-checkpoints, llama-server's): A, B,
    then A's system prompt with a new question evaluates from its turn on, answering as the slot
    that still holds A; with --ctx-checkpoints 0 it evaluates everything again."""
    from models_qwen35 import write_qwen35_gguf
    path = tmp_path / "qwen35.gguf"
    write_qwen35_gguf(path)
    system = "abcdefgh ijkl mnop qrst uvwx yz " * 8
    a = [{"role": "system", "content": system}, {"role": "user", "content": "first question"}]
    b = [{"role": "system", "content": "zzzz yyyy " * 20}, {"role": "user", "content": "hi"}]
    a2 = [{"role": "system", "content": system}, {"role": "user", "content": "the second one"}]

    on, off, live = (_run(flags, reqs, model=path, max_tokens=6)[0]
                     for flags, reqs in (([], (a, b, a2)), (["--ctx-checkpoints", "0"], (a, b, a2)), ([], (a, a2))))
    assert on[2]["timings"]["prompt_n"] < 60 < 250 < on[2]["timings"]["cache_n"], on[2]["timings"]   # its turn: ~45 characters
    assert off[2]["timings"]["prompt_n"] > 250 and off[2]["timings"]["cache_n"] == 0, off[2]["timings"]
    assert on[2]["choices"][0]["message"] == live[1]["choices"][0]["message"]
    assert live[1]["timings"]["prompt_n"] == on[2]["timings"]["prompt_n"]
