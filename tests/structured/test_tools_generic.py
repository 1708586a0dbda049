"""The generic tool-call format (structured/tools/generic.py) for templates without tool syntax: on the
two real models (SmolLM2's template has none; Gemma 3 270M has no template at all) a "required" or
named tool_choice yields OpenAI tool_calls whose arguments are valid against the tool's schema,
"auto" a call or an answer, "none" plain text; the grammar takes the format and nothing else; the
parse reads whole and streamed answers alike; earlier calls and results render; templates with a
known tool syntax are untouched."""
from __future__ import annotations

import json

import jsonschema
import pytest

import pyllamaspec
from pyllamaspec.engine.chat_template import ChatPrompt
from pyllamaspec.engine.grammar import Grammar
from pyllamaspec.files.offline import real_model_path
from pyllamaspec.structured.formats import chat_spec, tools_spec
from pyllamaspec.structured.tools import Context
from pyllamaspec.structured.tools.generic import Generic, answer_schema
from pyllamaspec.structured.tools.request import ToolRequest

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                                      "limit": {"type": "integer"}},
                                     "required": ["query"]}}}
TOOLS = [WEATHER, SEARCH]
Q = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    with pyllamaspec.Model(real_model_path(request.param), n_ctx=2048) as m:
        yield m


def _valid(call) -> None:
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "search"}}])
def test_a_required_or_named_call_is_made_with_valid_arguments(model, choice):
    for parallel in (False, True):
        r = pyllamaspec.chat(Q, model, tools=TOOLS, tool_choice=choice, parallel_tool_calls=parallel,
                             max_tokens=160, temperature=0)
        assert r.tool_calls and r.message["content"] == "", r.message
        for c in r.tool_calls:
            _valid(c)
            if isinstance(choice, dict):
                assert c.name == "search"
        # several calls: a small model may repeat them until max_tokens (each one read is whole)
        assert r.finish_reason == "tool_calls" or (parallel and r.finish_reason == "length")
        assert r.message["tool_calls"][0]["id"].startswith("call_")


def test_auto_answers_or_calls_and_none_answers_text(model):
    r = pyllamaspec.chat(Q, model, tools=TOOLS, tool_choice="auto", max_tokens=96, temperature=0)
    assert r.tool_calls or (r.message["content"] and not r.message["content"].lstrip().startswith("{"))
    for c in r.tool_calls:
        _valid(c)
    r = pyllamaspec.chat(Q, model, tools=TOOLS, tool_choice="none", max_tokens=24, temperature=0)
    assert not r.tool_calls and r.finish_reason != "tool_calls"


def test_the_prompt_describes_the_tools_and_the_grammar_holds_the_format(model):
    spec = tools_spec(TOOLS, "required")
    prompt, bound = spec.bind(ChatPrompt.make(Q, tools=TOOLS), model)
    assert bound.generic_tools and bound.text
    text = prompt.text(model)
    assert '"name": "get_weather"' in text and "`tool_call`" in text and "What is the weather" in text
    g = Grammar(bound.text, model)
    ok = model.tokenize('{"tool_call": {"name": "search", "arguments": {"query": "x"}}}', add_special=False)
    assert g.accept(ok) == len(ok) and g.may_end
    for bad in ('{"tool_call": {"name": "delete_all", "arguments": {}}}', '{"response": "hi"}',
                '{"tool_call": {"name": "search", "arguments": {"limit": 3}}}', "Sure!"):
        g = Grammar(bound.text, model)
        ids = model.tokenize(bad, add_special=False)
        assert g.accept(ids) < len(ids) or not g.may_end, bad


def test_an_auto_grammar_also_takes_a_response(model):
    _, bound = tools_spec(TOOLS, "auto").bind(ChatPrompt.make(Q, tools=TOOLS), model)
    g = Grammar(bound.text, model)
    ids = model.tokenize('{"response": "It is sunny."}', add_special=False)
    assert g.accept(ids) == len(ids) and g.may_end


def test_a_round_trip_renders_earlier_calls_and_results(model):
    history = Q + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21 C, clear"}]
    prompt, _ = tools_spec(TOOLS, "auto").bind(ChatPrompt.make(history, tools=TOOLS), model)
    text = prompt.text(model)
    assert '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}' in text
    assert '{"tool_response": {"name": "get_weather", "content": "21 C, clear"}}' in text
    r = pyllamaspec.chat(history, model, tools=TOOLS, max_tokens=48, temperature=0)
    assert r.finish_reason in ("stop", "length", "tool_calls")


def test_a_template_with_tool_syntax_keeps_its_own():
    from llamacpp_templates import template
    try:
        qwen3 = template("Qwen-Qwen3-0.6B.jinja").decode()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert not ToolRequest.make(TOOLS, "required").generic(qwen3)
    assert ToolRequest.make(TOOLS, "required").generic("{{ messages[0].content }}")
    assert not ToolRequest.make(TOOLS, "none").generic("{{ messages[0].content }}")
    assert not chat_spec(None).generic_tools


ANSWERS = [
    ('{"tool_call": {"name": "search", "arguments": {"query": "été", "limit": 3}}}',
     "", [("search", '{"query": "été", "limit": 3}')]),
    ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
     '{"name": "search", "arguments": {"query": "x"}}]}',
     "", [("get_weather", '{"city": "Paris"}'), ("search", '{"query": "x"}')]),
    ('{"response": "It is \\"sunny\\" \\u00e9t\\u00e9."}', 'It is "sunny" été.', []),
    ("Plain words, no JSON.", "Plain words, no JSON.", []),
    ('{"other": 1}', '{"other": 1}', []),
]


@pytest.mark.parametrize("text,content,calls", ANSWERS)
def test_answers_parse_whole_and_streamed(text, content, calls):
    ctx = Context(TOOLS, parallel=True)
    req = ToolRequest.make(TOOLS, "auto", True)
    for stream in (False, True):
        reader = req.output("{{ messages }}", "", True)
        deltas = []
        if stream:
            for c in text:
                deltas += reader.push(c)
            deltas += reader.finish()
        else:
            reader.text = text
        msg = reader.message()
        assert msg["content"] == content
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls", [])] == calls
        if stream:
            assert "".join(d.get("content", "") for d in deltas) == content
            args = {}
            for d in deltas:
                for tc in d.get("tool_calls", []):
                    args[tc["index"]] = args.get(tc["index"], "") + tc["function"].get("arguments", "")
            assert [args[i] for i in sorted(args)] == [a for _, a in calls]
    assert Generic().parse(text, ctx).content == content


def test_the_schema_is_a_call_or_a_response():
    ctx = Context(TOOLS)
    s = answer_schema(ctx, "auto")
    jsonschema.validate({"response": "hi"}, s)
    jsonschema.validate({"tool_call": {"name": "search", "arguments": {"query": "q"}}}, s)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"response": "hi"}, answer_schema(ctx, "required"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tool_call": {"name": "nope", "arguments": {}}}, s)
