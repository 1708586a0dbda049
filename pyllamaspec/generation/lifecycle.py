"""The generation lifecycle: a Generation is one prompt's decoding from start to end (its
sequences in the models, its Decoder and grammar, its text and stop, cancel, context full,
statistics, what the caches keep, failures), and a Scheduler runs Generations together. Every
front end runs this one object: generate() and the CLI one alone (run_alone: a batch of one),
generate([...]) and the server's slots several at once. Every round, one target evaluation
carries the verify rows of all of them (speculation/batch.py); one alone decodes by
Decoder.step.

A generation is admitted while the target's cells hold what the running ones may still need
(prompt + max_tokens + a draft each); the others wait their turn. One that joins running
generations has its (short) prompt evaluated in the next round's target evaluation, as
llama-server's continuous batching does, and where rounds of as many sequences decode plainly
(alone or together), its draft model's prompt is left to the catch-up of a round that drafts. A
cancelled one leaves before the next round (a round is tens of milliseconds; its prompt's
evaluation, which may be long, is interrupted at once).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Callable, Iterator, Sequence

from ..engine.cancel import Cancel
from ..engine.model import Model
from ..engine.sampling import SamplingParams
from ..errors import EvaluationInterrupted, GrammarError, InvalidArgumentError, RpcError
from ..speculation.batch import BatchRound
from ..speculation.decoder import Decoder, DraftParams
from .text import Piece, TextOutput
from .thinking import thinking_budget


MERGE_MAX = 256        # prompt tokens evaluated with a round's batch at most (Generation._merge)


class Generation:
    """One prompt's generation in a Scheduler; result as generate's (tokens, text, finish_reason,
    stats, logprobs, eog, prompt_tokens)."""

    def __init__(self, ids: list[int], target: Model, drafter, *, sampling: SamplingParams, draft: DraftParams,
                 max_tokens: int, stop: list[str], logprobs: int | None = None, per_token: bool = False,
                 cancel: Cancel | None = None, cache_prompt: bool = True, constraint=None,
                 result: dict | None = None, progress: Callable[[int, int], None] | None = None,
                 grammar=None, checkpoints: Sequence[int] = (), images=None):
        self.ids, self.target, self.drafter, self.max_tokens, self.stop = ids, target, drafter, max_tokens, stop
        self.sampling, self.draft, self.n_logprobs = sampling, draft, logprobs
        self.per_token, self.cancel, self.cache_prompt = per_token, cancel, cache_prompt
        self.constraint = constraint             # a GrammarSpec: this generation's grammar is made from it
        self.grammar = grammar                   # or that grammar, made already (fresh: none of it taken)
        self.progress = progress                 # progress(done, total) of the prompt's evaluation
        self.checkpoints = checkpoints           # prompt lengths to keep a hybrid's state at (a chat's turns)
        self.images = images                     # an ImagePrompt (vision/prompt.py): ids holds its images
        self.dec: Decoder | None = None          # made when it starts (a draft model's head is shared then)
        self.result: dict = {} if result is None else result   # filled in place: the caller's dict
        self.result.update(tokens=[], prompt_tokens=ids, finish_reason="length", stats=None, policy=None,
                           text="", logprobs=None if logprobs is None else [], eog=None)
        self.out: TextOutput | None = None
        self.t0: float | None = None
        self.done = False
        self.error: BaseException | None = None  # why it ended, where its own grammar stopped it
        self.budget = None                       # a chat's thinking budget (generation/thinking.py)

    def need(self) -> int:
        """Cells it may take at most (in the target and a draft model alike)."""
        return len(self.ids) + self.max_tokens + self.draft.n_draft + 1

    def draft_models(self) -> list[Model]:
        return [self.drafter] if isinstance(self.drafter, Model) else []

    def start(self, alongside: int = 0, draft_later=None) -> list[Piece]:
        """Takes its sequences and evaluates the prompt (what they hold of it is kept);
        alongside: the generations running beside it (a drafter that follows one sequence of
        its target, a draft head, refuses to run beside any: InvalidArgumentError);
        draft_later(decoder, n_seq): whether its draft model's prompt evaluation is left to a
        drafting round's catch-up (BatchRound.draft_later: where rounds decode plainly).
        Beside others, a short prompt's evaluation goes with the next round's (one target
        evaluation for all: Decoder.prefill's target_later)."""
        c = self.cancel
        fresh = not self.cache_prompt
        grammar = self.grammar
        if grammar is None and self.constraint is not None:
            grammar = self.constraint.make(self.target)
        self.dec = Decoder(self.target, self.drafter, self.sampling, self.draft, logprobs=self.n_logprobs,
                           grammar=grammar)
        self.dec.images = self.images
        self.result.update(stats=self.dec.stats, policy=self.dec.policy)
        self.budget = thinking_budget(self.constraint, self.target)
        self._follow_thinking()
        self._check_drafter(alongside)
        try:
            with c.watching() if c is not None else nullcontext():
                self.dec.open(self.ids, fresh=fresh, stop=c.is_set if c is not None else None)
                if c is not None:
                    c.watch(*self.dec.sequences())
                later = draft_later is not None and draft_later(self.dec, alongside + 1)
                self.dec.prefill(self.ids, fresh=fresh, draft_later=later, target_later=self._merge(alongside),
                                 progress=self.progress, checkpoints=self.checkpoints)
        except EvaluationInterrupted:
            if c is None or not c.is_set():
                self.end(ok=False)
                raise
            self.result["finish_reason"] = "cancelled"
            return self.end(ok=False)
        except BaseException:
            self.end(ok=False)
            raise
        self.out = TextOutput(self.target, self.stop, self.max_tokens, self.result, self.per_token)
        self.t0 = time.perf_counter()
        if self.max_tokens == 0:
            return self.end()
        return []

    def _merge(self, alongside: int) -> bool:
        """Whether its prompt is evaluated with the next round's batch: beside other
        generations (alone, a round would evaluate it alone all the same), short (a long one
        evaluated alone stays interruptible by its own cancel), and with no drafter or a draft
        model (one that reads the target's state of the prompt, an MTP head, must not find it
        missing; the n-gram kinds are left out too, untried)."""
        d = self.dec.drafter
        return bool(alongside) and len(self.ids) - 1 <= MERGE_MAX and (d is None or d.draft_model is not None)

    def _check_drafter(self, alongside: int) -> None:
        """A drafter that follows one sequence of its target (a draft head), or one Drafter object
        given for every generation (its state is one generation's), runs beside no other."""
        d = self.dec.drafter
        if d is None or not alongside:
            return
        shared = d is self.drafter
        if alongside >= d.max_sequences or shared:
            self.end(ok=False)
            why = "is one object for every prompt (its state is one generation's)" if shared else \
                "follows one sequence of its target (a draft head)"
            raise InvalidArgumentError(f"the drafter {d.key or type(d).__name__} {why}: it cannot decode beside "
                                       f"other generations; run them one at a time (n_parallel=1, the server's -np 1)")

    def ready(self) -> bool:
        """Whether it takes part in the next round (else it has just finished: call end())."""
        if self.cancel is not None and self.cancel.is_set():
            self.out.finish("cancelled")
        elif self.dec.room() < 1:
            self.out.finish("context_full")
        return not self.out.done

    def _follow_thinking(self) -> None:
        """A reasoning block's end forced when its budget ran out; the cost model's estimates
        switched between the block and the answer."""
        if self.budget is not None:
            self.dec.constraint.force(self.budget.to_force())
            self.dec.policy.set_phase("thinking" if self.budget.inside else "answer")

    @property
    def wants(self) -> int:
        """Tokens the next round may produce: what max_tokens leaves, and no further than a
        thinking budget's end."""
        room = self.budget.room() if self.budget is not None else None
        return self.out.wants if room is None else min(self.out.wants, room)

    def take(self, new: list[tuple[int, bool]]) -> list[Piece]:
        if self.budget is not None:
            self.budget.feed([t for t, _ in new])
            self._follow_thinking()
        lps = self.dec.round_logprobs if self.out.logprobs is not None else None
        pieces = self.out.push(new, lps)
        g = self.dec.constraint.grammar
        failure = g.failure if g is not None else None
        if failure and self.error is None:       # a limit passed at run time: this generation only
            self.error = GrammarError(failure)
            self.out.finish("stop")
        return pieces

    def end(self, ok: bool = True) -> list[Piece]:
        """Finishes it: the text held back, the statistics, the caches trimmed to what went out,
        the sequences given back."""
        if self.done:
            return []
        self.done = True
        pieces: list[Piece] = []
        if self.dec is None:
            return pieces
        try:
            if self.out is not None:
                pieces = self.out.close(flush=ok)
            if self.t0 is not None:
                self.dec.stats.n_generated = len(self.result["tokens"])
                self.dec.stats.t_generate = time.perf_counter() - self.t0
                self.dec.keep(len(self.ids) + len(self.result["tokens"]))
        finally:
            self.dec.close()
        return pieces

    def fail(self, e: BaseException) -> None:
        if isinstance(e, RpcError):            # a server was lost: say what had been produced
            e.tokens, e.text = list(self.result["tokens"]), self.result["text"]
        self.end(ok=False)


Emit = Callable[[Generation, list[Piece]], None]


class Scheduler:
    """Runs Generations together on one target (and drafter): admit() starts one when there is
    room, step() runs one round of all that are running."""

    def __init__(self, target: Model, n_parallel: int, k_max: int = 16):
        self.target = target
        self.n_parallel = max(1, min(n_parallel, target.n_seq_max))
        self.round = BatchRound(target, k_max)
        self.running: list[Generation] = []

    def has_room(self, g: Generation) -> bool:
        if len(self.running) >= self.n_parallel:
            return False
        if not self.running:
            return True                           # alone it may use the whole context
        ctx = [self.target.n_ctx] + [m.n_ctx for m in g.draft_models()]
        return sum(r.need() for r in self.running) + g.need() <= min(ctx)

    def admit(self, g: Generation, emit: Emit, draft_later: bool = True) -> None:
        """Starts g (its prompt evaluated): running, or finished at once (max_tokens 0, a cancel).
        draft_later: whether its draft model's prompt may be left to a drafting round's catch-up
        (BatchRound.draft_later; generate() alone evaluates it at once)."""
        pieces = g.start(len(self.running), self.round.draft_later if draft_later else None)
        if g.done:
            emit(g, pieces)
        else:
            self.running.append(g)

    def step(self, emit: Emit) -> None:
        """One round of every running generation; finished ones leave (emit gets their last
        pieces with done set). A failure of the round's evaluation ends all of them and is
        raised."""
        active = []
        for g in list(self.running):
            if g.ready():
                active.append(g)
            else:
                self.running.remove(g)
                emit(g, g.end())
        if not active:
            return
        try:
            if len(active) == 1:
                news = [active[0].dec.step(active[0].wants)]
            else:
                news = self.round.step([g.dec for g in active], [g.wants for g in active])
        except EvaluationInterrupted:
            c = active[0].cancel
            if len(active) > 1 or c is None or not c.is_set():
                self._fail(active, EvaluationInterrupted("evaluation interrupted", 10))
                raise
            active[0].out.finish("cancelled")       # its own cancel stopped its evaluation
            self.running.remove(active[0])
            emit(active[0], active[0].end(ok=False))
            return
        except BaseException as e:
            self._fail(active, e)
            raise
        for g, new in zip(active, news):
            pieces = g.take(new)
            if g.out.done:
                self.running.remove(g)
                pieces += g.end()
            emit(g, pieces)

    def _fail(self, gens: list[Generation], e: BaseException) -> None:
        for g in gens:
            if g in self.running:
                self.running.remove(g)
            g.fail(e)


def run_alone(g: Generation) -> Iterator[Piece]:
    """One generation by itself (generate(), stream_generate(), the CLI): a Scheduler of one,
    its pieces yielded as each round makes them. Closing the iterator early ends it (the caches
    keep what went out)."""
    sched = Scheduler(g.target, 1, k_max=g.draft.n_draft)
    made: list[Piece] = []

    def emit(_g: Generation, pieces: list[Piece]) -> None:
        made.extend(pieces)
    try:
        sched.admit(g, emit, draft_later=False)
        while True:
            yield from made
            made.clear()
            if not sched.running:
                break
            sched.step(emit)
        if g.error is not None:
            raise g.error
    finally:
        g.end(ok=False)                          # nothing when it ended already
