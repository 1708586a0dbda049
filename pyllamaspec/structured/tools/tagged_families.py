"""Families whose calls are not JSON text: Qwen3.5 / Qwen3-Coder (<function=name> with one
<parameter=key> block per argument), Gemma 4 (call:name{key:<|"|>text<|"|>,...}) and gpt-oss's
harmony (a commentary message to=functions.name). Their arguments are turned into compact JSON,
as llama.cpp does (a string parameter stays text; other values are read as JSON)."""
from __future__ import annotations

import json
import re
from typing import Any

from ..gbnf_text import dump_json, format_literal
from ..json_schema import PRIMITIVES, SchemaConverter
from .base import Call, Context, Family, Parsed, schema_rule, split_reasoning, until_rule


def _typed(value: str, schema: dict) -> Any:
    """An XML argument's value: text where the schema says string, else JSON if it reads as JSON."""
    if schema.get("type") == "string" or (not schema and not value[:1] in "[{0123456789-tfn\""):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


class QwenXml(Family):
    """Qwen3.5, Qwen3-Coder, Nemotron Nano 3: <tool_call>\\n<function=f>\\n<parameter=p>\\nvalue\\n</parameter>..."""
    name = "qwen-xml"
    openers = ("<tool_call>",)
    think = ("<think>", "</think>")
    first_call_only = True
    CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>\s*(.*?)(</function>\s*</tool_call>|\Z)", re.S)
    PARAM = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.S)

    @staticmethod
    def detect(source: str) -> bool:
        return "<tool_call>" in source and "<function=" in source and "<parameter=" in source

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        reasoning, rest = split_reasoning(text, self, ctx)
        k = rest.find("<tool_call>")
        if k < 0:
            return Parsed(rest, reasoning)
        out = Parsed(rest[:k].rstrip() if reasoning is not None else rest[:k], reasoning)
        for m in self.CALL.finditer(rest, k):
            name, body, closed = m.group(1).strip(), m.group(2), bool(m.group(3))
            props = ctx.schema(name).get("properties", {})
            args = {p.strip(): _typed(v, props.get(p.strip(), {})) for p, v in self.PARAM.findall(body)}
            out.calls.append(Call(name, dump_json(args), None, closed))
            if not closed:
                break
        return out

    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        f = tool["function"]
        schema = f.get("parameters") or {}
        props, required = schema.get("properties", {}), set(schema.get("required", []))
        text = until_rule(conv, "xml-arg-text", "\n</parameter>")
        args = []
        for p, s in props.items():
            value = text if s.get("type") == "string" else schema_rule(conv, f"tool-{f['name']}-{p}", s)
            rule = conv.add_rule(f"tool-{f['name']}-arg-{p}", format_literal(f"<parameter={p}>\n") + f" {value} "
                                 + format_literal("\n</parameter>\n"))
            args.append(rule if p in required else rule + "?")
        return conv.add_rule(f"tool-{f['name']}", format_literal(f"<tool_call>\n<function={f['name']}>\n") + " "
                             + " ".join(args) + ' "</function>\\n</tool_call>"')


STR = '<|"|>'


def _gemma_value(s: str, i: int) -> tuple[Any, int]:
    """One value of Gemma 4's call syntax: <|"|>text<|"|>, {key:value,...}, [values], or JSON."""
    if s.startswith(STR, i):
        end = s.find(STR, i + len(STR))
        end = len(s) if end < 0 else end
        return s[i + len(STR):end], min(len(s), end + len(STR))
    if s.startswith("{", i):
        out, i = {}, i + 1
        while i < len(s) and s[i] != "}":
            colon = s.find(":", i)
            if colon < 0:
                return out, len(s)
            key = s[i:colon].strip()
            out[key], i = _gemma_value(s, colon + 1)
            while i < len(s) and s[i] in ", \n":
                i += 1
        return out, i + 1
    if s.startswith("[", i):
        out, i = [], i + 1
        while i < len(s) and s[i] != "]":
            v, i = _gemma_value(s, i)
            out.append(v)
            while i < len(s) and s[i] in ", \n":
                i += 1
        return out, i + 1
    m = re.compile(r"\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)").match(s, i)
    if not m:
        return None, len(s)
    return json.loads(m.group(1)), m.end()


class Gemma4(Family):
    """Gemma 4: <|tool_call>call:name{key:value,...}<tool_call|>, strings between <|"|>."""
    name = "gemma4"
    openers = ("<|tool_call>call:",)
    first_call_only = True
    THOUGHT = re.compile(r"\s*<\|channel>thought\s*(.*?)(<channel\|>|\Z)", re.S)

    @property
    def markers(self) -> tuple[str, ...]:
        return ("<|tool_call>call:", "<|channel>thought", "<channel|>", "<tool_call|>")

    @staticmethod
    def detect(source: str) -> bool:
        return "'<|tool_call>call:'" in source

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        reasoning = None
        m = self.THOUGHT.match(text)
        if m:
            reasoning, text = m.group(1), text[m.end():]
        k = text.find("<|tool_call>call:")
        if k < 0:
            return Parsed(text, reasoning)
        out = Parsed(text[:k], reasoning)
        while k >= 0:
            start = k + len("<|tool_call>call:")
            brace = text.find("{", start)
            if brace < 0:
                break
            args, end = _gemma_value(text, brace)
            closed = text.startswith("<tool_call|>", end)
            out.calls.append(Call(text[start:brace], dump_json(args), None, closed))
            k = text.find("<|tool_call>call:", end) if closed else -1
        return out

    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        name = tool["function"]["name"]
        conv.add_rule("gemma4-string", '"<|\\"|>" ' + until_rule(conv, "gemma4-text", STR) + ' "<|\\"|>"')
        conv.add_rule("gemma4-value", "gemma4-string | gemma4-dict | gemma4-array | number | boolean | null")
        conv.add_rule("gemma4-dict", '"{" space ("}" | [^:}]+ ":" space gemma4-value ("," space [^:}]+ ":" space '
                                     'gemma4-value)* space "}")')
        conv.add_rule("gemma4-array", '"[" space ("]" | gemma4-value ("," space gemma4-value)* space "]")')
        for p in ("number", "integer", "boolean", "null"):
            conv.add_primitive(p, PRIMITIVES[p])
        args = _gemma_schema(conv, f"tool-{name}-args", tool["function"].get("parameters") or {})
        return conv.add_rule(f"tool-{name}", format_literal(f"<|tool_call>call:{name}") + f' {args} "<tool_call|>"')


def _gemma_literal(v: Any) -> str:
    return format_literal(STR + v + STR if isinstance(v, str) else dump_json(v))


def _gemma_schema(conv: SchemaConverter, name: str, schema: dict) -> str:
    """A value of Gemma 4's call syntax that the JSON schema admits (a tighter grammar than
    llama.cpp's, which takes any dict: enough for a small model to finish its call)."""
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return conv.add_rule(name, " | ".join(_gemma_literal(v) for v in values))
    kind = schema.get("type")
    if kind == "object" and schema.get("properties"):
        required = set(schema.get("required", []))
        parts = []
        for p, s in schema["properties"].items():
            kv = conv.add_rule(f"{name}-{p}-kv", format_literal(p + ":") + " space " + _gemma_schema(conv, f"{name}-{p}", s))
            parts.append((kv, p in required))
        body = ' "," space '.join(kv for kv, req in parts if req)
        for kv, req in parts:
            if not req:
                body = f'{body} ("," space {kv})?' if body else f"({kv})?"
        return conv.add_rule(name, f'"{{" space {body} space "}}"')
    simple = {"string": "gemma4-string", "integer": "integer", "number": "number", "boolean": "boolean",
              "null": "null"}
    return simple.get(kind, "gemma4-value")


class Harmony(Family):
    """gpt-oss: messages <|channel|>c<|message|>..., a call a commentary message to=functions.f."""
    name = "harmony"
    openers = ("<|start|>", " to=", "<|channel|>commentary to=")
    RECIPIENT = re.compile(r"to=functions\.([^\s<]+)(?=[\s<]|\Z)")
    CHANNEL = re.compile(r"<\|channel\|>(\w+)")

    @staticmethod
    def detect(source: str) -> bool:
        return "<|channel|>" in source

    @property
    def markers(self) -> tuple[str, ...]:
        return ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>",
                " to=")

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        out = Parsed()
        reasoning: list[str] = []
        for seg in text.split("<|start|>assistant"):
            header, sep, body = seg.partition("<|message|>")
            body = re.split(r"<\|end\|>|<\|call\|>|<\|return\|>", body)[0]
            to = self.RECIPIENT.search(header)
            if to and not final and to.end() == len(header) and not sep:
                to = None                   # the name may go on
            ch = self.CHANNEL.search(header)
            if to:
                out.calls.append(Call(to.group(1), body if sep else "", None, bool(sep)))
                break
            if ch and ch.group(1) == "analysis":
                reasoning.append(body)
            elif sep:
                out.content += body
        out.reasoning = "".join(reasoning) if reasoning else None
        return out

    def grammar(self, ctx: Context) -> str:
        conv = SchemaConverter()
        conv.add_rule("tool-call", " | ".join(self.call_rule(conv, t) for t in ctx.tools))
        analysis = until_rule(conv, "analysis-text", "<|end|>")
        head = "" if ctx.strict else f'("<|channel|>analysis<|message|>" {analysis} "<|end|><|start|>assistant")? '
        conv.add_rule("root", head + "tool-call")
        return conv.grammar()

    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        f = tool["function"]
        args = schema_rule(conv, f"tool-{f['name']}-args", f.get("parameters") or {"type": "object"})
        to = format_literal(f" to=functions.{f['name']}")
        channel = '"<|channel|>" ("commentary" | "analysis")'
        return conv.add_rule(f"tool-{f['name']}", f'({to} {channel} | {channel} {to}) '
                             f'(space "<|constrain|>"? [A-Za-z0-9_-]+)? "<|message|>" {args}')
