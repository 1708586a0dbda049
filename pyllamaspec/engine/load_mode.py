"""Where a model's weights live on the CPU: mapped from the file, or read into memory backed by
transparent huge pages (csrc/host/huge_pages.h).

Decoding reads every weight once per token. Mapped pages are 4 KiB (the page cache of a regular
file is not collapsed into huge pages on request); memory read in asks for 2 MiB pages, and
measured against llama-bench b11434 on this project's CPU (AVX-512, 2 threads; `python -m
pyllamaspec.bench ... --llama-bench BIN [--no-mmap]`), tg64 went from 0.98-0.99x (both mapped) to
1.02-1.04x (ours read in) on SmolLM2 and Gemma 3. Mapping stays right where the weights are
large next to the free memory (the page cache can drop and share them), go to a GPU, or no huge
pages are to be had (macOS, THP "never"); so `use_mmap=None` ("auto", llama.cpp's -lm auto)
reads the weights in only where all of this holds:
  Linux, THP "always" or "madvise", PYLLAMASPEC_HUGE_PAGES not 0, no layers offloaded, one file
  (not a split set), and the file at most half of MemAvailable.
"""
from __future__ import annotations

import os
import sys

from ..errors import InvalidArgumentError

THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def resolve_mmap(use_mmap: bool | None, path: str, n_gpu_layers: int) -> bool:
    """use_mmap as given (True, False), or for None whether to map the file (see the module)."""
    if use_mmap is None:
        return not read_in_pays(path, n_gpu_layers)
    if not isinstance(use_mmap, bool):
        raise InvalidArgumentError(f"use_mmap must be True, False or None (auto), got {use_mmap!r}")
    return use_mmap


def read_in_pays(path: str, n_gpu_layers: int) -> bool:
    if sys.platform != "linux" or n_gpu_layers != 0 or os.environ.get("PYLLAMASPEC_HUGE_PAGES") == "0":
        return False
    if "-of-" in os.path.basename(path):          # a split set: its size is all its shards'
        return False
    if not huge_pages_available():
        return False
    avail = mem_available()
    return avail is not None and os.path.getsize(path) <= avail // 2


def huge_pages_available(thp_file: str = THP_ENABLED) -> bool:
    try:
        with open(thp_file) as f:
            mode = f.read()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def mem_available(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes (None where it cannot be read)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
