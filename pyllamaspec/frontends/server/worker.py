"""The models' worker: one thread runs the requests one at a time, in arrival order, through
pyllamaspec's generation loop (iter_generate), and hands each request's pieces to the event
loop that waits on them; the event loop stays free (/health answers during a generation).

Each request has a Cancel: a client that goes away sets it, which interrupts the evaluation
running on the models and stops the loop before its next round; a request cancelled while it
waits in the queue is dropped unrun. The models' caches persist from request to request, so a
prompt that extends the previous one (a chat one turn longer) evaluates only its new tokens."""
from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator

from ...engine.cancel import Cancel
from ...engine.chat_template import ChatPrompt
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import GrammarError, InvalidArgumentError, PyllamaspecError
from ...speculation.decoder import DraftParams
from ..generate import Piece, iter_generate
from ..structured.formats import GrammarSpec
from .openai_format import APIError, GenRequest

log = logging.getLogger("pyllamaspec.server")


@dataclass
class Defaults:
    """What a request does not say: the command line's sampling, and its speculation."""
    sampling: SamplingParams
    draft: DraftParams
    seeded: bool = False                  # -s given: requests without a seed use it
    chat_template: str | None = None
    max_tokens: int | None = None         # -n: a request's max_tokens when it gives none (None: to the end)
    constraint: GrammarSpec | None = None  # --grammar / --json-schema: for requests without their own


@dataclass
class Job:
    """A checked request bound to the models: prompt ids and everything the loop needs."""
    req: GenRequest
    ids: list[int]
    stops: list[str]
    max_tokens: int
    sampling: SamplingParams
    draft: DraftParams
    loop: asyncio.AbstractEventLoop
    constraint: GrammarSpec | None = None     # with a chat's schema: the response-format grammar
    cancel: Cancel = field(default_factory=Cancel)
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled_at: float | None = None

    def stop(self) -> None:
        """Cancels the request (from the event loop): a no-op once it has finished."""
        if self.cancelled_at is None:
            self.cancelled_at = time.perf_counter()
        self.cancel.set()

    def emit(self, kind: str, value) -> None:
        """From the worker thread: queue an event for the request's handler."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:              # the event loop is gone (shutdown)
            pass

    async def stream(self) -> AsyncIterator[tuple[str, object]]:
        """("piece", Piece) ... then ("done", result dict) or ("error", exception)."""
        while True:
            kind, value = await self.events.get()
            yield kind, value
            if kind != "piece":
                return


@dataclass
class Counters:
    requests: int = 0                     # generations run to their end
    cancelled: int = 0                    # of those, stopped by their client going away
    dropped: int = 0                      # cancelled while waiting, never run
    errors: int = 0
    tokens: int = 0
    last_cancel: dict | None = None       # how fast the last cancelled generation stopped
    # llama-server's /metrics counters
    prompt_tokens: int = 0                # evaluated (not from the cache)
    prompt_cached: int = 0
    prompt_seconds: float = 0.0
    predicted_seconds: float = 0.0
    n_tokens_max: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_rounds: int = 0
    tasks: int = 0                        # ids handed to requests (/slots' id_task)

    def add(self, stats, n_prompt: int, n_generated: int) -> None:
        """A finished generation's statistics."""
        self.prompt_tokens += stats.n_prompt - stats.n_reused
        self.prompt_cached += stats.n_reused
        self.prompt_seconds += stats.t_prompt
        self.predicted_seconds += stats.t_generate
        self.n_tokens_max = max(self.n_tokens_max, n_prompt + n_generated)
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        self.draft_rounds += stats.rounds if stats.drafted else 0


class Worker:
    """Owns the target and drafter; runs Jobs on its own thread."""

    def __init__(self, target: Model, drafter: Model | str | None, defaults: Defaults):
        self.target, self.drafter, self.defaults = target, drafter, defaults
        for m in (target, drafter):
            if isinstance(m, Model):       # uvicorn owns Ctrl-C; generations stop by Cancel
                m.catch_sigint(False)
        self.counters = Counters()
        self.busy = False
        self.task: dict | None = None      # the slot's current (else last) request, for /slots
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._pieces: dict[int, bytes] = {}
        self._thread = threading.Thread(target=self._run_forever, name="pyllamaspec-worker", daemon=True)
        self._thread.start()

    @property
    def has_drafter(self) -> bool:
        return self.drafter is not None

    @property
    def queued(self) -> int:
        return self._jobs.qsize()

    def token_bytes(self, token: int) -> bytes:
        b = self._pieces.get(token)
        if b is None:
            b = self._pieces[token] = self.target.token_to_piece(token)
        return b

    # -- preparing (any thread: tokenizer calls run beside an evaluation) --------------------
    def prepare(self, req: GenRequest, loop: asyncio.AbstractEventLoop) -> Job:
        """Renders and tokenizes the prompt and checks it against the context: APIError if it
        does not fit."""
        t = self.target
        stops = list(req.stop)
        constraint = req.constraint or self.defaults.constraint
        try:
            if req.kind == "chat":
                tools = {"tools": list(constraint.tools.tools)} if constraint is not None and constraint.tools else {}
                prompt = ChatPrompt.make(req.messages, self.defaults.chat_template, **tools)
                ids, chat_stops = prompt.render(t)
                stops += [s for s in chat_stops if s not in stops]
                if constraint is not None:
                    constraint = constraint.for_chat(prompt, t)
            elif isinstance(req.prompt, str):
                ids = t.tokenize(req.prompt, add_special=True, parse_special=True)
            elif any(isinstance(x, str) for x in req.prompt):   # llama-server's mixed prompt
                ids = []
                for x in req.prompt:
                    ids += t.tokenize(x, add_special=not ids, parse_special=True) if isinstance(x, str) else [x]
                bad = [i for i in ids if not 0 <= i < t.n_vocab]
                if bad:
                    raise APIError(f"'prompt' has token id {bad[0]}, outside the vocabulary [0, {t.n_vocab})",
                                   param="prompt")
            else:
                ids = list(req.prompt)
                bad = [i for i in ids if not 0 <= i < t.n_vocab]
                if bad:
                    raise APIError(f"'prompt' has token id {bad[0]}, outside the vocabulary [0, {t.n_vocab})",
                                   param="prompt")
            if constraint is not None:
                constraint.make(t)         # a <token> the vocabulary lacks fails here, not in the queue
        except GrammarError as e:
            raise APIError(str(e), param={"grammar": "grammar", "tools": "tools"}.get(constraint.kind,
                                                                                       "response_format")) from None
        except PyllamaspecError as e:      # a template refusing the conversation, ...
            raise APIError(str(e), param="messages" if req.kind == "chat" else "prompt") from None
        n_ctx = min(m.n_ctx for m in (t, self.drafter) if isinstance(m, Model))
        if not ids:
            raise APIError("the prompt is empty (no tokens)", param="prompt")
        if len(ids) >= n_ctx:
            raise APIError(f"the prompt has {len(ids)} tokens, more than the context of {n_ctx} holds "
                           f"(the server's -c)", param="messages" if req.kind == "chat" else "prompt",
                           code="context_length_exceeded")
        room = n_ctx - len(ids)
        if req.max_tokens is not None and req.max_tokens > room:
            raise APIError(f"the context holds {n_ctx} tokens: the prompt has {len(ids)} and max_tokens asks for "
                           f"{req.max_tokens} more (at most {room})", param="max_tokens",
                           code="context_length_exceeded")
        sampling, draft = self._params(req)
        max_tokens = req.max_tokens
        if max_tokens is None:
            max_tokens = room if self.defaults.max_tokens is None else min(room, self.defaults.max_tokens)
        return Job(req, ids, stops, max_tokens, sampling, draft, loop, constraint)

    def _params(self, req: GenRequest) -> tuple[SamplingParams, DraftParams]:
        d = self.defaults
        fields = {**d.sampling.__dict__, **req.sampling}
        if req.seed is not None:
            fields["seed"] = req.seed
        elif not d.seeded:
            fields["seed"] = int.from_bytes(os.urandom(8), "little")
        try:
            sampling = SamplingParams(**fields)
        except InvalidArgumentError as e:
            raise APIError(str(e)) from None
        draft = d.draft
        # as generate(): a seed with sampling asks for the same output each time, so fixed
        # draft lengths (the cost model follows measured times)
        if draft.adaptive and (req.seed is not None or d.seeded) and sampling.temperature > 0:
            draft = DraftParams(**{**draft.__dict__, "adaptive": False})
        return sampling, draft

    # -- running (the worker thread) ----------------------------------------------------------
    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def run_exclusive(self, fn, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """fn() on the worker thread, in turn with the generations (it may use the models' caches:
        an embedding), its result or exception in the future."""
        fut = loop.create_future()
        self._jobs.put(_Call(fn, fut, loop))
        return fut

    def _run_forever(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if isinstance(job, _Call):
                job.run()
                continue
            if job.cancel.is_set():
                self.counters.dropped += 1
                job.emit("error", APIError("the request was cancelled", 499))
                continue
            self.busy = True
            try:
                self._run(job)
            except BaseException as e:    # noqa: BLE001 - never let a request take the worker down
                log.exception("generation failed")
                self.counters.errors += 1
                job.emit("error", e)
            finally:
                self.busy = False

    def _run(self, job: Job) -> None:
        result: dict = {}
        n_at_cancel = None
        pieces = iter_generate(job.ids, self.target, self.drafter, sampling=job.sampling, draft=job.draft,
                               max_tokens=job.max_tokens, stop=job.stops, result=result, cancel=job.cancel,
                               logprobs=job.req.logprobs, cache_prompt=job.req.cache_prompt,
                               per_token=job.req.logprobs is not None or job.req.return_tokens,
                               constraint=job.constraint)
        task = self._start_task(job)
        n = 0
        try:
            for p in pieces:
                if n_at_cancel is None and job.cancel.is_set():
                    n_at_cancel = n
                n += p.token >= 0
                task["generated"] += p.text
                task["n_decoded"], task["n_remain"] = n, job.max_tokens - n
                job.emit("piece", p)
        finally:
            pieces.close()
        self.counters.requests += 1
        self.counters.tokens += len(result.get("tokens", ()))
        if result.get("stats") is not None:
            task["n_cached"] = result["stats"].n_reused
            self.counters.add(result["stats"], len(job.ids), len(result.get("tokens", ())))
        if result.get("finish_reason") == "cancelled":
            self.counters.cancelled += 1
            done = time.perf_counter()
            self.counters.last_cancel = {
                "stop_ms": 1e3 * (done - job.cancelled_at) if job.cancelled_at else None,
                "tokens_after_cancel": n - n_at_cancel if n_at_cancel is not None else 0,
                "tokens": len(result.get("tokens", ())), "max_tokens": job.max_tokens}
        self.busy = False                  # before the answer goes out: /slots read after it sees it idle
        job.emit("done", result)

    def _start_task(self, job: Job) -> dict:
        """What /slots shows of the request now running (and, after it, of the last one)."""
        from .native import sampling_params
        self.counters.tasks += 1
        self.task = {"id": self.counters.tasks, "n_prompt": len(job.ids), "n_cached": 0, "n_decoded": 0,
                     "n_remain": job.max_tokens, "generated": "",
                     "prompt": self.target.detokenize(job.ids, render_special=True),
                     "params": sampling_params(job.sampling, job.draft if self.has_drafter else None, job.max_tokens,
                                               job.req.stream, job.req.logprobs or 0)}
        return self.task

    def health(self) -> dict:
        c = self.counters
        return {"status": "ok", "busy": self.busy, "queued": self.queued, "requests": c.requests,
                "cancelled": c.cancelled, "dropped": c.dropped, "errors": c.errors, "tokens": c.tokens,
                "last_cancel": c.last_cancel}


@dataclass
class _Call:
    """A function to run on the worker thread (Worker.run_exclusive)."""
    fn: object
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def run(self) -> None:
        try:
            value, error = self.fn(), None
        except BaseException as e:        # noqa: BLE001 - handed to the request that asked
            value, error = None, e
        try:
            self.loop.call_soon_threadsafe(self._settle, value, error)
        except RuntimeError:              # the event loop is gone (shutdown)
            pass

    def _settle(self, value, error) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(value)


__all__ = ["Worker", "Job", "Defaults", "Counters", "Piece"]
