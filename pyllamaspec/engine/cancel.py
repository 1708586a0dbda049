"""Cancel: stops a generation from any thread, without signals (a server's per-request cancel).

    cancel = pyllamaspec.Cancel()
    threading.Timer(2.0, cancel.set).start()
    r = pyllamaspec.generate(prompt, model, cancel=cancel)   # r.finish_reason == "cancelled"

set() interrupts the evaluation running inside the models the generation uses (a long prompt
stops within one graph node, not at its end) and the loop stops before its next round; the
result keeps the tokens produced so far. What it interrupts is the generation's own sequences
(sequence.py): a Model shared with other generations goes on with theirs.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator



class Cancel:
    """A one-shot cancel flag that also interrupts the models (or model sequences) it watches:
    anything with interrupt(), clear_interrupt() and closed."""

    def __init__(self) -> None:
        self._set = False
        self._lock = threading.Lock()
        self._models: list = []
        self._added: list[list] = []            # per watching(): what watch() added inside it

    def set(self) -> None:
        """Cancels: safe from any thread, at any time, more than once."""
        with self._lock:
            self._set = True
            for m in self._models:
                m.interrupt()

    def is_set(self) -> bool:
        return self._set

    __bool__ = is_set

    def watch(self, *models) -> None:
        """Inside watching(): watch these too, until it ends."""
        ms = [m for m in models if m is not None and hasattr(m, "interrupt")]
        with self._lock:
            self._models.extend(ms)
            if self._added:
                self._added[-1].extend(ms)
            for m in ms:
                if self._set:
                    m.interrupt()

    @contextmanager
    def watching(self, *models) -> Iterator["Cancel"]:
        """While inside, set() interrupts these models' evaluations (and those watch() adds).
        On the way out an interrupt that no evaluation consumed is withdrawn, so it cannot stop
        the models' next user."""
        with self._lock:
            self._added.append([])
        self.watch(*models)
        try:
            yield self
        finally:
            with self._lock:
                for m in self._added.pop():
                    self._models.remove(m)
                    if not m.closed:
                        m.clear_interrupt()
