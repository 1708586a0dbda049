"""chat(): a conversation in, the assistant's message out, through the model's chat template and
the same generation loop as generate() (speculative with a draft model)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from ..engine.chat_template import ChatPrompt
from ..errors import InvalidArgumentError
from .generate import GenerationResult, ModelLike, generate
from .structured.formats import response_content, response_format_schema


@dataclass
class ChatResult(GenerationResult):
    """A GenerationResult with the answer as a message: {"role": "assistant", "content": text}."""
    message: dict = field(default_factory=dict)


_GENERATE_ARGS = frozenset(inspect.signature(generate).parameters) - {"prompt", "model", "draft_model", "stream"}


def chat(messages: Sequence[Mapping[str, Any]], model: ModelLike, draft_model: ModelLike | str | None = None, *,
         stream: bool = False, chat_template: str | None = None, tools: list | None = None,
         template_kwargs: Mapping[str, Any] | None = None, **generate_kwargs: Any) -> "ChatResult | Iterator[str]":
    """Answer a conversation: messages is a list of {"role": ..., "content": ...} dicts (roles
    as the template knows them: system, user, assistant). The prompt is the model's chat
    template (or chat_template: a built-in name, a file, Jinja source) with the generation
    prompt added; generation stops at the template's end of turn. Returns a ChatResult
    (.message, .text, .stats, ...), or with stream=True a generator of text pieces.

    Other keyword arguments are generate()'s (max_tokens, temperature, stop, n_ctx, cancel, ...);
    tools and template_kwargs reach the template. With response_format / json_schema the
    grammar is llama-server's for a chat (the JSON bare or in a ```json fence after the
    template's generation prompt) and .message["content"] is the JSON alone. A Model reused across turns evaluates only
    the new part of each prompt (see generate's cache_prompt).
    """
    unknown = sorted(set(generate_kwargs) - _GENERATE_ARGS)
    if unknown:
        raise InvalidArgumentError(f"chat() got unexpected argument(s) {', '.join(unknown)}")
    if template_kwargs is not None and not isinstance(template_kwargs, Mapping):
        raise InvalidArgumentError(f"template_kwargs must be a dict, got {type(template_kwargs).__name__}")
    if tools is not None and not isinstance(tools, (list, tuple)):
        raise InvalidArgumentError(f"tools must be a list, got {type(tools).__name__}")
    extra = dict(template_kwargs or {})
    if tools is not None:
        extra["tools"] = list(tools)
    prompt = ChatPrompt.make(messages, chat_template, **extra)
    out = generate(prompt, model, draft_model, stream=stream, **generate_kwargs)
    if stream:
        return out
    fields = {f: getattr(out, f) for f in GenerationResult.__dataclass_fields__}
    structured = response_format_schema(generate_kwargs.get("response_format"),
                                        generate_kwargs.get("json_schema")) is not None
    content = response_content(out.text) if structured else out.text     # the JSON, without its fence
    return ChatResult(**fields, message={"role": "assistant", "content": content})


__all__ = ["chat", "ChatResult"]
