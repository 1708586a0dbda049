"""Tools and tool-call messages in the shapes llama.cpp b11434 hands a chat template
(common/chat.cpp), so that a template renders them as llama-server renders them:

- tools become {"type": "function", "function": {"name", "description" ("" if none),
  "parameters" ({} if none)}}, whatever else a request's tool carries;
- a message becomes {"role", "content" ("" if none), "reasoning_content", "name",
  "tool_call_id", "tool_calls": [{"type", "function": {"name", "arguments"}, "id"}]} with the
  optional keys only where set, tool-call arguments as JSON text;
- where the template reads arguments as an object (llama.cpp probes it: caps'
  supports_object_arguments), string arguments are parsed into objects.
`tojson` in templates keeps key order and writes ", " / ": " (chat_template.py)."""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Mapping, Sequence

from ..errors import InvalidArgumentError


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def check_tools(tools: Any) -> list[dict]:
    """OpenAI's tools: a list of {"type": "function", "function": {"name": ..., ...}}."""
    if not isinstance(tools, (list, tuple)):
        raise InvalidArgumentError(f"tools must be a list, got {type(tools).__name__}")
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping) or t.get("type") != "function" or not isinstance(t.get("function"), Mapping):
            raise InvalidArgumentError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        f = t["function"]
        if not isinstance(f.get("name"), str) or not f["name"]:
            raise InvalidArgumentError(f"tools[{i}].function.name must be a non-empty string")
        params = f.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise InvalidArgumentError(f"tools[{i}].function.parameters must be a JSON schema object")
    return [dict(t) for t in tools]


def is_function_tool(t: Any) -> bool:
    return isinstance(t, Mapping) and t.get("type") == "function" and isinstance(t.get("function"), Mapping)


def template_tools(tools: Sequence[Mapping]) -> list:
    """OpenAI function tools in llama.cpp's shape; anything else reaches the template as given
    (Hugging Face's apply_chat_template takes other shapes too)."""
    if not isinstance(tools, (list, tuple)):
        raise InvalidArgumentError(f"tools must be a list, got {type(tools).__name__}")
    if not all(is_function_tool(t) for t in tools):
        return list(tools)
    out = []
    for t in tools:
        f = t["function"]
        params = f.get("parameters")
        out.append({"type": "function", "function": {"name": f["name"], "description": f.get("description") or "",
                                                     "parameters": params if params is not None else {}}})
    return out


def _tool_call(i: int, tc: Any) -> dict:
    if not isinstance(tc, Mapping) or tc.get("type", "function") != "function" or not isinstance(tc.get("function"), Mapping):
        raise InvalidArgumentError(f"tool_calls[{i}] must be {{'type': 'function', 'function': {{...}}}}")
    f = tc["function"]
    if not isinstance(f.get("name"), str):
        raise InvalidArgumentError(f"tool_calls[{i}].function.name must be a string")
    args = f.get("arguments", "")
    out = {"type": "function", "function": {"name": f["name"], "arguments": args if isinstance(args, str) else _dump(args)}}
    if isinstance(tc.get("id"), str) and tc["id"]:
        out["id"] = tc["id"]
    return out


def template_message(m: Mapping) -> dict:
    """One message as llama.cpp's to_json_oaicompat writes it."""
    out: dict = {"role": m["role"], "content": m.get("content") or ""}
    for key in ("reasoning_content", "name", "tool_call_id"):
        if isinstance(m.get(key), str) and m[key]:
            out[key] = m[key]
    if m.get("tool_calls"):
        out["tool_calls"] = [_tool_call(i, tc) for i, tc in enumerate(m["tool_calls"])]
    return out


def has_tool_messages(messages: Sequence[Mapping]) -> bool:
    return any(m.get("tool_calls") or m.get("role") == "tool" or m.get("content") is None for m in messages)


def object_arguments(messages: list[dict]) -> list[dict]:
    """Tool-call arguments parsed from JSON text into objects (llama.cpp's func_args_not_string)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                args = tc["function"]["arguments"]
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except json.JSONDecodeError as e:
                        raise InvalidArgumentError(f"tool call arguments are not valid JSON: {e}") from None
                calls.append({**tc, "function": {**tc["function"], "arguments": args}})
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


_MARK = "pyllamaspec_arg_mark"


@lru_cache(maxsize=32)
def supports_object_arguments(source: str, compile_fn) -> bool:
    """Whether the template reads a tool call's arguments as an object: rendered with object
    arguments, the argument's value shows in the text (llama.cpp checks that it is read)."""
    probe = [{"role": "user", "content": "User message"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "call00001", "type": "function", "function": {"name": "tool1", "arguments": {"arg": _MARK}}}]},
             {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
             {"role": "assistant", "content": "The tool response was 'tool response'"},
             {"role": "user", "content": "User message"}]
    tools = [{"type": "function", "function": {"name": "tool1", "description": "Tool description", "parameters": {
        "type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
        "required": ["arg"]}}}]
    try:
        out = compile_fn(source).render(messages=probe, tools=tools, add_generation_prompt=False, bos_token="",
                                        eos_token="")
    except Exception:        # noqa: BLE001 - a template that refuses the probe reads no object
        return False
    return _MARK in out


@lru_cache(maxsize=32)
def supports_parallel_tool_calls(source: str, compile_fn) -> bool:
    """Whether the template shows two calls of one assistant message (llama-server's default
    for parallel_tool_calls)."""
    calls = [{"id": f"call0000{i}", "type": "function", "function": {"name": f"{_MARK}{i}", "arguments": {"arg": "v"}}}
             for i in (1, 2)]
    probe = [{"role": "user", "content": "User message"}, {"role": "assistant", "content": "", "tool_calls": calls},
             {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
             {"role": "tool", "content": "Tool response", "tool_call_id": "call00002"},
             {"role": "user", "content": "User message"}]
    try:
        out = compile_fn(source).render(messages=probe, tools=[], add_generation_prompt=False, bos_token="",
                                        eos_token="")
    except Exception:        # noqa: BLE001 - a template that refuses two calls does not take them
        return False
    return f"{_MARK}1" in out and f"{_MARK}2" in out


__all__ = ["check_tools", "supports_parallel_tool_calls", "template_tools", "template_message", "object_arguments", "supports_object_arguments",
           "has_tool_messages"]
