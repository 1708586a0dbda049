"""generate()'s options as one object: the public functions (generate, stream_generate, chat)
keep their keyword arguments for users and build a GenerateOptions once; everything below reads
the object (generate.py's _prepare checks every field before any work)."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

from ..engine.cancel import Cancel
from ..errors import InvalidArgumentError
from ..speculation.params import NgramParams


@dataclass
class GenerateOptions:
    """Every option of generate() but the prompt, the models and stream (generate()'s docstring
    says what each does)."""
    max_tokens: int = 256
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    n_draft: int = 16
    n_min: int = 0
    p_min: float | None = None
    adaptive: bool | None = None
    ngram: int = 3
    draft_vocab: int = 32768
    stop: str | Sequence[str] | None = None
    n_ctx: int = 4096
    n_threads: int | None = None
    n_gpu_layers: int = 0
    add_special: bool = True
    parse_special: bool = True
    cancel: Cancel | None = None
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    logprobs: int | None = None
    cache_prompt: bool = True
    spec_type: str | Sequence[str] | None = None
    ngram_params: NgramParams | None = None
    grammar: str | None = None
    json_schema: dict | str | None = None
    response_format: dict | None = None
    forced: bool = True
    n_parallel: int | None = None
    tree: bool | None = None
    tree_nodes: int = 0
    images: Sequence[Any] | None = None    # image files, bytes or PIL images, one per media marker
    mmproj: Any = None                     # their projector: a path or a vision.Projector
    draft_mmproj: Any = None               # the draft model's own projector (the draft reads its rows)

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any], caller: str, refused: Sequence[str] = ()) -> "GenerateOptions":
        """The options of a call that takes generate()'s keyword arguments as **kwargs (an
        unknown or refused name: InvalidArgumentError naming the caller)."""
        unknown = sorted((set(kwargs) - cls.names()) | (set(kwargs) & set(refused)))
        if unknown:
            raise InvalidArgumentError(f"{caller} got unexpected argument(s) {', '.join(unknown)}")
        return cls(**kwargs)
