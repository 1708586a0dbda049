"""A draft model of another family (another tokenizer): it drafts text, and the target verifies
its own tokens for that text.

Each round:
  1. the draft's sequence is brought to the target's text so far: it keeps its tokens up to the
     last one whose bytes still agree with that text, less one (a word cut by the last round is
     tokenized again whole), and evaluates the draft tokenizer's tokens of the rest;
  2. it drafts greedily, token by token, until the target's tokenization of the drafted text
     holds more than k tokens (or the draft ends its turn: the target's end-of-turn token is
     proposed in its place);
  3. the target's tokens of that text, cut to k, are the draft, a point mass (q = None).
Exactness does not depend on how the draft was found: a draft token chosen without the target's
randomness and verified as a point mass (accepted with probability p(x), else a token drawn
from p without x) leaves the target's distribution unchanged, greedy or sampled. Token
boundaries that do not align only cost acceptance: the target's own tokens are what is verified
and what is output.

The draft reads the target's text with control tokens written out (Gemma's <start_of_turn> as
text): it sees the chat as characters, not as its own template. Bytes of a character cut across
tokens are held back until it completes (neither tokenizer is given half a character)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ...engine.model import Model
from ...engine.vocab_bridge import CROSS
from ..drafter import NO_DRAFT, Draft, Drafter, Eval, Steps, drive
from ..params import DraftParams

if TYPE_CHECKING:
    from ..cost_model import DraftPolicy

MODE = CROSS


def complete_utf8(b: bytes | bytearray) -> int:
    """The length of b's longest prefix that does not end inside a UTF-8 character."""
    n = len(b)
    for back in range(1, min(4, n) + 1):
        c = b[n - back]
        if c < 0x80:                          # ASCII: complete
            return n
        if c >= 0xC0:                         # a lead byte: complete if its character fits
            need = 2 if c < 0xE0 else 3 if c < 0xF0 else 4
            return n if back >= need else n - back
    return n                                  # stray continuation bytes: nothing to wait for


class CrossVocabDrafter(Drafter):
    """Drafts with a Model whose vocabulary differs from the target's; see the module's docstring."""

    mode = MODE

    def __init__(self, model: Model, target: Model, params: DraftParams):
        self.model = self.draft_model = model
        self.target = target
        self.params = params
        self.key = f"{model.path}#{MODE}"
        self.draft_seq = None
        self.t_bos = target.bos_token
        self.t_end = target.eot_token if target.eot_token is not None else target.eos_token
        self.d_eog = model.eog_tokens
        self.d_bos = [model.bos_token] if model.vocab_info.add_bos and model.bos_token is not None else []
        self.text = bytearray()               # the target's text so far (seq[:n_text] rendered)
        self.n_text = 0
        self.n_synced = 0                     # len(seq) when the draft last read the text
        self.base = 0                         # where the draft's sequence starts in self.text (its window)
        self.d_ends: list[int] = []           # where each token of the draft's sequence ends in self.text
        self.fed: list[bytes] = []            # then the pieces of the draft tokens fed after them
        self.pieces: dict[int, bytes] = {}
        self.logits = np.empty((1, model.n_vocab), np.float32)
        self.step_buf = np.empty(1, np.int32)
        self._open = True

    # -- the target's text -------------------------------------------------------------------
    def _render(self, ids) -> bytes:
        """The target's bytes of ids, control tokens written out, a leading BOS left out."""
        ids = [int(t) for t in ids]
        if self.n_text == 0 and ids and ids[0] == self.t_bos:
            ids = ids[1:]
        return self.target.detokenize_bytes(ids, render_special=True) if ids else b""

    def _follow(self, seq: list[int]) -> None:
        """self.text extended to all of seq (a generation's text only grows)."""
        if len(seq) > self.n_text:
            self.text += self._render(seq[self.n_text:])
            self.n_text = len(seq)

    def _draft_ids(self, text: bytes) -> list[int]:
        return self.model.tokenize(text, add_special=False, parse_special=False)

    # -- the draft's sequence ------------------------------------------------------------------
    def open(self, prompt: list[int], fresh: bool = False, stop=None) -> None:
        if self.draft_seq is None:
            self.draft_seq = self.model.lease(None if fresh else self._prompt_ids(prompt), stop=stop)

    def _prompt_ids(self, prompt: list[int]) -> list[int]:
        """The draft's tokens for the prompt's text (all but its last token; its tail where the
        draft's context cannot take it all)."""
        self.text, self.n_text = bytearray(), 0
        self._follow(prompt[:-1])
        self.n_synced = len(prompt) - 1
        ids, self.base = self._tail(0, complete_utf8(self.text))
        return self.d_bos + ids

    def _tail(self, start: int, end: int) -> tuple[list[int], int]:
        """The draft's tokens of text[start:end], only the last half context's worth where the
        draft's context would not hold them with a draft after; (tokens, where they start)."""
        ids = self._draft_ids(bytes(self.text[start:end])) if start < end else []
        cap = (self.model.n_ctx - len(self.d_bos) - self.margin) // 2
        if cap < 1:                           # a context too small to draft in
            return [], end
        if len(ids) > cap:
            ids = ids[len(ids) - cap:]
            start = end - sum(len(self._piece(t)) for t in ids)
        return ids, start

    @property
    def margin(self) -> int:
        """Room a round's drafts may take in the draft's context."""
        return 4 * self.params.n_draft + 4

    def prefill(self, prompt: list[int], target=None, fresh: bool = False) -> int:
        ids = self._prompt_ids(prompt)
        self.open(prompt, fresh)
        if fresh:
            self.draft_seq.clear()
        n_keep = self.draft_seq.reuse_prefix(ids)
        upto = max(len(self.d_bos), len(ids) - 1)    # (the BOS at least: the rounds keep it)
        if n_keep < upto:
            self.draft_seq.eval(np.asarray(ids[n_keep:upto], np.int32), logits="none")
        self._index()
        return min(n_keep, self.draft_seq.n_past)

    def _index(self) -> None:
        """d_ends for what the draft's sequence holds, cut where its bytes part from the text."""
        held = self.draft_seq.cached_tokens[len(self.d_bos):] if self.draft_seq.n_past else []
        self.d_ends, self.fed = [], [self._piece(t) for t in held]
        self._agree()

    def _piece(self, t: int) -> bytes:
        piece = self.pieces.get(t)
        if piece is None:
            piece = self.pieces[t] = self.model.token_to_piece(int(t), render_special=True)
        return piece

    def _agree(self) -> None:
        """The tokens fed to the draft since d_ends was last set (a round's drafts): those that
        spell the text join d_ends, the sequence is cut after them."""
        at = self.d_ends[-1] if self.d_ends else self.base
        for piece in self.fed:
            if not piece or self.text[at:at + len(piece)] != piece:
                break
            at += len(piece)
            self.d_ends.append(at)
        self.fed = []
        keep = len(self.d_bos) + len(self.d_ends)
        if self.draft_seq.n_past > keep:
            self.draft_seq.truncate(keep)

    def _sync(self) -> tuple[np.ndarray, int] | None:
        """Cuts the draft's sequence back to the text, and one token more (a word cut by the
        last round is tokenized again whole); returns (the draft's tokens of the rest of the
        text, where they start in it), None when there is nothing to evaluate or no room."""
        n_seq = self.draft_seq.n_past - len(self.d_bos)
        if n_seq < len(self.d_ends) + len(self.fed):   # someone cut the sequence (Decoder.keep)
            self.fed = self.fed[:max(0, n_seq - len(self.d_ends))]
            del self.d_ends[max(n_seq, 0):]
        self._agree()
        full = complete_utf8(self.text)
        agree = len(self.d_ends)
        while agree and self.d_ends[agree - 1] > full:
            agree -= 1
        rest: list[int] = []
        while agree >= 0:
            agree = max(0, agree - 1)
            start = self.d_ends[agree - 1] if agree else self.base
            rest = self._draft_ids(bytes(self.text[start:full])) if start < full else []
            if rest or agree == 0:
                break
        if len(self.d_bos) + agree + len(rest) + self.margin >= self.model.n_ctx:
            agree = 0                         # the context is full: a new window, the text's tail
            rest, start = self._tail(self.base, full)
            self.base = start
        if not rest:
            return None
        del self.d_ends[agree:]
        self.draft_seq.truncate(len(self.d_bos) + agree)
        return np.asarray(rest, np.int32), start

    # -- a round ------------------------------------------------------------------------------
    def propose(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None) -> Draft:
        return drive(self.propose_steps(seq, k_cap, policy, constraint))

    def propose_steps(self, seq: list[int], k_cap: int, policy: "DraftPolicy", constraint=None,
                      batch: bool = False) -> Steps:
        t0 = time.perf_counter()
        self._follow(seq)
        # the cost model first: a round it decodes plainly costs nothing here (what the draft
        # would catch up on: about a token of its own per target token since it last drafted)
        if self.params.adaptive and not batch:
            k_cap = policy.choose(k_cap, len(seq) - self.n_synced + 1)
        if k_cap <= 0:
            return NO_DRAFT
        synced = self._sync()
        if synced is None:
            return NO_DRAFT
        rest, start = synced
        self.n_synced = len(seq)
        k_max = k_cap
        row = yield Eval(self.draft_seq, rest, "last", self.logits)
        self._extend_ends(rest, start)
        # the draft's confidence is a signal here even when decoding greedily (its argmax is
        # not the target's): the cost model stops it token by token, as a sampled draft
        per_token = self.params.adaptive and not batch and not policy.measuring
        tokens, conf = yield from self._draft(row, k_max, policy if per_token else None)
        if not batch:
            # every drafting round re-reads the text's end (its first logits come from it): a
            # cost of the draft, not a catch-up after plain rounds, so it is counted in c_draft
            policy.observe_draft(time.perf_counter() - t0, max(1, len(tokens)))
        return Draft(np.asarray(tokens, np.int32), p_max=conf)

    def _extend_ends(self, ids, start: int) -> None:
        at = start
        for t in ids:
            at += len(self._piece(int(t)))
            self.d_ends.append(at)

    def _draft(self, row: np.ndarray, k_max: int, policy: "DraftPolicy | None") -> Steps:
        """Greedy draft tokens until the target's tokens of their text outnumber k_max (so that
        the last one kept is whole: a word cut short would be rejected every round, and the cost
        model would read that as the draft's acceptance); returns (the first k_max, the
        draft's confidence in each: its lowest top probability over the draft tokens that spell
        it), with the target's end of turn last where the draft ended its own. The draft stops
        early below p_min, or where the cost model (policy) finds the next token not worth it."""
        full = complete_utf8(self.text)
        held = bytes(self.text[full:])        # a character the target has begun, not finished
        drafted, conf, ends = bytearray(), [], []
        p_min, p_all, end = self.params.stop_p, 1.0, False
        for i in range(4 * k_max + 4):
            logits = row[0] if row.ndim == 2 else row
            tok = int(np.argmax(logits))
            c = _top_p(logits)
            if i >= self.params.n_min and c < p_min:
                break
            if tok in self.d_eog:
                end = True
                break
            piece = self._piece(tok)
            if self.model.token_to_piece(tok) != piece:   # a control token of the draft's own
                break
            drafted += piece
            conf.append(c)
            ends.append(len(drafted))
            more = True
            if policy is not None and i >= self.params.n_min:
                p_all *= policy.token_alpha(c)
                keep, more = policy.keep_drafting(p_all, first=i == 0)
                if not keep:
                    del drafted[ends[-2] if len(ends) > 1 else 0:], conf[-1], ends[-1]
                    break
            if not more or len(self._target_ids(drafted, held, k_max + 1)) > k_max or i == 4 * k_max + 3:
                break
            self.step_buf[0] = tok
            self.fed.append(piece)
            row = yield Eval(self.draft_seq, self.step_buf, "last", self.logits)
        ids = self._target_ids(drafted, held, k_max, end=end)
        return ids, self._confidence(ids, held, conf, ends)

    def _confidence(self, ids: list[int], held: bytes, conf: list[float], ends: list[int]) -> np.ndarray:
        """Each target token's confidence: the lowest of the draft tokens its bytes overlap."""
        out = np.ones(len(ids), np.float32)
        at, i = len(held), 0                  # the target's tokens start after the held bytes
        for j, t in enumerate(ids):
            a, at = at, at + len(self.target.token_to_piece(t))
            lo = 1.0
            while i < len(ends) and ends[i] <= a:
                i += 1
            k = i
            while k < len(ends) and (k == i or ends[k - 1] < at):
                lo = min(lo, conf[k])
                k += 1
            out[j] = lo
        return out

    def _target_ids(self, drafted: bytearray, held: bytes, k: int, end: bool = False) -> list[int]:
        """The target's tokens of the drafted text (after the character it holds), at most k;
        with end, its end of turn after them."""
        if not drafted.startswith(held):
            return []
        n = complete_utf8(drafted)
        text = bytes(drafted[len(held):n])
        ids = self.target.tokenize(text, add_special=False, parse_special=False)[:k] if text else []
        if end and self.t_end is not None and len(ids) < k and n == len(drafted):
            ids.append(self.t_end)
        return ids

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        """Nothing now: the next round's _sync cuts the draft's sequence back to the text."""

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        if self.draft_seq is not None:
            self.draft_seq.release()
            self.draft_seq = None


def _top_p(logits: np.ndarray) -> float:
    """The top probability of a logits row."""
    m = float(logits.max())
    return 1.0 / float(np.exp(logits - m).sum())
