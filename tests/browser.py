"""A real headless browser for the tests: Chromium driven over the DevTools protocol, with a
minimal WebSocket client on the standard library (no Selenium, no downloaded drivers).

    with Browser() as b:                  # pytest.skip when no Chromium is installed
        b.open("http://127.0.0.1:8080/")
        b.eval("document.title")
"""
from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser binary: $PYLLAMASPEC_CHROMIUM, else the first of CANDIDATES on PATH."""
    env = os.environ.get("PYLLAMASPEC_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class WebSocket:
    """Text frames over one TCP connection (RFC 6455, client side: masked frames out)."""

    def __init__(self, url: str, timeout: float = 30):
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"no WebSocket upgrade: {head[:80]!r}")

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            out += chunk
        return out

    def send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            if b0 & 0x0F == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")
            if b0 & 0x0F in (0x1, 0x0, 0x2):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        self.sock.close()


class Browser:
    """A headless Chromium with one page, driven by JavaScript evaluated in it."""

    def __init__(self, binary: str | None = None):
        import pytest
        self.binary = binary or find_chromium()
        if not self.binary:
            why = ("no Chromium found (apt-get install chromium, or set PYLLAMASPEC_CHROMIUM): "
                   "the chat page is tested in a real browser")
            if os.environ.get("PYLLAMASPEC_REQUIRE_BROWSER", "") not in ("", "0"):
                pytest.fail(why)                # CI (.ci/run) installs it: missing there is a failure
            pytest.skip(why)
        self.profile = tempfile.mkdtemp(prefix="pyllamaspec-chromium-")
        self.proc = subprocess.Popen([self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                                      "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
                                      f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ws: WebSocket | None = None
        self.next_id = 0

    def __enter__(self) -> "Browser":
        port_file = pathlib.Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.is_file() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"{self.binary} did not start its DevTools server")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.loads(r.read()) if t["type"] == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        return self

    def __exit__(self, *exc) -> None:
        if self.ws is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression: str):
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression!r} threw: {r['exceptionDetails']}")
        return r["result"].get("value")

    def open(self, url: str, timeout: float = 30) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", timeout)

    def wait_for(self, expression: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{expression!r} was still false after {timeout} s")
