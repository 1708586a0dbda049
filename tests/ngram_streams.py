"""Token streams for the n-gram kinds' fixture (scripts/ngram_reference.py,
tests/speculation/test_ngram_kinds.py): a seeded synthetic text of repeated, varied phrases (many ties and
alternatives after the same n-gram), and a static lookup cache in llama.cpp's file format
(common_ngram_cache_save: 4 int32 ids of the n-gram, an int32 count of tokens, int32 (token,
count) pairs), built the way llama-lookup-create builds one (2-grams)."""
from __future__ import annotations

import pathlib
import struct

import numpy as np


def synthetic_stream(seed: int, n_prompt: int = 160, n_gen: int = 480, order_seed: int | None = None
                     ) -> tuple[list[int], list[int]]:
    """The phrases come from `seed`, their sequence from `order_seed` (default: seed): a static
    cache's corpus shares a stream's phrases, not its text."""
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(2, 120, rng.integers(3, 12)).tolist() for _ in range(14)]
    if order_seed is not None:
        rng = np.random.default_rng(order_seed)
    text: list[int] = []
    while len(text) < n_prompt + n_gen:
        p = list(phrases[rng.integers(len(phrases))])
        r = rng.random()
        if r < 0.2:                                   # a variant: one token changed
            p[rng.integers(len(p))] = int(rng.integers(2, 120))
        elif r < 0.3:                                 # a stray token
            p = [int(rng.integers(2, 120))]
        text += p
    return text[:n_prompt], text[n_prompt:n_prompt + n_gen]


def write_lookup_cache(path: pathlib.Path, corpus: list[int]) -> None:
    """The token after each 2-gram of corpus, counted; n-grams and tokens in first-seen order."""
    counts: dict[tuple[int, int], dict[int, int]] = {}
    for i in range(2, len(corpus)):
        part = counts.setdefault((corpus[i - 2], corpus[i - 1]), {})
        part[corpus[i]] = part.get(corpus[i], 0) + 1
    with open(path, "wb") as f:
        for (a, b), part in counts.items():
            f.write(struct.pack("<5i", a, b, -1, -1, len(part)))
            for tok, cnt in part.items():
                f.write(struct.pack("<2i", tok, cnt))
