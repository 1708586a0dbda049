"""Tool calling: which family a chat template's tool syntax is (as llama.cpp b11434 recognizes
it), the parse of an answer into content, reasoning and OpenAI tool_calls, and the grammar that
enforces a call where tool_choice asks for one."""
from __future__ import annotations

from .base import Call, Context, Family, Parsed
from .json_families import Hermes, Llama3, MistralArgs, MistralJson
from .tagged_families import Gemma4, Harmony, QwenXml

# llama.cpp's order: the specialized templates first, then the generic tag and JSON formats
FAMILIES: tuple[type[Family], ...] = (Harmony, Gemma4, QwenXml, MistralArgs, MistralJson, Hermes, Llama3)


def family_of(source: str) -> Family | None:
    """The tool-call family of a chat template's source, None if it has no tool syntax we read."""
    for f in FAMILIES:
        if f.detect(source):
            return f()
    return None


def parse_answer(fam: Family | None, text: str, ctx: Context, calls: bool = True, final: bool = True) -> Parsed:
    """An answer as llama-server reads it: the family's reasoning and calls (calls False, for
    tool_choice "none": reasoning only), the first call alone where the family takes only one
    without parallel calls, no empty reasoning."""
    if fam is None:
        return Parsed(text)
    p = fam.parse(text, ctx, final)
    if not calls:
        p.calls = []
    elif fam.first_call_only and not ctx.parallel:
        p.calls = p.calls[:1]
    if p.reasoning == "":
        p.reasoning = None
    return p


__all__ = ["Call", "Context", "Family", "Parsed", "FAMILIES", "family_of", "parse_answer"]
