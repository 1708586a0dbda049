"""Loads the core library with cffi (ABI mode) and turns its status codes into exceptions.

ABI mode: the declarations are read from the public header (between its cffi markers) and the
library is dlopen'ed, so no extension module is compiled for each Python version. A call costs
about a microsecond (see the closing note of issue 2 / `python -m pyllamaspec.bench
--overhead`), against milliseconds for an evaluation. cffi releases the GIL during every call.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from cffi import FFI

from ..errors import BY_STATUS, ModelClosedError, PyllamaspecError

# the package's folder: the wheel installs the library and its header there
_HERE = Path(__file__).resolve().parent.parent
_LIBNAMES = {"darwin": "libpyllamaspec.dylib", "win32": "pyllamaspec.dll"}


def _find(candidates: list[Path], what: str) -> Path:
    for c in candidates:
        if c.is_file():
            return c
    raise ImportError(f"pyllamaspec: cannot find {what}; looked in "
                      + ", ".join(str(c) for c in candidates)
                      + ". Install the package with `pip install .` (it builds the core).")


def _installed_copy(name: str) -> Path | None:
    """The file in the installed distribution: when this package is imported from a source
    checkout (e.g. `python -m pyllamaspec.cli` in the repository after `pip install .`), the
    built library lives in site-packages, not beside these sources."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        path = Path(distribution("pyllamaspec").locate_file(f"pyllamaspec/{name}"))
    except (PackageNotFoundError, Exception):
        return None
    return path if path.is_file() else None


def _library_path() -> Path:
    env = os.environ.get("PYLLAMASPEC_LIBRARY")
    if env:
        return _find([Path(env)], f"PYLLAMASPEC_LIBRARY={env}")
    name = _LIBNAMES.get(sys.platform, "libpyllamaspec.so")
    installed = _installed_copy(name)
    return _find([_HERE / name] + ([installed] if installed else []), f"the core library {name}")


def _header_path(library: Path) -> Path:
    # the header built with the library first: its declarations match the binary
    return _find([library.parent / "pyllamaspec.h", _HERE / "pyllamaspec.h",
                  _HERE.parent / "csrc" / "include" / "pyllamaspec.h"], "the header pyllamaspec.h")


def _declarations(header: str) -> str:
    begin, end = header.index("/* cffi-begin */"), header.index("/* cffi-end */")
    return header[begin + len("/* cffi-begin */"):end].replace("PSL_API ", "")


_lib_path = _library_path()
ffi = FFI()
ffi.cdef(_declarations(_header_path(_lib_path).read_text()))
lib = ffi.dlopen(str(_lib_path))
# Every function resolved now, not on first use: cffi resolves a function under its own lock, and a
# garbage collection that runs while a thread holds that lock (parsing a type) may run a finalizer
# (Model.__del__ -> close -> psl_context_interrupt) that calls a function not yet resolved: the
# thread then waits for the lock it holds (issue 48). Resolved, a call takes no lock.
for _name in dir(lib):
    getattr(lib, _name)


def last_error() -> str:
    return ffi.string(lib.psl_last_error()).decode("utf-8", "replace")


def check(status: int) -> None:
    """Raise the exception matching a non-zero status, with the core's message."""
    if status != 0:
        cls = BY_STATUS.get(status, PyllamaspecError)
        raise cls(last_error() or f"pyllamaspec error {status}", status)


def system_info() -> str:
    return ffi.string(lib.psl_system_info()).decode()


def set_verbose(verbose: bool) -> None:
    """Let ggml log to stderr (off by default)."""
    lib.psl_set_verbose(bool(verbose))


def mlock_all() -> str | None:
    """Locks this process's pages in RAM (mlockall: the mapped model files included), as
    llama.cpp's --mlock keeps a model from being swapped out. Returns why it failed, else None."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fn = libc.mlockall
    except (OSError, AttributeError):
        return "mlockall is not available on this system"
    if fn(1) != 0:                           # MCL_CURRENT
        err = ctypes.get_errno()
        return (f"{os.strerror(err)} (the limit on locked memory, `ulimit -l`, may be too low; "
                "raise RLIMIT_MEMLOCK)")
    return None


class Closeable:
    """Context manager and finalizer for the classes that own a core handle: each defines
    close() (safe to call twice)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Users:
    """The calls in flight on a core handle that threads share. Each call runs inside
    `with users:`; close(free) refuses new calls, asks the running ones to stop (stop()), waits
    until none is left, then frees the handle: no call can run on freed memory, and a call on a
    closed handle raises ModelClosedError. A call that mutates what the handle owns also holds
    `users.exclusive` (see Exclusive)."""

    def __init__(self, what: str):
        self.what = what
        self.closing = False
        self.exclusive = threading.Lock()
        self._cv = threading.Condition(threading.Lock())
        self._n = 0

    def __enter__(self) -> "Users":
        with self._cv:
            if self.closing:
                raise ModelClosedError(f"the {self.what} is closed")
            self._n += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cv:
            self._n -= 1
            if self._n == 0:
                self._cv.notify_all()

    def signal(self, fn) -> None:
        """Runs fn() (a thread-safe core call such as an interrupt) unless the handle is closing:
        never waits for the calls in flight, and the handle cannot be freed meanwhile."""
        with self._cv:
            if not self.closing:
                fn()

    def close(self, free, stop=None) -> None:
        """Frees the handle (free()) once no call uses it; safe to call twice and from several
        threads (the later ones wait for the first)."""
        with self._cv:
            first = not self.closing
            self.closing = True
            if first and stop is not None:
                stop()
            self._cv.wait_for(lambda: self._n == 0)
            if first:
                free()


class Exclusive:
    """`with Exclusive(users):` one call at a time on the handle, and none once it is closing
    (a call that waited for the lock while close() was called does not start)."""

    __slots__ = ("users",)

    def __init__(self, users: Users):
        self.users = users

    def __enter__(self) -> None:
        u = self.users
        u.__enter__()
        u.exclusive.acquire()
        if u.closing:
            u.exclusive.release()
            u.__exit__()
            raise ModelClosedError(f"the {u.what} is closed")

    def __exit__(self, *exc: object) -> None:
        self.users.exclusive.release()
        self.users.__exit__()
