"""What scripts/fuzz.py's grammar and template kinds share: the bounds a client's input must stay
within (issue 48: each step within 2 s, the child's peak RSS within 512 MiB of its start) and the
text mutation their cases go through."""
from __future__ import annotations

import os
import random
import time

TIME_BOUND_S = 2.0          # issue 48: every hostile input answers within 2 s
RSS_BOUND_MIB = 512         # growth of the child's peak RSS over its start


class Violation(Exception):
    pass


def _peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Bounds:
    """Runs the steps of one case, each timed against TIME_BOUND_S (ten times that under a
    sanitized core) and the peak RSS against RSS_BOUND_MIB over the case's start."""

    def __init__(self):
        self.peak0 = _peak_mib()
        self.limit_s = TIME_BOUND_S * (10.0 if os.environ.get("PYLLAMASPEC_FUZZ_LOGS") else 1.0)

    def step(self, what: str, fn):
        t = time.perf_counter()
        try:
            return fn()
        finally:
            took, grew = time.perf_counter() - t, _peak_mib() - self.peak0
            if took > self.limit_s:
                raise Violation(f"{what} took {took:.2f} s (bound {self.limit_s:g} s)")
            if grew > RSS_BOUND_MIB:
                raise Violation(f"peak RSS grew {grew:.0f} MiB by {what} (bound {RSS_BOUND_MIB} MiB)")


def mutate(rng: random.Random, text: str, inserts, max_ops: int, max_span: int, max_copies: int,
           truncate: bool = False) -> str:
    """Up to max_ops edits: a character deleted, one of `inserts` inserted, a span of up to
    max_span characters repeated up to max_copies times, or (truncate) the rest cut off."""
    for _ in range(rng.randint(1, max_ops)):
        if not text:
            break
        i = rng.randrange(len(text))
        op = rng.randrange(4 if truncate else 3)
        if op == 0:
            text = text[:i] + text[i + 1:]
        elif op == 1:
            text = text[:i] + rng.choice(inserts) + text[i:]
        elif op == 2:
            j = min(len(text), i + rng.randint(1, max_span))
            text = text[:j] + text[i:j] * rng.randint(2, max_copies) + text[j:]
        else:
            text = text[:i]
    return text
