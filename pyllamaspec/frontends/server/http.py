"""HTTP/1.1 as a public server must speak it (issue 48): a connection gets head_timeout seconds to
send a whole request head, from when it opens and again after each answer (a connection that
never sends one, or trickles its headers a byte at a time, is closed: uvicorn times out only the
idle keep-alive wait, and any byte cancels that); a head of more than max_head bytes is refused
with 431 (uvicorn's h11 bounds only a head still incomplete); a request with both
Content-Length and Transfer-Encoding is refused with 400 (RFC 9112 6.3: the framing is
ambiguous, the root of request smuggling)."""
from __future__ import annotations

import json

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT = 10.0        # seconds (llama-server closes a silent connection after about as long)
MAX_HEAD = 16 << 10        # bytes of request line and headers (llama-server's limit is 8 KiB)


def guarded_protocol(head_timeout: float = HEAD_TIMEOUT) -> type:
    """uvicorn's h11 protocol with the head deadline (uvicorn.run(http=...))."""

    class Guarded(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_task = None
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            if head_timeout > 0:
                self._head_task = self.loop.call_later(head_timeout, self._head_overdue)

        def _disarm(self) -> None:
            task = getattr(self, "_head_task", None)
            if task is not None:
                task.cancel()
                self._head_task = None

        def _head_overdue(self) -> None:
            self._head_task = None
            waiting = self.cycle is None or self.cycle.response_complete
            if waiting and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:        # a whole head came: the request runs
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()                     # the next request's head, on a kept-alive connection

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return Guarded


class HeadCheck:
    """ASGI middleware: a head over max_head bytes is a 431, Content-Length with
    Transfer-Encoding a 400, before the application sees the request."""

    def __init__(self, app, max_head: int = MAX_HEAD):
        self.app, self.max_head = app, max_head

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = scope["headers"]
        size = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + \
            sum(len(k) + len(v) + 4 for k, v in headers)
        if self.max_head and size > self.max_head:
            return await _refuse(send, 431, f"the request's headers are larger than {self.max_head} bytes")
        names = {k for k, _ in headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            return await _refuse(send, 400, "a request may not carry both Content-Length and Transfer-Encoding")
        return await self.app(scope, receive, send)


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": None}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["guarded_protocol", "HeadCheck", "HEAD_TIMEOUT", "MAX_HEAD"]
