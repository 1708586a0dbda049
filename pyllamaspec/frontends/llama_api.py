"""llama-cpp-python's habits on pyllamaspec's Model: ``Model(model_path=...)``,
``create_completion`` / ``create_chat_completion`` (and calling the model) with llama-cpp-python's
argument names, defaults and return dicts (OpenAI's shapes), ``create_embedding``; ``Llama`` is the
same class under llama-cpp-python's name. A thin layer: every call is pyllamaspec's own
stream_generate / chat prompt, speculative when the model was given a ``draft_model``.

    from pyllamaspec import Model                     # or: from pyllamaspec import Llama
    llm = Model(model_path="model.gguf", n_ctx=2048, draft_model="draft.gguf")
    out = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=32)
    print(out["choices"][0]["message"]["content"])

grammar= (GBNF text or a LlamaGrammar), response_format= (json_object / json_schema) and tools= /
tool_choice= go through to the engine's constraints (tools: not with stream=True). Options
llama-cpp-python has and this engine does not (logit_bias, mirostat, tfs_z, typical_p, suffix,
functions, logits processors) are refused by name with InvalidArgumentError, never ignored."""
from __future__ import annotations

import os
import time
import uuid
from contextlib import ExitStack
from typing import Any, Iterator, Sequence

from ..engine.chat_template import ChatPrompt
from ..engine.model import Model as _EngineModel
from ..errors import InvalidArgumentError
from ..generation.drafts import open_draft
from ..generation.generate import stream_generate
from ..structured.json_schema import json_schema_to_grammar
from .chat import chat
from .openai_shapes import FINISH, chat_logprobs, completion_logprobs

# option -> its values that change nothing (anything else is refused)
_NEUTRAL = {"suffix": (None, ""), "typical_p": (1, 1.0), "tfs_z": (1, 1.0), "mirostat_mode": (0,),
            "stopping_criteria": (None,), "logits_processor": (None,), "logit_bias": (None, {}),
            "functions": (None, []), "function_call": (None,)}


class LlamaGrammar:
    """llama-cpp-python's LlamaGrammar: GBNF text (from_string, from_file, or a JSON schema's
    grammar as llama.cpp converts it), for grammar= of create_completion / create_chat_completion."""

    def __init__(self, text: str):
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgumentError("a LlamaGrammar is GBNF text")
        self.text = text

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(grammar)

    @classmethod
    def from_file(cls, file: str | os.PathLike, verbose: bool = True) -> "LlamaGrammar":
        with open(file, encoding="utf-8") as f:
            return cls(f.read())

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        import json
        return cls(json_schema_to_grammar(json.loads(json_schema) if isinstance(json_schema, str) else json_schema))


def _grammar_text(grammar) -> str | None:
    if grammar is None or isinstance(grammar, str):
        return grammar or None
    if isinstance(grammar, LlamaGrammar):
        return grammar.text
    raise InvalidArgumentError(f"grammar must be GBNF text or a LlamaGrammar, got {type(grammar).__name__}")


def _response_format(rf):
    """llama-cpp-python's response_format: text (nothing), json_object (any JSON, or its schema)."""
    if rf is None or (isinstance(rf, dict) and rf.get("type", "text") == "text"):
        return None
    return rf


# llama-cpp-python's chat_format names for the built-in templates (chat_template.BUILTIN_TEMPLATES)
CHAT_FORMATS = {"llama-2": "llama2", "llama-3": "llama3", "mistral-instruct": "mistral"}


def _refuse(**options: Any) -> None:
    for name, value in options.items():
        if name in _NEUTRAL and not any(value is n or value == n for n in _NEUTRAL[name]):
            raise InvalidArgumentError(f"{name}={value!r} is not supported by pyllamaspec (llama-cpp-python's "
                                       f"option; its neutral value is {_NEUTRAL[name][0]!r})")


def _stops(stop: str | Sequence[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]


class LlamaMethods:
    """The llama-cpp-python methods, on top of a pyllamaspec Model (self)."""

    model_path: str
    draft_model: Any = None

    def _max_tokens(self, max_tokens: int | None) -> int:
        return max_tokens if max_tokens is not None and max_tokens > 0 else self.n_ctx

    def _run(self, prompt, max_tokens: int | None, sampling: dict, stop, logprobs: int | None):
        """stream_generate on this model (and its draft), llama-cpp-python's max_tokens (None or
        <= 0: until the context is full) and stop."""
        if sampling.get("seed") is None:
            sampling["seed"] = getattr(self, "seed", None)     # the constructor's, as llama-cpp-python
        return stream_generate(prompt, self, self.draft_model, max_tokens=self._max_tokens(max_tokens),
                               stop=_stops(stop) or None, logprobs=logprobs, **sampling)

    def _head(self, kind: str, model: str | None) -> dict:
        prefix = "chatcmpl-" if kind.startswith("chat") else "cmpl-"
        return {"id": prefix + uuid.uuid4().hex, "object": kind, "created": int(time.time()),
                "model": model if model is not None else self.model_path}

    def create_completion(self, prompt: str | list[int], suffix: str | None = None, max_tokens: int | None = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05,
                          typical_p: float = 1.0, logprobs: int | None = None, echo: bool = False,
                          stop: str | list[str] | None = None, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float = 1.0, top_k: int = 40,
                          stream: bool = False, seed: int | None = None, tfs_z: float = 1.0,
                          mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                          model: str | None = None, stopping_criteria=None, logits_processor=None, grammar=None,
                          logit_bias: dict | None = None) -> dict | Iterator[dict]:
        """llama-cpp-python's Llama.create_completion: a text_completion dict (OpenAI's shape), or
        with stream=True an iterator of chunks."""
        _refuse(suffix=suffix, typical_p=typical_p, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                stopping_criteria=stopping_criteria, logits_processor=logits_processor, logit_bias=logit_bias)
        sampling = dict(temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k, seed=seed,
                        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                        repeat_penalty=repeat_penalty, grammar=_grammar_text(grammar))
        responses = self._run(prompt, max_tokens, sampling, stop, logprobs)
        head = self._head("text_completion", model)
        prefix = (prompt if isinstance(prompt, str) else self.detokenize(prompt)) if echo else ""
        if stream:
            return self._completion_chunks(responses, head, prefix)
        return self._completion(responses, head, prefix, prompt, logprobs)

    def _completion(self, responses, head: dict, prefix: str, prompt, logprobs) -> dict:
        text, lps, last = prefix, [], None
        for r in responses:
            text += r.text
            if r.logprobs is not None and r.finish_reason is None:
                lps.append(r.logprobs)
            last = r
        stats = last.stats
        n_prompt = stats.n_prompt
        lp = None
        if logprobs is not None:
            start = len(prompt) if isinstance(prompt, str) and prefix else 0
            lp = completion_logprobs(lps, self.token_to_piece, start)
        choice = {"text": text, "index": 0, "logprobs": lp, "finish_reason": FINISH.get(last.finish_reason, "stop")}
        return {**head, "choices": [choice], "usage": {"prompt_tokens": n_prompt, "completion_tokens": stats.n_generated,
                                                      "total_tokens": n_prompt + stats.n_generated}}

    @staticmethod
    def _completion_chunks(responses, head: dict, prefix: str) -> Iterator[dict]:
        if prefix:
            yield {**head, "choices": [{"text": prefix, "index": 0, "logprobs": None, "finish_reason": None}]}
        for r in responses:
            finish = FINISH.get(r.finish_reason, "stop") if r.finish_reason else None
            if r.text or finish:
                yield {**head, "choices": [{"text": r.text, "index": 0, "logprobs": None, "finish_reason": finish}]}

    def __call__(self, prompt: str | list[int], **kwargs: Any) -> dict | Iterator[dict]:
        """create_completion, as llama-cpp-python's Llama is called."""
        return self.create_completion(prompt, **kwargs)

    def create_chat_completion(self, messages: list[dict], functions=None, function_call=None, tools=None,
                               tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                               min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False,
                               stop: str | list[str] | None = None, seed: int | None = None, response_format=None,
                               max_tokens: int | None = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0, tfs_z: float = 1.0,
                               mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                               model: str | None = None, logits_processor=None, grammar=None, logit_bias=None,
                               logprobs: bool | None = None, top_logprobs: int | None = None) -> dict | Iterator[dict]:
        """llama-cpp-python's Llama.create_chat_completion through the model's chat template
        (its GGUF template, or chat_format given to the constructor): a chat.completion dict, or
        with stream=True an iterator of chat.completion.chunk dicts."""
        _refuse(functions=functions, function_call=function_call, typical_p=typical_p, tfs_z=tfs_z,
                mirostat_mode=mirostat_mode, logits_processor=logits_processor, logit_bias=logit_bias)
        sampling = dict(temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k, seed=seed,
                        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                        repeat_penalty=repeat_penalty, grammar=_grammar_text(grammar),
                        response_format=_response_format(response_format))
        n_lp = (top_logprobs or 0) if logprobs else None
        if tools or tool_choice is not None or (sampling["response_format"] and not stream):
            if stream:
                raise InvalidArgumentError("tools with stream=True are not supported by the Llama layer (the "
                                           "server streams tool calls; pyllamaspec.chat() returns them)")
            return self._chat_via_engine(messages, tools, tool_choice, sampling, max_tokens, stop, n_lp, model)
        prompt = ChatPrompt.make(messages, getattr(self, "chat_format", None))
        responses = self._run(prompt, max_tokens, sampling, stop, n_lp)
        if stream:
            return self._chat_chunks(responses, self._head("chat.completion.chunk", model))
        text, lps, last = "", [], None
        for r in responses:
            text += r.text
            if r.logprobs is not None and r.finish_reason is None:
                lps.append(r.logprobs)
            last = r
        s = last.stats
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": chat_logprobs(lps, self.token_to_piece) if n_lp is not None else None,
                  "finish_reason": FINISH.get(last.finish_reason, "stop")}
        return {**self._head("chat.completion", model), "choices": [choice],
                "usage": {"prompt_tokens": s.n_prompt, "completion_tokens": s.n_generated,
                          "total_tokens": s.n_prompt + s.n_generated}}

    def _chat_via_engine(self, messages, tools, tool_choice, sampling: dict, max_tokens, stop, n_lp,
                         model) -> dict:
        """A chat with tools or a response format: pyllamaspec.chat() reads the answer (tool
        calls in OpenAI's shape, the JSON alone as the content)."""
        if sampling.get("seed") is None:
            sampling["seed"] = getattr(self, "seed", None)
        r = chat(messages, self, self.draft_model, chat_template=getattr(self, "chat_format", None), tools=tools,
                 tool_choice=tool_choice, max_tokens=self._max_tokens(max_tokens), stop=_stops(stop) or None,
                 logprobs=n_lp, **sampling)
        s = r.stats
        finish = "tool_calls" if r.tool_calls else FINISH.get(r.finish_reason, "stop")
        choice = {"index": 0, "message": r.message,
                  "logprobs": chat_logprobs(r.logprobs, self.token_to_piece) if n_lp is not None else None,
                  "finish_reason": finish}
        return {**self._head("chat.completion", model), "choices": [choice],
                "usage": {"prompt_tokens": s.n_prompt, "completion_tokens": s.n_generated,
                          "total_tokens": s.n_prompt + s.n_generated}}

    def token_eos(self) -> int:
        """llama-cpp-python's token_eos() (-1 where the vocabulary has none)."""
        return -1 if self.eos_token is None else self.eos_token

    def token_bos(self) -> int:
        return -1 if self.bos_token is None else self.bos_token

    def reset(self) -> None:
        """llama-cpp-python's reset(): the next call starts from an empty cache."""
        self.clear()

    @staticmethod
    def _chat_chunks(responses, head: dict) -> Iterator[dict]:
        yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                    "finish_reason": None}]}
        for r in responses:
            if r.text:
                yield {**head, "choices": [{"index": 0, "delta": {"content": r.text}, "logprobs": None,
                                            "finish_reason": None}]}
            if r.finish_reason:
                yield {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                            "finish_reason": FINISH.get(r.finish_reason, "stop")}]}

    def create_embedding(self, input: str | list[str], model: str | None = None) -> dict:
        """llama-cpp-python's create_embedding: OpenAI's list of embeddings (mean pooling,
        Euclidean-normalized, as llama-server's /v1/embeddings with --pooling mean)."""
        texts = input if isinstance(input, list) else [input]
        data, n = [], 0
        for i, text in enumerate(texts):
            ids = self.tokenize(text, add_special=True, parse_special=True)
            n += len(ids)
            data.append({"object": "embedding", "embedding": self.embed(ids).tolist(), "index": i})
        return {"object": "list", "data": data, "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": n, "total_tokens": n}}


class Llama(LlamaMethods, _EngineModel):
    """pyllamaspec.Model, also exported as Llama: the engine's Model (engine.model.Model: eval, tokenize, chat templates, ...) with
    llama-cpp-python's methods and constructor arguments: ``Model(model_path=..., n_ctx=...,
    draft_model=..., chat_format=..., seed=..., verbose=...)``. draft_model: a path, a Model,
    "ngram" (prompt lookup, llama-cpp-python's LlamaPromptLookupDecoding) or "mtp"; it speculates
    for every create_* call."""

    def __init__(self, path: str | os.PathLike | None = None, *, model_path: str | os.PathLike | None = None,
                 draft_model: Any = None, chat_format: str | None = None, seed: int | None = None,
                 verbose: bool = False, use_mlock: bool = False, flash_attn: bool | None = None,
                 logits_all: bool = False, **kwargs: Any):
        if (path is None) == (model_path is None):
            raise InvalidArgumentError("give the model's file once: Model(path) or Model(model_path=path)")
        # flash_attn: attention is ggml's either way; logits_all: eval() gives every row when asked
        super().__init__(path if path is not None else model_path, **kwargs)
        self.model_path = self.path
        self.chat_format = CHAT_FORMATS.get(chat_format, chat_format)
        self.seed = seed
        self._drafts = ExitStack()                # a draft opened from a path is this Model's to close
        try:
            self.draft_model = open_draft(draft_model, self, self._drafts, n_ctx=self.n_ctx, n_threads=self.n_threads)
        except BaseException:
            self.close()
            raise
        if verbose:
            from ..engine._native import set_verbose
            set_verbose(True)
        if use_mlock:
            from ..engine._native import mlock_all
            why = mlock_all()
            if why:
                import warnings
                warnings.warn(f"use_mlock: cannot lock the model in RAM: {why}")

    def close(self) -> None:
        if getattr(self, "_drafts", None) is not None:
            self._drafts.close()
        super().close()


Model = Llama

__all__ = ["Model", "Llama", "LlamaMethods", "LlamaGrammar"]
