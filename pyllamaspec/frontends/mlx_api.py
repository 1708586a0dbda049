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
import sys
from typing import Any, Iterator, Sequence

from ..engine.model import Model
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


def load(path: str | os.PathLike, **model_kwargs: Any) -> tuple[Model, TokenizerWrapper]:
    """(model, tokenizer) of a GGUF file, as mlx_lm.load returns them."""
    model = Model(path, **model_kwargs)
    return model, TokenizerWrapper(model)


def stream_generate(model: Model, tokenizer: TokenizerWrapper | None, prompt: "str | Sequence[int]",
                    max_tokens: int = 256, draft_model: Any = None, temp: float = 0.0,
                    **kwargs: Any) -> Iterator[_gen.GenerationResponse]:
    """mlx-lm's stream_generate(model, tokenizer, prompt, ...): pyllamaspec's GenerationResponse
    per token, then one with finish_reason and stats. temp (mlx-lm's name) or temperature."""
    kwargs.setdefault("temperature", temp)
    return _gen.stream_generate(prompt, model, draft_model, max_tokens=max_tokens, **kwargs)


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


__all__ = ["load", "generate", "stream_generate", "TokenizerWrapper"]
