"""OpenAI's request and response shapes: parsing and checking a request body into a
GenRequest, and shaping results, stream chunks, usage, logprobs and llama-server's timings.

Every problem with a request is an APIError (a 4xx status and OpenAI's error body) that says
which field is wrong and why; nothing here touches the models."""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ...engine.sampling import MAX_LOGPROBS, TokenLogprobs
from ...errors import (ContextFullError, GrammarError, InvalidArgumentError, ModelClosedError, PyllamaspecError,
                      TokenOutOfRangeError)
from ...speculation.decoder import Stats
from ...structured.formats import GrammarSpec, constraint_spec, tools_spec
from ...structured.reasoning import FORMATS
from ...structured.output import ChatOutput, PlainOutput
from ...vision.messages import split_media
from ...vision.prompt import server_marker
from ..openai_shapes import FINISH, TokenText, chat_logprobs, completion_logprobs  # noqa: F401 (re-exported)

# Roles a chat template knows; OpenAI's "developer" is the newer name of "system".
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
# Options that change what OpenAI returns in ways we do not implement: refused unless they hold
# their neutral value (a silently ignored option would give a wrong answer).
UNSUPPORTED = {
    "functions": (None, []), "function_call": (None, "none"),
    "logit_bias": (None, {}, []), "audio": (None,), "modalities": (None, ["text"]), "prediction": (None,),
    "suffix": (None, ""), "echo": (None, False), "best_of": (None, 1), "n": (None, 1), "web_search_options": (None,),
    # llama-server's sampling extras this server does not have (in any route, as llama-server takes them)
    "typical_p": (None, 1, 1.0), "mirostat": (None, 0), "dynatemp_range": (None, 0, 0.0),
    "xtc_probability": (None, 0, 0.0), "dry_multiplier": (None, 0, 0.0), "top_n_sigma": (None, -1, -1.0),
    "n_indent": (None, 0), "post_sampling_probs": (None, False), "lora": (None, []),
    "samplers": (None, ["penalties", "top_k", "top_p", "min_p", "temperature"]),
    # lazy grammars (applied from a trigger on): a grammar from the first token would differ
    "grammar_lazy": (None, False), "grammar_triggers": (None, []),
}
# Options without effect on one answer from this server: accepted and ignored.
IGNORED = {"user", "metadata", "store", "service_tier", "safety_identifier",
           "prompt_cache_key", "verbosity", "n_keep", "t_max_prompt_ms", "return_progress", "timings_per_token"}


class APIError(Exception):
    """A request the server refuses: HTTP status and OpenAI's error object."""

    def __init__(self, message: str, status: int = 400, *, param: str | None = None,
                 type: str = "invalid_request_error", code: str | None = None):
        message = _cut(message)
        super().__init__(message)
        self.message, self.status, self.param, self.type, self.code = message, status, param, type, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


MAX_MESSAGE = 600          # characters of an error message: a client's input is never echoed whole


def _cut(message: str) -> str:
    """An error message cut to MAX_MESSAGE characters (a 400 for a 200,000-entry logit_bias
    echoed the 2.5 MB map back)."""
    message = str(message)
    if len(message) <= MAX_MESSAGE:
        return message
    return message[:MAX_MESSAGE - 60] + f"... ({len(message)} characters in all)"


def as_api_error(e: BaseException) -> APIError:
    """An exception as the error a client gets: what the request asked for that cannot be done
    (a grammar, a template, an argument, a token id) is a 400, the server's own failure a 500."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ContextFullError):
        return APIError(str(e), 400, code="context_length_exceeded")
    if isinstance(e, (InvalidArgumentError, TokenOutOfRangeError)) and not isinstance(e, ModelClosedError):
        return APIError(str(e), 400)
    if isinstance(e, PyllamaspecError):
        return APIError(str(e), 500, type="server_error")
    return APIError(f"internal error: {type(e).__name__}: {e}", 500, type="server_error")


@dataclass
class GenRequest:
    """One checked request: what to generate and how to answer."""
    kind: str                                  # "chat" or "completion"
    messages: list[dict] | None = None
    prompt: str | list[int] | None = None
    max_tokens: int | None = None
    sampling: dict = field(default_factory=dict)   # SamplingParams fields given
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None                # top alternatives per token, None = no logprobs
    images: list = field(default_factory=list)  # a chat's image parts, /completion's multimodal_data (bytes)
    multimodal: bool = False                   # /completion's multimodal_data given: the prompt's markers are images
    model: str | None = None
    cache_prompt: bool = True                  # False: the caches start empty (llama-server's field)
    id_slot: int = -1                          # the slot asked for (-1: any)
    native: bool = False                       # llama-server's /completion shapes, not OpenAI's
    return_tokens: bool = False                # /completion: the generated ids too
    constraint: GrammarSpec | None = None      # grammar / json_schema / response_format
    template_kwargs: dict = field(default_factory=dict)   # chat_template_kwargs (over the server's)
    reasoning: dict = field(default_factory=dict)  # Reasoning fields given (over the server's)


# ---- field checks -----------------------------------------------------------------------------

def _type_name(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number" if isinstance(v, (int, float)) else type(v).__name__)


def _number(body: dict, name: str, lo: float, hi: float, *, integer: bool = False, lo_open: bool = False,
            hi_open: bool = False):
    v = body.get(name)
    if v is None:
        return None
    kind = "an integer" if integer else "a number"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        if not (integer and isinstance(v, float) and v.is_integer()):
            raise APIError(f"'{name}' must be {kind}, got {_type_name(v)} {_short(v)}", param=name)
        v = int(v)
    # (an int of hundreds of digits is compared as an int: float() of it would overflow)
    bad = (isinstance(v, float) and not math.isfinite(v)) or v < lo or v > hi
    if bad or (lo_open and v == lo) or (hi_open and v == hi):
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise APIError(f"'{name}' must be in {rng}, got {_short(v)}", param=name)
    return v


def _short(v: Any) -> str:
    """repr(v), shortened: an error message does not echo a huge value (reprlib: a 200,000-entry
    map is not written out whole first)."""
    import reprlib
    if isinstance(v, int) and abs(v) >= 10**30:
        return f"an integer of {len(str(abs(v)))} digits"
    rp = reprlib.Repr()              # (keyword arguments only from Python 3.12)
    rp.maxlevel, rp.maxdict, rp.maxlist, rp.maxtuple, rp.maxset, rp.maxstring, rp.maxother = 3, 6, 6, 6, 6, 60, 60
    r = rp.repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _bool(body: dict, name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise APIError(f"'{name}' must be a boolean, got {_type_name(v)} {v!r}", param=name)
    return v


def _refuse_unsupported(body: dict) -> None:
    for name, neutral in UNSUPPORTED.items():
        if name in body and body[name] not in neutral:
            what = "n > 1 (several choices)" if name == "n" else f"'{name}'"
            raise APIError(f"{what} is not supported by this server (got {body[name]!r})", param=name,
                           code="unsupported_parameter")


def _stop(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise APIError(f"'stop' must be a string or an array of strings, got {_type_name(v)}", param="stop")
    return [s for s in stops if s]            # OpenAI ignores empty stop strings


def _sampling(body: dict) -> dict:
    """The sampling fields given (OpenAI's names, llama-server's extras)."""
    checks: dict[str, Callable[[], Any]] = {
        "temperature": lambda: _number(body, "temperature", 0, 100),
        "top_p": lambda: _number(body, "top_p", 0, 1, lo_open=True),
        "top_k": lambda: _number(body, "top_k", 0, 2**31 - 1, integer=True),
        "min_p": lambda: _number(body, "min_p", 0, 1, hi_open=True),
        "repeat_penalty": lambda: _number(body, "repeat_penalty", 1e-4, 1e4, lo_open=True),
        "presence_penalty": lambda: _number(body, "presence_penalty", -2, 2),
        "frequency_penalty": lambda: _number(body, "frequency_penalty", -2, 2),
        "penalty_last_n": lambda: _number(body, "repeat_last_n", -1, 2**31 - 1, integer=True),
        "ignore_eos": lambda: _bool(body, "ignore_eos") if "ignore_eos" in body else None,
    }
    return {k: v for k, v in ((k, f()) for k, f in checks.items()) if v is not None}


def _slot(body: dict) -> int:
    """id_slot: -1 (any) or a slot's id (the worker checks it against its -np slots)."""
    v = _number(body, "id_slot", -1, 2**31 - 1, integer=True)
    return -1 if v is None else v


def _constraint(body: dict) -> GrammarSpec | None:
    """grammar (GBNF), json_schema, response_format, as llama-server reads them: a broken grammar
    or schema is a 400 naming the problem (the grammar's line and column, the schema's path)."""
    for name in ("grammar", "json_schema", "response_format"):
        v = body.get(name)
        if name == "grammar" and v is not None and not isinstance(v, str):
            raise APIError(f"'grammar' must be a string of GBNF, got {_type_name(v)}", param="grammar")
        if name != "grammar" and v is not None and not isinstance(v, (dict, str)):
            raise APIError(f"'{name}' must be an object, got {_type_name(v)}", param=name)
    try:
        # GBNF is parsed once, on the target's vocabulary (Worker._prompt), not here as well
        return constraint_spec(body.get("grammar") or None, body.get("json_schema"), body.get("response_format"),
                               check=False)
    except (GrammarError, InvalidArgumentError) as e:
        param = "grammar" if body.get("grammar") else "response_format" if "response_format" in body else "json_schema"
        raise APIError(str(e), param=param) from None


def _common(body: Any, kind: str, n_ctx: int) -> GenRequest:
    if not isinstance(body, dict):
        raise APIError(f"the request body must be a JSON object, got {_type_name(body)}")
    _refuse_unsupported(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise APIError(f"'model' must be a string, got {_type_name(model)}", param="model")
    req = GenRequest(kind, model=model, sampling=_sampling(body), stop=_stop(body), id_slot=_slot(body),
                     cache_prompt=_bool(body, "cache_prompt", True), constraint=_constraint(body))
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        v = _number(body, name, -1, 2**31 - 1, integer=True)
        if v == -1:                            # llama-server's "to the end"
            break
        if v is not None:
            if v > n_ctx:
                raise APIError(f"'{name}' is {v}, beyond the context of {n_ctx} tokens", param=name,
                               code="context_length_exceeded")
            req.max_tokens = v
            break
    seed = _number(body, "seed", -2**63, 2**64 - 1, integer=True)
    req.seed = None if seed is None or seed == -1 else seed % 2**64      # llama-server: -1 = random
    req.stream = _bool(body, "stream")
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise APIError(f"'stream_options' must be an object, got {_type_name(opts)}", param="stream_options")
        if not req.stream:
            raise APIError("'stream_options' is only allowed with 'stream': true", param="stream_options")
        req.include_usage = _bool(opts, "include_usage")
    return req


def _join_text(texts) -> str:
    """Text parts as llama-server joins them for a template of string contents (common/chat.cpp's
    concat_content_parts): a newline before each part once the text is not empty."""
    out = ""
    for t in texts:
        out += ("\n" if out else "") + t
    return out


def _content(i: int, m: dict, media_path: str | None = None) -> str:
    """A message's text; a list of parts with images becomes text with the server's media marker
    per image (llama-server's join), the images kept under "_images" for the request to collect
    (file:// URLs read under media_path, the server's --media-path)."""
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        for j, part in enumerate(c):
            if not isinstance(part, dict) or part.get("type") not in ("text", "image_url") or \
                    (part.get("type") == "text" and not isinstance(part.get("text"), str)):
                what = part.get("type") if isinstance(part, dict) else _type_name(part)
                raise APIError(f"messages[{i}].content[{j}]: only text and image_url parts are supported, got "
                               f"{what!r}", param=f"messages[{i}].content")
        if all(part["type"] == "text" for part in c):
            return _join_text(part["text"] for part in c)
        try:
            (msg,), images = split_media([{"role": "user", "content": c}], local_files=False,
                                         marker=server_marker(), media_path=media_path)
        except PyllamaspecError as e:
            raise APIError(f"messages[{i}]: {e}", param=f"messages[{i}].content") from None
        m["_images"] = images
        return msg["content"]
    if c is None:
        raise APIError(f"messages[{i}] has no content", param=f"messages[{i}].content")
    raise APIError(f"messages[{i}].content must be a string or an array of text parts, got {_type_name(c)}",
                   param=f"messages[{i}].content")


def _messages(body: dict, media_path: str | None = None) -> list[dict]:
    msgs = body.get("messages")
    if msgs is None:
        raise APIError("'messages' is required", param="messages")
    if not isinstance(msgs, list):
        raise APIError(f"'messages' must be an array of messages, got {_type_name(msgs)}", param="messages")
    if not msgs:
        raise APIError("'messages' is empty: give at least one message", param="messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise APIError(f"messages[{i}] must be an object, got {_type_name(m)}", param=f"messages[{i}]")
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            what = _short(role) if isinstance(role, str) or role is None else f"of type {_type_name(role)}"
            raise APIError(f"messages[{i}].role {what} is not supported (use one of {', '.join(ROLES)})",
                           param=f"messages[{i}].role")
        out.append(_message(i, m, ROLES[role], media_path))
    return out


def _message_images(body_messages: list) -> list:
    """The images of a chat's messages, in order (what _content kept of their image parts)."""
    return [img for m in body_messages if isinstance(m, dict) for img in m.pop("_images", [])]


def _message(i: int, m: dict, role: str, media_path: str | None = None) -> dict:
    """One message: content (null beside tool calls, or from a tool), an assistant's
    tool_calls, a tool result's tool_call_id and name, earlier reasoning_content."""
    calls = m.get("tool_calls")
    if calls is not None and (role != "assistant" or not isinstance(calls, list)):
        raise APIError(f"messages[{i}].tool_calls must be an array on an assistant message",
                       param=f"messages[{i}].tool_calls")
    out: dict = {"role": role}
    if m.get("content") is None and (calls or role in ("tool", "assistant")):
        if not calls and "content" not in m:
            raise APIError(f"messages[{i}] has neither content nor tool_calls", param=f"messages[{i}].content")
        out["content"] = None if calls else ""
    else:
        out["content"] = _content(i, m, media_path)
    for j, tc in enumerate(calls or []):
        f = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or tc.get("type", "function") != "function":
            raise APIError(f"messages[{i}].tool_calls[{j}] must be {{'type': 'function', 'function': {{'name', "
                           f"'arguments'}}}}", param=f"messages[{i}].tool_calls")
    if calls:
        out["tool_calls"] = calls
    for key in ("tool_call_id", "name", "reasoning_content"):
        if isinstance(m.get(key), str):
            out[key] = m[key]
    return out


def _tools(body: dict, req: GenRequest) -> None:
    """tools, tool_choice, parallel_tool_calls: the tools reach the template and the answer is
    read in its tool-call syntax (a grammar enforces "required" or a named function)."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise APIError("'tool_choice' needs 'tools'", param="tool_choice")
        return
    if req.constraint is not None:
        raise APIError("Cannot use custom grammar constraints (grammar, json_schema, response_format) with tools",
                       param="tools")
    try:
        req.constraint = tools_spec(tools, choice, body.get("parallel_tool_calls"))
    except InvalidArgumentError as e:
        raise APIError(str(e), param="tool_choice" if "tool_choice" in str(e) else "tools") from None


def _reasoning(body: dict, req: GenRequest) -> None:
    """llama-server's thinking fields: chat_template_kwargs (enable_thinking must be a boolean),
    reasoning_format, reasoning_budget_tokens (thinking_budget_tokens; -1: the server's),
    reasoning_budget_message, and OpenAI's reasoning_effort ("none" turns thinking off, another
    level reaches the template)."""
    kw = body.get("chat_template_kwargs")
    if kw is not None and not isinstance(kw, dict):
        raise APIError(f"'chat_template_kwargs' must be an object, got {_type_name(kw)}", param="chat_template_kwargs")
    req.template_kwargs = dict(kw or {})
    if "enable_thinking" in req.template_kwargs and not isinstance(req.template_kwargs["enable_thinking"], bool):
        raise APIError('invalid type for "enable_thinking" (expected boolean, got '
                       f'{_type_name(req.template_kwargs["enable_thinking"])})', param="chat_template_kwargs")
    effort = body.get("reasoning_effort")
    if effort is not None:
        if not isinstance(effort, str):
            raise APIError(f"'reasoning_effort' must be a string, got {_type_name(effort)}", param="reasoning_effort")
        if effort == "none":
            req.template_kwargs["enable_thinking"] = False
        elif effort:
            req.template_kwargs["reasoning_effort"] = effort
    fmt = body.get("reasoning_format")
    if fmt is not None:
        if fmt not in FORMATS:
            raise APIError(f"'reasoning_format' must be one of {', '.join(FORMATS)}, got {fmt!r}",
                           param="reasoning_format")
        req.reasoning["format"] = fmt
    name = "reasoning_budget_tokens" if "reasoning_budget_tokens" in body else "thinking_budget_tokens"
    budget = _number(body, name, -1, 1 << 30, integer=True)
    if budget is not None and budget >= 0:
        req.reasoning["budget"] = budget
    msg = body.get("reasoning_budget_message")
    if msg is not None:
        if not isinstance(msg, str):
            raise APIError("'reasoning_budget_message' must be a string", param="reasoning_budget_message")
        req.reasoning["message"] = msg


def parse_chat(body: Any, n_ctx: int, media_path: str | None = None) -> GenRequest:
    """A chat request; media_path: the server's --media-path (file:// image URLs), or None."""
    req = _common(body, "chat", n_ctx)
    req.messages = _messages(body, media_path)
    req.images = _message_images(body["messages"])
    _tools(body, req)
    _reasoning(body, req)
    want = _bool(body, "logprobs")
    top = _number(body, "top_logprobs", 0, MAX_LOGPROBS, integer=True)
    if top is not None and not want:
        raise APIError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    req.logprobs = (top or 0) if want else _n_probs(body)
    return req


def _n_probs(body: dict) -> int | None:
    """llama-server's n_probs (the top n per token; 0: none), where the OpenAI fields are not given."""
    n = _number(body, "n_probs", 0, MAX_LOGPROBS, integer=True)
    return n if n else None


def parse_completion(body: Any, n_ctx: int) -> GenRequest:
    req = _common(body, "completion", n_ctx)
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]                               # one prompt in an array
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        req.prompt = p
    elif isinstance(p, str):
        if not p:
            raise APIError("'prompt' is empty", param="prompt")
        req.prompt = p
    elif isinstance(p, list) and len(p) > 1:
        raise APIError("several prompts in one request are not supported: send one prompt", param="prompt",
                       code="unsupported_parameter")
    elif isinstance(p, dict):                  # (llama-server's, with --mmproj, reads this prompt as a string)
        raise APIError("a prompt object ({\"prompt_string\", \"multimodal_data\"}) is taken by /completion and "
                       "/completions; /v1/completions takes a string or token ids", param="prompt")
    else:
        raise APIError(f"'prompt' must be a non-empty string or an array of token ids, got {_type_name(p)}",
                       param="prompt")
    req.logprobs = _number(body, "logprobs", 0, MAX_LOGPROBS, integer=True)
    if req.logprobs is None:
        req.logprobs = _n_probs(body)
    return req


# ---- responses --------------------------------------------------------------------------------

def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]


def usage(stats: Stats | None, n_prompt: int, n_generated: int) -> dict:
    cached = stats.n_reused if stats is not None else 0
    return {"prompt_tokens": n_prompt, "completion_tokens": n_generated, "total_tokens": n_prompt + n_generated,
            "prompt_tokens_details": {"cached_tokens": cached}}


def timings(stats: Stats | None, has_drafter: bool) -> dict:
    """llama-server's timings object (cache_n: prompt tokens reused from the cache, prompt_n:
    evaluated), with the speculation's acceptance and tokens per round."""
    if stats is None:
        return {}
    prompt_n = stats.n_prompt - stats.n_reused
    p_ms, g_ms = 1e3 * stats.t_prompt, 1e3 * stats.t_generate
    # rates from the tokens the prefill evaluated (the last prompt token goes with the first
    # round): a 1-token prompt has no prompt rate (0), not one divided by a few microseconds
    n_eval = stats.n_prompt_evaluated
    t = {"cache_n": stats.n_reused, "prompt_n": prompt_n, "prompt_ms": p_ms,
         "prompt_per_token_ms": p_ms / n_eval if n_eval else 0.0,
         "prompt_per_second": stats.prompt_tps,
         "predicted_n": stats.n_generated, "predicted_ms": g_ms,
         "predicted_per_token_ms": g_ms / stats.n_generated if stats.n_generated else 0.0,
         "predicted_per_second": stats.generate_tps}
    if has_drafter:
        t.update(draft_n=stats.drafted, draft_n_accepted=stats.accepted, draft_acceptance=stats.acceptance_rate,
                 draft_rounds=stats.rounds, tokens_per_round=stats.mean_accepted)
        if stats.draft_mode:
            t["draft_mode"] = stats.draft_mode
    if stats.tree_rounds:                     # token trees: how many, how big, what they kept
        t.update(tree_rounds=stats.tree_rounds, tree_nodes=stats.tree_nodes, tree_shape=stats.tree_shape,
                 tree_depth_accepted=sum(d for _, d, _ in stats.tree_log) / stats.tree_rounds)
    if stats.forced:                          # text a grammar forced, drafted for free
        t.update(draft_n_forced=stats.forced, draft_n_forced_accepted=stats.forced_accepted,
                 tokens_per_round=stats.mean_accepted)
    if stats.batch_rounds:
        # rounds verified with other slots': how many sequences an evaluation carried on average,
        # and in how many of them the batch's cost model decoded plainly (more slots, less room)
        t.update(batch_n=stats.mean_batch, batch_rounds=stats.batch_rounds, batch_plain_rounds=stats.batch_plain)
    return t


@dataclass
class Shaper:
    """Builds one request's response objects (whole or as chunks)."""
    req: GenRequest
    model: str
    text_of: TokenText
    has_drafter: bool
    id: str = ""
    created: int = 0
    prompt_chars: int = 0
    output: ChatOutput | None = None           # a chat's reader of its own text

    def __post_init__(self) -> None:
        self.id = self.id or new_id(self.req.kind)
        self.created = self.created or int(time.time())
        if self.output is None and self.req.kind == "chat":
            self.output = PlainOutput()

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "pyllamaspec"}

    def _logprobs(self, lps: list[TokenLogprobs] | None, offset: int = 0) -> dict | None:
        if self.req.logprobs is None or lps is None:
            return None
        if self.req.kind == "chat":
            return chat_logprobs(lps, self.text_of)
        return completion_logprobs(lps, self.text_of, self.prompt_chars + offset)

    def finish_reason(self, finish: str) -> str:
        if self.output is not None and self.output.has_tool_calls and finish == "stop":
            return "tool_calls"
        return FINISH.get(finish, finish)

    def whole(self, text: str, finish: str, lps, stats: Stats | None, n_prompt: int, n_gen: int) -> dict:
        choice: dict = {"index": 0, "logprobs": self._logprobs(lps), "finish_reason": None}
        if self.req.kind == "chat":
            self.output.push(text)
            self.output.finish()
            choice["message"] = self.output.message()
            obj = self._head("chat.completion")
        else:
            choice["text"] = text
            obj = self._head("text_completion")
        choice["finish_reason"] = self.finish_reason(finish)
        obj.update(choices=[choice], usage=usage(stats, n_prompt, n_gen), timings=timings(stats, self.has_drafter))
        return obj

    def deltas(self, text: str, final: bool = False) -> list[dict]:
        """A chat's deltas for more of its text (the reader holds back what may be syntax)."""
        out = self.output.push(text) if text else []
        return out + (self.output.finish() if final else [])

    def chunk(self, text: str | None = None, lps=None, finish: str | None = None, *, role: bool = False,
              offset: int = 0, delta: dict | None = None) -> dict:
        choice: dict = {"index": 0, "logprobs": self._logprobs(lps, offset) if lps else None,
                        "finish_reason": self.finish_reason(finish) if finish else None}
        if self.req.kind == "chat":
            d: dict = {"role": "assistant", "content": ""} if role else {}
            if text:
                d["content"] = text
            d.update(delta or {})
            choice["delta"] = d
            obj = self._head("chat.completion.chunk")
        else:
            choice["text"] = text or ""
            obj = self._head("text_completion")
        obj["choices"] = [choice]
        return obj

    def final_chunk(self, finish: str, stats: Stats | None) -> dict:
        obj = self.chunk(finish=finish)
        obj["timings"] = timings(stats, self.has_drafter)
        return obj

    def usage_chunk(self, stats: Stats | None, n_prompt: int, n_gen: int) -> dict:
        obj = self._head("chat.completion.chunk" if self.req.kind == "chat" else "text_completion")
        obj.update(choices=[], usage=usage(stats, n_prompt, n_gen))
        return obj


__all__ = ["APIError", "as_api_error", "GenRequest", "parse_chat", "parse_completion", "Shaper", "timings", "usage"]
