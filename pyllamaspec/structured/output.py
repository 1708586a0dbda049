"""A chat answer read as it streams: the text the model writes becomes OpenAI's message (content,
tool_calls) and, piece by piece, the deltas of a streamed answer. One reader per request:

- PlainOutput: the text is the content;
- JsonOutput: under a response format, the content is the JSON alone, without the ```json fence
  and the whitespace the grammar allows around it (what llama-server's parser returns);
- ToolOutput (tools.py): content, then tool calls in the model family's syntax.

push(text) returns the deltas the new text makes final (text that could still turn out to be
syntax is held back), finish() the rest, message() the whole answer."""
from __future__ import annotations

from abc import ABC, abstractmethod

FENCE_OPEN, FENCE_CLOSE = "```json", "```"


class ChatOutput(ABC):
    """Reads one answer; deltas are OpenAI's chunk deltas ({"content": ...}, {"tool_calls": [...]})."""

    def __init__(self) -> None:
        self.text = ""

    @abstractmethod
    def push(self, text: str) -> list[dict]:
        """The deltas the answer so far makes final, after `text` more of it."""

    @abstractmethod
    def finish(self) -> list[dict]:
        """The deltas left at the end."""

    @abstractmethod
    def message(self) -> dict:
        """The whole answer as an assistant message."""

    @property
    def has_tool_calls(self) -> bool:
        return False


class PlainOutput(ChatOutput):
    def push(self, text: str) -> list[dict]:
        self.text += text
        return [{"content": text}] if text else []

    def finish(self) -> list[dict]:
        return []

    def message(self) -> dict:
        return {"role": "assistant", "content": self.text}


def json_content(text: str, final: bool) -> str:
    """The JSON of a response-format answer: after optional whitespace and an optional ```json
    fence, up to the closing fence and trailing whitespace. Before the end (final False) it
    holds back what may still be fence or trailing whitespace, so that it only ever grows."""
    s = text.lstrip()
    if not final and len(s) < len(FENCE_OPEN) and FENCE_OPEN.startswith(s):
        return ""
    fenced = s.startswith(FENCE_OPEN)
    body = s[len(FENCE_OPEN):].lstrip() if fenced else s
    body = body.rstrip()
    if fenced and final and body.endswith(FENCE_CLOSE):
        return body[:-len(FENCE_CLOSE)].rstrip()
    if not final:
        while body.endswith("`"):            # the start of a closing fence, perhaps
            body = body[:-1]
        body = body.rstrip()
    return body


class JsonOutput(ChatOutput):
    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def _delta(self, final: bool) -> list[dict]:
        content = json_content(self.text, final)
        if len(content) <= self.sent:
            return []
        out = content[self.sent:]
        self.sent = len(content)
        return [{"content": out}]

    def push(self, text: str) -> list[dict]:
        self.text += text
        return self._delta(False)

    def finish(self) -> list[dict]:
        return self._delta(True)

    def message(self) -> dict:
        return {"role": "assistant", "content": json_content(self.text, True)}


__all__ = ["ChatOutput", "PlainOutput", "JsonOutput", "json_content"]
