"""llama-server's own routes, beside the OpenAI ones (app.py): /completion (and /completions),
/tokenize, /detokenize, /props, /slots, /metrics (with --metrics), /embedding(s) and
/v1/embeddings (with --embeddings), and the chat page at /. Generation goes through the same
worker and loop as every other route (worker.py); shapes are in native.py."""
from __future__ import annotations

import asyncio
import base64
import html
import json
import time
from dataclasses import dataclass
from typing import AsyncIterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ...errors import PyllamaspecError
from ...vision.prompt import server_marker
from . import native, slot_files
from .openai_format import APIError, as_api_error, parse_chat
from .worker import Job, Worker

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Options:
    """llama-server's switches for these routes."""
    metrics: bool = False                 # --metrics
    slots: bool = True                    # --slots / --no-slots
    embeddings: bool = False              # --embeddings
    pooling: str = "none"                 # --pooling (none: only /embedding, per token)
    normalize: int = 2                    # --embd-normalize
    ui: bool = True                       # the chat page at / (--no-webui turns it off)
    operator: bool = False                # --slots-debug: /slots and /health show prompts, answers, counters
    keyed: bool = False                   # an API key is set: whoever passed it is the operator
    slot_save_path: str | None = None     # --slot-save-path: /slots/{id}?action=save|restore|erase
    media_path: str | None = None         # --media-path: the directory file:// image URLs name files in


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def _not_supported(what: str, flag: str) -> JSONResponse:
    return _error(APIError(f"This server does not support {what}. Start it with `{flag}`", 501,
                           type="not_supported_error"))


async def _json(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise APIError("the request body is nested too deeply") from None
    except ValueError as e:           # an integer of more digits than Python converts
        raise APIError(f"the request body cannot be read: {e}") from None
    if not isinstance(body, dict):
        raise APIError("the request body must be a JSON object")
    return body


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


class NativeRoutes:
    def __init__(self, worker: Worker, alias: str, model_path: str, opts: Options, generate):
        self.worker, self.alias, self.model_path, self.opts = worker, alias, model_path, opts
        self.generate = generate          # app.Routes._generate: the shared request path
        self.started = time.time()

    # -- /completion ------------------------------------------------------------------------
    async def completion(self, request: Request) -> Response:
        return await self.generate(request, native.parse_native_completion)

    def settings(self, job: Job) -> dict:
        return native.sampling_params(job.sampling, job.draft if self.worker.has_drafter else None, job.max_tokens,
                                      job.req.stream, job.req.logprobs or 0)

    def whole(self, job: Job, result: dict) -> dict:
        prompt = self.worker.target.detokenize(job.text_ids, render_special=True)
        return native.whole(job.req, self.alias, result, self.settings(job), self.worker.token_bytes,
                            self.worker.has_drafter, prompt)

    def stream(self, job: Job) -> StreamingResponse:
        return StreamingResponse(self._chunks(job), media_type="text/event-stream", headers=SSE_HEADERS)

    async def _chunks(self, job: Job) -> AsyncIterator[bytes]:
        """llama-server's stream: a chunk per piece of text, then the final object (content ""),
        no [DONE]."""
        tokens: list[int] = []
        lps: list = []
        n = 0
        try:
            async for kind, value in job.stream():
                if kind == "piece":
                    if value.token >= 0:
                        tokens.append(value.token)
                        n += 1
                    if value.logprobs is not None:
                        lps.append(value.logprobs)
                    if value.text:
                        c = native.chunk(job.req, value.text, tokens, lps, n, len(job.ids), self.worker.token_bytes)
                        yield _sse({**c, "id_slot": max(job.slot, 0)})
                        tokens, lps = [], []
                elif kind == "error":
                    yield _sse(as_api_error(value).body())
                else:
                    final = self.whole(job, value)
                    final.update(content="", tokens=[])
                    final.pop("completion_probabilities", None)
                    yield _sse(final)
        finally:
            job.stop()

    # -- tokenizer ---------------------------------------------------------------------------
    async def tokenize(self, request: Request) -> Response:
        try:
            body = await _json(request)
            content = body.get("content", "")
            add_special, parse_special = body.get("add_special", False), body.get("parse_special", True)
            with_pieces = body.get("with_pieces", False)
            for name, v in (("add_special", add_special), ("parse_special", parse_special),
                            ("with_pieces", with_pieces)):
                if not isinstance(v, bool):
                    raise APIError(f"'{name}' must be a boolean", param=name)
            ids = await run_in_threadpool(self._tokenize_mixed, content, add_special, parse_special)
        except APIError as e:
            return _error(e)
        if not with_pieces:
            return JSONResponse({"tokens": ids})
        out = []
        for t in ids:
            b = self.worker.target.token_to_piece(t, render_special=True)
            try:
                piece = b.decode("utf-8")
            except UnicodeDecodeError:         # part of a character: its bytes, as llama-server
                piece = list(b)
            out.append({"id": t, "piece": piece})
        return JSONResponse({"tokens": out})

    async def apply_template(self, request: Request) -> Response:
        """llama-server's /apply-template: the prompt a chat request renders to (its tools,
        chat_template_kwargs, reasoning_effort), nothing generated."""
        try:
            body = await _json(request)
            req = await run_in_threadpool(parse_chat, body, self.worker.target.n_ctx, self.opts.media_path)
            text = await run_in_threadpool(self.worker.chat_text, req)
        except APIError as e:
            return _error(e)
        except PyllamaspecError as e:          # a template refusing the conversation, ...
            return _error(APIError(str(e), param="messages"))
        return JSONResponse({"prompt": text})

    def _tokenize_mixed(self, content, add_special: bool, parse_special: bool) -> list[int]:
        t = self.worker.target
        items = content if isinstance(content, list) else [content]
        ids: list[int] = []
        for i, x in enumerate(items):
            if isinstance(x, str):
                ids += t.tokenize(x, add_special=add_special and i == 0, parse_special=parse_special)
            elif isinstance(x, int) and not isinstance(x, bool):
                ids.append(x)
            else:
                raise APIError("'content' must be a string or an array of strings and token ids", param="content")
        return ids

    async def detokenize(self, request: Request) -> Response:
        try:
            body = await _json(request)
            tokens = body.get("tokens", [])
            n_vocab = self.worker.target.n_vocab
            if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
                raise APIError("'tokens' must be an array of token ids", param="tokens")
            bad = [t for t in tokens if not 0 <= t < n_vocab]
            if bad:
                raise APIError(f"token id {bad[0]} is outside the vocabulary [0, {n_vocab})", param="tokens")
        except APIError as e:
            return _error(e)
        t = self.worker.target                  # as llama-server: pieces joined, special tokens as text
        text = b"".join(t.token_to_piece(i, render_special=True) for i in tokens).decode("utf-8", "replace")
        return JSONResponse({"content": text})

    # -- the server ---------------------------------------------------------------------------
    async def props(self, request: Request) -> Response:
        t, d = self.worker.target, self.worker.defaults
        template = t.meta("tokenizer.chat_template") or ""

        def piece(tok) -> str:
            return t.token_to_piece(tok, render_special=True).decode("utf-8", "replace") if tok is not None else ""
        return JSONResponse({
            "default_generation_settings": {
                "params": native.sampling_params(d.sampling, d.draft if self.worker.has_drafter else None,
                                                 d.max_tokens),
                "n_ctx": self.worker.n_ctx_slot},
            "total_slots": self.worker.n_slots, "model_alias": self.alias, "model_path": self.model_path,
            "model_ftype": t.info.file_type_name,
            "modalities": {"vision": self.worker.projector is not None, "video": False, "audio": False},
            "media_marker": server_marker(),   # what /completion's prompt_string holds per image
            "endpoint_slots": self.opts.slots, "endpoint_props": False, "endpoint_metrics": self.opts.metrics,
            "ui": self.opts.ui, "chat_template": template, "bos_token": piece(t.bos_token),
            "eos_token": piece(t.eos_token), "build_info": f"pyllamaspec | {_system_info()}",
            "is_sleeping": False, "speculative": {"drafter": _drafter_name(self.worker.drafter),
                                                  "n_max": d.draft.n_draft, "adaptive": d.draft.adaptive},
            "numerics": native.numerics(t), "chat_format": native.chat_format(t, d)})

    async def post_props(self, request: Request) -> Response:
        return _not_supported("changing global properties", "--props")

    async def slots(self, request: Request) -> Response:
        if not self.opts.slots:
            return _not_supported("slots endpoint", "--slots")
        w = self.worker
        if request.query_params.get("fail_on_no_slot") and w.n_busy >= w.n_slots:
            return _error(APIError("no slot available", 503, type="unavailable_error"))
        # a slot's text is its client's (a password typed into a chat): shown to the operator only;
        # with an API key set, a request that got here carried it
        return JSONResponse(w.slots(text=self.opts.operator or self.opts.keyed))

    async def post_slot(self, request: Request) -> Response:
        """llama-server's slot actions (slot_files.py): save, restore, erase."""
        d = self.opts.slot_save_path
        if d is None:
            return _not_supported("slots action", "--slot-save-path")
        action = request.query_params.get("action")
        try:
            slot = int(request.path_params["id_slot"])
            if not 0 <= slot < self.worker.n_slots:
                raise APIError(f"invalid slot id {slot}: the server has {self.worker.n_slots} slots", param="id_slot")
            body = await _json(request) if action in ("save", "restore") else {}
            if action == "save":
                fn = lambda: slot_files.save(self.worker, d, slot, body.get("filename"))      # noqa: E731
            elif action == "restore":
                fn = lambda: slot_files.restore(self.worker, d, slot, body.get("filename"))   # noqa: E731
            elif action == "erase":
                fn = lambda: slot_files.erase(self.worker, slot)                              # noqa: E731
            else:
                raise APIError(f"invalid action {action!r}: save, restore or erase", param="action")
            out = await self.worker.run_exclusive(fn, asyncio.get_running_loop())
        except ValueError:
            return _error(APIError("the slot id must be an integer", param="id_slot"))
        except APIError as e:
            return _error(e)
        return JSONResponse(out)

    async def metrics(self, request: Request) -> Response:
        if not self.opts.metrics:
            return _not_supported("metrics endpoint", "--metrics")
        c, w = self.worker.counters, self.worker
        values = {"prompt_tokens_total": c.prompt_tokens, "prompt_tokens_cached_total": c.prompt_cached,
                  "prompt_seconds_total": c.prompt_seconds, "tokens_predicted_total": c.tokens,
                  "tokens_predicted_seconds_total": c.predicted_seconds, "n_tokens_max": c.n_tokens_max,
                  "spec_decode_num_draft_tokens_total": c.drafted,
                  "spec_decode_num_accepted_tokens_total": c.accepted,
                  "spec_decode_num_drafts_total": c.draft_rounds, "requests_total": c.requests,
                  "requests_cancelled_total": c.cancelled,
                  "prompt_tokens_seconds": c.prompt_tokens / c.prompt_seconds if c.prompt_seconds else 0.0,
                  "predicted_tokens_seconds": c.tokens / c.predicted_seconds if c.predicted_seconds else 0.0,
                  "requests_processing": w.n_busy, "requests_deferred": w.queued}
        cache = w.target.prompt_cache              # --cache-ram: its states, bytes, hits
        if cache is not None:
            values.update(prompt_cache_states=len(cache.entries), prompt_cache_bytes=cache.bytes,
                          prompt_cache_hits_total=cache.hits)
        return PlainTextResponse(native.metrics_text(values), media_type="text/plain; version=0.0.4",
                                 headers={"Process-Start-Time-Unix": str(int(self.started))})

    # -- embeddings ---------------------------------------------------------------------------
    async def embeddings_oai(self, request: Request) -> Response:
        return await self._embeddings(request, oai=True)

    async def embeddings(self, request: Request) -> Response:
        return await self._embeddings(request, oai=False)

    async def _embeddings(self, request: Request, oai: bool) -> Response:
        if not self.opts.embeddings:
            return _not_supported("embeddings", "--embeddings")
        try:
            body = await _json(request)
            inputs, oai = self._embedding_inputs(body, oai)
            b64 = _encoding(body)
            norm = body.get("embd_normalize", self.opts.normalize)
            if not isinstance(norm, int) or isinstance(norm, bool) or norm < -1:
                raise APIError("'embd_normalize' must be an integer >= -1", param="embd_normalize")
            if oai and self.opts.pooling == "none":
                raise APIError("Pooling type 'none' is not OAI compatible. Please use a different pooling type "
                               "(start the server with --pooling mean or --pooling last)")
            ids = await run_in_threadpool(lambda: [self._embedding_ids(x) for x in inputs])
            t = self.worker.target
            rows = await self.worker.run_exclusive(
                lambda: [t.embed(i, self.opts.pooling, norm) for i in ids], asyncio.get_running_loop())
        except APIError as e:
            return _error(e)
        except PyllamaspecError as e:
            return _error(APIError(str(e), 500, type="server_error"))
        if not oai:
            return JSONResponse([{"index": i, "embedding": (r if r.ndim == 2 else r[None]).tolist()}
                                 for i, r in enumerate(rows)])
        n = sum(len(i) for i in ids)
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(r.astype("<f4").tobytes()).decode() if b64 else r.tolist(),
                 **({"encoding_format": "base64"} if b64 else {})} for i, r in enumerate(rows)]
        return JSONResponse({"model": body.get("model") or self.alias, "object": "list",
                             "usage": {"prompt_tokens": n, "total_tokens": n}, "data": data})

    @staticmethod
    def _embedding_inputs(body: dict, oai: bool) -> tuple[list, bool]:
        """input (OpenAI) or content (llama-server's; answered in its own shape): one text or token
        id list, or an array of them."""
        if "input" in body:
            x = body["input"]
        elif "content" in body:
            x, oai = body["content"], False
        else:
            raise APIError('"input" or "content" must be provided', param="input")
        is_ids = isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x)
        items = [x] if isinstance(x, str) or is_ids else x
        if not isinstance(items, list) or not items:
            raise APIError('"input" must not be empty', param="input")
        return items, oai

    def _embedding_ids(self, x) -> list[int]:
        t = self.worker.target
        if isinstance(x, str):
            ids = t.tokenize(x, add_special=True, parse_special=True)
        elif isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in x):
            ids = list(x)
            if any(not 0 <= i < t.n_vocab for i in ids):
                raise APIError(f"a token id is outside the vocabulary [0, {t.n_vocab})", param="input")
        else:
            raise APIError("each input must be a string or an array of token ids", param="input")
        if not ids:
            raise APIError("Input content cannot be empty", param="input")
        if len(ids) > t.n_ctx:
            raise APIError(f"an input has {len(ids)} tokens, more than the context of {t.n_ctx} holds",
                           param="input", code="context_length_exceeded")
        return ids

    # -- the chat page ------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        if not self.opts.ui:
            return _error(APIError("the chat page is off (--no-webui)", 404, type="not_found_error"))
        from .page import PAGE
        return HTMLResponse(PAGE.replace("{{MODEL}}", html.escape(self.alias)))

    def routes(self) -> list[Route]:
        return [
            Route("/completion", self.completion, methods=["POST"]),
            Route("/completions", self.completion, methods=["POST"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/apply-template", self.apply_template, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/props", self.props, methods=["GET"]), Route("/props", self.post_props, methods=["POST"]),
            Route("/slots", self.slots, methods=["GET"]), Route("/slots/{id_slot}", self.post_slot, methods=["POST"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/embedding", self.embeddings, methods=["POST"]),
            Route("/embeddings", self.embeddings, methods=["POST"]),
            Route("/v1/embeddings", self.embeddings_oai, methods=["POST"]),
            Route("/", self.page, methods=["GET"]),
        ]


def _encoding(body: dict) -> bool:
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise APIError("The format to return the embeddings in. Can be either float or base64",
                       param="encoding_format")
    return fmt == "base64"


def _system_info() -> str:
    from ...engine._native import system_info
    return system_info().split("|")[0].strip()


def _drafter_name(d) -> str | None:
    if d is None or isinstance(d, str):
        return d
    return d.path


__all__ = ["NativeRoutes", "Options"]

