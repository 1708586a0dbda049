"""What every tool-call family shares: the parsed answer (content, reasoning, calls), the
family interface (detect, parse, grammar), and the pieces parsers and grammars are built from:
JSON members with their exact source text (llama.cpp returns a call's arguments as the model
wrote them), reasoning blocks, text that must not contain a marker (GBNF)."""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..gbnf_text import format_literal
from ..json_schema import SchemaConverter
from ..schema_model import read_schema


@dataclass
class Call:
    name: str
    arguments: str                 # JSON text, as the model wrote it where the syntax is JSON
    id: str | None = None
    done: bool = True              # its arguments are complete


@dataclass
class Parsed:
    content: str = ""
    reasoning: str | None = None
    calls: list[Call] = field(default_factory=list)


@dataclass
class Context:
    """What a parse or a grammar needs of the request: its tools (their parameter schemas),
    whether several calls may come in one answer, whether the generation prompt opened a
    reasoning block (Qwen3.5's ends with <think>)."""
    tools: list[dict] = field(default_factory=list)
    parallel: bool = False
    think_open: bool = False
    strict: bool = False           # a named tool_choice: the call comes first, nothing before it

    def schema(self, name: str) -> dict:
        for t in self.tools:
            if t["function"]["name"] == name:
                p = t["function"].get("parameters")
                return p if isinstance(p, dict) and p else {"type": "object", "properties": {}}
        return {}


class Family(ABC):
    """A model family's tool-call syntax."""
    name = ""
    openers: tuple[str, ...] = ()          # text that starts tool-call syntax (content stops there)
    think: tuple[str, str] | None = None   # its reasoning block's tags
    first_call_only = False                # without parallel calls only the first counts (llama.cpp)

    @property
    def markers(self) -> tuple[str, ...]:
        """Text that may be syntax: a stream holds back what could become one of these."""
        return tuple(self.openers) + (self.think or ())

    @staticmethod
    @abstractmethod
    def detect(source: str) -> bool:
        """Whether a chat template is this family's (as llama.cpp recognizes it)."""

    @abstractmethod
    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        """The answer: before the end (final False) the last call may be unfinished."""

    @abstractmethod
    def call_rule(self, conv: SchemaConverter, tool: dict) -> str:
        """GBNF for one call of `tool` (its arguments constrained by its schema)."""

    def grammar(self, ctx: Context) -> str:
        """tool_choice "required": optional reasoning, optional text before the call (as
        llama.cpp's grammar allows), then one call (several if parallel); a named tool
        (ctx.strict, ctx.tools holds it alone): its call right away."""
        conv = SchemaConverter()
        calls = " | ".join(self.call_rule(conv, t) for t in ctx.tools)
        conv.add_rule("tool-call", calls)
        head = ""
        if ctx.strict:
            pass
        elif self.think:
            start, end = self.think
            free = until_rule(conv, "think-text", end)
            head = (f"{free}? ({format_literal(end)} space)? " if ctx.think_open
                    else f"({format_literal(start)} {free}? {format_literal(end)} space)? ")
        text = until_rule(conv, "text", self.openers[0]) + "? " if self.openers and not ctx.strict else ""
        more = ' (space tool-call)*' if ctx.parallel else ""
        conv.add_rule("root", head + text + "tool-call" + more)
        return conv.grammar()


# ---- parsing helpers -----------------------------------------------------------------------

_DECODER = json.JSONDecoder()


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def json_value(text: str, i: int) -> tuple[Any, int] | None:
    """The JSON value at i and where it ends; None if it is not (yet) complete."""
    try:
        return _DECODER.raw_decode(text, i)
    except (json.JSONDecodeError, ValueError):
        return None


def object_members(text: str, i: int) -> tuple[dict[str, tuple[Any, int, int]], int, bool]:
    """The members of the JSON object at i: key -> (value, start, end) of its source text; where
    the object ends; whether it is complete. An unfinished last value spans to the text's end."""
    out: dict[str, tuple[Any, int, int]] = {}
    i = skip_ws(text, i)
    if i >= len(text) or text[i] != "{":
        return out, i, False
    i += 1
    while True:
        i = skip_ws(text, i)
        if i < len(text) and text[i] == "}":
            return out, i + 1, True
        key = json_value(text, i)
        if key is None or not isinstance(key[0], str):
            return out, len(text), False
        i = skip_ws(text, key[1])
        if i >= len(text) or text[i] != ":":
            return out, len(text), False
        start = skip_ws(text, i + 1)
        val = json_value(text, start)
        if val is None:
            out[key[0]] = (None, start, len(text))
            return out, len(text), False
        out[key[0]] = (val[0], start, val[1])
        i = skip_ws(text, val[1])
        if i < len(text) and text[i] == ",":
            i += 1


def first_of(text: str, markers: tuple[str, ...], start: int = 0) -> int:
    """Where the first of the markers starts (len(text) if none does)."""
    found = [k for k in (text.find(m, start) for m in markers) if k >= 0]
    return min(found) if found else len(text)


def held_back(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of text that is the start of a marker (it may become one):
    a tool-call marker, or a stop string (generation/text.py)."""
    best = 0
    for m in markers:
        for n in range(min(len(m) - 1, len(text)), best, -1):
            if text.endswith(m[:n]):
                best = n
                break
    return best


def split_reasoning(text: str, fam: Family, ctx: Context) -> tuple[str | None, str]:
    """(reasoning, the rest): a block opened by the generation prompt runs to its end tag or
    the first call; one the model opens must come first (whitespace around the tags dropped)."""
    if fam.think is None:
        return None, text
    start, end = fam.think
    if ctx.think_open:
        body = text
    elif text.lstrip().startswith(start):
        body = skip_ws_str(text.lstrip()[len(start):])
    else:
        return None, text
    k = body.find(end)
    call = first_of(body, fam.openers)
    if k >= 0 and k <= call:
        return body[:k], body[k + len(end):].lstrip()
    return body[:call], body[call:]


def skip_ws_str(s: str) -> str:
    return s[skip_ws(s, 0):]


# ---- grammar helpers -----------------------------------------------------------------------

def _class_char(c: str) -> str:
    return c if c.isalnum() else "\\x%02X" % ord(c) if ord(c) < 0x100 else c


def until_rule(conv: SchemaConverter, name: str, marker: str) -> str:
    """A rule for any text that does not contain `marker` (a KMP automaton: state i has read
    the marker's first i characters)."""
    chars = sorted(set(marker))

    def step(state: int, c: str) -> int:
        s = marker[:state] + c
        for n in range(min(len(s), len(marker)), -1, -1):
            if s.endswith(marker[:n]):
                return n
        return 0
    names = [f"{name}-{i}" for i in range(len(marker))]
    for i in range(len(marker)):
        alts = [f"[{_class_char(c)}] {names[j]}" for c in chars if (j := step(i, c)) < len(marker)]
        alts.append("[^" + "".join(_class_char(c) for c in chars) + "] " + names[0])
        conv.add_rule(names[i], "| " + " | ".join(alts))      # the empty alternative: it may end here
    return names[0]


def schema_rule(conv: SchemaConverter, name: str, schema: dict) -> str:
    return conv.visit(read_schema(schema), name)
