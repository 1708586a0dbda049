"""Cancel: stops a generation from any thread, without signals (a server's per-request cancel).

    cancel = pyllamaspec.Cancel()
    threading.Timer(2.0, cancel.set).start()
    r = pyllamaspec.generate(prompt, model, cancel=cancel)   # r.finish_reason == "cancelled"

set() interrupts the evaluation running inside the models the generation uses (a long prompt
stops within one graph node, not at its end) and the loop stops before its next round; the
result keeps the tokens produced so far.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from .model import Model


class Cancel:
    """A one-shot cancel flag that also interrupts the models it watches."""

    def __init__(self) -> None:
        self._set = False
        self._lock = threading.Lock()
        self._models: list[Model] = []

    def set(self) -> None:
        """Cancels: safe from any thread, at any time, more than once."""
        with self._lock:
            self._set = True
            for m in self._models:
                m.interrupt()

    def is_set(self) -> bool:
        return self._set

    __bool__ = is_set

    @contextmanager
    def watching(self, *models: Model | None) -> Iterator["Cancel"]:
        """While inside, set() interrupts these models' evaluations. On the way out an interrupt
        that no evaluation consumed is withdrawn, so it cannot stop the models' next user."""
        ms = [m for m in models if isinstance(m, Model)]
        with self._lock:
            self._models.extend(ms)
            for m in ms:
                if self._set:
                    m.interrupt()
        try:
            yield self
        finally:
            with self._lock:
                for m in ms:
                    self._models.remove(m)
                    if not m.closed:
                        m.clear_interrupt()
