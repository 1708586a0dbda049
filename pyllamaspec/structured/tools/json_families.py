"""Families whose calls are JSON objects: Qwen3 / Hermes (<tool_call>{"name", "arguments"}</tool_call>),
Llama 3.x ({"name", "parameters"} as the answer), Mistral Nemo ([TOOL_CALLS][{"name",
"arguments", "id"}, ...]) and Mistral Small 3.x ([TOOL_CALLS]name[ARGS]{...}). A call's arguments
are the source text of its JSON value, as llama.cpp returns them."""
from __future__ import annotations

from ..gbnf_text import format_literal
from ..json_schema import SchemaConverter
from .base import (Call, Context, Family, Parsed, first_of, json_value, object_members, schema_rule, skip_ws,
                   split_reasoning)


def _args(text: str, members: dict, key: str) -> str:
    _, a, b = members[key]
    return text[a:b]


class Hermes(Family):
    """Qwen3 (and Hermes-style templates): each call in <tool_call>...</tool_call>."""
    name = "hermes"
    openers = ("<tool_call>",)
    think = ("<think>", "</think>")
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    @staticmethod
    def detect(source: str) -> bool:
        return "<tool_call>" in source

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        reasoning, rest = split_reasoning(text, self, ctx)
        k = rest.find(self.OPEN)
        if k < 0:
            return Parsed(rest, reasoning)
        out = Parsed(rest[:k], reasoning)
        while k >= 0:
            members, end, complete = object_members(rest, k + len(self.OPEN))
            if "name" not in members or "arguments" not in members:
                break
            out.calls.append(Call(members["name"][0], _args(rest, members, "arguments"), None, complete))
            if not complete:
                break
            k = rest.find(self.OPEN, end)
        return out

    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        f = tool["function"]
        args = schema_rule(conv, f"tool-{f['name']}-args", f.get("parameters") or {"type": "object"})
        body = ('"{" space "\\"name\\"" space ":" space ' + format_literal('"' + f["name"] + '"')
                + ' space "," space "\\"arguments\\"" space ":" space ' + args + ' space "}"')
        return conv.add_rule(f"tool-{f['name']}", f'"<tool_call>\\n" space {body} space "</tool_call>"')


class Llama3(Family):
    """Llama 3.x: the answer is a JSON call {"name": ..., "parameters": {...}} (maybe after text)."""
    name = "llama3"
    openers = ('{"name"', '{"type"')

    @staticmethod
    def detect(source: str) -> bool:
        return "<|start_header_id|>" in source and '"parameters"' in source

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        k = first_of(text, self.openers)
        while k < len(text):
            members, end, complete = object_members(text, k)
            if "name" in members and "parameters" in members:
                return Parsed(text[:k], None, [Call(members["name"][0], _args(text, members, "parameters"), None,
                                                    complete)])
            if not final and not complete:      # a call may still be forming here
                return Parsed(text[:k])
            k = first_of(text, self.openers, k + 1)
        return Parsed(text)

    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        f = tool["function"]
        args = schema_rule(conv, f"tool-{f['name']}-args", f.get("parameters") or {"type": "object"})
        typed = '("\\"type\\"" space ":" space "\\"function\\"" space "," space)?'
        return conv.add_rule(f"tool-{f['name']}", f'"{{" space {typed} "\\"name\\"" space ":" space '
                             + format_literal('"' + f["name"] + '"')
                             + ' space "," space "\\"parameters\\"" space ":" space ' + args + ' space "}"')


class MistralJson(Family):
    """Mistral Nemo: [TOOL_CALLS] then a JSON array of {"name", "arguments", "id"}."""
    name = "mistral-json"
    openers = ("[TOOL_CALLS]",)

    @staticmethod
    def detect(source: str) -> bool:
        return "[TOOL_CALLS]" in source

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        k = text.find("[TOOL_CALLS]")
        if k < 0:
            return Parsed(text)
        out = Parsed(text[:k])
        i = skip_ws(text, k + len("[TOOL_CALLS]"))
        if i < len(text) and text[i] == "[":
            i += 1
        while True:
            members, end, complete = object_members(text, i)
            if "name" not in members or "arguments" not in members:
                break
            ident = members.get("id", (None,))[0]
            out.calls.append(Call(members["name"][0], _args(text, members, "arguments"),
                                  ident if isinstance(ident, str) else None, complete))
            i = skip_ws(text, end)
            if not complete or i >= len(text) or text[i] != ",":
                break
            i += 1
        return out

    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        f = tool["function"]
        args = schema_rule(conv, f"tool-{f['name']}-args", f.get("parameters") or {"type": "object"})
        return conv.add_rule(f"tool-{f['name']}", '"[TOOL_CALLS]" space "[" space "{" space "\\"name\\"" space ":" '
                             'space ' + format_literal('"' + f["name"] + '"') + ' space "," space "\\"arguments\\"" '
                             'space ":" space ' + args + ' space "," space "\\"id\\"" space ":" space "\\"" '
                             '[a-zA-Z0-9]{9} "\\"" space "}" space "]"')


class MistralArgs(Family):
    """Mistral Small 3.x / Devstral: [TOOL_CALLS]name[ARGS]{...} per call. (llama.cpp b11434's
    generated parser refuses this, its own grammar's syntax; we read it as the template writes it.)"""
    name = "mistral-args"
    openers = ("[TOOL_CALLS]",)

    @staticmethod
    def detect(source: str) -> bool:
        return "[TOOL_CALLS]" in source and "[ARGS]" in source

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        k = text.find("[TOOL_CALLS]")
        if k < 0:
            return Parsed(text)
        out = Parsed(text[:k])
        while k >= 0:
            a = text.find("[ARGS]", k)
            if a < 0:
                break
            name = text[k + len("[TOOL_CALLS]"):a].split("[CALL_ID]")[0].strip()
            start = skip_ws(text, a + len("[ARGS]"))
            val = json_value(text, start)
            end = val[1] if val else len(text)
            out.calls.append(Call(name, text[start:end], None, val is not None))
            if val is None:
                break
            k = text.find("[TOOL_CALLS]", end)
        return out

    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        f = tool["function"]
        args = schema_rule(conv, f"tool-{f['name']}-args", f.get("parameters") or {"type": "object"})
        return conv.add_rule(f"tool-{f['name']}", '"[TOOL_CALLS]" ' + format_literal(f["name"]) + ' "[ARGS]" ' + args)
