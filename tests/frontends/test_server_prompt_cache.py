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


def _run(flags: list[str], requests=(A, B, A2)) -> tuple[list[dict], str, dict, str]:
    s = Server(["-m", str(real_model_path("smollm2")), "-c", "2048", "-np", "1", "-t", "1", "--temp", "0",
                "--metrics", "--slots-debug", *flags])
    try:
        out = []
        for msgs in requests:
            code, r = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 8})
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
