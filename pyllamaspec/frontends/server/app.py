"""The routes (Starlette): OpenAI's /v1/chat/completions, /v1/completions, /v1/models, and
llama-server's /health; its other routes are in native_routes.py. Streaming answers are server-sent events in OpenAI's chunk format,
ending with ``data: [DONE]``."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hmac
import json
import logging
import time
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .http import MAX_HEAD, HeadCheck
from .native_routes import NativeRoutes, Options
from .openai_format import APIError, GenRequest, Shaper, as_api_error as _as_api_error, parse_chat, parse_completion
from .worker import Job, Worker

log = logging.getLogger("pyllamaspec.server")
PUBLIC = {"/health", "/v1/health", "/"}          # the chat page asks for the key itself


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


class ApiKey:
    """ASGI middleware: every route but /health needs ``Authorization: Bearer KEY`` or
    ``X-Api-Key: KEY``, as llama-server (401 else). The header's bytes are compared with the
    key's UTF-8 bytes (what clients send for a key that is not ASCII; decoding the header as
    Latin-1 first would never match it)."""

    def __init__(self, app, key: str | None):
        self.app, self.key = app, key

    async def __call__(self, scope, receive, send):
        if self.key is None or scope["type"] != "http" or scope["path"] in PUBLIC:
            return await self.app(scope, receive, send)
        given = presented_key(scope)
        if not given or not hmac.compare_digest(given, self.key.encode("utf-8")):
            msg = "missing API key (Authorization: Bearer ... or X-Api-Key)" if not given else "invalid API key"
            resp = error_response(APIError(msg, 401, type="authentication_error", code="invalid_api_key"))
            return await resp(scope, receive, send)
        return await self.app(scope, receive, send)


def presented_key(scope) -> bytes:
    """The key a request carries: Authorization: Bearer KEY, else X-Api-Key: KEY."""
    headers = dict(scope["headers"])
    auth = headers.get(b"authorization", b"")
    return auth[7:].strip() if auth[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"").strip()


class BodyLimit:
    """ASGI middleware: a request body over max_bytes is refused with 413 before it is read (its
    Content-Length says so) or as soon as it passes the limit (chunked), so that a huge prompt
    never sits in memory."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    def _error(self) -> APIError:
        return APIError(f"the request body is larger than {self.max_bytes} bytes (the server's --max-body-size)", 413,
                        code="request_too_large")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.max_bytes:
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await error_response(self._error())(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise HTTPException(413, self._error().message)
            return msg
        return await self.app(scope, counted, send)


async def _body(request: Request):
    raw = await request.body()
    request.state.large = len(raw) > 1 << 20
    try:
        # a body of megabytes takes a while to parse: not on the event loop (/health answers meanwhile)
        return json.loads(raw) if len(raw) < 1 << 16 else await run_in_threadpool(json.loads, raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise APIError("the request body is nested too deeply") from None
    except ValueError as e:           # an integer of more digits than Python converts
        raise APIError(f"the request body cannot be read: {e}") from None
    finally:
        del raw


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


async def _until_disconnect(request: Request) -> None:
    """Returns when the client goes away (the body has been read: only http.disconnect is left)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


class Routes:
    def __init__(self, worker: Worker, alias: str, native: NativeRoutes | None = None, key: str | None = None,
                 operator: bool = False, media_path: str | None = None):
        self.worker, self.alias, self.native, self.key, self.operator = worker, alias, native, key, operator
        self.media_path = media_path          # --media-path: file:// image URLs under it

    async def health(self, request: Request) -> Response:
        """{"status": "ok"} as llama-server's; the counters for the operator (--slots-debug, or the
        API key where one is set: /health itself needs none)."""
        given = presented_key(request.scope) if self.key is not None else b""
        keyed = bool(given) and hmac.compare_digest(given, self.key.encode("utf-8"))
        return JSONResponse(self.worker.health(detail=self.operator or keyed))

    async def models(self, request: Request) -> Response:
        t = self.worker.target
        meta = {"n_ctx": t.n_ctx, "n_vocab": t.n_vocab, "n_params": t.info.n_params, "size": t.info.size_bytes,
                "arch": t.info.arch, "drafter": _drafter_name(self.worker.drafter)}
        # llama-server's "models" list beside OpenAI's "data": clients read an image model's
        # "multimodal" capability there
        caps = ["completion", "multimodal"] if self.worker.projector is not None else ["completion"]
        return JSONResponse({"models": [{"name": self.alias, "model": self.alias, "type": "model",
                                         "capabilities": caps, "details": {"format": "gguf"}}],
                             "object": "list", "data": [
            {"id": self.alias, "object": "model", "created": int(time.time()), "owned_by": "pyllamaspec",
             "meta": meta}]})

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, functools.partial(parse_chat, media_path=self.media_path))

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, parse_completion)

    async def _generate(self, request: Request, parse) -> Response:
        try:
            # parsing converts JSON schemas to grammars: work a client sizes, so not on the event loop
            req: GenRequest = await run_in_threadpool(parse, await _body(request), self.worker.target.n_ctx)
            job = await run_in_threadpool(self.worker.prepare, req, asyncio.get_running_loop())
        except APIError as e:
            if getattr(request.state, "large", False):
                # the refused body (megabytes of objects) is held by the error's traceback, a
                # cycle the collector would reach only much later: reclaimed now
                e.__traceback__ = None
                await run_in_threadpool(gc.collect)
            return error_response(e)
        self.worker.submit(job)
        if req.native:                         # llama-server's /completion shapes
            if req.stream:
                return self.native.stream(job)
            return await self._whole(request, job, lambda r, lps: self.native.whole(job, r))
        prompt_chars = len(req.prompt) if isinstance(req.prompt, str) else 0
        reader = job.constraint.reader() if req.kind == "chat" and job.constraint is not None else None
        shaper = Shaper(req, self.alias, self.worker.token_bytes, self.worker.has_drafter, prompt_chars=prompt_chars,
                        output=reader)
        if req.stream:
            return StreamingResponse(self._chunks(job, shaper), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await self._whole(request, job, lambda r, lps: shaper.whole(
            r["text"], r["finish_reason"], lps, r["stats"], len(r["prompt_tokens"]), len(r["tokens"])))

    async def _whole(self, request: Request, job: Job, shape) -> Response:
        collect = asyncio.ensure_future(_collect(job))
        gone = asyncio.ensure_future(_until_disconnect(request))
        try:
            await asyncio.wait([collect, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not collect.done():                 # the client went away: stop its generation
            job.stop()
            await collect
            return Response(status_code=499)
        kind, value, lps = collect.result()
        if kind == "error":
            return error_response(_as_api_error(value))
        return JSONResponse(shape(value, lps))

    async def _chunks(self, job: Job, shaper: Shaper) -> AsyncIterator[bytes]:
        """The stream; if the client goes away Starlette cancels it, and `finally` stops the job."""
        chat = job.req.kind == "chat"
        offset = 0
        pending: list = []                    # logprobs of tokens whose text is still held back
        try:
            if chat:
                yield _sse(shaper.chunk(role=True))
            async for kind, value in job.stream():
                if kind == "piece":
                    if value.logprobs is not None:
                        pending.append(value.logprobs)
                    for delta in (shaper.deltas(value.text) if chat else [{"text": value.text}] if value.text else []):
                        yield _sse(shaper.chunk(delta.pop("text", None), pending, offset=offset, delta=delta))
                        offset += sum(len(shaper.text_of(t.token).decode("utf-8", "replace")) for t in pending)
                        pending = []
                elif kind == "error":
                    yield _sse(_as_api_error(value).body())
                else:
                    r = value
                    for delta in (shaper.deltas("", final=True) if chat else []):
                        yield _sse(shaper.chunk(None, pending, delta=delta))
                        pending = []
                    if pending:
                        yield _sse(shaper.chunk("", pending, offset=offset))
                    yield _sse(shaper.final_chunk(r["finish_reason"], r["stats"]))
                    if job.req.include_usage:
                        yield _sse(shaper.usage_chunk(r["stats"], len(r["prompt_tokens"]), len(r["tokens"])))
            yield b"data: [DONE]\n\n"
        finally:
            job.stop()


async def _collect(job: Job):
    """(kind, value, logprobs) of a whole answer."""
    async for kind, value in job.stream():
        if kind != "piece":
            lps = value.get("logprobs") if kind == "done" else None
            return kind, value, lps
    raise RuntimeError("the stream ended without a result")


def _drafter_name(d) -> str | None:
    if d is None or isinstance(d, str):
        return d
    return d.path


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return error_response(APIError(exc.detail or "error", exc.status_code,
                                   type="not_found_error" if exc.status_code == 404 else "invalid_request_error",
                                   code="request_too_large" if exc.status_code == 413 else None))


async def _server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error")
    return error_response(_as_api_error(exc))


MAX_BODY = 16 << 20       # bytes; --max-body-size


def create_app(worker: Worker, alias: str, api_key: str | None = None, options: Options | None = None,
               model_path: str = "", max_body: int = MAX_BODY, max_head: int = MAX_HEAD) -> Starlette:
    """The routes of llama-server: OpenAI's (here) and its own (native_routes.py, /slots and
    /props among them); `options` are its switches (--metrics, --embeddings, --pooling, ...)."""
    opts = options or Options()
    opts.keyed = api_key is not None
    r = Routes(worker, alias, key=api_key, operator=opts.operator, media_path=opts.media_path)
    r.native = NativeRoutes(worker, alias, model_path, opts, r._generate)
    routes = [
        Route("/health", r.health, methods=["GET"]), Route("/v1/health", r.health, methods=["GET"]),
        Route("/v1/models", r.models, methods=["GET"]), Route("/models", r.models, methods=["GET"]),
        Route("/v1/chat/completions", r.chat, methods=["POST"]), Route("/chat/completions", r.chat, methods=["POST"]),
        Route("/v1/completions", r.completions, methods=["POST"]),
        *r.native.routes(),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await run_in_threadpool(worker.close)

    return Starlette(routes=routes, middleware=[Middleware(HeadCheck, max_head=max_head),
                                                Middleware(BodyLimit, max_bytes=max_body), Middleware(ApiKey, key=api_key)],
                     exception_handlers={HTTPException: _http_error, Exception: _server_error}, lifespan=lifespan)


__all__ = ["create_app"]
