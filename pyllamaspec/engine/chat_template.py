"""Chat templates: a GGUF's `tokenizer.chat_template` (Jinja) rendered as Hugging Face's
transformers and llama-cpp-python render it, and the prompt tokenized as llama.cpp does.

Rendering: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loopcontrols extension, HF's `tojson` (no ASCII escaping, keys in order), and the globals
`raise_exception` and `strftime_now`; the variables `messages`, `add_generation_prompt`,
`bos_token`, `eos_token`, `tools` (when given) and any extra keyword arguments.

A model without a template falls back to ChatML, as llama.cpp does (with a warning, once per
model file). `chat_template` may also name a built-in template (BUILTIN_TEMPLATES), a file, or
be Jinja source itself.
"""
from __future__ import annotations

import json
import os
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping, Sequence

from ..errors import ChatTemplateError, InvalidArgumentError
from .template_content import as_template_takes, is_text_parts, joined
from .chat_tools import (has_tool_messages, object_arguments, supports_object_arguments, supports_parallel_tool_calls,
                         template_message, template_tools)

# Templates written for pyllamaspec (not copied from any model card), for models whose GGUF
# has none or a broken one.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Gemma has no system role: a system message opens the first user turn; the assistant is "model".
GEMMA = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = ns.system + message['content'] | trim + '\n\n' %}"
    "{% else %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% if role == 'user' %}{{ ns.system }}{% set ns.system = '' %}{% endif %}"
    "{{ message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

# Llama 2 style: [INST] ... [/INST] answer</s>, a system message inside the first [INST].
LLAMA2 = (
    "{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = '<<SYS>>\n' + message['content'] | trim + '\n<</SYS>>\n\n' %}"
    "{% elif message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + ns.system + message['content'] | trim + ' [/INST]' }}{% set ns.system = '' %}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{% else %}{{ raise_exception('llama2 template: unknown role ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
)

# Mistral style: one BOS, [INST]user[/INST]answer</s>, a system message before the last user turn.
MISTRAL = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{% set ns.system = message['content'] | trim + '\n\n' %}{% endif %}{% endfor %}"
    "{% set users = messages | selectattr('role', 'equalto', 'user') | list %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + (ns.system if message is sameas users[-1] else '') + message['content'] | trim + '[/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] | trim + eos_token }}"
    "{% elif message['role'] != 'system' %}{{ raise_exception('mistral template: unknown role ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
)

BUILTIN_TEMPLATES: dict[str, str] = {
    "chatml": CHATML, "llama3": LLAMA3, "gemma": GEMMA, "llama2": LLAMA2, "mistral": MISTRAL,
}

_warned_fallback: set[str] = set()


class _RaisedByTemplate(Exception):
    """raise_exception() inside a template."""


def _raise_exception(message: str) -> None:
    raise _RaisedByTemplate(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # HF's tojson: jinja2's own escapes HTML characters and sorts keys, which changes prompts
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


# Bounds on one rendering: a template (from a GGUF file or --chat-template) may be hostile or
# broken, and rendering runs in the server's threads: nested loops, huge string products or
# deep recursion must end in a ChatTemplateError, soon, not pin a thread or eat the memory.
RENDER_SECONDS = 1.5          # real templates render in milliseconds
RENDER_CHARS = 16 << 20        # the text it may produce (a caller may ask for less); any string it builds too


class _OverBudget(BaseException):
    """Past a rendering's bounds. A BaseException: no `except Exception` (in a probe, or in
    jinja's runtime) may swallow it and render on."""


class _Budget:
    """The current thread's rendering deadline and output allowance (see render())."""
    local = threading.local()

    def __init__(self, seconds: float, chars: int):
        self.deadline, self.chars, self.n = time.monotonic() + seconds, chars, 0

    @classmethod
    def tick(cls, n: int = 0) -> None:
        b = getattr(cls.local, "budget", None)
        if b is None:
            return
        b.n += 1
        if n and n > b.chars:
            raise _OverBudget(f"it would produce more than {b.chars} characters")
        if b.n & 255 == 0 and time.monotonic() > b.deadline:
            raise _OverBudget(f"it runs longer than {RENDER_SECONDS:g} s")


def _range(*args):
    """range() for templates: each step counts against the rendering's time budget."""
    r = range(*args)
    if len(r) > 100_000:                      # jinja's own sandbox limit
        raise _OverBudget(f"range of {len(r)} items")
    for i in r:
        _Budget.tick()
        yield i


class _Ticking(list):
    """A list whose iteration counts against the budget (nested loops over messages)."""

    def __iter__(self):
        for x in super().__iter__():
            _Budget.tick()
            yield x


def _sized(x: Any) -> int:
    return len(x) if isinstance(x, (str, list, tuple, bytes)) else 0


def pass_eval_context(fn):
    from jinja2 import pass_eval_context as p
    return p(fn)


def _fits(n: int) -> None:
    """A string (or list) of n items is about to be built: within the output allowance, else
    refused before the memory is taken (a template doubling a string 31 times asked for 2 GiB)."""
    b = getattr(_Budget.local, "budget", None)
    limit = RENDER_CHARS if b is None else b.chars     # None: jinja folding constants while compiling
    if n > limit:
        raise _OverBudget(f"it would build a string of more than {limit} characters")


def _str_len(x: Any) -> int:
    return len(x) if isinstance(x, str) else len(str(x)) if isinstance(x, (int, float, bool)) or x is None else 0


def _bounded_concat(parts) -> str:
    """`a ~ b ~ ...` (jinja's str_join), its size checked first."""
    parts = [p if isinstance(p, str) else str(p) for p in parts]
    _fits(sum(len(p) for p in parts))
    return "".join(parts)


# str methods and filters whose result size a template chooses by an argument: checked before
# they run (name -> the size of the result, from the string and the arguments)
def _width(s: str, width: Any = 0, *_: Any, **__: Any) -> int:
    return max(len(s), width) if isinstance(width, int) else len(s)


def _replaced(s: str, old: Any = "", new: Any = "", count: Any = -1, *_: Any, **__: Any) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(s)
    n = (len(s) + 1) if old == "" else s.count(old)
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return len(s) + n * max(0, len(new) - len(old))


def _indented(s: str, width: Any = 4, *_: Any, **__: Any) -> int:
    w = width if isinstance(width, int) else len(width) if isinstance(width, str) else 4
    return len(s) + (s.count("\n") + 1) * max(0, w)


SIZED_STR_METHODS = {"center": _width, "ljust": _width, "rjust": _width, "zfill": _width,
                     "replace": _replaced, "expandtabs": lambda s, t=8, *a, **k: len(s) * max(1, t if isinstance(t, int) else 8)}


def _format_widths(fmt: str) -> int:
    """The largest field width or precision a format string asks for ("%1000000000s", "{:>1e9}")."""
    import re
    return max((int(m) for m in re.findall(r"(\d{4,})", fmt)), default=0)


def _formatted_size(fmt: str, args: tuple, kwargs: dict) -> int:
    """A bound on what a format makes: its text, the widths written in it, its arguments, and
    where widths come from the arguments ("%*s", "{:>{w}}") every integer argument as one."""
    import re
    values = list(args) + list(kwargs.values())
    size = len(fmt) + _format_widths(fmt) + sum(_str_len(x) for x in values)
    if re.search(r"%[-+ #0]*\*|%[^%a-zA-Z]*\.\*|\{[^{}]*\{", fmt):
        size += sum(x for x in values if isinstance(x, int) and x > 0)
    return size


def _bounded_filter(name: str, fn, size):
    def f(*args, **kwargs):
        _fits(size(*args, **kwargs))
        return fn(*args, **kwargs)
    f.__name__ = name
    for attr in ("jinja_pass_arg",):           # keep how jinja passes the context / environment
        if hasattr(fn, attr):
            setattr(f, attr, getattr(fn, attr))
    return f


@pass_eval_context
def _join(ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> str:
    """jinja's join, its size checked first (the items taken once: a range is a generator here)."""
    from jinja2.filters import do_join
    items = value if isinstance(value, str) else list(value)
    _fits(sum(_str_len(x) for x in items) + _str_len(d) * len(items))
    return do_join(ctx, items, d, attribute)


def _wrapped(env: Any, s: Any, width: Any = 79, break_long_words: bool = True, wrapstring: Any = None,
             *_: Any, **__: Any) -> int:
    w = width if isinstance(width, int) and width > 0 else 1
    return _str_len(s) * (1 + (len(wrapstring) if isinstance(wrapstring, str) else 1)) // w + _str_len(s)


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """jinja's lipsum, its size bounded (lipsum(200000) took 15 s)."""
    from jinja2.utils import generate_lorem_ipsum
    if not all(isinstance(v, int) for v in (n, min, max)):
        raise _OverBudget("lipsum takes integers")
    _fits(n * max * 12)
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


@lru_cache(maxsize=32)
def _compile(source: str):
    import jinja2
    from jinja2 import filters
    from jinja2.compiler import CodeGenerator
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Gen(CodeGenerator):
        def visit_Concat(self, node, frame):     # `a ~ b` through _bounded_concat
            self.write("environment.bounded_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class Env(ImmutableSandboxedEnvironment):
        code_generator_class = Gen
        intercepted_binops = frozenset({"*", "**", "+", "%"})
        bounded_concat = staticmethod(_bounded_concat)

        def call_binop(self, context, operator, left, right):
            if operator == "*" and isinstance(left, int) != isinstance(right, int):
                k = left if isinstance(left, int) else right
                _Budget.tick(max(0, k) * max(_sized(left), _sized(right)))
            if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                _fits(len(left) + len(right))
            if operator == "%" and isinstance(left, str):
                _fits(_formatted_size(left, right if isinstance(right, tuple) else (right,), {}))
            if operator == "**" and isinstance(right, int) and abs(right) > 4096:
                raise _OverBudget(f"power of {right}")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):   # noqa: N805 (jinja's signature)
            owner = getattr(__obj, "__self__", None)
            size = SIZED_STR_METHODS.get(getattr(__obj, "__name__", ""))
            if isinstance(owner, str) and size is not None:
                _fits(size(owner, *args, **kwargs))
            elif isinstance(owner, str) and getattr(__obj, "__name__", "") == "join" and args:
                items = args[0] if isinstance(args[0], (list, tuple)) else ()
                _fits(sum(_str_len(x) for x in items) + len(owner) * len(items))
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value):        # "{:>1000000000}".format(...): its widths checked first
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            fmt = value.__self__

            def bounded(*args, **kwargs):
                _fits(_formatted_size(fmt, args, kwargs))
                return wrapped(*args, **kwargs)
            return bounded

    env = Env(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["center"] = _bounded_filter("center", filters.do_center, _width)
    env.filters["indent"] = _bounded_filter("indent", filters.do_indent, _indented)
    env.filters["replace"] = _bounded_filter("replace", filters.do_replace,
                                             lambda ctx, s, *a, **k: _replaced(str(s), *a, **k))
    env.filters["format"] = _bounded_filter("format", filters.do_format, lambda s, *a, **k: _formatted_size(str(s), a, k))
    env.filters["join"] = _join
    env.filters["wordwrap"] = _bounded_filter("wordwrap", filters.do_wordwrap, _wrapped)
    env.globals["lipsum"] = _lipsum
    env.globals["range"] = _range
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template: syntax error at line {e.lineno}: {e.message}") from None


def check_messages(messages: Any) -> list[dict]:
    """A conversation: a non-empty list of dicts, each with a str role and a str content or a
    list of text parts ({"type": "text", "text": str}; other keys are kept, for templates that
    read them)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, "
                                   f"got {type(messages).__name__}")
    if not messages:
        raise InvalidArgumentError("messages is empty")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidArgumentError(f"messages[{i}] must be a dict with 'role' and 'content', "
                                       f"got {type(m).__name__}")
        if not isinstance(m.get("role"), str):
            raise InvalidArgumentError(f"messages[{i}] has no 'role'" if "role" not in m else
                                       f"messages[{i}]['role'] must be a str, got {type(m['role']).__name__}")
        # content may be None only beside tool calls (an assistant that only calls tools)
        if "content" not in m and not m.get("tool_calls"):
            raise InvalidArgumentError(f"messages[{i}] has no 'content'")
        c = m.get("content")
        if not isinstance(c, str) and not is_text_parts(c) and \
                not (c is None and (m.get("tool_calls") or m["role"] == "tool")):
            raise InvalidArgumentError(f"messages[{i}]['content'] must be a str or a list of text parts "
                                       f"({{'type': 'text', 'text': ...}}), got {type(c).__name__}")
    return [dict(m) for m in messages]


def is_messages(x: Any) -> bool:
    """Whether x looks like a conversation (a list of dicts) rather than a prompt or token ids."""
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(m, Mapping) for m in x)


@dataclass(frozen=True)
class ChatTemplate:
    """A Jinja chat template with the special-token strings it may print."""
    source: str
    bos_token: str = ""
    eos_token: str = ""
    name: str = "custom"

    @property
    def parallel_tool_calls(self) -> bool:
        """Whether it shows several calls in one assistant message (llama-server's default for
        a request's parallel_tool_calls)."""
        try:
            return supports_parallel_tool_calls(self.source, _compile_bounded)
        except _OverBudget as e:
            raise ChatTemplateError(f"chat template ({self.name}) stopped: {e}") from None

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
               tools: list | None = None, max_chars: int = RENDER_CHARS, **kwargs: Any) -> str:
        """The prompt text, as Hugging Face's apply_chat_template(tokenize=False) gives it.
        Bounded: a rendering that runs longer than RENDER_SECONDS, would produce more than
        max_chars characters, or fails (recursion, memory, overflow) is a ChatTemplateError."""
        import jinja2

        msgs = check_messages(messages)
        if not isinstance(add_generation_prompt, bool):
            raise InvalidArgumentError(f"add_generation_prompt must be True or False, got {add_generation_prompt!r}")
        if tools is not None:
            kwargs["tools"] = template_tools(tools)
        # llama.cpp's extra context; it hands every template enable_thinking (true unless reasoning
        # is switched off: Gemma 4 then opens a thinking turn, DeepSeek V3.1 / R1 leave <think> open)
        now = datetime.now()
        variables = dict(bos_token=self.bos_token, eos_token=self.eos_token, datetime=now.strftime("%b %d %Y"),
                         date_string=now.strftime("%d %b %Y"), enable_thinking=True)
        variables.update(kwargs)          # a caller's bos_token etc. win, as in HF
        try:
            # the probes of what the template supports render it too: within the same bounds
            if tools is not None or has_tool_messages(msgs):
                msgs = [template_message(m) for m in msgs]
                if supports_object_arguments(self.source, _compile_bounded):
                    msgs = object_arguments(msgs)
            msgs = as_template_takes(self.source, _llamacpp_messages(self.source, msgs), _compile_bounded)
            msgs = _Ticking(msgs)
            text = _bounded_render(_compile(self.source), max_chars, messages=msgs,
                                   add_generation_prompt=add_generation_prompt, **variables)
        except _RaisedByTemplate as e:
            raise ChatTemplateError(f"chat template ({self.name}) refused the conversation: {e}") from None
        except _OverBudget as e:
            raise ChatTemplateError(f"chat template ({self.name}) stopped: {e}") from None
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"chat template ({self.name}) failed: {type(e).__name__}: {e}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, MemoryError,
                RecursionError) as e:
            raise ChatTemplateError(f"chat template ({self.name}) failed: {type(e).__name__}: {str(e)[:200]}") from None
        if _is_harmony(self.source) and not add_generation_prompt:
            # llama.cpp (its issue 15417): a conversation rendered for inference ends its last
            # final message with <|end|>, not the <|return|> that closes a finished exchange
            head, sep, tail = text.rpartition("<|return|>")
            text = head + "<|end|>" + tail if sep else text
        return text


class _BoundedProbe:
    """A compiled template whose render() keeps the rendering's bounds (chat_tools' probes)."""

    def __init__(self, template):
        self.template = template

    def render(self, **ctx: Any) -> str:
        return _bounded_render(self.template, 1 << 20, **ctx)


def _compile_bounded(source: str) -> _BoundedProbe:
    return _BoundedProbe(_compile(source))


def _bounded_render(template, max_chars: int, **ctx: Any) -> str:
    """template.render(**ctx) within the budget: the output is gathered piece by piece, each
    piece (and each loop step, _range / _Ticking) checking the deadline and the size."""
    _Budget.local.budget = budget = _Budget(RENDER_SECONDS, max_chars)
    try:
        parts, n = [], 0
        for piece in template.generate(**ctx):
            n += len(piece)
            if n > max_chars:
                raise _OverBudget(f"it would produce more than {max_chars} characters")
            parts.append(piece)
            budget.n += 1
            if budget.n & 255 == 0 and time.monotonic() > budget.deadline:
                raise _OverBudget(f"it runs longer than {RENDER_SECONDS:g} s")
        return "".join(parts)
    finally:
        _Budget.local.budget = None


# ---- what llama.cpp does to a conversation before rendering it (common/chat.cpp) ----

def _is_harmony(source: str) -> bool:
    """gpt-oss's harmony format: llama.cpp recognizes it by its channel marker."""
    return "<|channel|>" in source


_PROBE_SYSTEM = "System message"


@lru_cache(maxsize=32)
def _supports_system_role(source: str) -> bool:
    """Whether the template prints a system message (llama.cpp probes it likewise: a template
    that refuses or ignores one gets it merged into the first user message instead)."""
    probe = [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": "User message"}]
    try:
        out = _bounded_render(_compile(source), 1 << 20, messages=_Ticking(probe), add_generation_prompt=False,
                              bos_token="", eos_token="")
    except _OverBudget:        # past the bounds on two messages: no conversation renders (not cached)
        raise
    except (Exception, RecursionError, MemoryError):   # noqa: BLE001 - any failure on the probe: "not supported"
        return False
    return _PROBE_SYSTEM in out


def _is_ministral3(source: str) -> bool:
    """Ministral 3 / Magistral / Mistral Large 3 (and Devstral): llama.cpp recognizes them by
    their markers, Mistral Small 3.2 by its [CALL_ID] (common/chat.cpp)."""
    return all(t in source for t in ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")) and "[CALL_ID]" not in source


def _mistral_blocks(m: dict) -> dict:
    """A system or assistant message as content blocks, as llama.cpp's Ministral 3 path writes
    it: its reasoning as a "thinking" block, then its text."""
    blocks = []
    if isinstance(m.get("reasoning_content"), str):
        blocks.append({"type": "thinking", "thinking": m["reasoning_content"]})
    content = m.get("content")
    if isinstance(content, str):
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        blocks.extend(content)
    out = dict(m, content=blocks)
    out.pop("reasoning_content", None)
    return out


def _llamacpp_messages(source: str, msgs: list[dict]) -> list[dict]:
    """The conversation as llama.cpp hands it to the template: the OpenAI "developer" role is
    "system" except for harmony (which has a developer role of its own), gpt-oss reads
    reasoning as "thinking", Ministral 3's system and assistant messages become content blocks,
    and a template without a system role gets the system prompt prefixed to the next message."""
    if _is_harmony(source):
        return [dict(m, thinking=m["reasoning_content"]) if isinstance(m.get("reasoning_content"), str) else m
                for m in msgs]
    msgs = [dict(m, role="system") if m["role"] == "developer" else m for m in msgs]
    if _is_ministral3(source):
        return [_mistral_blocks(m) if m["role"] in ("system", "assistant") else m for m in msgs]
    if msgs[0]["role"] == "system" and not _supports_system_role(source):
        if len(msgs) == 1:
            return []          # llama.cpp drops it (with a warning) when nothing follows
        merged = dict(msgs[1], content=joined(msgs[0]["content"]) + "\n" + joined(msgs[1]["content"]))
        return [merged] + msgs[2:]
    return msgs


def template_source(chat_template: str, what: str = "chat_template") -> tuple[str, str]:
    """(source, name) for a built-in name, a file path, or Jinja source."""
    if not isinstance(chat_template, str) or not chat_template:
        raise InvalidArgumentError(f"{what} must be a non-empty str, got {chat_template!r}")
    if chat_template in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[chat_template], chat_template
    if "{{" in chat_template or "{%" in chat_template:
        return chat_template, "custom"
    if os.path.isfile(chat_template):
        try:
            with open(chat_template, encoding="utf-8") as f:
                return f.read(), chat_template
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidArgumentError(f"cannot read the chat template file {chat_template}: {e}") from None
    raise InvalidArgumentError(f"{what} {chat_template!r} is neither a built-in template "
                               f"({', '.join(BUILTIN_TEMPLATES)}), a file, nor Jinja source")


def model_template(model, chat_template: str | None = None) -> ChatTemplate:
    """The template to use for `model`: chat_template if given, else the model's own, else
    ChatML with a warning (once per model file), as llama.cpp does."""
    if chat_template is not None:
        source, name = template_source(chat_template)
    else:
        source = model.meta("tokenizer.chat_template")
        name = "model"
        if not isinstance(source, str) or not source:
            source, name = CHATML, "chatml (fallback)"
            path = getattr(model, "path", "")
            if path not in _warned_fallback:
                _warned_fallback.add(path)
                warnings.warn(f"{os.path.basename(path) or 'the model'} has no chat template; using ChatML",
                              stacklevel=3)
    return ChatTemplate(source, _special_text(model, model.bos_token), _special_text(model, model.eos_token), name)


def _special_text(model, token: int | None) -> str:
    if token is None:
        return ""
    return model.token_to_piece(token, render_special=True).decode("utf-8", "replace")


def prompt_ids(model, text: str, template: ChatTemplate) -> list[int]:
    """Token ids of a rendered prompt as llama.cpp makes them: special tokens parsed, BOS (EOS)
    added when the vocabulary asks for it, and a BOS (EOS) the template wrote itself dropped
    first so it is not doubled."""
    return model.tokenize(_undoubled(model, text, template), add_special=True, parse_special=True)


def _undoubled(model, text: str, template: ChatTemplate) -> str:
    info = model.vocab_info
    if info.add_bos and template.bos_token and text.startswith(template.bos_token):
        text = text[len(template.bos_token):]
    if info.add_eos and template.eos_token and text.endswith(template.eos_token):
        text = text[:-len(template.eos_token)]
    return text


def chat_text(prompt: "ChatPrompt", model) -> str:
    """The rendered prompt as prompt_ids tokenizes it (with BOS added): the text that images'
    markers are found in (vision/prompt.py tokenizes it then)."""
    return _undoubled(model, prompt.text(model), prompt.template(model))




# End-of-turn markers a template may print; one the vocabulary lacks as an end-of-generation
# token (ChatML on a model without <|im_end|>) becomes a stop string.
_TURN_ENDS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")
# In harmony (gpt-oss) <|end|> closes the analysis channel inside one reply; the reply ends at
# <|return|> or <|call|>.
_HARMONY_TURN_ENDS = ("<|return|>", "<|call|>")


@dataclass(frozen=True)
class ChatPrompt:
    """A conversation to render with a model's template once the model is loaded."""
    messages: tuple
    chat_template: str | None = None
    add_generation_prompt: bool = True
    kwargs: tuple = ()

    @classmethod
    def make(cls, messages: Any, chat_template: str | None = None, add_generation_prompt: bool = True,
             **kwargs: Any) -> "ChatPrompt":
        msgs = check_messages(messages)
        if chat_template is not None:
            template_source(chat_template)            # a bad name fails before any model loads
        if not isinstance(add_generation_prompt, bool):
            raise InvalidArgumentError(f"add_generation_prompt must be True or False, got {add_generation_prompt!r}")
        return cls(tuple(msgs), chat_template, add_generation_prompt, tuple(kwargs.items()))

    def render(self, model, max_chars: int = RENDER_CHARS) -> tuple[list[int], list[str]]:
        """(prompt ids, stop strings the template implies). max_chars bounds the rendered text
        (ChatTemplateError beyond it): a server passes what its context could take."""
        tmpl = model_template(model, self.chat_template)
        return prompt_ids(model, self.text(model, max_chars), tmpl), self._stops(model, tmpl)

    def text(self, model, max_chars: int = RENDER_CHARS) -> str:
        """The rendered prompt (llama-server's /apply-template)."""
        tmpl = model_template(model, self.chat_template)
        return tmpl.render(list(self.messages), add_generation_prompt=self.add_generation_prompt,
                           max_chars=max_chars, **dict(self.kwargs))

    def template(self, model) -> ChatTemplate:
        return model_template(model, self.chat_template)

    def generation_prompt(self, model) -> str:
        """What the template adds for the assistant's turn: the rendering with the generation
        prompt past its common prefix with the one without (llama.cpp's generation_prompt, which
        an output-format grammar takes first)."""
        tmpl = model_template(model, self.chat_template)
        msgs, kw = list(self.messages), dict(self.kwargs)
        with_prompt = tmpl.render(msgs, add_generation_prompt=True, **kw)
        without = tmpl.render(msgs, add_generation_prompt=False, **kw)
        n = 0
        while n < min(len(with_prompt), len(without)) and with_prompt[n] == without[n]:
            n += 1
        return with_prompt[n:]

    def turn_starts(self, model, ids: list[int]) -> list[int]:
        """Where the first and the last user turn begin in the prompt ids (the lengths of the
        conversation before them, rendered alone, where the prompt starts with exactly those
        tokens): where a later prompt of the same conversation parts from this one, and so
        where a hybrid model keeps checkpoints (llama-server's, at user turns)."""
        users = [i for i, m in enumerate(self.messages) if isinstance(m, dict) and m.get("role") == "user"]
        tmpl = model_template(model, self.chat_template)
        out = []
        for i in sorted({users[0], users[-1]} if users else set()):
            try:
                text = tmpl.render(list(self.messages[:i]), add_generation_prompt=False, **dict(self.kwargs))
            except (ChatTemplateError, InvalidArgumentError):   # a template that wants a user turn last
                continue
            head = prompt_ids(model, text, tmpl)
            if 0 < len(head) < len(ids) and ids[:len(head)] == head:
                out.append(len(head))
        return out

    @staticmethod
    def _stops(model, tmpl: ChatTemplate) -> list[str]:
        stops = []
        for marker in _HARMONY_TURN_ENDS if _is_harmony(tmpl.source) else _TURN_ENDS:
            if marker in tmpl.source:
                ids = model.tokenize(marker, add_special=False, parse_special=True)
                if not (len(ids) == 1 and model.is_eog(ids[0])):
                    stops.append(marker)
        return stops


__all__ = ["ChatTemplate", "ChatPrompt", "BUILTIN_TEMPLATES", "model_template", "template_source", "prompt_ids",
           "check_messages", "is_messages"]
