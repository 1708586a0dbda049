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


def test_size_methods_and_ints(llm):
    """Issue 46, item 3: llm.n_ctx() is a method in llama-cpp-python; model.n_ctx stays the int the
    engine, the CLI and the server read (both on one object: SizeInt)."""
    assert llm.n_ctx() == llm.n_ctx == 512 and type(llm.n_ctx()) is int and isinstance(llm.n_ctx, int)
    assert llm.n_vocab() == llm.n_vocab == llm.info.n_vocab and llm.n_embd() == llm.info.n_embd
    assert llm.n_ctx - 12 == 500 and json.dumps({"n": llm.n_ctx}) == '{"n": 512}' and f"{llm.n_ctx}" == "512"


def test_tokenize_detokenize_both_signatures(llm):
    """llama-cpp-python's tokenize(bytes, add_bos, special) and detokenize(tokens, prev_tokens,
    special) -> bytes next to the engine's tokenize(text, add_special, parse_special) and
    detokenize(ids, render_special) -> str."""
    chat = "<|im_start|>user\nHi<|im_end|>"
    assert llm.tokenize(chat.encode(), special=True) == llm.tokenize(chat, parse_special=True)
    assert llm.tokenize(chat.encode(), add_bos=False, special=True) == llm.tokenize(chat, False, True)
    assert llm.tokenize(chat.encode()) == llm.tokenize(chat, add_special=True, parse_special=False)
    assert len(llm.tokenize(chat.encode(), special=True)) < len(llm.tokenize(chat.encode()))   # control ids
    with pytest.raises(InvalidArgumentError, match="add_bos"):
        llm.tokenize(b"Hi", add_special=True, add_bos=False)
    ids = llm.tokenize(chat, parse_special=True)
    assert llm.detokenize(ids) == "user\nHi" and llm.detokenize(ids, True) == chat          # engine: str
    assert llm.detokenize(ids, render_special=True) == chat
    assert llm.detokenize(ids, special=False) == b"user\nHi"                                 # lcp: bytes
    assert llm.detokenize(ids, special=True) == chat.encode() == llm.detokenize(ids, None, True)
    assert llm.detokenize(ids, prev_tokens=None) == b"user\nHi"
    assert llm.detokenize(ids[3:], prev_tokens=ids[:3], special=True) == llm.detokenize(ids[3:], special=True)
    with pytest.raises(InvalidArgumentError, match="render_special"):
        llm.detokenize(ids, special=True, render_special=True)
    with pytest.raises(pyllamaspec.TokenOutOfRangeError):                                # the engine's checks
        llm.detokenize([llm.n_vocab], special=False)


def _no_openai(monkeypatch):
    import sys
    for name in ("openai", "openai.types", "openai.types.chat"):
        monkeypatch.setitem(sys.modules, name, None)        # None in sys.modules: import raises ImportError


def test_openai_v1_without_openai(llm, monkeypatch):
    _no_openai(monkeypatch)
    with pytest.raises(ImportError, match="pip install openai"):
        llm.create_chat_completion_openai_v1(messages=Q, max_tokens=2)


def test_openai_v1_with_openai(llm, monkeypatch):
    """The openai package's objects when it imports: a fake openai.types.chat stands in for it."""
    import sys
    import types

    class _Obj:
        def __init__(self, **kw):
            self.kw = kw

    class ChatCompletion(_Obj):
        pass

    class ChatCompletionChunk(_Obj):
        pass

    _no_openai(monkeypatch)
    fake = types.ModuleType("openai.types.chat")
    fake.ChatCompletion, fake.ChatCompletionChunk = ChatCompletion, ChatCompletionChunk
    monkeypatch.setitem(sys.modules, "openai.types.chat", fake)
    r = llm.create_chat_completion_openai_v1(messages=Q, max_tokens=4, temperature=0)
    ref = llm.create_chat_completion(messages=Q, max_tokens=4, temperature=0)
    assert type(r) is ChatCompletion and r.kw["choices"] == ref["choices"] and r.kw["object"] == "chat.completion"
    chunks = list(llm.create_chat_completion_openai_v1(messages=Q, max_tokens=4, temperature=0, stream=True))
    assert chunks and all(type(c) is ChatCompletionChunk for c in chunks)
    assert "".join(c.kw["choices"][0]["delta"].get("content", "") for c in chunks) == \
        ref["choices"][0]["message"]["content"]


def test_n_choices_decoded_together(llm, monkeypatch):
    """Issue 46, item 3: n > 1 gives n choices (indexes 0..n-1) decoded as one batch, each with
    its own seed (seed + i): greedy choices equal the n=1 answer, a seeded call is reproducible
    and its choice i is the n=1 answer with seed + i; usage sums the completion tokens."""
    import pyllamaspec.frontends.llama_choices as lc
    batches = []

    def together(ids, *a, **kw):
        batches.append(len(ids))
        return generate_together(ids, *a, **kw)
    generate_together = lc.generate_together
    monkeypatch.setattr(lc, "generate_together", together)
    p = "The capital of France is"
    one = llm.create_completion(p, max_tokens=6, temperature=0, logprobs=1)
    three = llm.create_completion(p, max_tokens=6, temperature=0, n=3, logprobs=1)
    assert batches == [3] and [c["index"] for c in three["choices"]] == [0, 1, 2]
    for c in three["choices"]:
        assert c["text"] == one["choices"][0]["text"] and c["finish_reason"] == "length"
        assert c["logprobs"]["tokens"] == one["choices"][0]["logprobs"]["tokens"]
    assert three["usage"] == {"prompt_tokens": one["usage"]["prompt_tokens"], "completion_tokens": 18,
                              "total_tokens": one["usage"]["prompt_tokens"] + 18}
    sampled = dict(max_tokens=8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11)
    a = [c["text"] for c in llm.create_completion(p, n=3, **sampled)["choices"]]
    assert a == [c["text"] for c in llm.create_completion(p, n=3, **sampled)["choices"]] and len(set(a)) > 1
    assert a[1] == llm.create_completion(p, **{**sampled, "seed": 12})["choices"][0]["text"]
    # stop strings, a grammar and a tokenized prompt reach every choice as they reach n=1's
    for kw in (dict(stop="."), dict(grammar='root ::= " Paris" | " Lyon"'), dict(prompt=llm.tokenize(p))):
        kw = {"prompt": p, "max_tokens": 6, "temperature": 0, **kw}
        ref = llm.create_completion(**kw)["choices"][0]
        assert [(c["text"], c["finish_reason"]) for c in llm.create_completion(**kw, n=2)["choices"]] == \
            [(ref["text"], ref["finish_reason"])] * 2
    assert batches == [3, 3, 3, 2, 2, 2]
    chat_one = llm.create_chat_completion(messages=Q, max_tokens=5, temperature=0)
    chat_two = llm.create_chat_completion(messages=Q, max_tokens=5, temperature=0, n=2)
    assert [c["message"] for c in chat_two["choices"]] == [chat_one["choices"][0]["message"]] * 2
    assert [c["index"] for c in chat_two["choices"]] == [0, 1] and chat_two["usage"]["completion_tokens"] == 10


@pytest.mark.parametrize("n", [0, -1, 1.5, "2", True, None])
def test_bad_n_refused_by_name(llm, n):
    with pytest.raises(InvalidArgumentError, match="n must be"):
        llm.create_completion("Hi", max_tokens=2, n=n)
    with pytest.raises(InvalidArgumentError, match="n must be"):
        llm.create_chat_completion(messages=Q, max_tokens=2, n=n)


def test_n_with_stream_or_tools_refused(llm):
    with pytest.raises(InvalidArgumentError, match="n=2 with stream"):
        llm.create_completion("Hi", max_tokens=2, n=2, stream=True)
    with pytest.raises(InvalidArgumentError, match="n=2 with stream"):
        llm.create_chat_completion(messages=Q, max_tokens=2, n=2, stream=True)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(InvalidArgumentError, match="n=2 with tools"):
        llm.create_chat_completion(messages=Q, max_tokens=2, n=2, tools=tools)


def test_detokenize_bytes_as_llama_cpp_python_on_a_space_prefix(tmp_path):
    """llama-cpp-python joins the pieces and drops a leading space only after a BOS; the engine's
    detokenize drops a SentencePiece space prefix from any first token (llama.cpp's
    llama_detokenize). The layer's methods over a vocabulary-only Tokenizer (they read only
    the vocabulary), on a Llama-2-style vocabulary with the space prefix."""
    from tokenizer_helpers import write_tokenizer_gguf
    from pyllamaspec.engine.vocab import Tokenizer
    from pyllamaspec.frontends.llama_api import LlamaMethods
    normal = ["\u2581", "H", "e", "l", "o", "w", "r", "d", "He", "ll", "llo", "Hello", "\u2581Hello", "or", "wor", "ld",
              "world", "\u2581world", "!", "\u2581\u2581"]           # test_tokenizer.py's llama2_style
    toks = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)] + [t.encode() for t in normal]
    types, scores = [2, 3, 3] + [6] * 256 + [1] * len(normal), [0.0] * 259 + [-float(k) for k in range(len(normal))]
    write_tokenizer_gguf(tmp_path / "spm.gguf", model="llama", tokens=toks, types=types, scores=scores, bos=1, eos=2,
                         unk=0)

    class Vocab(LlamaMethods, Tokenizer):
        pass
    with Vocab(tmp_path / "spm.gguf") as t:
        ids = t.tokenize(b"Hello world!")
        assert ids[0] == t.bos_token and t.detokenize(ids, special=False) == b"Hello world!"
        tail = ids[2:]                                    # "\u2581world", "!"
        assert t.detokenize(tail, special=False) == b" world!" != t.detokenize(tail).encode()
        assert t.detokenize(tail, prev_tokens=ids[:-2]) == b" world!"
