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
functions, logits processors) are refused by name with InvalidArgumentError, never ignored.

Also llama-cpp-python's n_ctx() / n_vocab() / n_embd() (n_ctx and n_vocab stay ints: SizeInt),
tokenize / detokenize with its signatures next to the engine's (detokenize's docstring says how
the two are told apart), create_chat_completion_openai_v1 (the openai package's objects, when it
is installed), token_eos / token_bos / reset, and OpenAI's n > 1 (llama_choices.py)."""
from __future__ import annotations

import os
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from ..engine.chat_template import ChatPrompt
from ..engine.model import Model as _EngineModel
from ..engine.vocab import _as_ids
from ..errors import InvalidArgumentError
from ..generation.drafts import open_draft
from ..generation.generate import stream_generate
from ..structured.json_schema import json_schema_to_grammar
from .chat import chat
from .llama_choices import check_n, decode_choices
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


class _Unset:
    """prev_tokens not given (None is llama-cpp-python's value for "no previous tokens")."""

    def __repr__(self) -> str:
        return "<not given>"


_UNSET: Any = _Unset()


def _one_of(name: str, value: bool | None, alias: str, alias_value: bool | None, default: bool) -> bool:
    """An option the engine and llama-cpp-python name differently (add_special / add_bos, ...)."""
    if value is not None and alias_value is not None:
        raise InvalidArgumentError(f"give {name} or {alias} (llama-cpp-python's name for it), not both")
    chosen = value if value is not None else alias_value
    return default if chosen is None else bool(chosen)


@dataclass
class LlamaState:
    """llama-cpp-python's LlamaState: the tokens the cache held, and the core's state bytes
    (scores: None, logits are not kept)."""
    input_ids: np.ndarray
    scores: Any
    n_tokens: int
    llama_state: bytes
    llama_state_size: int
    seed: int | None = None


class SizeInt(int):
    """A size that is both an int and a method returning it: ``llm.n_ctx()`` (llama-cpp-python's
    spelling) and ``model.n_ctx`` (the engine's, used as an int across pyllamaspec: the CLI, the
    server, generation, tests and users' code) on one object, pyllamaspec.Model being Llama.
    Why an int subclass: a method would break every ``model.n_ctx`` in arithmetic and
    comparisons, a property cannot be both; an int subclass is an int everywhere (arithmetic,
    comparisons, json, cffi, f-strings, isinstance(x, int)), and calling it gives the plain int."""

    def __call__(self) -> int:
        return int(self)


def _stops(stop: str | Sequence[str] | None) -> list[str]:
    return [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]


def _check_n(n: Any, stream: bool) -> int:
    """n checked by name; several choices are not streamed (their chunks would interleave, and
    the batch path returns each choice whole: generate() streams one prompt)."""
    n = check_n(n)
    if n > 1 and stream:
        raise InvalidArgumentError(f"n={n} with stream=True is not supported by the Llama layer (n choices are "
                                   f"decoded together and returned whole: use stream=False)")
    return n


def _usage(n_prompt: int, n_generated: int) -> dict:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_generated, "total_tokens": n_prompt + n_generated}


def _results_usage(results: list[dict]) -> dict:
    """OpenAI's usage of n choices: the prompt once, the completion tokens of all of them."""
    return _usage(len(results[0]["prompt_tokens"]), sum(r["stats"].n_generated for r in results))


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
                          logit_bias: dict | None = None, n: int = 1) -> dict | Iterator[dict]:
        """llama-cpp-python's Llama.create_completion: a text_completion dict (OpenAI's shape), or
        with stream=True an iterator of chunks. n (OpenAI's): n choices decoded together
        (llama_choices.py), seeded seed, seed + 1, ...; not with stream=True."""
        n = _check_n(n, stream)
        _refuse(suffix=suffix, typical_p=typical_p, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                stopping_criteria=stopping_criteria, logits_processor=logits_processor, logit_bias=logit_bias)
        sampling = dict(temperature=temperature, top_p=top_p, min_p=min_p, top_k=top_k, seed=seed,
                        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                        repeat_penalty=repeat_penalty, grammar=_grammar_text(grammar))
        head = self._head("text_completion", model)
        prefix = (prompt if isinstance(prompt, str) else self.detokenize(prompt)) if echo else ""
        if n > 1:
            return self._completions(prompt, n, sampling, max_tokens, stop, logprobs, head, prefix)
        responses = self._run(prompt, max_tokens, sampling, stop, logprobs)
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
        choice = self._completion_choice(0, text, lps, last.finish_reason, prompt, prefix, logprobs)
        return {**head, "choices": [choice], "usage": _usage(stats.n_prompt, stats.n_generated)}

    def _completion_choice(self, index: int, text: str, lps: list, finish: str, prompt, prefix: str,
                           logprobs: int | None) -> dict:
        lp = None
        if logprobs is not None:
            start = len(prompt) if isinstance(prompt, str) and prefix else 0
            lp = completion_logprobs(lps, self.token_to_piece, start)
        return {"text": text, "index": index, "logprobs": lp, "finish_reason": FINISH.get(finish, "stop")}

    def _choices(self, prompt, n: int, sampling: dict, max_tokens, stop, logprobs: int | None) -> list[dict]:
        """n > 1: the n choices' result dicts, decoded together (llama_choices.decode_choices)."""
        if sampling.get("seed") is None:
            sampling["seed"] = getattr(self, "seed", None)     # the constructor's, as _run
        return decode_choices(self, prompt, n, sampling, max_tokens=self._max_tokens(max_tokens),
                              stop=_stops(stop) or None, logprobs=logprobs)

    def _completions(self, prompt, n: int, sampling: dict, max_tokens, stop, logprobs, head: dict,
                     prefix: str) -> dict:
        results = self._choices(prompt, n, sampling, max_tokens, stop, logprobs)
        choices = [self._completion_choice(i, prefix + r["text"], r["logprobs"] or [], r["finish_reason"], prompt,
                                           prefix, logprobs) for i, r in enumerate(results)]
        return {**head, "choices": choices, "usage": _results_usage(results)}

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
                               logprobs: bool | None = None, top_logprobs: int | None = None,
                               n: int = 1) -> dict | Iterator[dict]:
        """llama-cpp-python's Llama.create_chat_completion through the model's chat template
        (its GGUF template, or chat_format given to the constructor): a chat.completion dict, or
        with stream=True an iterator of chat.completion.chunk dicts. n (OpenAI's): n choices
        decoded together, seeded seed, seed + 1, ...; not with stream=True, tools or a
        response_format."""
        n = _check_n(n, stream)
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
            if n > 1:
                raise InvalidArgumentError(f"n={n} with tools or response_format is not supported by the Llama "
                                           f"layer (n > 1 takes plain or grammar= chats)")
            return self._chat_via_engine(messages, tools, tool_choice, sampling, max_tokens, stop, n_lp, model)
        prompt = ChatPrompt.make(messages, getattr(self, "chat_format", None))
        if n > 1:
            results = self._choices(prompt, n, sampling, max_tokens, stop, n_lp)
            choices = [self._chat_choice(i, r["text"], r["logprobs"] or [], r["finish_reason"], n_lp)
                       for i, r in enumerate(results)]
            return {**self._head("chat.completion", model), "choices": choices, "usage": _results_usage(results)}
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
        return {**self._head("chat.completion", model),
                "choices": [self._chat_choice(0, text, lps, last.finish_reason, n_lp)],
                "usage": _usage(s.n_prompt, s.n_generated)}

    def _chat_choice(self, index: int, text: str, lps: list, finish: str, n_lp: int | None) -> dict:
        return {"index": index, "message": {"role": "assistant", "content": text},
                "logprobs": chat_logprobs(lps, self.token_to_piece) if n_lp is not None else None,
                "finish_reason": FINISH.get(finish, "stop")}

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

    # -- tokens: llama-cpp-python's and the engine's signatures on one name ----------------------
    def tokenize(self, text: str | bytes, add_special: bool | None = None, parse_special: bool | None = None, *,
                 add_bos: bool | None = None, special: bool | None = None) -> list[int]:
        """The engine's tokenize (engine/vocab.py) under both spellings: llama-cpp-python's
        ``tokenize(text: bytes, add_bos=True, special=False)`` and the engine's
        ``tokenize(text, add_special=True, parse_special=False)`` mean the same (llama_tokenize's
        add_special and parse_special, in that order, with those defaults, a list of ids back),
        so one method takes either keyword; giving both names of one option is refused."""
        add = _one_of("add_special", add_special, "add_bos", add_bos, True)
        parse = _one_of("parse_special", parse_special, "special", special, False)
        return super().tokenize(text, add, parse)

    def detokenize(self, tokens, prev_tokens: Any = _UNSET, special: bool | None = None, *,
                   render_special: bool | None = None) -> str | bytes:
        """Two signatures on one name, told apart by the arguments (the bare call cannot be):

        - llama-cpp-python's ``detokenize(tokens, prev_tokens=None, special=False) -> bytes``
          when prev_tokens (a list, or None, given by position or name) or special= is given:
          as its LlamaTokenizer, the tokens' pieces joined (control tokens rendered if
          special), one leading space dropped only where the first token is BOS. prev_tokens
          is accepted and, as there, changes nothing: joined pieces do not depend on what came
          before (the offset mapping it documents is its Hugging Face tokenizer's).
        - the engine's ``detokenize(ids, render_special=False) -> str`` otherwise:
          ``detokenize(ids)``, ``detokenize(ids, True)``, ``detokenize(ids, render_special=True)``.

        The bare ``detokenize(ids)`` stays the engine's str: pyllamaspec's documented API and
        every caller in the package rely on it; llama-cpp-python code that decodes the bytes
        (``llm.detokenize(ids).decode()``) passes ``special=False`` to get them."""
        if isinstance(prev_tokens, bool):          # the engine's positional render_special
            if special is not None or render_special is not None:
                raise InvalidArgumentError("detokenize: render_special given twice")
            return super().detokenize(tokens, prev_tokens)
        if prev_tokens is _UNSET and special is None:
            return super().detokenize(tokens, bool(render_special))
        if render_special is not None:
            raise InvalidArgumentError("detokenize: render_special is the engine's name (str back), special= "
                                       "and prev_tokens= llama-cpp-python's (bytes back): use one form")
        return self._pieces(_as_ids(tokens).tolist(), bool(special))    # ids checked as the engine's

    def _pieces(self, ids: list, special: bool) -> bytes:
        """llama-cpp-python's detokenize: not the engine's detokenize_bytes, which drops a
        SentencePiece space prefix from any first token (llama.cpp's llama_detokenize); there the
        space goes only after a BOS, and a piece read on its own keeps its space."""
        out = b"".join(self.token_to_piece(t, special) for t in ids)
        if ids and self.bos_token is not None and ids[0] == self.bos_token and out[:1] == b" ":
            return out[1:]
        return out

    def save_state(self) -> "LlamaState":
        """llama-cpp-python's save_state(): what the model's cache holds (sequence 0: its tokens
        and their K/V rows, a hybrid's recurrent states too), for load_state on this model with the
        same cache types."""
        blob = self._seq0.save_state()
        ids = np.asarray(self.cached_tokens, np.intc)
        return LlamaState(input_ids=ids, scores=None, n_tokens=len(ids), llama_state=blob,
                          llama_state_size=len(blob), seed=getattr(self, "seed", None))

    def load_state(self, state: "LlamaState") -> None:
        """llama-cpp-python's load_state(state): the cache holds what it held at save_state, so
        the next call evaluates only what its prompt adds. A state of another model or cache
        type is InvalidArgumentError, the cache unchanged. A draft model follows on its own (it
        evaluates the restored text at the next speculative call)."""
        if not isinstance(state, LlamaState):
            raise InvalidArgumentError(f"load_state takes what save_state() returned, got {type(state).__name__}")
        self._seq0.load_state(state.llama_state)

    def n_embd(self) -> int:
        """llama-cpp-python's n_embd(): the embedding size (info.n_embd)."""
        return self.info.n_embd

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any) -> Any:
        """llama-cpp-python's create_chat_completion_openai_v1: create_chat_completion's answer
        as the openai package's objects (ChatCompletion; with stream=True an iterator of
        ChatCompletionChunk). openai is optional: without it, an ImportError that says how to
        install it (before any work, as llama-cpp-python)."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError as e:
            raise ImportError("create_chat_completion_openai_v1 returns the openai package's objects, and openai "
                              "is not installed: pip install openai (create_chat_completion gives the same "
                              "answer as dicts)", name="openai") from e
        out = self.create_chat_completion(*args, **kwargs)
        if isinstance(out, dict):
            return ChatCompletion(**out)
        return (ChatCompletionChunk(**chunk) for chunk in out)

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
        # llm.n_ctx() and llm.n_vocab() as llama-cpp-python calls them, still ints (SizeInt says why)
        self.n_ctx, self.n_vocab = SizeInt(self.n_ctx), SizeInt(self.n_vocab)
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

__all__ = ["Model", "Llama", "LlamaMethods", "LlamaGrammar", "LlamaState", "SizeInt"]
