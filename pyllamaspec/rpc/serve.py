"""Serve this machine's devices to pyllamaspec or llama.cpp clients over ggml's RPC protocol.

    python -m pyllamaspec.rpc_server [--host 127.0.0.1] [--port 50052] [-t N] [-d DEV,...] [-c | --cache DIR]

The flags of llama.cpp's rpc-server (tools/rpc/rpc-server.cpp), which can be run instead: the
wire protocol is ggml's. One client at a time; no authentication, so it binds to 127.0.0.1
unless told otherwise. A client may make it allocate buffers of any size before sending data,
and an idle client blocks all others: ggml's server has no hook to bound either, so serve a
trusted network only (docs/several-machines.md, "Trust"). Ctrl-C (or SIGTERM) stops it.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

WARNING = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
WARNING: Host ('{host}') is != '127.0.0.1'
         Never expose the RPC server to an open network!
         This is an experimental feature and is not secure!
         (any client may allocate any amount of memory here,
         and one idle client blocks all others)
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


def default_cache_dir() -> str:
    """llama.cpp's: $LLAMA_CACHE, else $XDG_CACHE_HOME or ~/.cache, + llama.cpp/rpc."""
    base = os.environ.get("LLAMA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llama.cpp")
    return os.path.join(base, "rpc")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pyllamaspec.rpc_server", description=__doc__.split("\n")[0])
    ap.add_argument("-H", "--host", default="127.0.0.1", help="host to bind to (default: 127.0.0.1)")
    ap.add_argument("-p", "--port", type=int, default=50052, help="port to bind to (default: 50052)")
    ap.add_argument("-t", "--threads", type=int, default=0,
                    help="threads for the CPU device (default: half the hardware threads)")
    ap.add_argument("-d", "--device", default=None,
                    help="comma-separated ggml devices to serve (default: the accelerators, else the CPU)")
    ap.add_argument("-c", "--cache", nargs="?", const=default_cache_dir(), default=None, metavar="DIR",
                    help="cache large tensors by hash in DIR (llama.cpp's -c: its cache directory)")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if not 0 < a.port < 65536:
        print(f"error: invalid port {a.port}", file=sys.stderr)
        return 2
    from ..engine._native import check, ffi, lib
    from ..errors import PyllamaspecError
    if a.host != "127.0.0.1":
        print(WARNING.format(host=a.host), file=sys.stderr, flush=True)
    if a.cache:
        os.makedirs(a.cache, exist_ok=True)
    endpoint = f"{a.host}:{a.port}"
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            check(lib.psl_rpc_serve(endpoint.encode(), a.cache.encode() if a.cache else ffi.NULL, a.threads,
                                    a.device.encode() if a.device else ffi.NULL))
        except PyllamaspecError as e:
            failed.append(e)

    # The server blocks in the core for good: it runs on a thread, and this one waits for
    # Ctrl-C / SIGTERM, then ends the process (the OS closes the sockets).
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    t = threading.Thread(target=serve, daemon=True, name="rpc-server")
    t.start()
    try:
        while t.is_alive():
            t.join(0.5)
    except KeyboardInterrupt:
        print("rpc_server: stopped", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)
    if failed:
        print(f"error: {failed[0]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
