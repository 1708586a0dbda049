"""Thinking models (structured/reasoning.py) against llama.cpp b11434
(tests/data/reference/chat_reasoning_llamacpp.json, scripts/chat_reasoning_reference.py): with
thinking on and off (chat_template_kwargs' enable_thinking) the prompt renders as llama.cpp renders
it, the thinking tags are llama.cpp's, and each --reasoning-format splits answers as llama-server
splits them, whole and as a stream (the deltas never run ahead of llama.cpp's partial parse and
add up to the whole answer)."""
from __future__ import annotations

import datetime
import json

import pytest

from conftest import reference_dir
from llamacpp_templates import FixedNow, template_or_skip
from pyllamaspec.engine import chat_template
from pyllamaspec.engine.chat_template import ChatTemplate
from pyllamaspec.errors import InvalidArgumentError
from pyllamaspec.structured.reasoning import Reasoning, reasoning_output, think_syntax

FIXTURE = json.loads((reference_dir() / "chat_reasoning_llamacpp.json").read_text())
FAMILIES = FIXTURE["families"]
# Where llama.cpp's generated parser does something no rule of the template explains, we differ:
# SmolLM3 with thinking off prefixes every answer with "\n"; gpt-oss under --reasoning-format none
# drops the "<|start|>assistant<|channel|>final<|message|>" between the channels from the content.
DEVIATIONS = {("smollm3", False, "deepseek"), ("smollm3", False, "auto"), ("smollm3", False, "deepseek-legacy"),
              ("gpt-oss", True, "none"), ("gpt-oss", False, "none")}


def _source(family: str) -> str:
    return template_or_skip(FAMILIES[family]["template_file"])


def _cases(family: str):
    for case in FAMILIES[family]["cases"]:
        assert "error" not in case, case
        yield case["request"], case


@pytest.mark.parametrize("family", list(FAMILIES))
def test_thinking_on_and_off_render_as_llamacpp(family, monkeypatch):
    monkeypatch.setattr(chat_template, "datetime", FixedNow(datetime.date.fromisoformat(FIXTURE["date"])))
    tmpl = ChatTemplate(_source(family), "<|im_start|>", "<|im_end|>", family)    # SmolLM2's bos / eos
    seen = set()
    for q, case in _cases(family):
        assert tmpl.render(q["messages"], enable_thinking=q["enable_thinking"]) == case["prompt"], (family, q)
        seen.add(case["prompt"])
    # gpt-oss's template reads reasoning_effort, not enable_thinking
    assert len(seen) == (2 if family == "gpt-oss" else 4), "thinking on and off render differently"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_thinking_tags_are_llamacpps(family):
    syntax = think_syntax(_source(family))
    case = FAMILIES[family]["cases"][0]
    assert case["supports_thinking"] and syntax is not None
    assert syntax.start == case["thinking_start_tag"]
    assert syntax.end in case["thinking_end_tags"]


def _message(reader, text: str, stream: bool) -> dict:
    if stream:
        for c in text:
            reader.push(c)
        reader.finish()
    else:
        reader.text = text
    return reader.message()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_answers_split_as_llama_server(family):
    source, checked = _source(family), 0
    for q, case in _cases(family):
        if (family, q["enable_thinking"], q["reasoning_format"]) in DEVIATIONS:
            continue
        for text, want in zip(q["outputs"], case["parsed"]):
            for stream in (False, True):
                got = _message(reasoning_output(source, case["generation_prompt"], q["reasoning_format"]), text, stream)
                assert got == want["message"], (family, q["enable_thinking"], q["reasoning_format"], text, stream)
                checked += 1
    assert checked >= 12


def _streamed(deltas: list[dict]) -> tuple[str, str]:
    return ("".join(d.get("content", "") for d in deltas), "".join(d.get("reasoning_content", "") for d in deltas))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_stream_never_runs_ahead_of_llamacpps_partial_parse(family):
    source = _source(family)
    for q, case in _cases(family):
        if not q.get("partial_outputs") or (family, q["enable_thinking"], q["reasoning_format"]) in DEVIATIONS:
            continue
        reader = reasoning_output(source, case["generation_prompt"], q["reasoning_format"])
        deltas, done = [], ""
        for prefix, partial in zip(q["partial_outputs"], case["partial"]):
            deltas += reader.push(prefix[len(done):])
            done = prefix
            content, reasoning = _streamed(deltas)
            want = partial["message"]
            assert want["content"].startswith(content), (family, prefix)
            assert want.get("reasoning_content", "").startswith(reasoning), (family, prefix)
        deltas += reader.finish()
        whole = reader.message()
        assert _streamed(deltas) == (whole["content"], whole.get("reasoning_content", "")), family


def test_reasoning_options_are_checked():
    assert Reasoning().format == "auto" and Reasoning().budget == -1
    for bad in ({"format": "think"}, {"budget": -2}, {"budget": 1.5}, {"budget": True}, {"message": 3}):
        with pytest.raises(InvalidArgumentError):
            Reasoning(**bad)


def test_a_template_without_a_block_reads_text():
    source = "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert think_syntax(source) is None
    r = reasoning_output(source, "", "auto")
    assert _message(r, "<think>x</think>y", False) == {"role": "assistant", "content": "<think>x</think>y"}
