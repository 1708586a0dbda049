"""OpenAI's response shapes that more than the server use (llama_api.py too): finish reasons and
the logprobs objects of chat and legacy completions."""
from __future__ import annotations

from typing import Callable

from ..engine.sampling import TokenLogprobs

# our finish reasons as OpenAI names them
FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}

TokenText = Callable[[int], bytes]


def chat_logprobs(lps: list[TokenLogprobs], text_of: TokenText) -> dict:
    """choices[].logprobs of a chat completion: {"content": [{token, logprob, bytes, top_logprobs}]}."""
    def entry(tok: int, lp: float) -> dict:
        b = text_of(tok)
        return {"token": b.decode("utf-8", "replace"), "logprob": lp, "bytes": list(b)}
    return {"content": [dict(entry(t.token, t.logprob), top_logprobs=[entry(i, lp) for i, lp in t.top])
                        for t in lps]}


def completion_logprobs(lps: list[TokenLogprobs], text_of: TokenText, offset: int = 0) -> dict:
    """choices[].logprobs of a (legacy) completion: tokens, token_logprobs, top_logprobs (a
    dict per token) and text_offset (each token's start in prompt + text)."""
    tokens, offsets = [], []
    for t in lps:
        s = text_of(t.token).decode("utf-8", "replace")
        offsets.append(offset)
        tokens.append(s)
        offset += len(s)
    return {"tokens": tokens, "token_logprobs": [t.logprob for t in lps],
            "top_logprobs": [{text_of(i).decode("utf-8", "replace"): lp for i, lp in t.top} for t in lps],
            "text_offset": offsets}
