"""n > 1 in the Llama layer's create_completion / create_chat_completion (issue 46, item 3): n
choices of one prompt decoded together as generate([...]) decodes several prompts
(generation/together.py: one Scheduler, every round's drafts of all of them verified in one
target evaluation), each choice with a seed of its own.

Why not generate([prompt] * n): generate() gives every prompt of a batch the same seed, so n
sampled choices of one prompt would be one answer n times. Here choice i samples with seed + i
(a seeded call is reproducible, its choices differ), or with a random seed of its own."""
from __future__ import annotations

import numbers
import os
from dataclasses import replace
from typing import Any

from ..engine.chat_template import ChatPrompt
from ..errors import InvalidArgumentError, ModelClosedError
from ..generation.generate import draft_params, prompt_ids, sampling_params, stream_generate
from ..generation.options import GenerateOptions
from ..generation.together import generate_together
from ..structured.formats import constraint_spec

_SEED_MAX = 2**64 - 1          # SamplingParams' seed range


def check_n(n: Any) -> int:
    """OpenAI's n (how many choices): an integer >= 1, refused by name otherwise."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise InvalidArgumentError(f"n must be an integer >= 1 (the number of choices), got {n!r}")
    return int(n)


def choice_seeds(seed: int | None, n: int) -> list[int]:
    """seed, seed + 1, ... (wrapping in the seed's range); unseeded: a random seed each."""
    if seed is None:
        return [int.from_bytes(os.urandom(8), "little") for _ in range(n)]
    return [(seed + i) % (_SEED_MAX + 1) for i in range(n)]


def _options(max_tokens: int, stop: list[str] | None, logprobs: int | None, sampling: dict) -> GenerateOptions:
    return GenerateOptions(max_tokens=max_tokens, stop=stop, logprobs=logprobs, **sampling)


def decode_choices(model, prompt, n: int, sampling: dict, *, max_tokens: int, stop: list[str] | None,
                   logprobs: int | None) -> list[dict]:
    """The n result dicts of the generation lifecycle (text, tokens, prompt_tokens,
    finish_reason, stats, logprobs), choice i sampled with the i-th of choice_seeds.
    prompt: text, token ids or a ChatPrompt; sampling: generate()'s sampling and grammar
    options (seed among them)."""
    if model.closed:
        raise ModelClosedError("the model is closed")
    # stream_generate checks every option as generate() does, before any work; its generator
    # is never started
    stream_generate(prompt, model, model.draft_model, max_tokens=max_tokens, stop=stop, logprobs=logprobs,
                    **sampling).close()
    o = _options(max_tokens, stop, logprobs, sampling)
    base = sampling_params(o, 0)
    stops = list(stop or [])
    constraint = constraint_spec(o.grammar, o.json_schema, o.response_format)
    if isinstance(prompt, ChatPrompt):             # as iter_generate renders a chat
        if constraint is not None:
            prompt, constraint = constraint.bind(prompt, model)
        ids, chat_stops = prompt.render(model)
        stops += [s for s in chat_stops if s not in stops]
    else:
        ids = prompt_ids(prompt, model, o.add_special, o.parse_special)
    samplings = [replace(base, seed=s) for s in choice_seeds(o.seed, n)]
    return generate_together([list(ids) for _ in range(n)], model, model.draft_model, samplings, draft_params(o),
                             max_tokens=o.max_tokens, stop=stops, logprobs=o.logprobs, constraint=constraint)


__all__ = ["check_n", "choice_seeds", "decode_choices"]
