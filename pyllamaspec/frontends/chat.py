"""chat(): a conversation in, the assistant's message out, through the model's chat template and
the same generation loop as generate() (speculative with a draft model)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from ..engine.chat_template import ChatPrompt
from ..errors import InvalidArgumentError
from ..generation.generate import GenerationResult, ModelLike, generate_with
from ..generation.options import GenerateOptions
from ..structured.formats import tools_spec
from ..structured.reasoning import Reasoning
from ..vision.messages import has_media, split_media


@dataclass
class ToolCall:
    """A call the model made: its id, the function's name and its arguments (JSON text, as the
    model wrote it; .args() reads them)."""
    id: str
    name: str
    arguments: str

    def args(self) -> Any:
        return json.loads(self.arguments)


@dataclass
class ChatResult(GenerationResult):
    """A GenerationResult with the answer as a message: {"role": "assistant", "content": text},
    with "tool_calls" (OpenAI's shape) and "reasoning_content" where the model gave them;
    .tool_calls as objects; finish_reason "tool_calls" when it called tools."""
    message: dict = field(default_factory=dict)
    tool_calls: list[ToolCall] = field(default_factory=list)


def chat(messages: Sequence[Mapping[str, Any]], model: ModelLike, draft_model: ModelLike | str | None = None, *,
         stream: bool = False, chat_template: str | None = None, tools: list | None = None,
         tool_choice: Any = None, parallel_tool_calls: bool | None = None,
         template_kwargs: Mapping[str, Any] | None = None, reasoning_format: str = "auto",
         reasoning_budget: int = -1, reasoning_budget_message: str = "",
         **generate_kwargs: Any) -> "ChatResult | Iterator[str]":
    """Answer a conversation: messages is a list of {"role": ..., "content": ...} dicts (roles
    as the template knows them: system, user, assistant, tool; an assistant's "tool_calls"
    in OpenAI's shape). The prompt is the model's chat template (or chat_template: a built-in
    name, a file, Jinja source) with the generation prompt added; generation stops at the
    template's end of turn. Returns a ChatResult (.message, .tool_calls, .text, .stats, ...),
    or with stream=True a generator of text pieces.

    tools (OpenAI's function tools) are rendered as llama.cpp renders them, and the answer is
    read in the template's tool-call syntax (Qwen3 / Hermes, Qwen3.5 XML, gpt-oss harmony,
    Llama 3.x, Mistral, Gemma 4) into .message["tool_calls"]; tool_choice "required" or a
    named function ({"type": "function", "function": {"name": ...}}) is enforced by a grammar,
    "none" reads no calls; parallel_tool_calls (default: whether the template shows several).
    Other keyword arguments are generate()'s (max_tokens, temperature, stop, n_ctx, cancel, ...);
    template_kwargs reach the template ({"enable_thinking": False} turns a Qwen3's thinking off).
    A thinking model's reasoning block becomes .message["reasoning_content"] as llama-server
    splits it (reasoning_format "auto" / "deepseek"; "none" leaves it in the content);
    reasoning_budget N closes the block after N tokens (0: at once; -1: no bound), its end tag
    forced after reasoning_budget_message. Templates without tool syntax (SmolLM2, Gemma 3) get
    the generic JSON tool format: the tools in the system message, the answer held by a grammar
    to {"tool_call": ...} (or {"response": ...} for "auto"). With response_format / json_schema the grammar is
    llama-server's for a chat (the JSON bare or in a ```json fence after the template's
    generation prompt) and .message["content"] is the JSON alone. A Model reused across turns
    evaluates only the new part of each prompt (see generate's cache_prompt). A user message's
    content may be a list of parts, {"type": "text", ...} and images ({"type": "image_url",
    "image_url": {"url": "data:image/png;base64,..." or a file}} or {"type": "image", "image":
    a file, bytes or a PIL image}): they need mmproj= (llama.cpp's mmproj GGUF); a draft model
    reads its own projector's rows at them with draft_mmproj= (see generate).
    """
    opts = GenerateOptions.from_kwargs(generate_kwargs, "chat()")
    if template_kwargs is not None and not isinstance(template_kwargs, Mapping):
        raise InvalidArgumentError(f"template_kwargs must be a dict, got {type(template_kwargs).__name__}")
    extra = dict(template_kwargs or {})
    constraint = None
    if tools is not None:
        constraint = tools_spec(tools, tool_choice, parallel_tool_calls)
        extra["tools"] = list(tools)
    elif tool_choice is not None:
        raise InvalidArgumentError("tool_choice needs tools")
    reasoning = Reasoning(reasoning_format, reasoning_budget, reasoning_budget_message)
    if has_media(messages):                      # image parts: markers in the text, the images beside
        messages, images = split_media(messages)
        opts.images = list(opts.images or []) + images
    prompt = ChatPrompt.make(messages, chat_template, **extra)
    out = generate_with(prompt, model, draft_model, opts, stream=stream, tools=constraint, reasoning=reasoning)
    if stream:
        return out
    fields = {f: getattr(out, f) for f in GenerationResult.__dataclass_fields__}
    message = out.message or {"role": "assistant", "content": out.text}
    calls = [ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])]
    if calls and fields["finish_reason"] == "stop":
        fields["finish_reason"] = "tool_calls"
    fields["message"] = message
    return ChatResult(**fields, tool_calls=calls)


__all__ = ["chat", "ChatResult", "ToolCall"]
