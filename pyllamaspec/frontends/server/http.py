"""HTTP/1.1 as a public server must speak it (issue 48): a connection gets head_timeout seconds to
send a whole request head, from when it opens and again after each answer (a connection that
never sends one, or trickles its headers a byte at a time, is closed: uvicorn times out only the
idle keep-alive wait, and any byte cancels that); a body that stops arriving, or an answer the
client stops reading, is cut after io_timeout (llama-server's -to); a head of more than max_head
bytes is refused with 431 (uvicorn's h11 bounds only a head still incomplete: past that, a 431
too); a request with
both Content-Length and Transfer-Encoding is refused with 400 (RFC 9112 6.3: the framing is
ambiguous, the root of request smuggling)."""
from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT = 10.0        # seconds (llama-server closes a silent connection after about as long)
MAX_HEAD = 16 << 10        # bytes of request line and headers (llama-server's limit is 8 KiB)


REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with two timers: a whole request head within head_timeout of the
    connection opening or of its last answer (a part of a head then gets a 408, an idle
    connection is just closed); and, while the client owes a body or has to read an answer, no
    stall longer than io_timeout (-to/--timeout, llama-server's read/write timeout). The class
    attributes are set by guarded_protocol."""
    head_timeout = HEAD_TIMEOUT
    io_timeout = 600.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer = self._io_timer = None
        self._head_bytes = 0
        self._too_large = False
        self._await_head()
        next_event = self.conn.next_event

        def next_event_noting_size():             # h11 refuses a head still incomplete past its bound
            try:
                return next_event()
            except h11.RemoteProtocolError as e:
                self._too_large = e.error_status_hint == 431
                raise
        self.conn.next_event = next_event_noting_size

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a head h11 refused: a 431, as HeadCheck gives a whole one, where the
        head grew too large before it was complete (how much of it one read brings varies)."""
        if not self._too_large:
            return super().send_400_response(msg)
        body = json.dumps({"error": {"message": "the request's headers are too large", "type": "invalid_request_error",
                                     "param": None, "code": None}}).encode()
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body)
        self.transport.close()

    def _await_head(self) -> None:
        self._cancel("_head_timer")
        self._head_cycle, self._head_bytes = self.cycle, 0
        if self.head_timeout > 0:
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.cycle is self._head_cycle and not self.transport.is_closing():
            if self._head_bytes:              # part of a head: say why (an idle connection just closes)
                self.transport.write(REQUEST_TIMEOUT)
            self.transport.close()

    def _cancel(self, name: str) -> None:
        t = getattr(self, name, None)
        if t is not None:
            t.cancel()
            setattr(self, name, None)

    def data_received(self, data: bytes) -> None:
        if self._head_timer is not None:
            self._head_bytes += len(data)
        super().data_received(data)
        if self.cycle is not self._head_cycle:        # a whole head came: the request runs
            self._cancel("_head_timer")
        self._io_stalled_after(self._body_pending())

    def _body_pending(self) -> bool:
        c = self.cycle
        return c is not None and c.more_body and not c.disconnected and not self.flow.read_paused

    def _io_stalled_after(self, waiting: bool) -> None:
        """(Re)arms the read/write timer while the client owes data or has ours to read."""
        self._cancel("_io_timer")
        if waiting and self.io_timeout > 0:
            self._io_timer = self.loop.call_later(self.io_timeout, self._io_late)

    def _io_late(self) -> None:
        self._io_timer = None
        if not self.transport.is_closing():
            self.transport.abort()            # a write buffer never read: dropped, not flushed

    def pause_writing(self) -> None:          # the client stopped reading the answer
        super().pause_writing()
        self._io_stalled_after(True)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._io_stalled_after(self._body_pending())

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._cancel("_io_timer")
        if not self.transport.is_closing():
            self._await_head()                # the next request's head, on a kept-alive connection

    def connection_lost(self, exc) -> None:
        self._cancel("_head_timer")
        self._cancel("_io_timer")
        super().connection_lost(exc)


def guarded_protocol(head_timeout: float = HEAD_TIMEOUT, io_timeout: float = 600.0) -> type:
    """uvicorn's `http=`: GuardedH11 with these timeouts (0: none)."""
    return type("GuardedH11", (GuardedH11,), {"head_timeout": head_timeout, "io_timeout": io_timeout})


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


__all__ = ["GuardedH11", "guarded_protocol", "HeadCheck", "HEAD_TIMEOUT", "MAX_HEAD"]
