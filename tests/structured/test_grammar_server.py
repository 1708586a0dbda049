"""Greedy answers under GBNF grammars and JSON schemas equal llama-server b11434's on the two
real models (tests/data/reference/grammar_server_llamacpp.json, scripts/llamacpp_server_grammar.py):
the grammar we sample with is the one llama-server logged, to the character, and the answers
are the same text, or part only at a step whose top-2 margin among the allowed tokens is a near
tie (tests/tolerances.py GRAMMAR_NEAR_TIE: measured across ggml's CPU kernels, times 2). Always valid: each JSON answer that ends parses. Our server
gives the same answers as pyllamaspec.chat / generate."""
from __future__ import annotations

import json

import numpy as np
import pytest

import pyllamaspec
import tolerances
from conftest import real_model, reference_dir
from pyllamaspec import Model
from pyllamaspec.engine.chat_template import ChatPrompt
from pyllamaspec.structured.formats import constraint_spec, response_content

FIXTURE = json.loads((reference_dir() / "grammar_server_llamacpp.json").read_text())
FIELDS = ("grammar", "json_schema", "response_format")


def _spec(case: dict, model: Model):
    body = case["request"]
    spec = constraint_spec(*(body.get(k) for k in FIELDS))
    if case["kind"] == "chat":
        prompt = ChatPrompt.make(body["messages"])
        return spec.for_chat(prompt, model), prompt.render(model)[0]
    return spec, model.tokenize(body["prompt"], add_special=True, parse_special=True)


def _ours(case: dict, model: Model):
    body = case["request"]
    kw = {k: body[k] for k in FIELDS if k in body}
    if case["kind"] == "chat":
        return pyllamaspec.chat(body["messages"], model, temperature=0, max_tokens=body["max_tokens"], **kw)
    return pyllamaspec.generate(body["prompt"], model, temperature=0, max_tokens=body["max_tokens"], **kw)


def _divergence_margin(model: Model, case: dict, ours) -> float:
    """Our top-2 margin (allowed tokens) at the first token where our text leaves llama.cpp's,
    along our own tokens, one evaluation a token (on the CPU the generation's batched rows are
    these rows: test_grammar_speculation), an answer that ends where llama.cpp's goes on included
    (seen with ggml's AMX kernels: Gemma 3's end of generation against four spaces, margin 0.035;
    plain greedy's text was then a prefix of llama.cpp's, and no parting was found)."""
    spec, ids = _spec(case, model)
    g = spec.make(model)
    model.clear()
    model.eval(ids[:-1], logits="none")
    row = model.eval(ids[-1:], logits="last")[0]
    ref, text = case["raw"], ""

    def margin() -> float:
        top2 = np.sort(row[g.mask()[:len(row)]])[-2:]
        return float(top2[-1] - top2[0]) if len(top2) == 2 else np.inf

    for t in ours.tokens:
        if model.is_eog(t):
            break
        text += model.token_to_piece(t).decode("utf-8", "replace")
        if not ref.startswith(text):
            return margin()
        g.accept([t])
        row = model.eval([t], logits="last")[0]
    # ours ended (its end of generation, not max_tokens) where llama.cpp's goes on: it parts there
    return margin() if text != ref and ours.finish_reason == "stop" else np.inf


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_grammars_equal_llama_servers(name):
    with Model(real_model(name), n_ctx=2048) as m:
        for case in FIXTURE["models"][name]["cases"]:
            spec, _ = _spec(case, m)
            assert spec.text == case["grammar"], case["request"]


@pytest.mark.parametrize("name", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)])   # gemma3: 12 s
def test_greedy_answers_equal_llama_servers(name):
    cases = FIXTURE["models"][name]["cases"]
    same = 0
    with Model(real_model(name), n_ctx=2048) as m:
        for case in cases:
            r = _ours(case, m)
            if r.text == case["raw"]:
                same += 1
                if case["kind"] == "chat":
                    assert r.message["content"] == case["content"]
            else:
                margin = _divergence_margin(m, case, r)
                print(f"{name}: parts at margin {margin:.3f}: ours {r.text!r} llama.cpp {case['raw']!r}")
                assert margin < tolerances.GRAMMAR_NEAR_TIE.tol(), case["request"]
            if r.finish_reason == "stop" and "grammar" not in case["request"]:
                json.loads(response_content(r.text))
    print(f"{name}: {same}/{len(cases)} answers identical to llama-server's")
    # Every answer that parts from llama-server's does so at a near tie (asserted above): how many
    # part depends on the CPU's kernels, which move near ties (identical answers, measured:
    # SmolLM2 13/13 with the native AVX-512, AVX2 and generic kernels, 11/13 with AMX tiles;
    # Gemma 3 10/13 native, 8/13 AVX2, 9/13 AMX). Half identical keeps the test from passing on
    # near ties alone.
    assert same >= len(cases) / 2


def test_server_answers_equal_the_python_api(smollm2_path):
    from test_server import Server
    cases = FIXTURE["models"]["smollm2"]["cases"]
    srv = Server(["-m", str(smollm2_path), "-c", "2048", "-t", "1"])
    try:
        with Model(smollm2_path, n_ctx=2048) as m:
            for case in cases[:2] + cases[6:9]:
                route = "/v1/chat/completions" if case["kind"] == "chat" else "/v1/completions"
                status, body = srv.post(route, case["request"])
                assert status == 200, body
                choice = body["choices"][0]
                got = choice["message"]["content"] if case["kind"] == "chat" else choice["text"]
                r = _ours(case, m)
                want = r.message["content"] if case["kind"] == "chat" else r.text
                assert got == want
            status, body = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                             "grammar": 'root ::= "a" | b'})
            assert status == 400 and "rule 'b'" in body["error"]["message"]
            status, body = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                             "response_format": {"type": "json_schema", "json_schema":
                                                                                 {"schema": {"type": "nothing"}}}})
            assert status == 400 and "unrecognized type" in body["error"]["message"]
    finally:
        srv.stop()


def test_streamed_structured_content(smollm2_path):
    """Streaming a response format sends the JSON alone, as the whole answer does."""
    from test_server import Server
    case = FIXTURE["models"]["smollm2"]["cases"][0]
    srv = Server(["-m", str(smollm2_path), "-c", "2048", "-t", "1"])
    try:
        client = srv.client()
        req = dict(case["request"])
        pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="x", stream=True, **{k: req.pop(k) for k in ("messages", "max_tokens", "temperature")},
            extra_body=req) if c.choices]
        assert "".join(pieces) == case["content"]
    finally:
        srv.stop()
