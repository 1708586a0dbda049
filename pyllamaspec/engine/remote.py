"""A model's layers on other machines, through ggml's RPC backend (llama.cpp's ``rpc-server``).

``Model(path, rpc=["host:port", ...])`` spreads the layers over the servers' devices and the
local ones (by free memory, or ``tensor_split``) with ggml's backend scheduler; the servers are
``python -m pyllamaspec.rpc_server`` or llama.cpp's ``rpc-server`` (same wire protocol).

Faults. ggml-rpc's client calls abort() on any socket error (its RPC_STATUS_ASSERT / GGML_ABORT,
raised on its dispatcher thread, which nothing can catch). So a model with rpc= runs its
context in a worker process (``pyllamaspec.rpc.worker``); this process keeps the tokenizer and
metadata and sends the worker token ids, getting logits back over a pipe. Before the worker
connects, each server is probed here with ggml's HELLO handshake under a timeout: an
unreachable, busy or incompatible server is an RpcError naming it, before anything can abort.

What the bound is: a server that dies (process killed, host reset) makes the worker's socket
fail at once, the worker aborts, and the call raises RpcError as soon as the pipe reports it
(milliseconds on loopback; tests/rpc/test_rpc.py measures it). A server that stops answering without
closing the connection (a hung host, a cut cable) is caught by ``rpc_timeout``: no single call
may take longer; the worker is then killed. A call legitimately slower than rpc_timeout (a long
prompt on a slow link) fails the same way: raise it for such work. After an RpcError the model
only closes (its KV cache was on the lost server).

interrupt() and Ctrl-C reach the worker as SIGINT, and the core polls for them in its CPU
computation: an eval stops at its next local step, and one whose layers are all remote runs to
its end first (ggml's RPC protocol has no cancel).
"""
from __future__ import annotations

import mmap
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any, Sequence

import numpy as np

from ..errors import (
    BY_STATUS,
    BackendError,
    EvaluationInterrupted,
    InvalidArgumentError,
    RpcError,
    UnsupportedModelError,
)
from ._native import ffi, lib
from .context import Context

HELLO = 14                 # ggml-rpc's RPC_CMD_HELLO (fixed across protocol versions)
CONN_CAPS = 24             # bytes of transport capabilities in HELLO (protocol 7)
PROBE_TIMEOUT = 5.0        # seconds for connect + handshake of one server
OPEN_TIMEOUT = 600.0       # the worker's load sends every weight over the network
SHM_ROWS = 64              # logits of up to this many rows come back through shared memory


def available() -> bool:
    """Whether the core was built with ggml's RPC backend."""
    return bool(lib.psl_rpc_available())


def protocol_version() -> tuple[int, int, int]:
    v = ffi.new("int32_t[3]")
    lib.psl_rpc_version(v, v + 1, v + 2)
    return v[0], v[1], v[2]


def endpoints(rpc: Sequence[str] | str | None) -> list[str]:
    """"host:port,host:port" or a list of them → a checked list ([] for None)."""
    if rpc is None:
        return []
    items = rpc.split(",") if isinstance(rpc, str) else list(rpc)
    out = []
    for e in items:
        if not isinstance(e, str):
            raise InvalidArgumentError(f"an RPC server is 'host:port', got {e!r}")
        e = e.strip()
        host, _, port = e.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(f"an RPC server is 'host:port', got {e!r}")
        out.append(e)
    if isinstance(rpc, str) and not out:
        raise InvalidArgumentError("rpc names no server")
    if out and not available():
        raise InvalidArgumentError("this build of the core has no RPC backend (configure with -DGGML_RPC=ON)")
    return out


def split_values(tensor_split: Sequence[float] | str | None, servers: list[str]) -> list[float] | None:
    if tensor_split is None:
        return None
    if not servers:
        raise InvalidArgumentError("tensor_split needs rpc servers to split over")
    vals = tensor_split.split(",") if isinstance(tensor_split, str) else list(tensor_split)
    try:
        out = [float(v) for v in vals]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"tensor_split is a list of numbers, got {tensor_split!r}") from None
    if not out or any(not np.isfinite(v) or v < 0 for v in out) or sum(out) <= 0:
        raise InvalidArgumentError(f"tensor_split needs values >= 0 with a positive sum, got {tensor_split!r}")
    return out


def set_params(mp: Any, servers: list[str], split: list[float] | None) -> list[Any]:
    """Fills the rpc fields of psl_model_params; returns the cffi objects to keep alive."""
    if not servers:
        return []
    keep = [ffi.new("char[]", ",".join(servers).encode())]
    mp.rpc_servers = keep[0]
    if split:
        keep.append(ffi.new("float[]", split))
        mp.tensor_split, mp.n_tensor_split = keep[1], len(split)
    return keep


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed the connection during the handshake")
        buf += chunk
    return buf


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT) -> tuple[int, int, int]:
    """ggml's HELLO handshake with one server: its protocol version, or RpcError (unreachable,
    busy with another client, closed, or a version this client cannot talk to)."""
    host, _, port = endpoint.rpartition(":")
    ours = protocol_version()
    try:
        s = socket.create_connection((host, int(port)), timeout=timeout)
    except socket.timeout:
        raise RpcError(f"cannot reach RPC server {endpoint}: no answer within {timeout:g} s") from None
    except OSError as e:
        raise RpcError(f"cannot reach RPC server {endpoint}: {e.strerror or e}") from None
    try:
        with s:
            s.settimeout(timeout)
            s.sendall(struct.pack("<BQ", HELLO, CONN_CAPS) + bytes(CONN_CAPS))
            size = struct.unpack("<Q", _recv_exact(s, 8))[0]
            if size < 3:
                raise RpcError(f"RPC server {endpoint}: malformed HELLO response ({size} bytes)")
            major, minor, patch = _recv_exact(s, 3)
    except socket.timeout:
        raise RpcError(f"RPC server {endpoint} did not answer within {timeout:g} s (busy with another "
                       "client? ggml's server serves one at a time)") from None
    except OSError as e:           # closed or reset: what a server of another protocol version does
        raise RpcError(f"RPC server {endpoint}: {e.strerror or e} during the handshake (a server of "
                       f"another protocol version closes the connection; this client speaks "
                       f"{'.'.join(map(str, ours))})") from None
    if major != ours[0] or minor > ours[1]:
        raise RpcError(f"RPC server {endpoint} speaks protocol {major}.{minor}.{patch}, this client "
                       f"{'.'.join(map(str, ours))}: use the same ggml version on both sides")
    return major, minor, patch


class RemoteContext(Context):
    """The worker process that holds the model's context; one request at a time, each bounded
    by the timeout (see the module's docstring)."""

    def __init__(self, path: str, servers: list[str], split: list[float] | None, timeout: float,
                 kw: dict[str, Any]):
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidArgumentError(f"rpc_timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.alive = False
        self._interrupt = False          # interrupt() with no call running: the next one stops
        self._busy = False
        self._proc: subprocess.Popen | None = None
        self._shm: mmap.mmap | None = None
        self._shm_fd = -1
        for e in servers:
            probe(e, min(PROBE_TIMEOUT, self.timeout))
        self._log = tempfile.TemporaryFile()
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        # logits come back through shared memory (one copy, not four through the pipe); Linux only
        self._shm_fd = os.memfd_create("pyllamaspec-logits") if hasattr(os, "memfd_create") else -1
        # ggml's abort would first attach gdb for a backtrace (over a second): the message suffices
        env = dict(os.environ, GGML_NO_BACKTRACE="1")
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
                                            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        try:
            # its own session: the terminal's Ctrl-C reaches this process, which forwards it
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pyllamaspec.rpc.worker", str(p2c_r), str(c2p_w), str(self._shm_fd)],
                pass_fds=(p2c_r, c2p_w) + ((self._shm_fd,) if self._shm_fd >= 0 else ()),
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, env=env, start_new_session=True)
        finally:
            os.close(p2c_r)
            os.close(c2p_w)
        self._out = Connection(p2c_w, readable=False)
        self._in = Connection(c2p_r, writable=False)
        self.alive = True
        try:
            got = self.call("open", path, servers, split, kw, timeout=max(self.timeout, OPEN_TIMEOUT))
            self.info, self._devices = got["info"], got["devices"]
            self.n_ctx, self.n_batch, self.n_threads = got["n_ctx"], got["n_batch"], got["n_threads"]
            self.max_rollback, self.memory = got["max_rollback"], got["memory"]
            if self._shm_fd >= 0:
                size = SHM_ROWS * self.info["n_vocab"] * 4
                os.ftruncate(self._shm_fd, size)
                self._shm = mmap.mmap(self._shm_fd, size)
                self.call("map_shm", size)
        except BaseException:
            self.close()
            raise

    # -- requests ---------------------------------------------------------------------------
    def call(self, op: str, *args: Any, timeout: float | None = None) -> Any:
        if not self.alive:
            raise RpcError("the connection to the RPC servers was lost earlier: close this model")
        try:
            self._out.send_bytes(pickle.dumps((op, args), protocol=5))
        except OSError:
            self._lost("the worker is gone")
        ok, value = self._wait(op, self.timeout if timeout is None else timeout)
        if ok:
            return value
        status, message = value
        raise BY_STATUS.get(status, BackendError)(message, status)

    def _wait(self, op: str, timeout: float) -> tuple[bool, Any]:
        deadline = time.monotonic() + timeout
        self._busy = True
        forwarded = ctrl_c = False
        try:
            while True:
                try:
                    if self._interrupt and not forwarded:
                        self._signal(signal.SIGINT)
                        forwarded = True
                    if self._in.poll(0.05):
                        return pickle.loads(self._in.recv_bytes())
                    if time.monotonic() > deadline:
                        self._lost(f"'{op}' took more than rpc_timeout={timeout:g} s (a server stopped "
                                   "answering?)")
                except KeyboardInterrupt:     # Ctrl-C: stop the worker's eval, then raise it here
                    ctrl_c = self._interrupt = True
                except (EOFError, OSError):   # ggml-rpc aborted it: a server failed or hung up
                    self._lost(f"the worker process died during '{op.replace('_shm', '')}'")
        finally:
            self._busy = False
            self._interrupt = False
            if ctrl_c:
                raise KeyboardInterrupt

    def eval(self, toks: np.ndarray, mode: int, out: np.ndarray, rows: int) -> None:
        if self._interrupt:
            self._interrupt = False
            raise EvaluationInterrupted("evaluation interrupted", 10)
        n = rows * out.shape[-1]
        if self._shm is not None and rows <= SHM_ROWS:
            self.call("eval_shm", toks.tobytes(), mode)
            out.reshape(-1)[:n] = np.frombuffer(self._shm, np.float32, n)
        else:
            out.reshape(-1)[:n] = np.frombuffer(self.call("eval", toks.tobytes(), mode), np.float32)

    def embed(self, toks: np.ndarray, out: np.ndarray) -> None:
        out.reshape(-1)[:] = np.frombuffer(self.call("embed", toks.tobytes()), np.float32)

    def n_past(self) -> int:
        return self.call("n_past")

    # one sequence: the worker's context is driven through sequence 0's calls
    def _seq0(self, seq: int) -> None:
        if seq != 0:
            raise InvalidArgumentError(f"a model on RPC servers holds one sequence (asked for {seq})")

    def decode(self, tokens: np.ndarray, n_seq_id: np.ndarray | None, seq_id: np.ndarray | None,
               flags: np.ndarray | None, out: np.ndarray, rows: int) -> None:
        if seq_id is not None:
            for s in seq_id.tolist():
                self._seq0(s)
        n = len(tokens)
        if flags is None or flags.all():
            mode = 2
        elif not flags.any():
            mode = 0
        elif n and flags[-1] and flags.sum() == 1:
            mode = 1
        else:
            raise InvalidArgumentError("a model on RPC servers gives logits for all, the last or no tokens")
        self.eval(tokens, mode, out, rows)

    def seq_n_past(self, seq: int) -> int:
        return self.n_past() if seq == 0 else 0

    def seq_truncate(self, seq: int, n_keep: int) -> None:
        self._seq0(seq)
        self.truncate(n_keep)

    def seq_copy(self, src: int, dst: int, n: int) -> None:
        self._seq0(src)
        self._seq0(dst)
        self.truncate(n)

    def seq_mtp_draft(self, seq: int, token: int, step: int, out: np.ndarray) -> None:
        self.enable_mtp()

    def seq_mtp_draft_nodes(self, seq: int, tokens: np.ndarray, parents: np.ndarray, out: np.ndarray) -> None:
        self.enable_mtp()

    def truncate(self, n_keep: int) -> None:
        self.call("truncate", n_keep)

    def clear(self) -> None:
        self.call("clear")

    def set_output_ids(self, ids: np.ndarray) -> None:
        self.call("set_output_ids", ids.tobytes())

    def add_output_ids(self, ids: np.ndarray) -> None:
        self.call("add_output_ids", ids.tobytes())

    def perf(self, reset: bool) -> dict[str, float]:
        return self.call("perf", bool(reset))

    def set_threads(self, n_threads: int) -> int:
        self.n_threads = self.call("set_threads", n_threads)
        return self.n_threads

    def enable_mtp(self) -> None:
        raise UnsupportedModelError("MTP drafting is not available for a model on RPC servers")

    def mtp_draft(self, token: int, step: int, out: np.ndarray) -> None:
        self.enable_mtp()

    def attach_head(self, head) -> None:
        raise UnsupportedModelError("draft heads (EAGLE-3, DFlash) are not available for a model on RPC servers")

    def head_draft(self, token: int, step: int, out: np.ndarray) -> None:
        self.attach_head(None)

    def head_block(self, token: int, n: int, out: np.ndarray) -> None:
        self.attach_head(None)

    def devices(self, n_layer: int) -> list[str]:
        return list(self._devices)

    def interrupt(self) -> None:
        self._interrupt = True

    def clear_interrupt(self) -> None:
        if not self._busy:
            self._interrupt = False

    # -- failure and shutdown ---------------------------------------------------------------
    def _signal(self, sig: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.kill(self._proc.pid, sig)
            except OSError:
                pass

    def _lost(self, why: str) -> None:
        self.alive = False
        self._signal(signal.SIGKILL)
        code = self._proc.wait() if self._proc is not None else None
        tail = self._log_tail()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        raise RpcError(f"RPC target lost: {why} (worker {how})" + (f": {tail}" if tail else ""))

    def _log_tail(self) -> str:
        try:
            self._log.seek(0)
            lines = [ln.strip() for ln in self._log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-3:])

    def close(self) -> None:
        if self._proc is not None:
            self._stop_worker()
        if self._shm is not None:
            self._shm.close()
            self._shm = None
        if self._shm_fd >= 0:
            os.close(self._shm_fd)
            self._shm_fd = -1

    def _stop_worker(self) -> None:
        if self.alive and self._proc.poll() is None:
            try:
                self._out.send_bytes(pickle.dumps(("close", ()), protocol=5))
                self._proc.wait(timeout=min(self.timeout, 10.0))
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.alive = False
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        for c in (self._out, self._in):
            c.close()
        self._log.close()
        self._proc = None
