"""Tool calling (structured/tools/): for each family's template (llama.cpp's copies,
tests/llamacpp_templates.py), the prompt with tools, earlier calls and results renders as
llama.cpp renders it, answers in the family's syntax parse into the same OpenAI messages
(tests/data/reference/chat_tools_llamacpp.json, scripts/chat_tools_reference.py), the
grammar of a required or named tool_choice takes the family's calls and nothing else,
streamed deltas add up to the whole answer, and a round trip with the openai client works for
every family."""
from __future__ import annotations

import datetime
import json

import pytest

import pyllamaspec
from conftest import reference_dir
from llamacpp_templates import FixedNow, template_or_skip
from pyllamaspec import Model
from pyllamaspec.engine import chat_template
from pyllamaspec.engine.chat_template import ChatTemplate
from pyllamaspec.engine.grammar import Grammar
from pyllamaspec.structured.tools import Context, family_of, parse_answer
from pyllamaspec.structured.tools.request import ToolRequest

FIXTURE = json.loads((reference_dir() / "chat_tools_llamacpp.json").read_text())
FAMILIES = FIXTURE["families"]
# llama.cpp b11434's generated parser for Mistral Small 3.2 refuses the syntax its own template and
# grammar write ([TOOL_CALLS]name[ARGS]{...}); we read it (json_families.MistralArgs)
KNOWN_DEVIATIONS = {"mistral-small-3.2"}


def _source(family: str) -> str:
    return template_or_skip(FAMILIES[family]["template_file"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_rendering_equals_llamacpp(family, monkeypatch):
    monkeypatch.setattr(chat_template, "datetime", FixedNow(datetime.date.fromisoformat(FIXTURE["date"])))
    tmpl = ChatTemplate(_source(family), "<|im_start|>", "<|im_end|>", family)    # SmolLM2's bos / eos
    for i, case in enumerate(FAMILIES[family]["cases"]):
        q = case["request"]
        render = lambda: tmpl.render(q["messages"], add_generation_prompt=q.get("add_generation_prompt", True),  # noqa: E731
                                     tools=q.get("tools"))
        if "error" in case:                   # the template refuses (raise_exception), here too
            with pytest.raises(pyllamaspec.ChatTemplateError):
                render()
            continue
        assert render() == case["prompt"], (family, i)


def _ctx(case: dict) -> Context:
    q = case["request"]
    return Context(q.get("tools", []), q.get("parallel_tool_calls", False),
                   case["generation_prompt"].rstrip().endswith("<think>"))


def _as_message(p) -> dict:
    msg = {"role": "assistant", "content": p.content}
    if p.reasoning is not None:
        msg["reasoning_content"] = p.reasoning
    if p.calls:
        msg["tool_calls"] = [dict({"type": "function", "function": {"name": c.name, "arguments": c.arguments}},
                                  **({"id": c.id} if c.id else {})) for c in p.calls]
    return msg


@pytest.mark.parametrize("family", list(FAMILIES))
def test_parsing_equals_llamacpp(family):
    fam = family_of(_source(family))
    assert fam is not None
    compared = 0
    for case in FAMILIES[family]["cases"]:
        if "error" in case:
            continue
        q = case["request"]
        for text, want in zip(q["outputs"], case["parsed"]):
            got = _as_message(parse_answer(fam, text, _ctx(case), calls=q["tool_choice"] != "none"))
            if "error" in want:
                continue                      # llama.cpp refused the text; we read it leniently
            assert got == want["message"], (family, text)
            compared += 1
    assert compared >= (0 if family in KNOWN_DEVIATIONS else 2)


def test_parse_comparison_can_fail():
    case = FAMILIES["qwen3"]["cases"][0]
    fam = family_of(_source("qwen3"))
    text = case["request"]["outputs"][2]
    got = _as_message(parse_answer(fam, text.replace("Let me check.\n", "Let me check."), _ctx(case)))
    assert got != case["parsed"][2]["message"]


def _complete(message: dict) -> bool:
    try:
        return all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in message["tool_calls"])
    except json.JSONDecodeError:
        return False


def _accepts(g: Grammar, model: Model, text: str) -> bool:
    ids = model.tokenize(text, add_special=False, parse_special=False)
    return g.accept(ids) == len(ids) and g.may_end


@pytest.mark.parametrize("family", list(FAMILIES))
def test_required_grammar_takes_the_familys_calls(family, smollm2_path):
    """The grammar of tool_choice "required" takes a call of each sample answer llama.cpp
    parsed into one call (in our own syntax for Mistral Small); a named choice refuses the other
    tool, and an answer without a call."""
    source = _source(family)
    case = next(c for c in FAMILIES[family]["cases"] if c["request"]["tool_choice"] == "required" and "error" not in c)
    tools = case["request"]["tools"]
    with Model(smollm2_path, n_ctx=64) as m:
        grammar = ToolRequest.make(tools, "required", False).grammar(source, case["generation_prompt"], False)
        fam = family_of(source)
        alone = Context(tools, True, case["generation_prompt"].rstrip().endswith("<think>"))
        samples = [t for t, p in zip(case["request"]["outputs"], case["parsed"])
                   if len(p.get("message", {}).get("tool_calls", [])) == 1 and _complete(p["message"])
                   and len(parse_answer(fam, t, alone).calls) == 1 and "<|call|>" not in t]   # a call ends gpt-oss
        if family in KNOWN_DEVIATIONS:
            samples = [case["request"]["outputs"][1]]
        assert samples
        for text in samples:
            assert _accepts(Grammar(grammar, m), m, text), (family, text)
        named = ToolRequest.make(tools, {"type": "function", "function": {"name": "search"}}, False)
        g = named.grammar(source, case["generation_prompt"], False)
        weather = next(t for t in samples if "get_weather" in t)
        assert not _accepts(Grammar(g, m), m, weather)
        assert not _accepts(Grammar(grammar, m), m, "The weather is sunny.")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_streamed_deltas_add_up(family):
    """Fed a few characters at a time, the reader's deltas make the same message as the whole
    text: content and reasoning in order, each call's id and name first, then its arguments."""
    source = _source(family)
    case = FAMILIES[family]["cases"][2]
    req = ToolRequest.make(case["request"]["tools"], "auto", True)
    for text in case["request"]["outputs"]:
        reader = req.output(source, case["generation_prompt"], True)
        calls: dict[int, dict] = {}
        content = reasoning = ""
        deltas = [d for i in range(0, len(text), 3) for d in reader.push(text[i:i + 3])] + reader.finish()
        for d in deltas:
            content += d.get("content", "")
            reasoning += d.get("reasoning_content", "")
            for tc in d.get("tool_calls", []):
                c = calls.setdefault(tc["index"], {"arguments": "", "pieces": 0})
                if "id" in tc:
                    assert c["arguments"] == "" and "name" not in c     # id and name come first
                    c.update(id=tc["id"], name=tc["function"]["name"])
                if tc["function"].get("arguments"):
                    c["arguments"] += tc["function"]["arguments"]
                    c["pieces"] += 1
        whole = reader.message()
        assert content == whole["content"] and reasoning == whole.get("reasoning_content", "")
        assert [(c["id"], c["name"], c["arguments"]) for c in calls.values()] == \
               [(t["id"], t["function"]["name"], t["function"]["arguments"]) for t in whole.get("tool_calls", [])]
        if family == "qwen3" and len(text) > 60 and "tool_call" in text:
            assert max(c["pieces"] for c in calls.values()) > 1          # JSON arguments stream


ROUND_TRIP_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "London"]}}, "required": ["city"]}}}]


# two families in the README's command, the other four in the slow set (~4 s each)
@pytest.mark.parametrize("family", ["qwen3", "llama3.1"] + [pytest.param(f, marks=pytest.mark.slow)
                                                            for f in ("qwen35", "gpt-oss", "mistral-nemo", "gemma4")])
def test_openai_round_trip(family, smollm2_path, tmp_path):
    """tools in, tool_calls out (a named tool_choice: the grammar makes even a 135M model call
    it), the call and its result in, an answer out; the streamed call equals the whole one."""
    from test_server import Server
    path = tmp_path / "template.jinja"
    path.write_text(_source(family))
    srv = Server(["-m", str(smollm2_path), "-c", "2048", "-t", "1", "--chat-template-file", str(path)])
    try:
        client = srv.client()
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        kw = dict(model="x", tools=ROUND_TRIP_TOOLS, parallel_tool_calls=False, max_tokens=96, temperature=0,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
        r = client.chat.completions.create(messages=msgs, **kw)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather" and call.id
        assert isinstance(json.loads(call.function.arguments), dict)
        stream = list(client.chat.completions.create(messages=msgs, stream=True, **kw))
        parts = [tc for ch in stream if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
        assert parts[0].function.name == "get_weather" and parts[0].id
        assert "".join(p.function.arguments or "" for p in parts) == call.function.arguments
        assert [ch.choices[0].finish_reason for ch in stream if ch.choices][-1] == "tool_calls"
        msgs += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "{\"temperature\": 21}"}]
        r2 = client.chat.completions.create(messages=msgs, model="x", tools=ROUND_TRIP_TOOLS, tool_choice="none",
                                            max_tokens=8, temperature=0)
        assert isinstance(r2.choices[0].message.content, str) and not r2.choices[0].message.tool_calls
    finally:
        srv.stop()


def test_python_api_returns_tool_calls(smollm2_path):
    with Model(smollm2_path, n_ctx=2048) as m:
        r = pyllamaspec.chat([{"role": "user", "content": "Weather in London?"}], m, tools=ROUND_TRIP_TOOLS,
                             tool_choice={"type": "function", "function": {"name": "get_weather"}},
                             parallel_tool_calls=False, chat_template=_source("qwen3"), temperature=0, max_tokens=64)
        assert r.finish_reason == "tool_calls" and r.tool_calls[0].name == "get_weather"
        assert r.tool_calls[0].args()["city"] in ("Paris", "London")
        assert r.message["tool_calls"][0]["id"] == r.tool_calls[0].id
        with pytest.raises(pyllamaspec.InvalidArgumentError, match="not one of the tools"):
            pyllamaspec.chat([{"role": "user", "content": "x"}], m, tools=ROUND_TRIP_TOOLS,
                             tool_choice={"type": "function", "function": {"name": "nope"}})
