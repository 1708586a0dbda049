"""A request's tools: OpenAI's tools, tool_choice and parallel_tool_calls checked, and what they
become once the chat template is known: the grammar that enforces a call (tool_choice
"required", or a named function: llama-server b11434 reads a named choice as "auto"; we enforce
it, as OpenAI does) and the reader that turns the answer into content and tool_calls."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from ...engine.chat_tools import check_tools
from ...errors import InvalidArgumentError
from . import Context, family_of, parse_answer
from .base import Family, held_back
from .generic import Generic, generic_messages, system_text, with_system
from ..output import ChatOutput


def check_tool_choice(choice: Any, tools: list[dict]) -> str:
    """"auto", "none", "required", or the name of the one tool a call must use."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise InvalidArgumentError(f"tool_choice must be 'auto', 'none', 'required' or a function, got {choice!r}")
        return choice
    fn = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise InvalidArgumentError("tool_choice must be 'auto', 'none', 'required' or "
                                   "{'type': 'function', 'function': {'name': ...}}")
    if name not in {t["function"]["name"] for t in tools}:
        raise InvalidArgumentError(f"tool_choice names {name!r}, which is not one of the tools")
    return name


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass(frozen=True)
class ToolRequest:
    tools: tuple = ()
    choice: str = "auto"
    parallel: bool | None = None            # None: what the template supports (llama-server)

    @classmethod
    def make(cls, tools: Any, tool_choice: Any = None, parallel_tool_calls: Any = None) -> "ToolRequest":
        tools = check_tools(tools)
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise InvalidArgumentError(f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}")
        return cls(tuple(tools), check_tool_choice(tool_choice, tools), parallel_tool_calls)

    def context(self, generation_prompt: str, parallel_default: bool) -> Context:
        tools = [t for t in self.tools if self.choice not in self.names or t["function"]["name"] == self.choice]
        parallel = parallel_default if self.parallel is None else self.parallel
        return Context(list(tools), parallel, generation_prompt.rstrip().endswith("<think>"),
                       strict=self.choice in self.names)

    @property
    def names(self) -> set[str]:
        return {t["function"]["name"] for t in self.tools}

    def generic(self, source: str) -> bool:
        """Whether the generic JSON format carries the calls: the template has no tool syntax we
        know, and the request may call a tool."""
        return self.choice != "none" and family_of(source) is None

    def family(self, source: str) -> Family | None:
        return Generic() if self.generic(source) else family_of(source)

    def messages(self, messages: list[dict]) -> list[dict]:
        """The conversation for the generic format: the tools and the answer's format in the
        system message, earlier calls and results in that format."""
        return with_system(generic_messages(messages), system_text(list(self.tools), self.choice))

    def grammar(self, source: str, generation_prompt: str, parallel_default: bool) -> str | None:
        """GBNF for a choice that requires a call (and for any choice but "none" in the generic
        format); None where the model may answer freely."""
        fam = self.family(source)
        if fam is None or self.choice == "none":
            return None
        ctx = self.context(generation_prompt, parallel_default)
        if isinstance(fam, Generic):
            return fam.grammar(ctx, "auto" if self.choice == "auto" else "required")
        return None if self.choice == "auto" else fam.grammar(ctx)

    def output(self, source: str, generation_prompt: str, parallel_default: bool) -> "ToolOutput":
        return ToolOutput(self, self.family(source), self.context(generation_prompt, parallel_default))


@dataclass
class _Sent:
    id: str
    args: str = ""                          # the arguments sent so far


class ToolOutput(ChatOutput):
    """Reads an answer in the family's syntax. Streamed: reasoning and content as they come
    (text that may start tool syntax held back), each call's id, type and name as soon as the
    name is known, then its arguments as they grow where the syntax is JSON, or whole once the
    call is complete where they are converted (Qwen3.5 XML, Gemma 4)."""

    RAW_ARGS = {"hermes", "llama3", "mistral-json", "mistral-args", "harmony", "generic"}

    def __init__(self, req: ToolRequest, fam: Family | None, ctx: Context):
        super().__init__()
        self.req, self.ctx = req, ctx
        self.fam = fam
        self.markers = self.fam.markers if self.fam else ()
        self.sent_content = self.sent_reasoning = 0
        self.sent: list[_Sent] = []
        self.parsed = None

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.parsed and self.parsed.calls)

    def _parse(self, final: bool):
        text = self.text if final else self.text[:len(self.text) - held_back(self.text, self.markers)]
        self.parsed = parse_answer(self.fam, text, self.ctx, calls=self.req.choice != "none", final=final)
        return self.parsed

    def _deltas(self, final: bool) -> list[dict]:
        p = self._parse(final)
        out = []
        if p.reasoning and len(p.reasoning) > self.sent_reasoning:
            out.append({"reasoning_content": p.reasoning[self.sent_reasoning:]})
            self.sent_reasoning = len(p.reasoning)
        if len(p.content) > self.sent_content:
            out.append({"content": p.content[self.sent_content:]})
            self.sent_content = len(p.content)
        for i, c in enumerate(p.calls):
            if i == len(self.sent):
                self.sent.append(_Sent(c.id or new_call_id()))
                out.append({"tool_calls": [{"index": i, "id": self.sent[i].id, "type": "function",
                                            "function": {"name": c.name, "arguments": ""}}]})
            s = self.sent[i]
            streams = self.fam.name in self.RAW_ARGS or c.done or final
            if streams and len(c.arguments) > len(s.args) and c.arguments.startswith(s.args):
                out.append({"tool_calls": [{"index": i, "function": {"arguments": c.arguments[len(s.args):]}}]})
                s.args = c.arguments
        return out

    def push(self, text: str) -> list[dict]:
        self.text += text
        return self._deltas(False)

    def finish(self) -> list[dict]:
        return self._deltas(True)

    def message(self) -> dict:
        p = self._parse(True)
        msg: dict = {"role": "assistant", "content": p.content}
        if p.reasoning:
            msg["reasoning_content"] = p.reasoning
        if p.calls:
            ids = [s.id for s in self.sent] + [c.id or new_call_id() for c in p.calls[len(self.sent):]]
            msg["tool_calls"] = [{"id": ids[i], "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for i, c in enumerate(p.calls)]
        return msg


__all__ = ["ToolRequest", "ToolOutput", "check_tool_choice", "new_call_id"]
