"""An OpenAI-compatible HTTP server over pyllamaspec's generation loop (llama-server's routes
and flags): ``python -m pyllamaspec.server -m TARGET.gguf [-md DRAFT.gguf | --lookup]``.

    POST /v1/chat/completions   POST /v1/completions   GET /v1/models   GET /health

A thin layer: requests are parsed and checked (openai_format.py), run one at a time on the
loaded models by a worker thread (worker.py) through the same loop as pyllamaspec.generate,
and shaped back as OpenAI's objects, streamed as server-sent events (app.py).

It needs Starlette and uvicorn: ``pip install "pyllamaspec[server]"``. Importing pyllamaspec
does not.
"""
from __future__ import annotations

from ...errors import PyllamaspecError

EXTRA_HINT = 'pip install "pyllamaspec[server]"'


class ServerDependencyError(PyllamaspecError, ImportError):
    """Starlette or uvicorn is missing."""


def check_dependencies() -> None:
    """Raises ServerDependencyError naming the extra to install when a dependency is missing."""
    missing = []
    for name in ("starlette", "uvicorn"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ServerDependencyError(f"the server needs {' and '.join(missing)}: {EXTRA_HINT}")


def create_app(*args, **kwargs):
    """The Starlette application (see app.create_app)."""
    check_dependencies()
    from .app import create_app as make
    return make(*args, **kwargs)


__all__ = ["create_app", "check_dependencies", "ServerDependencyError", "EXTRA_HINT"]
