"""mlx-lm's habits: ``model, tokenizer = load(path)``, ``generate(model, tokenizer, prompt=...)``
and ``stream_generate(model, tokenizer, prompt, ...)`` with mlx-lm's argument order (the model
first), greedy by default as mlx-lm's; a thin layer over pyllamaspec's own generate /
stream_generate (prompt first), with speculation when a draft_model is given.

    from pyllamaspec.mlx import load, generate
    model, tokenizer = load("model.gguf")
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    print(generate(model, tokenizer, prompt=prompt, max_tokens=64, verbose=True))
"""
from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..engine.model import Model
from ..errors import InvalidArgumentError
from ..generation import generate as _gen


class TokenizerWrapper:
    """mlx-lm's tokenizer object for a pyllamaspec Model: encode, decode, the chat template
    (Hugging Face's meaning: tokenize=True by default), the end-of-generation ids."""

    def __init__(self, model: Model):
        self.model = model

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.model.tokenize(text, add_special=add_special_tokens, parse_special=True)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.model.detokenize(list(ids), render_special=not skip_special_tokens)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = True,
                            **kwargs: Any) -> "str | list[int]":
        return self.model.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                              tokenize=tokenize, **kwargs)

    @property
    def eos_token_id(self) -> int | None:
        return self.model.eos_token

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self.model.eog_tokens)


@dataclass(frozen=True)
class Sampler:
    """mlx-lm's make_sampler(...): here a description of the chain, which runs in the core
    (temperature, top-k, top-p, min-p as llama.cpp orders them), not a function of logits."""
    temp: float = 0.0
    top_p: float = 0.0
    min_p: float = 0.0
    top_k: int = 0

    def options(self) -> dict:
        # mlx-lm's 0 means "off" for top_p / min_p / top_k; the core's off values are 1.0, 0.0, 0
        return {"temperature": self.temp, "top_p": self.top_p if 0.0 < self.top_p < 1.0 else 1.0,
                "min_p": self.min_p, "top_k": self.top_k}


def make_sampler(temp: float = 0.0, top_p: float = 0.0, min_p: float = 0.0, min_tokens_to_keep: int = 1,
                 top_k: int = 0, **refused: Any) -> Sampler:
    """mlx-lm's make_sampler: pass it as sampler= to generate / stream_generate. Options the
    core does not have (xtc_*) are refused by name."""
    given = {k: v for k, v in refused.items() if v not in (None, 0, 0.0, (), [])}
    if given:
        raise InvalidArgumentError(f"make_sampler: {', '.join(sorted(given))} not supported (temp, top_p, "
                                   "min_p and top_k are)")
    return Sampler(float(temp), float(top_p), float(min_p), int(top_k))


@dataclass(frozen=True)
class LogitsProcessors:
    """mlx-lm's make_logits_processors(...): llama.cpp's repeat penalty, applied in the core."""
    repetition_penalty: float | None = None
    repetition_context_size: int = 20

    def options(self) -> dict:
        if not self.repetition_penalty:
            return {}
        return {"repeat_penalty": self.repetition_penalty, "penalty_last_n": self.repetition_context_size}


def make_logits_processors(logit_bias: dict | None = None, repetition_penalty: float | None = None,
                           repetition_context_size: int | None = 20) -> LogitsProcessors:
    """mlx-lm's make_logits_processors: pass it as logits_processors= (logit_bias is refused:
    generate() has no bias yet)."""
    if logit_bias:
        raise InvalidArgumentError("make_logits_processors: logit_bias is not supported by generate()")
    return LogitsProcessors(repetition_penalty, 20 if repetition_context_size is None else int(repetition_context_size))


@dataclass
class MlxResponse:
    """mlx-lm's GenerationResponse: the piece, its token, speeds so far and the peak memory of
    the process in GB (resident set), finish_reason on the last one; from_draft, logprobs and
    stats as pyllamaspec's GenerationResponse."""
    text: str
    token: int
    from_draft: bool
    logprobs: Any
    prompt_tokens: int
    prompt_tps: float
    generation_tokens: int
    generation_tps: float
    peak_memory: float
    finish_reason: str | None = None
    stats: Any = None


def _peak_gb() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (1 << 30 if sys.platform == "darwin" else 1 << 20)     # bytes on macOS, KiB on Linux


def _kwargs(kwargs: dict) -> dict:
    """mlx-lm's sampler= / logits_processors= as generate()'s options."""
    sampler = kwargs.pop("sampler", None)
    if sampler is not None:
        if not isinstance(sampler, Sampler):
            raise InvalidArgumentError("sampler must come from pyllamaspec.mlx.make_sampler (sampling runs in the core)")
        kwargs.update(sampler.options())
    procs = kwargs.pop("logits_processors", None)
    for p in ([procs] if isinstance(procs, LogitsProcessors) else procs or []):
        if not isinstance(p, LogitsProcessors):
            raise InvalidArgumentError("logits_processors must come from pyllamaspec.mlx.make_logits_processors")
        kwargs.update(p.options())
    return kwargs


def load(path: str | os.PathLike, **model_kwargs: Any) -> tuple[Model, TokenizerWrapper]:
    """(model, tokenizer) of a GGUF file, as mlx_lm.load returns them."""
    model = Model(path, **model_kwargs)
    return model, TokenizerWrapper(model)


def stream_generate(model: Model, tokenizer: TokenizerWrapper | None, prompt: "str | Sequence[int]",
                    max_tokens: int = 256, draft_model: Any = None, temp: float = 0.0,
                    **kwargs: Any) -> Iterator[MlxResponse]:
    """mlx-lm's stream_generate(model, tokenizer, prompt, ...): a response per token, then one
    with finish_reason and stats. temp (mlx-lm's name) or temperature; sampler= from
    make_sampler, logits_processors= from make_logits_processors."""
    kwargs = _kwargs(kwargs)
    kwargs.setdefault("temperature", temp)
    return _mlx_responses(_gen.stream_generate(prompt, model, draft_model, max_tokens=max_tokens, **kwargs))


def _mlx_responses(responses: Iterator[_gen.GenerationResponse]) -> Iterator[MlxResponse]:
    import time
    t0 = time.perf_counter()
    t_first = None
    n = 0
    for r in responses:
        now = time.perf_counter()
        if r.stats is not None:          # the last: the generation's own measurements
            s = r.stats
            yield MlxResponse(r.text, r.token, r.from_draft, r.logprobs, s.n_prompt, s.prompt_tps, s.n_generated,
                              s.generate_tps, _peak_gb(), r.finish_reason, s)
            return
        n += 1
        if t_first is None:
            t_first = now                # the prompt's evaluation ends with the first token
        gen_tps = (n - 1) / (now - t_first) if n > 1 and now > t_first else 0.0
        yield MlxResponse(r.text, r.token, r.from_draft, r.logprobs, 0, 1.0 / max(t_first - t0, 1e-9), n, gen_tps,
                          _peak_gb())


def generate(model: Model, tokenizer: TokenizerWrapper | None, prompt: "str | Sequence[int]",
             max_tokens: int = 256, verbose: bool = False, draft_model: Any = None, **kwargs: Any) -> str:
    """mlx-lm's generate(model, tokenizer, prompt=...): the text; verbose prints it as it comes,
    then the prompt and generation speeds (and the speculation's acceptance)."""
    text, last = "", None
    for r in stream_generate(model, tokenizer, prompt, max_tokens=max_tokens, draft_model=draft_model, **kwargs):
        text += r.text
        last = r
        if verbose and r.text:
            print(r.text, end="", flush=True)
    if verbose and last is not None and last.stats is not None:
        s = last.stats
        print(f"\n==========\nPrompt: {s.n_prompt} tokens, {s.prompt_tps:.3f} tokens-per-sec\n"
              f"Generation: {s.n_generated} tokens, {s.generate_tps:.3f} tokens-per-sec", file=sys.stdout)
        if s.drafted:
            print(f"Speculation: {s.accepted}/{s.drafted} drafted tokens accepted, "
                  f"{s.mean_accepted:.2f} tokens per round")
    return text


__all__ = ["load", "generate", "stream_generate", "TokenizerWrapper", "make_sampler", "make_logits_processors",
           "Sampler", "LogitsProcessors", "MlxResponse"]
