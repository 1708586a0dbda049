"""The worker process of a Model whose layers live on RPC servers (see pyllamaspec.rpc).

It loads the model in this process's core, with the servers as devices, and answers the
parent's requests one at a time: (op, args) in, (True, value) or (False, (status, message)) out,
pickled over two pipes. ggml-rpc aborts this process when a server fails; the parent sees the
pipe close and raises. SIGINT from the parent interrupts a running eval.
Usage: python -m pyllamaspec.rpc.worker READ_FD WRITE_FD [SHM_FD]  (logits: shared memory, or -1)
"""
from __future__ import annotations

import mmap
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

import numpy as np


def _open(path: str, servers: list[str], split: list[float] | None, kw: dict[str, Any]):
    from ..engine.model import Model
    m = Model(path, rpc=servers, tensor_split=split, rpc_isolate=False, tokenizer=False, **kw)
    info = {f: getattr(m.info, f) for f in m.info.__dataclass_fields__}
    return m, {"info": info, "devices": m.devices, "n_ctx": m.n_ctx, "n_batch": m.n_batch,
               "n_threads": m.n_threads, "max_rollback": m.max_rollback, "memory": m.memory}


class Worker:
    def __init__(self, shm_fd: int):
        self.model = None
        self.shm_fd, self.shm = shm_fd, None

    def handle(self, op: str, args: tuple) -> Any:
        if op == "open":
            self.model, value = _open(*args)
            return value
        if op == "map_shm":
            self.shm = mmap.mmap(self.shm_fd, args[0])
            return None
        if op == "eval_shm":     # the core writes the logits straight into the shared memory
            data, mode = args
            toks = np.frombuffer(data, np.int32)
            out = np.ndarray((len(self.shm) // 4,), np.float32, buffer=self.shm)
            self.model.eval(toks, ("none", "last", "all")[mode], out=out)
            return None
        return _handle(self.model, op, args)


def _handle(m, op: str, args: tuple) -> Any:
    if op == "eval":
        data, mode = args
        return m.eval(np.frombuffer(data, np.int32), ("none", "last", "all")[mode]).tobytes()
    if op == "embed":
        return m.embed_tokens(np.frombuffer(args[0], np.int32)).tobytes()
    if op == "n_past":
        return m.n_past
    if op == "truncate":
        return m.truncate(*args)
    if op == "clear":
        return m.clear()
    if op == "set_output_ids":
        a = np.frombuffer(args[0], np.int32)
        return m.set_output_ids(a if len(a) else None)
    if op == "add_output_ids":
        return m.add_output_ids(np.frombuffer(args[0], np.int32))
    if op == "perf":
        return m.perf(*args)
    if op == "set_threads":
        m.set_threads(*args)
        return m.n_threads
    raise ValueError(f"unknown request {op!r}")


def main(argv: list[str]) -> int:
    from ..errors import PyllamaspecError
    inp = Connection(int(argv[1]), writable=False)
    out = Connection(int(argv[2]), readable=False)
    worker = Worker(int(argv[3]) if len(argv) > 3 else -1)
    # SIGINT (forwarded by the parent) only trips the core's eval interrupt: no KeyboardInterrupt
    # may land between requests
    signal.signal(signal.SIGINT, lambda *_: None)
    os.dup2(2, 1)                    # ggml prints to stdout: keep it off anything that matters
    while True:
        try:
            op, args = pickle.loads(inp.recv_bytes())
        except EOFError:
            break
        if op == "close":
            break
        try:
            reply = (True, worker.handle(op, args))
        except PyllamaspecError as e:
            reply = (False, (e.status, str(e)))
        except Exception as e:       # a bug here still answers, so the parent never waits in vain
            reply = (False, (12, f"{type(e).__name__}: {e}"))
        out.send_bytes(pickle.dumps(reply, protocol=5))
    if worker.model is not None:
        worker.model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
