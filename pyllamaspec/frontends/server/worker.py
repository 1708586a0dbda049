"""The models' worker: one thread runs the requests in n_parallel slots (llama-server's -np,
continuous batching): a request takes a free slot in arrival order, its prompt is evaluated,
then every round one target evaluation carries the drafts of all running slots
(generation/lifecycle.py, speculation/batch.py); each request's pieces go to the event loop that
waits on them, which stays free (/health answers during a generation).

Each request has a Cancel: a client that goes away sets it, which interrupts its prompt's
evaluation and takes it out before the next round; a request cancelled while it waits is
dropped unrun. A slot is a sequence of the models' contexts: the one holding most of the new
prompt is taken (or that prefix is copied from another), so a prompt that extends an earlier one
(a chat one turn longer) evaluates only its new tokens. Functions that use the models' caches
(an embedding) run on the same thread when no slot is busy (run_exclusive)."""
from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import AsyncIterator

from ...engine.cancel import Cancel
from ...engine.chat_template import ChatPrompt, chat_text
from ...engine.grammar import Grammar
from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import GrammarError, InvalidArgumentError, PyllamaspecError
from ...speculation.decoder import DraftParams
from ...generation.text import Piece
from ...generation.lifecycle import Generation, Scheduler
from ...structured.formats import GrammarSpec, chat_spec
from ...structured.reasoning import Reasoning
from ...vision import prompt as vision_prompt
from ...vision.prompt import ImagePrompt
from .openai_format import APIError, GenRequest

log = logging.getLogger("pyllamaspec.server")
NO_IMAGES_CHAT = ("image input is not supported - hint: if this is unexpected, you may need to provide the mmproj "
                  "(--mmproj)")
NO_IMAGES_PROMPT = ("Multimodal data provided, but model does not support multimodal requests. - hint: start the "
                    "server with --mmproj")


@dataclass
class Defaults:
    """What a request does not say: the command line's sampling, and its speculation."""
    sampling: SamplingParams
    draft: DraftParams
    seeded: bool = False                  # -s given: requests without a seed use it
    chat_template: str | None = None
    max_tokens: int | None = None         # -n: a request's max_tokens when it gives none (None: to the end)
    n_parallel: int = 1                   # -np: slots
    kv_unified: bool = True               # every slot may use the whole context (else n_ctx / n_parallel each)
    constraint: GrammarSpec | None = None  # --grammar / --json-schema: for requests without their own
    template_kwargs: dict = field(default_factory=dict)   # --chat-template-kwargs, --reasoning on|off
    reasoning: Reasoning = Reasoning()    # --reasoning-format, --reasoning-budget(-message)


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
    grammar: Grammar | None = None            # the constraint on the target's vocabulary, made once
    checkpoints: list[int] = field(default_factory=list)   # where a hybrid keeps its state (user turns)
    images: "ImagePrompt | None" = None       # the prompt's images: its ids hold them (vision/prompt.py)
    cancel: Cancel = field(default_factory=Cancel)
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled_at: float | None = None
    gen: Generation | None = None         # while it runs in a slot
    slot: int = -1                        # its slot's id (0 .. n_parallel - 1)
    task: int = 0                         # llama-server's id_task: the request's number
    info: dict | None = None              # what /slots shows of it (native.describe_slot)
    n_out: int = 0                        # tokens sent
    n_at_cancel: int | None = None
    outbox: "Outbox | None" = None        # the worker's (submit): events go out once per round

    @property
    def text_ids(self) -> list[int]:
        """The prompt's ids with an image's positions as its placeholder token (what detokenizes)."""
        return self.images.text_ids() if self.images is not None else self.ids

    def stop(self) -> None:
        """Cancels the request (from the event loop): a no-op once it has finished."""
        if self.cancelled_at is None:
            self.cancelled_at = time.perf_counter()
        self.cancel.set()

    def emit(self, kind: str, value) -> None:
        """From the worker thread: queue an event for the request's handler (through the
        worker's outbox once submitted)."""
        if self.outbox is not None:
            self.outbox.put(self, kind, value)
            return
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


class Outbox:
    """The worker's events for the requests' handlers, handed to their event loop together:
    one wake-up of the loop per round, not one per token of each slot (each wake-up is a
    write to the loop's socket and a turn of the loop, which competes with the evaluation's
    threads for the cores)."""

    def __init__(self) -> None:
        self._items: list[tuple[Job, str, object]] = []

    def put(self, job: Job, kind: str, value) -> None:
        self._items.append((job, kind, value))

    def flush(self) -> None:
        """From the worker thread: everything put so far, to its loop(s)."""
        if not self._items:
            return
        items, self._items = self._items, []
        by_loop: dict = {}
        for it in items:
            by_loop.setdefault(it[0].loop, []).append(it)
        for loop, its in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, its)
            except RuntimeError:          # the event loop is gone (shutdown)
                pass


def _deliver(items: list) -> None:
    for job, kind, value in items:
        job.events.put_nowait((kind, value))


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


def task_line(slot: int, task: int, result: dict, constraint: GrammarSpec | None = None) -> str:
    """One line per request, as llama-server logs a task's timings (counts only: no text), and
    how a chat's tool calls were asked for where the template has no tool syntax."""
    s = result["stats"]
    line = (f"slot {slot} task {task}: prompt {s.n_prompt} tokens ({s.n_reused} cached, "
            f"{s.n_prompt - s.n_reused} evaluated in {1e3 * s.t_prompt:.0f} ms), generated {s.n_generated} in "
            f"{1e3 * s.t_generate:.0f} ms ({s.generate_tps:.1f} t/s), finish {result.get('finish_reason')}")
    if s.drafted:
        line += f", drafted {s.drafted} accepted {s.accepted} ({100 * s.accepted / s.drafted:.0f}%)"
        if s.draft_mode:
            line += f" [{s.draft_mode}]"
        split = s.thinking_acceptance()
        if split is not None:
            line += f" [thinking {100 * split[0]:.0f}%, answer {100 * split[1]:.0f}%]"
    if constraint is not None and constraint.generic_tools:
        line += ", tool calls in the generic JSON format (the template has no tool syntax)"
    return line


class Worker:
    """Owns the target and drafter; runs Jobs in n_parallel slots on its own thread."""

    def __init__(self, target: Model, drafter: Model | str | None, defaults: Defaults, projector=None,
                 draft_projector=None):
        self.target, self.drafter, self.defaults = target, drafter, defaults
        self.projector = projector                 # --mmproj: a vision Projector, or None
        self.draft_projector = draft_projector     # --mmproj-draft: the draft model's, or None
        for m in (target, drafter):
            if isinstance(m, Model):       # uvicorn owns Ctrl-C; generations stop by Cancel
                m.catch_sigint(False)
        self.counters = Counters()
        n = defaults.n_parallel
        self.n_slots = n
        self.n_ctx_slot = min(m.n_ctx for m in (target, drafter) if isinstance(m, Model))
        if not defaults.kv_unified:
            self.n_ctx_slot //= n
        self.sched = Scheduler(target, n, k_max=defaults.draft.n_draft)
        # the longest token in bytes: a text of B bytes is at least B / max_piece tokens, so a
        # prompt that cannot fit is refused before it is tokenized (or rendered) in full
        self.max_piece = max(1, max(len(target.token_to_piece(i, render_special=True)) for i in range(target.n_vocab)))
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._calls: deque[_Call] = deque()       # run_exclusive's, waiting for idle slots
        self.last: dict[int, dict] = {}           # each slot's last request, for /slots
        self.slot_seq: dict = {}                  # each slot's last sequence of the target (slot_action)
        self._pieces: dict[int, bytes] = {}
        self._outbox = Outbox()
        self._thread = threading.Thread(target=self._run_forever, name="pyllamaspec-worker", daemon=True)
        self._thread.start()

    @property
    def has_drafter(self) -> bool:
        return self.drafter is not None

    @property
    def busy(self) -> bool:
        return bool(self._running)

    @property
    def n_busy(self) -> int:
        """Slots processing a request."""
        return len(self._running)

    @property
    def queued(self) -> int:
        return self._jobs.qsize() + len(self._waiting)

    def token_bytes(self, token: int) -> bytes:
        b = self._pieces.get(token)
        if b is None:
            b = self._pieces[token] = self.target.token_to_piece(token)
        return b

    # -- preparing (any thread: tokenizer calls run beside an evaluation) --------------------
    def prepare(self, req: GenRequest, loop: asyncio.AbstractEventLoop) -> Job:
        """Renders and tokenizes the prompt and checks it against the context: APIError if it
        does not fit."""
        stops = list(req.stop)
        param = "messages" if req.kind == "chat" else "prompt"
        if req.kind == "chat":
            self._fits(sum(len(m["content"]) for m in req.messages), param)
        elif isinstance(req.prompt, str):
            self._fits(len(req.prompt), param)
        if not -1 <= req.id_slot < self.n_slots:
            raise APIError(f"'id_slot' {req.id_slot}: this server has {self.n_slots} slot"
                           f"{'s' if self.n_slots > 1 else ''} (id{'s 0..' if self.n_slots > 1 else ' '}"
                           f"{self.n_slots - 1})", param="id_slot")
        ids, stops, constraint, grammar, turns, images = self._prompt(req, stops)
        n_ctx = self.n_ctx_slot
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
        return Job(req, ids, stops, max_tokens, sampling, draft, loop, constraint, grammar, checkpoints=turns,
                   images=images)

    def _prompt(self, req: GenRequest, stops: list[str]) -> "tuple[list[int], list[str], GrammarSpec | None, Grammar | None, list[int], ImagePrompt | None]":
        """The prompt's ids (a chat rendered with its tools), its stops, the request's constraint
        and its grammar on the target's vocabulary (made here, once: a bad grammar or a <token>
        the vocabulary lacks is the request's 400, not a failure in the queue), and where a
        hybrid target keeps checkpoints (a chat's user turns); a prompt with images (a chat's,
        /completion's multimodal_data), its ImagePrompt (the images encoded here: a broken one is
        the request's 400)."""
        t = self.target
        constraint = req.constraint or self.defaults.constraint
        turns: list[int] = []
        images = None
        try:
            if req.kind == "chat":
                prompt, constraint = self.chat_prompt(req, constraint)
                ids, chat_stops = prompt.render(t, max_chars=self.n_ctx_slot * self.max_piece)
                stops += [s for s in chat_stops if s not in stops]
                if req.images:
                    images = self._images(req, chat_text(prompt, t))
                    ids = images.ids
                elif t.memory.get("recurrent_bytes", 0):
                    turns = prompt.turn_starts(t, ids)
            elif req.multimodal:                   # /completion's multimodal_data
                images = self._images(req, req.prompt)
                ids = images.ids
            elif isinstance(req.prompt, str):
                ids = t.tokenize(req.prompt, add_special=True, parse_special=True)
            else:
                ids = []
                for x in req.prompt:               # llama-server's mixed prompt: texts and ids
                    ids += t.tokenize(x, add_special=not ids, parse_special=True) if isinstance(x, str) else [x]
                bad = [i for i in ids if not 0 <= i < t.n_vocab]
                if bad:
                    raise APIError(f"'prompt' has token id {bad[0]}, outside the vocabulary [0, {t.n_vocab})",
                                   param="prompt")
            grammar = constraint.make(t) if constraint is not None else None
        except GrammarError as e:
            raise APIError(str(e), param={"grammar": "grammar", "tools": "tools"}.get(constraint.kind,
                                                                                       "response_format")) from None
        except PyllamaspecError as e:      # a template refusing the conversation, ...
            raise APIError(str(e), param="messages" if req.kind == "chat" else "prompt") from None
        return ids, stops, constraint, grammar, turns, images

    def _images(self, req: GenRequest, text: str) -> "ImagePrompt":
        """A chat's images or /completion's multimodal_data encoded with the server's projector
        (--mmproj), its text tokenized around them at the server's media marker, as llama-server's
        mtmd does; each problem is the request's 400, in llama-server's words."""
        chat = req.kind == "chat"
        param = "messages" if chat else "prompt"
        if self.projector is None:         # llama-server's words for a chat, then for a prompt object
            raise APIError(NO_IMAGES_CHAT if chat else NO_IMAGES_PROMPT, param=param)
        marker = vision_prompt.server_marker()
        try:
            vision_prompt.check_markers(text, len(req.images), marker)      # before the images' work
        except InvalidArgumentError as e:
            raise APIError(f"Failed to tokenize prompt: {e}", param=param) from None
        rows, draft_rows = [], []
        for k, src in enumerate(req.images):
            try:
                rows.append(self.projector.encode(src))
                if self.draft_projector is not None:        # the draft's own rows of the same image
                    draft_rows.append(self.draft_projector.encode(src))
            except InvalidArgumentError as e:
                where = f"image {k + 1}" if chat else f"multimodal_data[{k}]"
                raise APIError(f"Failed to load image or audio file ({where}): {e}", param=param) from None
        p = vision_prompt.tokenize(self.target, text, rows, self.projector.info.type, True, marker)
        if self.draft_projector is not None:
            try:
                vision_prompt.attach_draft_rows(p, draft_rows, self.drafter)
            except InvalidArgumentError as e:              # the two projectors size this image apart
                raise APIError(f"Failed to tokenize prompt: {e}", param=param) from None
        return p

    def chat_prompt(self, req: GenRequest, constraint: GrammarSpec | None) -> "tuple[ChatPrompt, GrammarSpec]":
        """A chat's prompt and what constrains and reads its answer, with the server's and the
        request's template variables and reasoning settings: the template decides the format
        (its tool syntax or the generic one, its thinking)."""
        kw = {**self.defaults.template_kwargs, **req.template_kwargs}
        if constraint is not None and constraint.tools:
            kw["tools"] = list(constraint.tools.tools)
        prompt = ChatPrompt.make(req.messages, self.defaults.chat_template, **kw)
        reasoning = replace(self.defaults.reasoning, **req.reasoning)
        return chat_spec(constraint, reasoning).bind(prompt, self.target)

    def chat_text(self, req: GenRequest) -> str:
        """The prompt a chat request renders to (/apply-template)."""
        prompt, _ = self.chat_prompt(req, req.constraint or self.defaults.constraint)
        return prompt.text(self.target, max_chars=self.n_ctx_slot * self.max_piece)

    def _fits(self, n_chars: int, param: str) -> None:
        """Refuses a text of n_chars characters (at least as many bytes) that is at least
        n_ctx_slot tokens long whatever the tokenizer does with it."""
        floor = n_chars // self.max_piece
        if floor >= self.n_ctx_slot:
            raise APIError(f"the prompt has {n_chars} characters, at least {floor} tokens: more than the context "
                           f"of {self.n_ctx_slot} holds (the server's -c)", param=param, code="context_length_exceeded")

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

    # -- running (the worker thread) -----------------------------------------------------------
    def submit(self, job: Job) -> None:
        job.outbox = self._outbox
        self._jobs.put(job)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def run_exclusive(self, fn, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """fn() on the worker thread once no slot is busy (it may use the models' caches: an
        embedding), its result or exception in the future."""
        fut = loop.create_future()
        self._jobs.put(_Call(fn, fut, loop))
        return fut

    def _run_forever(self) -> None:
        while True:
            self._outbox.flush()              # before _take_jobs may block
            if not self._take_jobs():
                self._outbox.flush()
                return
            while self._calls and not self._running:
                self._calls.popleft().run()
            self._admit()
            if not self._running:
                continue
            try:
                self.sched.step(self._emit)
            except BaseException as e:    # noqa: BLE001 - the round's requests fail, the worker goes on
                log.exception("generation failed")
                for job in [j for j in self._running if j.gen is not None and j.gen.done]:
                    self._finish(job, error=e)

    def _take_jobs(self) -> bool:
        """Moves new requests to the waiting line, blocking while nothing runs; False: closing."""
        block = not self._running and not self._waiting and not self._calls
        while True:
            try:
                job = self._jobs.get(block=block, timeout=None if block else 0)
            except queue.Empty:
                return True
            if job is None:
                for j in self._running + list(self._waiting):
                    j.stop()
                return False
            if isinstance(job, _Call):
                self._calls.append(job)
            else:
                self._waiting.append(job)
            block = False

    def _admit(self) -> None:
        """Starts waiting requests in arrival order while a slot (and the cells) are free. Whatever
        fails while a request is admitted is that request's error: the worker goes on."""
        while self._waiting and not self._calls:      # calls first: they wait for idle slots
            job = self._waiting[0]
            try:
                if not self._admit_one(job):
                    return                         # no room yet: it waits at the head of the line
            except BaseException as e:    # noqa: BLE001 - its prompt failed: this request only
                log.exception("generation failed")
                if self._waiting and self._waiting[0] is job:
                    self._waiting.popleft()
                self._finish(job, error=e)

    def _admit_one(self, job: Job) -> bool:
        """Starts job (True), drops it if cancelled (True), or leaves it waiting for room (False)."""
        if job.cancel.is_set():
            self._waiting.popleft()
            self.counters.dropped += 1
            job.emit("error", APIError("the request was cancelled", 499))
            return True
        g = Generation(job.ids, self.target, self.drafter, sampling=job.sampling, draft=job.draft,
                       max_tokens=job.max_tokens, stop=job.stops, logprobs=job.req.logprobs,
                       per_token=job.req.logprobs is not None or job.req.return_tokens, cancel=job.cancel,
                       cache_prompt=job.req.cache_prompt, constraint=job.constraint, grammar=job.grammar,
                       checkpoints=job.checkpoints, images=job.images)
        taken = {j.slot for j in self._running}
        if not self.sched.has_room(g) or job.req.id_slot in taken:
            return False                           # (a request for a busy slot waits for it)
        self._waiting.popleft()
        job.gen = g
        job.slot = job.req.id_slot if job.req.id_slot >= 0 else \
            next(i for i in range(self.n_slots + len(taken) + 1) if i not in taken)
        self.counters.tasks += 1
        job.task = self.counters.tasks
        job.info = self._task_info(job)
        self.last[job.slot] = job.info
        self._running.append(job)
        self.sched.admit(g, self._emit)
        if g.dec is not None and g.dec.tseq is not None:
            self.hold(job.slot, g.dec.tseq)           # what the slot holds (/slots save)
        return True

    def hold(self, slot: int, seq) -> None:
        """slot now holds seq, and no other slot does (the pool may hand a sequence that one slot
        left to another: a save of the first must not write the second's conversation)."""
        for k in [k for k, s in self.slot_seq.items() if s is seq]:
            del self.slot_seq[k]
        self.slot_seq[slot] = seq

    def _job_of(self, g: Generation) -> Job:
        return next(j for j in self._running if j.gen is g)

    def _emit(self, g: Generation, pieces: list[Piece]) -> None:
        job = self._job_of(g)
        for p in pieces:
            if job.n_at_cancel is None and job.cancel.is_set():
                job.n_at_cancel = job.n_out
            job.n_out += p.token >= 0
            job.info["generated"] += p.text
            job.info["n_decoded"], job.info["n_remain"] = job.n_out, job.max_tokens - job.n_out
            if job.req.stream:        # a whole answer's handler waits for "done" only: no wake-up per round
                job.emit("piece", p)
        if g.done:
            self._finish(job, error=g.error)

    def _finish(self, job: Job, error: BaseException | None = None) -> None:
        if job in self._running:
            self._running.remove(job)
        if error is not None:
            self.counters.errors += 1
            job.emit("error", error)
            return
        result = job.gen.result
        result["id_slot"] = job.slot
        self.counters.requests += 1
        self.counters.tokens += len(result.get("tokens", ()))
        if result.get("stats") is not None:
            job.info["n_cached"] = result["stats"].n_reused
            self.counters.add(result["stats"], len(job.ids), len(result.get("tokens", ())))
            log.info("%s", task_line(job.slot, job.task, result, job.constraint))
        if result.get("finish_reason") == "cancelled":
            self.counters.cancelled += 1
            self.counters.last_cancel = {
                "stop_ms": 1e3 * (time.perf_counter() - job.cancelled_at) if job.cancelled_at else None,
                "tokens_after_cancel": job.n_out - job.n_at_cancel if job.n_at_cancel is not None else 0,
                "tokens": len(result.get("tokens", ())), "max_tokens": job.max_tokens}
        job.emit("done", result)

    def _task_info(self, job: Job) -> dict:
        """What /slots shows of a request (while it runs, and after it as its slot's last)."""
        from .native import sampling_params
        return {"id": job.task, "n_prompt": len(job.ids), "n_cached": 0, "n_decoded": 0,
                "n_remain": job.max_tokens, "generated": "",
                "prompt": self.target.detokenize(job.text_ids, render_special=True),
                "params": sampling_params(job.sampling, job.draft if self.has_drafter else None, job.max_tokens,
                                          job.req.stream, job.req.logprobs or 0)}

    def slots(self, text: bool = False) -> list[dict]:
        """llama-server's /slots: one object per slot, with its current (else last) request
        (text: its prompt and answer too, the operator's view)."""
        from .native import describe_slot
        busy = {j.slot for j in list(self._running)}
        return [describe_slot(i, self.n_ctx_slot, self.has_drafter, i in busy, self.last.get(i), text)
                for i in range(self.n_slots)]

    def health(self, detail: bool = False) -> dict:
        """llama-server's /health: {"status": "ok"}; detail (the operator's view): the counters."""
        if not detail:
            return {"status": "ok"}
        c = self.counters
        n_run = len(self._running)
        cache = self.target.prompt_cache
        return {"status": "ok", "busy": self.busy, "queued": self.queued, "requests": c.requests,
                "cancelled": c.cancelled, "dropped": c.dropped, "errors": c.errors, "tokens": c.tokens,
                "last_cancel": c.last_cancel, "slots_idle": self.n_slots - n_run, "slots_processing": n_run,
                "prompt_cache": cache.describe() if cache is not None else None}


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
