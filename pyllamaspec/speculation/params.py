"""Parameters of speculation (llama.cpp's --draft-* flags), shared by the decoder and the drafters."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine import _args
from ..errors import InvalidArgumentError
from .spec_types import parse as parse_spec_types


@dataclass
class NgramMapParams:
    """llama.cpp's --spec-ngram-{simple,map-k,map-k4v}-{size-n,size-m,min-hits}: the lookup
    n-gram's length, the drafted m-gram's (the kind's longest draft), the hits a key needs."""
    size_n: int = 12
    size_m: int = 48
    min_hits: int = 1

    def __post_init__(self) -> None:
        _args.integer("size_n", self.size_n, 1, 1024)
        _args.integer("size_m", self.size_m, 1, 1024)
        _args.integer("min_hits", self.min_hits, 1, 65535)


@dataclass
class NgramModParams:
    """llama.cpp's --spec-ngram-mod-n-match / -n-max / -n-min."""
    n_match: int = 24
    n_max: int = 64
    n_min: int = 48

    def __post_init__(self) -> None:
        _args.integer("n_match", self.n_match, 1, 1024)
        _args.integer("n_max", self.n_max, 0, 1024)
        _args.integer("n_min", self.n_min, 0, 1024)


@dataclass
class SuffixParams:
    """Suffix drafting (--spec-type suffix, drafters/ngram/suffix.py): the most tokens of earlier
    prompts and answers kept per target (the oldest dropped first), the longest match looked for,
    a draft's length at most factor x its match's, and the least empirical probability of a draft."""
    max_tokens: int = 1 << 17
    max_depth: int = 64
    factor: float = 1.0
    min_prob: float = 0.1

    def __post_init__(self) -> None:
        _args.integer("max_tokens", self.max_tokens, 1, 1 << 30)
        _args.integer("max_depth", self.max_depth, 1, 1024)
        _args.real("factor", self.factor, 0.0, 1024.0)
        _args.real("min_prob", self.min_prob, 0.0, 1.0)


@dataclass
class NgramParams:
    """The parameters of llama.cpp's n-gram kinds, with its defaults; ngram-cache's static and
    dynamic lookup caches (-lcs, -lcd: files made by llama.cpp's llama-lookup-create); and our
    suffix drafting's (SuffixParams)."""
    simple: NgramMapParams = field(default_factory=NgramMapParams)
    map_k: NgramMapParams = field(default_factory=NgramMapParams)
    map_k4v: NgramMapParams = field(default_factory=NgramMapParams)
    mod: NgramModParams = field(default_factory=NgramModParams)
    cache_static: str | None = None
    cache_dynamic: str | None = None
    suffix: SuffixParams = field(default_factory=SuffixParams)


@dataclass
class DraftParams:
    """llama.cpp's --draft-max, --draft-min, --draft-p-min; `adaptive` lets the cost model pick
    the draft length (up to n_draft) each round and, token by token, where a draft model's draft
    stops; p_min (a draft stops where its top probability is below it) then defaults to none,
    else to llama.cpp's 0.75; `ngram` is the n-gram drafter's longest match;
    `draft_vocab`: a draft model with more than twice as many tokens computes logits for this
    many common ones only (Model.common_token_ids; 0 = all of them); `forced`: under a grammar,
    the text it forces is drafted for free (speculation/constraint.py); `spec_type`: llama.cpp's
    --spec-type names (a comma-separated string or a sequence; None: from the draft given);
    `ngrams`: the parameters of llama.cpp's n-gram kinds.
    Token trees (a draft model's, the MTP head's, the n-gram drafter's; speculation/tree/verify.py):
    `tree` True drafts a tree each round, False a chain, None lets the cost model choose (a tree
    only where it pays); n_draft stays the depth (the longest branch), a node at depth <
    tree_levels gets up to tree_width children, and tree_nodes is the node budget (0: 2 * the
    depth)."""
    n_draft: int = 16
    n_min: int = 0
    p_min: float | None = None
    adaptive: bool = True
    ngram: int = 3
    draft_vocab: int = 32768
    forced: bool = True
    spec_type: str | tuple[str, ...] | None = None
    ngrams: NgramParams = field(default_factory=NgramParams)
    tree: bool | None = None
    tree_nodes: int = 0
    tree_width: int = 2
    tree_levels: int = 2

    def __post_init__(self) -> None:
        _args.integer("n_draft", self.n_draft, 1, _args.MAX_DRAFT)
        _args.integer("n_min", self.n_min, 0, self.n_draft)
        if self.p_min is not None:
            _args.real("p_min", self.p_min, 0.0, 1.0)
        if not isinstance(self.adaptive, (bool, np.bool_)):
            raise InvalidArgumentError(f"adaptive must be True or False, got {self.adaptive!r}")
        _args.integer("ngram", self.ngram, 1, 64)
        _args.integer("draft_vocab", self.draft_vocab)
        if not isinstance(self.forced, (bool, np.bool_)):
            raise InvalidArgumentError(f"forced must be True or False, got {self.forced!r}")
        if self.spec_type is not None:
            self.spec_type = parse_spec_types(self.spec_type)
        if self.tree is not None and not isinstance(self.tree, (bool, np.bool_)):
            raise InvalidArgumentError(f"tree must be True, False or None, got {self.tree!r}")
        _args.integer("tree_nodes", self.tree_nodes, 0, _args.MAX_DRAFT)
        _args.integer("tree_width", self.tree_width, 1, 16)
        _args.integer("tree_levels", self.tree_levels, 0, _args.MAX_DRAFT)
        if not isinstance(self.ngrams, NgramParams):
            raise InvalidArgumentError(f"ngrams must be NgramParams, got {type(self.ngrams).__name__}")

    @property
    def stop_p(self) -> float:
        """The fixed confidence below which a draft stops: p_min, else none with the cost model
        and llama.cpp's 0.75 without it."""
        return self.p_min if self.p_min is not None else 0.0 if self.adaptive else 0.75
