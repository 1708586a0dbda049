"""llama-server's own request and response shapes (its native routes, beside OpenAI's):
/completion's body and answer (content, stop_type, completion_probabilities, timings), the
slots (/slots: one today, described by describe_slot so that a list of them can grow), /props,
and /metrics in Prometheus's text format under llama.cpp's metric names.

Shapes only: nothing here touches the models (see worker.py)."""
from __future__ import annotations

import base64
import binascii
import warnings
from typing import Any, Callable

from ...engine.chat_template import model_template
from ...engine.sampling import SamplingParams, TokenLogprobs
from ...errors import PyllamaspecError
from ...structured.reasoning import think_syntax
from ...structured.tools import family_of
from ...speculation.decoder import DraftParams, Stats
from .openai_format import APIError, GenRequest, _bool, _common, _n_probs, _type_name, timings

TokenText = Callable[[int], bytes]
# llama-server's sampler chain names, in the order this server applies them
SAMPLERS = ["penalties", "top_k", "top_p", "min_p", "temperature"]


def parse_native_completion(body: Any, n_ctx: int) -> GenRequest:
    """POST /completion: prompt (a string, token ids, both mixed, or llama-server's prompt object
    {"prompt_string", "multimodal_data"}), n_predict (-1: to the end), n_probs, stream, stop,
    cache_prompt, id_slot, return_tokens and the sampling fields."""
    req = _common(body, "completion", n_ctx)
    req.native = True
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (list, dict)):
        p = p[0]
    if isinstance(p, dict):
        p = _prompt_object(p, req)
    ok_item = lambda x: isinstance(x, str) or (isinstance(x, int) and not isinstance(x, bool))  # noqa: E731
    if isinstance(p, str) and p:
        req.prompt = p
    elif isinstance(p, list) and p and all(ok_item(x) for x in p):
        req.prompt = p if any(isinstance(x, str) for x in p) else [int(x) for x in p]
    else:
        raise APIError(f"'prompt' must be a non-empty string, an array of token ids, or both mixed, got "
                       f"{_type_name(p)}", param="prompt")
    req.logprobs = _n_probs(body)
    req.return_tokens = _bool(body, "return_tokens")
    return req


def _prompt_object(p: dict, req: GenRequest) -> Any:
    """llama-server's prompt object: its prompt_string, read as any prompt; with multimodal_data
    (base64 images, decoded into req.images) prompt_string is text with one server media marker
    (/props' media_marker) per image."""
    if "prompt_string" not in p:
        raise APIError('"prompt" elements must be a string, a list of tokens, a JSON object containing a prompt '
                       'string, or a list of mixed strings & tokens.', param="prompt")
    text, data = p["prompt_string"], p.get("multimodal_data")
    if data is None:
        return text
    if not isinstance(text, str):
        raise APIError(f"'prompt_string' must be a string beside 'multimodal_data', got {_type_name(text)}",
                       param="prompt")
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise APIError("'multimodal_data' must be an array of base64 strings", param="prompt")
    req.multimodal = True
    req.images = [_base64(x, k) for k, x in enumerate(data)]
    return text


def _base64(s: str, k: int) -> bytes:
    """One multimodal_data entry's bytes: line breaks and missing padding are taken (as
    llama-server's decoder takes them), any other character is a 400."""
    t = "".join(s.split())
    if t.startswith("data:"):
        raise APIError(f"multimodal_data[{k}] is a data URL: send only the base64 after its comma", param="prompt")
    try:
        return base64.b64decode(t + "=" * (-len(t) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise APIError(f"multimodal_data[{k}] is not valid base64", param="prompt") from None


def probabilities(lps: list[TokenLogprobs], text_of: TokenText) -> list[dict]:
    """completion_probabilities: per token its id, text, bytes, logprob and the top alternatives
    (llama-server's n_probs with post_sampling_probs off: the raw softmax)."""
    def entry(tok: int, lp: float) -> dict:
        b = text_of(tok)
        return {"id": tok, "token": b.decode("utf-8", "replace"), "bytes": list(b), "logprob": lp}
    return [dict(entry(t.token, t.logprob), top_logprobs=[entry(i, lp) for i, lp in t.top]) for t in lps]


def sampling_params(sampling: SamplingParams, draft: DraftParams | None, max_tokens: int | None,
                    stream: bool = False, n_probs: int = 0) -> dict:
    """generation_settings / a slot's params: the sampling and speculation a request ran with."""
    out = {"seed": sampling.seed, "temperature": sampling.temperature, "top_k": sampling.top_k,
           "top_p": sampling.top_p, "min_p": sampling.min_p, "repeat_last_n": sampling.penalty_last_n,
           "repeat_penalty": sampling.repeat_penalty, "presence_penalty": sampling.presence_penalty,
           "frequency_penalty": sampling.frequency_penalty, "ignore_eos": sampling.ignore_eos,
           "max_tokens": -1 if max_tokens is None else max_tokens,
           "n_predict": -1 if max_tokens is None else max_tokens, "stream": stream, "n_probs": n_probs,
           "samplers": SAMPLERS}
    if draft is not None:
        out.update({"speculative.n_max": draft.n_draft, "speculative.n_min": draft.n_min,
                    "speculative.p_min": draft.p_min, "speculative.adaptive": draft.adaptive})
    return out


def stop_type(result: dict) -> str:
    """llama-server's stop_type: eos (an end-of-generation token), word (a stop string), limit
    (n_predict or the context), none (cancelled)."""
    reason = result.get("finish_reason")
    if reason == "stop":
        return "eos" if result.get("eog") is not None else "word"
    return "limit" if reason in ("length", "context_full") else "none"


def whole(req: GenRequest, model: str, result: dict, settings: dict, text_of: TokenText, has_drafter: bool,
          prompt_text: str) -> dict:
    """The answer of a /completion without stream."""
    stats: Stats | None = result.get("stats")
    text = result.get("text", "")
    out = {"index": 0, "content": text, "tokens": list(result.get("tokens", ())) if req.return_tokens else [],
           "id_slot": result.get("id_slot", 0), "stop": True, "model": model, "tokens_predicted": len(result.get("tokens", ())),
           "tokens_evaluated": len(result.get("prompt_tokens", ())), "generation_settings": settings,
           "prompt": prompt_text, "has_new_line": "\n" in text, "truncated": False, "stop_type": stop_type(result),
           "stopping_word": result.get("stopping_word", ""),
           # what the cache holds afterwards, as llama-server counts it (the prompt and the output)
           "tokens_cached": len(result.get("prompt_tokens", ())) + len(result.get("tokens", ())),
           "timings": timings(stats, has_drafter)}
    if req.logprobs is not None and result.get("logprobs"):
        out["completion_probabilities"] = probabilities(result["logprobs"], text_of)
    return out


def chunk(req: GenRequest, text: str, tokens: list[int], lps: list[TokenLogprobs], n_predicted: int,
          n_prompt: int, text_of: TokenText) -> dict:
    """One streamed piece of a /completion."""
    out: dict = {"index": 0, "content": text, "tokens": tokens if req.return_tokens else [], "stop": False,
                 "id_slot": 0, "tokens_predicted": n_predicted, "tokens_evaluated": n_prompt}
    if req.logprobs is not None and lps:
        out["completion_probabilities"] = probabilities(lps, text_of)
    return out


def describe_slot(slot_id: int, n_ctx: int, speculative: bool, busy: bool, task: dict | None,
                  text: bool = False) -> dict:
    """One entry of /slots, as llama-server describes a slot: its id, context, whether it is
    working, and its current (else last) task: counts and params, and with text (the operator's
    view) its prompt and what it generated."""
    out: dict[str, Any] = {"id": slot_id, "n_ctx": n_ctx, "speculative": speculative, "is_processing": busy}
    if task is not None:
        out.update({"id_task": task["id"], "n_prompt_tokens": task["n_prompt"],
                    "n_prompt_tokens_processed": task["n_prompt"] - task["n_cached"],
                    "n_prompt_tokens_cache": task["n_cached"], "params": task["params"],
                    "next_token": [{"has_next_token": busy, "has_new_line": "\n" in task["generated"],
                                    "n_remain": task["n_remain"], "n_decoded": task["n_decoded"]}],
                    })
        if text:
            out.update({"prompt": task["prompt"], "generated": task["generated"]})
    return out


# (name, type, help) of the metrics, as llama-server names them (llamacpp: prefix)
METRICS = [
    ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "counter", "Total time spent processing prompts"),
    ("tokens_predicted_total", "counter", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens"),
    ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "counter", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps"),
    ("requests_total", "counter", "Requests run to their end (pyllamaspec)"),
    ("requests_cancelled_total", "counter", "Requests stopped by their client going away (pyllamaspec)"),
    ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    ("requests_processing", "gauge", "Number of requests processing"),
    ("requests_deferred", "gauge", "Number of requests deferred"),
    ("prompt_cache_states", "gauge", "Prompt states kept in host memory (--cache-ram, pyllamaspec)"),
    ("prompt_cache_bytes", "gauge", "Bytes of the prompt states kept in host memory (pyllamaspec)"),
    ("prompt_cache_hits_total", "counter", "Prompts resumed from a kept state (pyllamaspec)"),
]


def metrics_text(values: dict[str, float]) -> str:
    """Prometheus's text exposition format (version 0.0.4)."""
    lines = []
    for name, kind, help_ in METRICS:
        lines += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {kind}",
                  f"llamacpp:{name} {float(values.get(name, 0.0)):g}"]
    return "\n".join(lines) + "\n"


__all__ = ["parse_native_completion", "probabilities", "sampling_params", "stop_type", "whole", "chunk",
           "describe_slot", "metrics_text", "METRICS", "SAMPLERS"]


def numerics(model) -> dict:
    """/props' "numerics": the choices of ours that make an answer depart from llama.cpp's (a KV
    cache type other than its F16, deterministic kernels), so a client can tell why."""
    type_k, type_v = model.memory["type_k"], model.memory["type_v"]
    departs = [f"KV cache {t} ({name})" for name, t in (("type_k", type_k), ("type_v", type_v)) if t != "f16"]
    if model.deterministic:
        departs.append("deterministic kernels (vec_dot at every batch size)")
    return {"cache_type_k": type_k, "cache_type_v": type_v, "deterministic": model.deterministic,
            "departs_from_llama_cpp": departs}


def chat_format(target, defaults) -> dict:
    """/props' "chat_format": how chats are read with this template: its tool-call syntax
    ("generic": none we know, so the generic JSON format and a grammar carry tool calls), its
    reasoning block's tags, and the server's reasoning settings."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # a model without a template: said once, at load
            source = model_template(target, defaults.chat_template).source
    except PyllamaspecError:
        return {"tool_calls": None, "thinking": None}
    fam, think = family_of(source), think_syntax(source)
    return {"tool_calls": fam.name if fam is not None else "generic",
            "thinking": {"start": think.start, "end": think.end} if think is not None else None,
            "reasoning_format": defaults.reasoning.format, "reasoning_budget": defaults.reasoning.budget}
