"""One generation's text as its tokens arrive: detokenized (never a broken UTF-8 character),
cut at a stop string, held back while a stop string could still complete, and the reason it
finished. The generation loops (generate.py alone, scheduler.py several at once) feed it."""
from __future__ import annotations

from dataclasses import dataclass

from ..engine.sampling import TokenLogprobs
from ..structured.tools.base import held_back   # a stop string is held back as a tool-call marker is


@dataclass
class Piece:
    """A piece of streamed text and whether the draft proposed the token it came from; with
    per_token, one per token (text "" while held back), with its logprobs when asked."""
    text: str
    token: int
    from_draft: bool
    logprobs: TokenLogprobs | None = None


class TextOutput:
    """Fills result (tokens, logprobs, finish_reason, eog, text) as tokens are pushed; done once
    an end-of-generation token, a stop string or max_tokens ended it. close() releases the text
    held back to the end (and the detokenizer)."""

    def __init__(self, model, stop: list[str], max_tokens: int, result: dict, per_token: bool = False):
        self.model, self.stop, self.max_tokens = model, stop, max_tokens
        self.result, self.per_token = result, per_token
        self.tokens: list[int] = result["tokens"]
        self.logprobs: list[TokenLogprobs] | None = result["logprobs"]
        self.text, self.emitted = "", 0          # all text so far; how much of it went out
        self.done = self.hit_stop_string = False
        self.detok = model.detokenizer()

    @property
    def wants(self) -> int:
        """How many more tokens it will take."""
        return self.max_tokens - len(self.tokens)

    def finish(self, reason: str) -> None:
        self.result["finish_reason"], self.done = reason, True

    def push(self, new: list[tuple[int, bool]], lps: list | None) -> list[Piece]:
        """A round's tokens (with their logprobs, when asked): the pieces that became final."""
        out: list[Piece] = []
        for (tok, from_draft), lp in zip(new, lps if lps is not None else [None] * len(new)):
            if self.model.is_eog(tok):
                self.finish("stop")
                self.result["eog"] = Piece("", tok, from_draft, lp)
                break
            self.tokens.append(tok)
            if self.logprobs is not None:
                self.logprobs.append(lp)
            self.text += self.detok.push(tok)
            stop = self.stop
            if stop:
                start = max(0, self.emitted - max(map(len, stop)))
                hits = [(i, s) for i, s in ((self.text.find(s, start), s) for s in stop) if i >= 0]
                if hits:                            # cut the text at the stop string (llama-server's stopping_word)
                    at, self.result["stopping_word"] = min(hits)
                    self.text = self.text[:at]
                    self.hit_stop_string = True
                    self.finish("stop")
            safe = len(self.text) if self.hit_stop_string or not stop else len(self.text) - held_back(self.text, stop)
            if safe > self.emitted or self.per_token:
                out.append(Piece(self.text[self.emitted:safe], tok, from_draft, lp))
                self.emitted = max(self.emitted, safe)
            if self.hit_stop_string:
                break
            if len(self.tokens) >= self.max_tokens:
                self.finish("length")
                break
        self.result["text"] = self.text[:self.emitted]
        return out

    def close(self, flush: bool = True) -> list[Piece]:
        """The text held back to the end, unless a stop string cut it (a Piece of the last
        token, or -1 with per_token; none when not flush: a generation that failed); the
        detokenizer is freed."""
        out: list[Piece] = []
        try:
            if flush and not self.hit_stop_string:     # no stop string can complete any more: release the rest
                self.text += self.detok.flush()
                if len(self.text) > self.emitted:
                    last = -1 if self.per_token or not self.tokens else self.tokens[-1]
                    out.append(Piece(self.text[self.emitted:], last, False))
                    self.emitted = len(self.text)
        finally:
            self.result["text"] = self.text[:self.emitted]
            self.detok.close()
        return out
