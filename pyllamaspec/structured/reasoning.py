"""Thinking models as llama-server b11434 reads them: where a template's reasoning block starts and
ends, how --reasoning-format splits an answer into reasoning_content and content, and what
--reasoning-budget counts between (tests/data/reference/chat_reasoning_llamacpp.json).

- "deepseek" and "auto" (the default): the block's text is reasoning_content, in the whole answer
  and in each streamed delta; "deepseek-legacy": the same for the whole answer, but a stream keeps
  the block in its content deltas; "none": the block stays in the content, after what the
  generation prompt itself opened of it (Qwen3.5's "<think>\\n").
- Where the generation prompt opened the block (Qwen3.5, DeepSeek R1) the answer starts inside it;
  where it opened and closed it (enable_thinking false) nothing is read as reasoning.
- Templates that render an earlier turn's reasoning_content themselves (Qwen3, Qwen3.5, GLM) have
  the whitespace around the tags dropped, as llama.cpp's parser learns from them; others keep it.
gpt-oss (harmony channels) and Gemma 4 (<|channel>thought ... <channel|>) are read by their tool
families' parsers, which know their channels."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgumentError
from .output import ChatOutput, PlainOutput
from .tools import family_of
from .tools.base import Context, Family, Parsed, held_back
from .tools.request import ToolOutput, ToolRequest
from .tools.tagged_families import Gemma4, Harmony

FORMATS = ("auto", "deepseek", "deepseek-legacy", "none")


@dataclass(frozen=True)
class Reasoning:
    """How a chat's thinking is read and bounded: format (FORMATS), budget (thinking tokens:
    -1 unbounded, 0 the block closed at once, N closed after N tokens), message (text put before
    the forced end of the block, llama.cpp's --reasoning-budget-message)."""
    format: str = "auto"
    budget: int = -1
    message: str = ""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise InvalidArgumentError(f"reasoning_format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < -1:
            raise InvalidArgumentError(f"reasoning budget must be -1 (unbounded), 0 or a number of tokens, "
                                       f"got {self.budget!r}")
        if not isinstance(self.message, str):
            raise InvalidArgumentError("reasoning budget message must be text")


@dataclass(frozen=True)
class ThinkSyntax:
    """A template's reasoning block: its tags, and whether whitespace around them is dropped."""
    start: str
    end: str
    strip: bool = False


def think_syntax(source: str) -> ThinkSyntax | None:
    """The reasoning block of a chat template's model, None if it has none we know."""
    if Harmony.detect(source):
        return ThinkSyntax("<|channel|>analysis<|message|>", "<|end|>")
    if Gemma4.detect(source):
        return ThinkSyntax("<|channel>thought", "<channel|>")
    if "<think>" in source:
        return ThinkSyntax("<think>", "</think>", "reasoning_content" in source)
    return None


class Thinking(Family):
    """An answer that may open with a reasoning block (no tool syntax read): the split of the
    module's docstring, for the <think> kinds."""
    name = "thinking"

    def __init__(self, syntax: ThinkSyntax, generation_prompt: str):
        self.syntax = syntax
        self.think = (syntax.start, syntax.end)
        g = generation_prompt
        k = g.rfind(syntax.start)
        self.closed = k >= 0 and g.find(syntax.end, k) >= 0          # enable_thinking false
        self.open = k >= 0 and not self.closed and not g[k + len(syntax.start):].strip()
        self.lead = g[k + len(syntax.start):] if self.open else ""    # its whitespace after the tag

    @staticmethod
    def detect(source: str) -> bool:
        return False

    def parse(self, text: str, ctx: Context, final: bool = True) -> Parsed:
        s = self.syntax
        if self.closed:
            return Parsed(text.lstrip() if s.strip else text)
        if self.open:
            body = text
        else:
            t = text.lstrip() if s.strip else text
            if not t.startswith(s.start):
                if not final and s.start.startswith(t):
                    return Parsed("")                                  # perhaps the tag, still coming
                return Parsed(t)
            body = t[len(s.start):]
        k = body.find(s.end)
        if k < 0:
            reasoning = body if final else body[:len(body) - held_back(body, (s.end,))]
            content = ""
        else:
            reasoning, content = body[:k], body[k + len(s.end):]
        reasoning = self.lead + reasoning
        if s.strip:
            reasoning, content = reasoning.lstrip(), content.lstrip()
        return Parsed(content, reasoning or None)

    def call_rule(self, conv, tool: dict) -> str:
        raise NotImplementedError


def reasoning_family(source: str, generation_prompt: str) -> Family | None:
    """What reads a chat's answer for its reasoning, None where the template has no block."""
    syntax = think_syntax(source)
    if syntax is None:
        return None
    fam = family_of(source)
    if isinstance(fam, (Harmony, Gemma4)):
        return fam
    return Thinking(syntax, generation_prompt)


def unsplit_prefix(source: str, generation_prompt: str) -> str:
    """Under --reasoning-format none: what the generation prompt holds of the block, which
    llama-server puts before the answer's content (Qwen3.5's "<think>\\n")."""
    syntax = think_syntax(source)
    if syntax is None or Harmony.detect(source):
        return ""
    k = generation_prompt.rfind(syntax.start)
    return generation_prompt[k:] if k >= 0 else ""


class PrefixedOutput(ChatOutput):
    """--reasoning-format none: the text as it comes, after what the generation prompt opened
    (lstrip: the template drops whitespace before the block, and the prompt opened none)."""

    def __init__(self, prefix: str, lstrip: bool):
        super().__init__()
        self.prefix, self.lstrip = prefix, lstrip and not prefix
        self.sent = 0

    def _content(self) -> str:
        return self.prefix + (self.text.lstrip() if self.lstrip else self.text)

    def push(self, text: str) -> list[dict]:
        self.text += text
        return self.finish()

    def finish(self) -> list[dict]:
        c = self._content()
        out, self.sent = c[self.sent:], len(c)
        return [{"content": out}] if out else []

    def message(self) -> dict:
        return {"role": "assistant", "content": self._content()}


class LegacyOutput(PlainOutput):
    """--reasoning-format deepseek-legacy: a stream keeps the block in its content; the whole
    answer is split."""

    def __init__(self, split: ChatOutput):
        super().__init__()
        self.split = split

    def message(self) -> dict:
        self.split.text = self.text
        return self.split.message()


def reasoning_output(source: str, generation_prompt: str, fmt: str) -> ChatOutput:
    """How a chat's answer (no tools, no response format) is read under reasoning format fmt."""
    fam = reasoning_family(source, generation_prompt)
    if fam is None:
        return PlainOutput()
    if fmt == "none":
        syntax = think_syntax(source)
        return PrefixedOutput(unsplit_prefix(source, generation_prompt), syntax is not None and syntax.strip)
    think_open = isinstance(fam, Thinking) and fam.open
    split = ToolOutput(ToolRequest(choice="none"), fam, Context(think_open=think_open))
    return LegacyOutput(split) if fmt == "deepseek-legacy" else split


__all__ = ["FORMATS", "Reasoning", "ThinkSyntax", "think_syntax", "Thinking", "reasoning_family", "unsplit_prefix",
           "reasoning_output"]
