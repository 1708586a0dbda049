"""llama-cpp-python's and mlx-lm's habits (issue 27, 9): Model(model_path=...) with
create_completion / create_chat_completion / __call__ / create_embedding (llama-cpp-python's
argument names and return dicts), Llama as its name; pyllamaspec.mlx's load / generate with the
model first. Each answer equals pyllamaspec's own generate / chat with the same settings."""
from __future__ import annotations

import json

import pytest

import pyllamaspec
from pyllamaspec import InvalidArgumentError, Llama, Model

Q = [{"role": "user", "content": "What is the capital of France?"}]
KW = dict(n_ctx=512, n_batch=32, n_threads=1)


@pytest.fixture(scope="module")
def llm(smollm2_path):
    from pyllamaspec.files.convert import ensure_variant
    with Model(model_path=str(smollm2_path), draft_model=str(ensure_variant(smollm2_path, "q4_0")), **KW) as m:
        yield m


def test_model_path_and_llama_name(smollm2_path):
    assert Llama is Model and issubclass(Model, pyllamaspec.engine.model.Model)
    with pytest.raises(InvalidArgumentError, match="once"):
        Model(str(smollm2_path), model_path=str(smollm2_path))
    with Model(model_path=smollm2_path, n_ctx=64) as m:
        assert m.model_path == str(smollm2_path) and m.draft_model is None


def test_create_completion_shape_and_text(llm):
    r = llm.create_completion("The capital of France is", max_tokens=8, temperature=0, logprobs=2)
    ref = pyllamaspec.generate("The capital of France is", llm, llm.draft_model, max_tokens=8, temperature=0,
                               logprobs=2)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-") and r["model"] == llm.model_path
    ch = r["choices"][0]
    assert ch["text"] == ref.text and ch["index"] == 0 and ch["finish_reason"] == "length"
    assert r["usage"] == {"prompt_tokens": len(ref.prompt_tokens), "completion_tokens": 8, "total_tokens":
                          len(ref.prompt_tokens) + 8}
    assert ch["logprobs"]["token_logprobs"] == pytest.approx([t.logprob for t in ref.logprobs], abs=1e-5)
    assert "".join(ch["logprobs"]["tokens"]) == ch["text"]
    echoed = llm("The capital of France is", max_tokens=8, temperature=0, echo=True)      # __call__
    assert echoed["choices"][0]["text"] == "The capital of France is" + ref.text
    chunks = list(llm.create_completion("The capital of France is", max_tokens=8, temperature=0, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == ref.text
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_create_chat_completion_shape_and_text(llm):
    r = llm.create_chat_completion(messages=Q, max_tokens=5, temperature=0, logprobs=True, top_logprobs=1)
    ref = pyllamaspec.chat(Q, llm, llm.draft_model, max_tokens=5, temperature=0)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    msg = r["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": ref.text} and ref.text
    assert len(r["choices"][0]["logprobs"]["content"]) == 5            # the answer is longer: 7 tokens or more
    chunks = list(llm.create_chat_completion(messages=Q, max_tokens=5, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == ref.text
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"][0]["delta"] == {}


@pytest.mark.parametrize("kw", [{"logit_bias": {1: 5.0}}, {"mirostat_mode": 2}, {"typical_p": 0.5},
                                {"functions": [{"name": "f"}]}])
def test_unsupported_options_are_refused_by_name(llm, kw):
    name = next(iter(kw))
    with pytest.raises(InvalidArgumentError, match=name):
        llm.create_chat_completion(messages=Q, max_tokens=2, **kw)


def test_constraints_pass_through(llm):
    """Issue 46, item 3: grammar=, response_format= and tools= reach the engine (they were
    refused by name although chat() and the server take them)."""
    from pyllamaspec import LlamaGrammar
    yes_no = 'root ::= "yes" | "no"'
    r = llm.create_completion("Is Paris in France? Answer:", max_tokens=4, temperature=0, grammar=yes_no)
    assert r["choices"][0]["text"] in ("yes", "no")
    g = LlamaGrammar.from_string(yes_no)
    r2 = llm.create_chat_completion(messages=Q, max_tokens=4, temperature=0, grammar=g)
    assert r2["choices"][0]["message"]["content"] in ("yes", "no")
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    r3 = llm.create_chat_completion(messages=Q, max_tokens=40, temperature=0,
                                    response_format={"type": "json_object", "schema": schema})
    ref = pyllamaspec.chat(Q, llm, llm.draft_model, max_tokens=40, temperature=0,
                           response_format={"type": "json_object", "schema": schema})
    assert r3["choices"][0]["message"] == ref.message
    if r3["choices"][0]["finish_reason"] == "stop":
        assert "city" in json.loads(r3["choices"][0]["message"]["content"])
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    r4 = llm.create_chat_completion(messages=Q, max_tokens=24, temperature=0, tools=tools, tool_choice="auto")
    ref = pyllamaspec.chat(Q, llm, llm.draft_model, max_tokens=24, temperature=0, tools=tools, tool_choice="auto")
    assert r4["choices"][0]["message"] == ref.message
    with pytest.raises(InvalidArgumentError, match="stream"):
        llm.create_chat_completion(messages=Q, max_tokens=2, tools=tools, stream=True)
    assert "root ::=" in LlamaGrammar.from_json_schema(json.dumps(schema)).text


def test_llama_cpp_python_methods_and_arguments(smollm2_path):
    with Model(model_path=smollm2_path, n_ctx=64, flash_attn=True, logits_all=False) as m:
        assert m.token_eos() == m.eos_token and m.token_bos() == (m.bos_token if m.bos_token is not None else -1)
        m.create_completion("Hello", max_tokens=2, temperature=0)
        assert m.n_past > 0
        m.reset()
        assert m.n_past == 0


def test_create_embedding(llm):
    r = llm.create_embedding(["hello", "world"])
    assert r["object"] == "list" and [d["index"] for d in r["data"]] == [0, 1]
    assert len(r["data"][0]["embedding"]) == llm.info.n_embd and r["usage"]["prompt_tokens"] >= 2


def test_mlx_shapes(smollm2_path):
    from pyllamaspec.mlx import generate, load
    model, tok = load(smollm2_path, **KW)
    try:
        prompt = tok.apply_chat_template(Q, add_generation_prompt=True)
        assert isinstance(prompt, list) and tok.decode(tok.encode("Hello")) == "Hello"
        text = generate(model, tok, prompt=prompt, max_tokens=8)                  # greedy by default
        assert text == pyllamaspec.generate(prompt, model, max_tokens=8, temperature=0).text and text
        assert tok.eos_token_id in tok.eos_token_ids
    finally:
        model.close()


def test_mlx_sampler_processors_and_response_fields(smollm2_path):
    """Issue 46, item 4: make_sampler / make_logits_processors as mlx-lm names them, and the
    response fields mlx-lm code reads (generation_tps, prompt_tps, peak_memory, ...)."""
    from pyllamaspec.errors import InvalidArgumentError
    from pyllamaspec.mlx import generate, load, make_logits_processors, make_sampler, stream_generate
    model, tok = load(smollm2_path, **KW)
    try:
        prompt = tok.apply_chat_template(Q, add_generation_prompt=True)
        rs = list(stream_generate(model, tok, prompt, max_tokens=6, sampler=make_sampler(temp=0.0)))
        last = rs[-1]
        assert last.finish_reason in ("length", "stop") and last.generation_tokens == last.stats.n_generated
        assert last.generation_tps > 0 and last.prompt_tps > 0 and last.prompt_tokens == len(prompt)
        assert 0.01 < last.peak_memory < 64 and all(r.generation_tokens == i + 1 for i, r in enumerate(rs[:-1]))
        greedy = pyllamaspec.generate(prompt, model, max_tokens=6, temperature=0).text
        assert "".join(r.text for r in rs) == greedy
        # a sampled run through make_sampler is reproducible by seed, as the core's sampling is
        s = make_sampler(temp=0.9, top_p=0.9, min_p=0.05, top_k=20)
        a = generate(model, tok, prompt=prompt, max_tokens=8, sampler=s, seed=3)
        assert a == pyllamaspec.generate(prompt, model, max_tokens=8, temperature=0.9, top_p=0.9, min_p=0.05,
                                         top_k=20, seed=3).text
        # the repetition penalty reaches the core (llama.cpp's, over the context size given)
        lp = make_logits_processors(repetition_penalty=1.3, repetition_context_size=32)
        b = generate(model, tok, prompt=prompt, max_tokens=8, logits_processors=[lp])
        assert b == pyllamaspec.generate(prompt, model, max_tokens=8, temperature=0, repeat_penalty=1.3,
                                         penalty_last_n=32).text
        with pytest.raises(InvalidArgumentError, match="xtc_probability"):
            make_sampler(temp=0.5, xtc_probability=0.5)
        with pytest.raises(InvalidArgumentError, match="logit_bias"):
            make_logits_processors(logit_bias={1: 2.0})
        with pytest.raises(InvalidArgumentError, match="make_sampler"):
            generate(model, tok, prompt=prompt, max_tokens=2, sampler=lambda x: x)
    finally:
        model.close()


def test_closed_model_says_so(smollm2_path):
    """Issue 27, 7: the docs say any call after close() raises ModelClosedError; generate()
    raised a plain InvalidArgumentError."""
    from pyllamaspec import ModelClosedError
    m = Model(smollm2_path, n_ctx=64)
    m.close()
    with pytest.raises(ModelClosedError):
        pyllamaspec.generate("Hi", m, max_tokens=1)
    with pytest.raises(ModelClosedError):
        m.create_completion("Hi", max_tokens=1)
