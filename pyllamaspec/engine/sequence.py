"""Sequences: one Model, several token sequences in its context (llama.cpp's seq_id), each with
its own part of the KV cache, so that generations sharing a Model never see each other's tokens.

    with model.lease(prompt_ids) as seq:      # a free sequence (waits while all are taken)
        seq.reuse_prefix(prompt_ids)          # what it (or another sequence) holds of the prompt
        logits = seq.eval(ids, logits="last")
    rows = model.decode([(s1, t1, "all"), (s2, t2, "all")])   # several sequences, one evaluation

The Model's own eval / truncate / n_past / cached_tokens are sequence 0's (Model.sequence(0)), as
they were before a context held several. A lease picks the free sequence whose cache shares the
longest prefix with the prompt (ties: the lowest id, so one user at a time keeps sequence 0), and
when another sequence, busy or not, shares a longer one, copies that prefix into it (cells shared,
nothing evaluated). Sequences nobody holds keep their tokens for later prompts until the cells are
needed: then the least recently used are emptied.

A hybrid model's sequence (a recurrent state) rolls back in O(1) only as far as its ring of states
reaches; further back its next eval replays it from the start. Checkpoints (take_checkpoint: the
recurrent state at chosen prompt positions, llama-server's context checkpoints) let reuse_prefix
resume from the latest one at or below the shared prefix instead.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Sequence

import numpy as np

from ..errors import EvaluationInterrupted, InvalidArgumentError, ModelClosedError, PyllamaspecError
from . import _args

_LOGITS_MODES = {"none": 0, "last": 1, "all": 2}
MAX_CHECKPOINTS = 8        # a sequence's checkpoints by default (Model.n_ctx_checkpoints, --ctx-checkpoints)
_clock = itertools.count(1)


def logits_mode(logits: str) -> int:
    mode = _LOGITS_MODES.get(logits) if isinstance(logits, str) else None
    if mode is None:
        raise InvalidArgumentError(f"logits must be 'all', 'last' or 'none', got {logits!r}")
    return mode


def check_out(out: np.ndarray | None, rows: int, n_vocab: int) -> np.ndarray:
    if out is None:
        return np.empty((rows, n_vocab), dtype=np.float32)
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous \
            or not out.flags.writeable:
        raise InvalidArgumentError("out must be a writeable C-contiguous float32 numpy array")
    return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ContextSequence:
    """One sequence of a Model's context: its tokens, evaluated and rolled back on their own.
    Calls run one at a time with the Model's other calls (its lock). interrupt() stops an eval
    of this sequence (and only of it) now or, if none runs, the next one; a batch that carries
    several sequences (Model.decode) is not stopped by one of them."""

    def __init__(self, model: Any, seq_id: int):     # model: the Model (model.py imports this module)
        self.model, self.id = model, seq_id
        self._cache_ids: list[int] = []     # the ids the core holds for it, in order
        self.leased = False
        self.last_used = 0
        self._interrupt = False              # asked for, not yet consumed by an eval
        self._sent = False                   # passed to the core during the running call
        # a hybrid's checkpoints: length -> its recurrent state there (the core checks, when one
        # is set, that the sequence holds the tokens it was taken after)
        self.checkpoints: dict[int, bytes] = {}

    def __repr__(self) -> str:
        return f"<ContextSequence {self.id} of {self.model.path!r}: {len(self._cache_ids)} tokens>"

    # -- state ------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self.model.closed

    @property
    def n_past(self) -> int:
        """Tokens in this sequence's cache."""
        return self.model._call(self, lambda c: c.seq_n_past(self.id), interruptible=False)

    @property
    def cached_tokens(self) -> list[int]:
        """The token ids this sequence holds, in order (a copy)."""
        with self.model._excl:
            return list(self._cache_ids)

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx

    # -- evaluation -------------------------------------------------------------------------
    def eval(self, tokens: Sequence[int] | np.ndarray, logits: str = "all", out: np.ndarray | None = None) -> np.ndarray:
        """Model.eval for this sequence: tokens at positions [n_past, n_past + n)."""
        return self.model._eval_one(self, tokens, logits, out)

    def eval_rows(self, rows: np.ndarray, ids: Sequence[int], non_causal: bool,
                  logits: str = "none", grid: tuple[int, int] | None = None, draft_token: int = 0) -> np.ndarray:
        """Evaluates rows (n x n_embd_inp float32: an image's, from a Projector) in place of token
        embeddings at [n_past, n_past + n); this sequence's ids, and the core's history (what a
        saved state keeps), hold `ids` there (an image's own ids, negative: so a prompt with
        another image or a text there shares no prefix with it, restored or not). non_causal:
        the rows see each other both ways (in one batch). grid: the rows' (nx, ny) (ImageRows.grid),
        which a text model with M-RoPE (Qwen) places at 2-D positions, as llama.cpp's mtmd; None:
        one position a row. draft_token: the token an attached EAGLE-3 head pairs with the rows'
        features (the prompt's placeholder: ImagePrompt.placeholder)."""
        m = self.model
        rows = np.ascontiguousarray(rows, np.float32)
        if rows.ndim != 2 or rows.shape[0] != len(ids):
            raise InvalidArgumentError(f"rows {rows.shape} and ids ({len(ids)}) do not match")
        mode = logits_mode(logits)
        n_out = rows.shape[0] if mode == 2 else (1 if mode == 1 else 0)
        out = np.empty((max(n_out, 1), m.n_vocab), np.float32)

        def run(c) -> None:
            m._make_room(len(ids), {self: len(ids)})
            try:
                c.seq_eval_rows(self.id, rows, np.asarray(ids, np.int32), non_causal, mode, out, grid, draft_token)
            finally:
                m._sync(self, list(ids))
        m._call(self, run)
        return out[:n_out]

    def truncate(self, n_keep: int) -> None:
        """Keeps its first n_keep tokens (O(1) rollback)."""
        n_keep = _args.integer("n_keep", n_keep, -_args.INT32_MAX - 1)

        def run(c) -> None:
            c.seq_truncate(self.id, n_keep)
            del self._cache_ids[n_keep:]
        self.model._call(self, run, interruptible=False)

    def clear(self) -> None:
        """Empties this sequence."""
        self.truncate(0)

    def reuse_prefix(self, ids: Sequence[int]) -> int:
        """Truncates the sequence to its longest common prefix with ids (a hybrid's: to its
        latest checkpoint at or below it, where its ring of states does not reach); returns its
        length (the tokens of ids that need no evaluation)."""
        return self.model._call(self, lambda c: self._cut(c, common_prefix(self._cache_ids, ids)),
                                interruptible=False)

    def _cut(self, c, n: int) -> int:
        """Truncates to n tokens (under the Model's lock). Where that leaves a hybrid's recurrent
        state to be replayed from the start, the latest checkpoint at or below n serves instead
        (those the core refuses, taken after other tokens, go); with none, the sequence is
        emptied (the replay would evaluate them all the same). Returns the tokens kept."""
        c.seq_truncate(self.id, n)
        del self._cache_ids[n:]
        for p in sorted((p for p in self.checkpoints if p <= n), reverse=True):
            if not c.seq_stale(self.id):
                break
            c.seq_truncate(self.id, p)
            del self._cache_ids[p:]
            try:
                c.seq_set_checkpoint(self.id, self.checkpoints[p])
            except PyllamaspecError:
                del self.checkpoints[p]
        if c.seq_stale(self.id):
            c.seq_truncate(self.id, 0)
            self._cache_ids.clear()
        return len(self._cache_ids)

    def take_checkpoint(self) -> bool:
        """A hybrid's checkpoint at its length now (psl_context_seq_checkpoint_get); False where
        there is none to take (no recurrent state, a draft head, a remote context, the Model's
        n_ctx_checkpoints at 0). At most n_ctx_checkpoints are kept: then the one closest above
        another goes (the first and the last stay)."""
        limit = getattr(self.model, "n_ctx_checkpoints", MAX_CHECKPOINTS)

        def run(c) -> bool:
            if limit <= 0:
                return False
            try:
                blob = c.seq_checkpoint(self.id)
            except PyllamaspecError:
                return False
            cps = self.checkpoints
            cps[len(self._cache_ids)] = blob
            while len(cps) > limit:
                pos = sorted(cps)
                gaps = [(b - a, b) for a, b in zip(pos, pos[1:-1])]
                del cps[min(gaps)[1] if gaps else pos[0]]
            return True
        return self.model._call(self, run, interruptible=False)

    def copy_from(self, src: "ContextSequence", n: int) -> None:
        """This sequence becomes the first n tokens of src (psl_context_seq_copy: the KV cells are
        shared, not copied; a hybrid's recurrent state is copied). A token tree's branches start
        this way (speculation/tree/verify.py)."""
        n = _args.integer("n", n, 0)

        def run(c) -> None:
            if n > len(src._cache_ids):
                raise InvalidArgumentError(f"sequence {src.id} holds {len(src._cache_ids)} tokens, not {n}")
            c.seq_copy(src.id, self.id, n)
            self._cache_ids = src._cache_ids[:n]
            self.checkpoints = {p: b for p, b in src.checkpoints.items() if p <= n}
        self.model._call(self, run, interruptible=False)

    def save_state(self) -> bytes:
        """Its state as bytes (psl_context_seq_state_get): its tokens, their K/V rows and a
        hybrid's recurrent states after its last positions (as far back as truncate() rolls back
        without a replay; the MTP block's hidden rows where it drafts), for load_state on a
        context of the same model and cache types (and MTP drafting on or off as here). Not with a
        draft head: UnsupportedModelError."""
        return self.model._call(self, lambda c: c.seq_state(self.id), interruptible=False)

    def load_state(self, state: bytes) -> None:
        """Holds exactly what save_state gave (its own tokens let go first). A state of another
        model or cache type, or a truncated one: InvalidArgumentError, the sequence unchanged."""
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"state must be bytes from save_state(), got {type(state).__name__}")
        state = bytes(state)

        def run(c) -> None:
            c.seq_set_state(self.id, state)
            n = int(np.frombuffer(state, np.uint32, 1, 12)[0])      # the header: magic, version, tensors, tokens
            self._cache_ids = np.frombuffer(state, np.int32, n, 16).tolist()
            self.checkpoints = {}
        self.model._call(self, run, interruptible=False)

    def mtp_draft(self, token: int, step: int, out: np.ndarray | None = None) -> np.ndarray:
        """Model.mtp_draft from this sequence's hidden state."""
        return self.model._mtp_draft(self, token, step, out)

    def mtp_draft_nodes(self, tokens, parents, out: np.ndarray | None = None) -> np.ndarray:
        """Several MTP draft nodes of a token tree in one batch (psl_context_seq_mtp_draft_nodes):
        node i runs tokens[i] as a child of node parents[i] of this sequence's draft (numbered as
        evaluated: step 0 is node 0, each earlier node the next). Returns their logits [n, n_vocab]."""
        return self.model._mtp_draft_nodes(self, tokens, parents, out)

    # -- interrupts ---------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Stops this sequence's eval running now or, if none is, its next one
        (EvaluationInterrupted, the cache as it was). Safe from any thread."""
        self.model._interrupt_seq(self)

    def clear_interrupt(self) -> None:
        """Withdraws an interrupt() that no eval has consumed yet."""
        self._interrupt = False

    # -- lease --------------------------------------------------------------------------------
    def release(self) -> None:
        """Gives the sequence back to the Model (its tokens stay for later prompts)."""
        self.model._pool.release(self)

    def __enter__(self) -> "ContextSequence":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class SequencePool:
    """The sequences of one Model: made on first use, leased one generation at a time."""

    def __init__(self, model: Any, n_seq: int):
        self.model, self.n_seq = model, n_seq
        self.limit = n_seq                    # sequences a lease may take (1 while a draft head is attached)
        self._seqs: dict[int, ContextSequence] = {}
        self._cv = threading.Condition(threading.Lock())

    def get(self, seq_id: int) -> ContextSequence:
        seq_id = _args.integer("seq_id", seq_id, 0, self.n_seq - 1)
        with self._cv:
            s = self._seqs.get(seq_id)
            if s is None:
                s = self._seqs[seq_id] = ContextSequence(self.model, seq_id)
            return s

    def all(self) -> list[ContextSequence]:
        with self._cv:
            return list(self._seqs.values())

    def lease(self, prompt: Sequence[int] | None, wait: bool = True, stop=None) -> ContextSequence | None:
        """A free sequence, the one whose cache shares most of prompt (see the module's
        docstring); None when all are leased and not wait, else waits for one (stop(): gives up
        with EvaluationInterrupted)."""
        with self._cv:
            while True:
                if self.model.closed:
                    raise ModelClosedError("the model is closed")
                free = [i for i in range(self.limit) if i not in self._seqs or not self._seqs[i].leased]
                if free or not wait:
                    break
                if stop is not None and stop():
                    raise EvaluationInterrupted("cancelled while waiting for a free sequence", 10)
                self._cv.wait(0.05 if stop is not None else 0.5)
            if not free:
                return None
            # the free sequences that hold something, then the lowest empty id
            cands = [i for i in free if i in self._seqs and self._seqs[i]._cache_ids]
            empty = next((i for i in free if i not in self._seqs or not self._seqs[i]._cache_ids), None)
            if empty is not None:
                cands.append(empty)
            cands.sort()
            if prompt is not None:
                cands.sort(key=lambda i: -common_prefix(self._seqs[i]._cache_ids if i in self._seqs else [], prompt))
            i = cands[0]
            s = self._seqs.get(i)
            if s is None:
                s = self._seqs[i] = ContextSequence(self.model, i)
            s.leased = True
            s.last_used = next(_clock)
        return s

    def spare(self, n: int) -> list[ContextSequence]:
        """Up to n free sequences, leased now without waiting, the empty ones first (so that
        what idle sequences hold for later prompts is kept while it can be): a token tree's
        branches for one round (speculation/tree/verify.py), released after it."""
        with self._cv:
            if self.model.closed:
                raise ModelClosedError("the model is closed")
            free = [i for i in range(self.limit) if i not in self._seqs or not self._seqs[i].leased]
            free.sort(key=lambda i: (i in self._seqs and bool(self._seqs[i]._cache_ids), i))
            out = []
            for i in free[:max(0, n)]:
                s = self._seqs.get(i)
                if s is None:
                    s = self._seqs[i] = ContextSequence(self.model, i)
                s.leased = True
                s.last_used = next(_clock)
                out.append(s)
        return out

    def lease_id(self, seq_id: int, stop=None) -> ContextSequence:
        """Sequence seq_id, leased once it is free (stop(): gives up with EvaluationInterrupted)."""
        s = self.get(seq_id)
        with self._cv:
            while s.leased:
                if self.model.closed:
                    raise ModelClosedError("the model is closed")
                if stop is not None and stop():
                    raise EvaluationInterrupted("cancelled while waiting for a free sequence", 10)
                self._cv.wait(0.05 if stop is not None else 0.5)
            s.leased = True
            s.last_used = next(_clock)
        return s

    def release(self, s: ContextSequence) -> None:
        with self._cv:
            s.leased = False
            s.last_used = next(_clock)
            s._interrupt = False
            self._cv.notify_all()

    def wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def idle(self) -> list[ContextSequence]:
        """Sequences nobody holds that hold tokens, least recently used first."""
        with self._cv:
            return sorted((s for s in self._seqs.values() if not s.leased and s._cache_ids),
                          key=lambda s: s.last_used)

    def best_source(self, prompt: Sequence[int], exclude: ContextSequence) -> tuple[ContextSequence | None, int]:
        """The sequence (other than exclude) sharing the longest prefix with prompt, and its length."""
        best, n = None, 0
        for s in self.all():
            if s is not exclude:
                k = common_prefix(s._cache_ids, prompt)
                if k > n:
                    best, n = s, k
        return best, n

