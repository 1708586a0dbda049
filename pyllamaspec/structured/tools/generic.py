"""Tool calls for templates with no tool syntax (SmolLM2, Gemma 3, Phi, ...): a generic JSON format,
as older llama.cpp's "generic" format was. The tools are described in a system message, and a
grammar holds the answer to one JSON object:

    {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    {"tool_calls": [{"name": ..., "arguments": ...}, ...]}          (parallel_tool_calls)
    {"response": "text for the user"}                               (tool_choice "auto" only)

so a "required" or named tool_choice always yields calls whose arguments match the tool's
schema, and "auto" a call or an answer. tool_choice "none" does not use it: the template renders
the conversation as it is and the answer is read as text."""
from __future__ import annotations

import json
from typing import Any

from ..json_schema import SchemaConverter, json_schema_to_grammar
from ..schema_model import read_schema
from .base import (Call, Context, Family, Parsed, held_back, json_value, object_members, skip_ws,
                   until_rule)

# What the model reads before the conversation (merged into the first system message).
INTRO = "You can call any of the following tools to satisfy the user's requests: "
ASK = {
    "auto": "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply "
            "to the user's request.",
    "required": "Respond in JSON format with `tool_call` (a request to call tools).",
}


def tool_schema(tool: dict) -> dict:
    f = tool["function"]
    params = f.get("parameters")
    return {"type": "object",
            "properties": {"name": {"const": f["name"]},
                           "arguments": params if isinstance(params, dict) and params else {"type": "object"}},
            "required": ["name", "arguments"]}


def answer_schema(ctx: Context, choice: str) -> dict:
    """The JSON schema of an answer: a call (or several, parallel), or for "auto" also a response."""
    one = [tool_schema(t) for t in ctx.tools]
    call = one[0] if len(one) == 1 else {"anyOf": one}
    if ctx.parallel:
        calls = {"type": "object", "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1}},
                 "required": ["tool_calls"]}
    else:
        calls = {"type": "object", "properties": {"tool_call": call}, "required": ["tool_call"]}
    if choice != "auto":
        return calls
    response = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
    return {"anyOf": [calls, response]}


def system_text(tools: list[dict], choice: str) -> str:
    """The tools and the answer's format, for the system message (a named choice names its tool)."""
    listed = json.dumps([t["function"] for t in tools], indent=2, ensure_ascii=False)
    ask = ASK["auto" if choice == "auto" else "required"]
    if choice not in ("auto", "required"):
        ask += f" Call the tool `{choice}`."
    return f"{INTRO}{listed}\n\n{ask}"


def with_system(messages: list[dict], text: str) -> list[dict]:
    """messages with `text` at the start of the system message (one is added if there is none)."""
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        return [dict(messages[0], content=messages[0]["content"] + "\n\n" + text)] + list(messages[1:])
    return [{"role": "system", "content": text}] + list(messages)


def generic_messages(messages: list[dict]) -> list[dict]:
    """The conversation as a template without tool syntax can show it: an assistant's calls become
    its JSON answer in this format, a tool's result a user message {"tool_response": ...}."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            shaped = [{"name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))}
                      for c in calls]
            body = {"tool_call": shaped[0]} if len(shaped) == 1 else {"tool_calls": shaped}
            text = json.dumps(body, ensure_ascii=False)
            content = m.get("content")
            m = {k: v for k, v in m.items() if k != "tool_calls"}
            m["content"] = (content + "\n" + text) if isinstance(content, str) and content else text
        elif m.get("role") == "tool":
            result = {"content": m.get("content")}
            if m.get("name"):
                result = {"name": m["name"], **result}
            m = {"role": "user", "content": json.dumps({"tool_response": result}, ensure_ascii=False)}
        out.append(m)
    return out


def _arguments(a: Any) -> Any:
    """A call's arguments as JSON (the OpenAI shape gives them as text)."""
    if isinstance(a, str):
        try:
            return json.loads(a)
        except json.JSONDecodeError:
            return a
    return a


def _partial_string(text: str, i: int) -> str | None:
    """The JSON string starting at text[i] (its opening quote) decoded as far as it goes: complete
    escapes only. None if there is no string at i."""
    if i >= len(text) or text[i] != '"':
        return None
    done = json_value(text, i)
    if done is not None:
        return done[0] if isinstance(done[0], str) else None
    body = text[i + 1:]
    for cut in range(len(body), max(-1, len(body) - 7), -1):     # an escape is at most 6 characters
        try:
            return json.loads('"' + body[:cut] + '"')
        except json.JSONDecodeError:
            continue
    return None


class Generic(Family):
    """The JSON answer of a template without tool syntax (never detected: chosen where no family is)."""
    name = "generic"
    openers = ("{",)

    @staticmethod
    def detect(source: str) -> bool:
        return False

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        if ctx.think_open:                   # the block the generation prompt opened, then the JSON
            k = text.find("</think>")
            if k < 0:
                return Parsed("", text if final else text[:len(text) - held_back(text, ("</think>",))])
            out = self.parse(text[k + len("</think>"):], Context(ctx.tools, ctx.parallel), final)
            out.reasoning = text[:k].strip() or None
            return out
        i = skip_ws(text, 0)
        if i >= len(text):
            return Parsed("" if not final else text)
        if text[i] != "{":
            return Parsed(text)                      # not the format (no grammar held it): plain text
        members, _, complete = object_members(text, i)
        if "response" in members:
            value, start, _ = members["response"]
            s = value if isinstance(value, str) else _partial_string(text, start)
            if s is None and value is not None:
                s = json.dumps(value, ensure_ascii=False)
            return Parsed(s or "")
        out = Parsed("")
        if "tool_call" in members:
            call = self._call(text, members["tool_call"][1])
            out.calls = [call] if call is not None else []
        elif "tool_calls" in members:
            out.calls = self._calls(text, members["tool_calls"][1])
        elif final and not complete:
            return Parsed(text)                      # cut before any key: what was written
        if final and not out.calls and complete and not members.keys() & {"tool_call", "tool_calls"}:
            return Parsed(text)                      # some other JSON object: the model's text
        if final:
            out.calls = [c for c in out.calls if c.done]     # a call cut by max_tokens is no call
        return out

    @staticmethod
    def _call(text: str, i: int) -> Call | None:
        m, _, complete = object_members(text, i)
        if not isinstance(m.get("name", (None,))[0], str) or "arguments" not in m:
            return None
        _, a, b = m["arguments"]
        return Call(m["name"][0], text[a:b], None, complete)

    def _calls(self, text: str, i: int) -> list[Call]:
        i = skip_ws(text, i)
        if i >= len(text) or text[i] != "[":
            return []
        out, i = [], i + 1
        while True:
            i = skip_ws(text, i)
            call = self._call(text, i)
            if call is None:
                return out
            out.append(call)
            _, end, complete = object_members(text, i)
            i = skip_ws(text, end)
            if not complete or i >= len(text) or text[i] != ",":
                return out
            i += 1

    def call_rule(self, conv, tool: dict) -> str:        # the grammar is the schema's (grammar below)
        raise NotImplementedError

    def grammar(self, ctx: Context, choice: str = "required") -> str:
        """The answer's JSON; after the rest of a reasoning block the generation prompt opened."""
        if not ctx.think_open:
            return json_schema_to_grammar(answer_schema(ctx, choice))
        conv = SchemaConverter()
        answer = conv.visit(read_schema(answer_schema(ctx, choice)), "answer")
        think = until_rule(conv, "think-text", "</think>")
        conv.add_rule("root", f'{think} "</think>" space {answer}')
        return conv.grammar()


__all__ = ["Generic", "answer_schema", "system_text", "with_system", "generic_messages"]

