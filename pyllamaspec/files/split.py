"""Names of split GGUF models (llama.cpp's gguf-split: ``<prefix>-00001-of-0000N.gguf`` ...).

The core opens a set's shards itself (csrc/gguf/gguf_split.cpp); Python needs the names only to fetch
every part from the hub and to say which part is missing."""
from __future__ import annotations

import os
import re

SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def split_info(path: str) -> tuple[int, int] | None:
    """(part number from 1, number of parts) when ``path`` is named as a part, else None."""
    m = SPLIT_RE.search(path)
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_split(path: str) -> bool:
    """A part of a set of more than one file (a ``-00001-of-00001`` file is a whole model)."""
    info = split_info(path)
    return info is not None and info[1] > 1


def split_parts(path: str) -> list[str]:
    """All part names of the split set that ``path`` (any part) belongs to, part 1 first."""
    m = SPLIT_RE.search(path)
    if m is None:
        raise ValueError(f"{path!r} is not named as a part of a split GGUF model")
    n = int(m.group(2))
    head, tail = path[:m.start()], path[m.end() - 5:]
    return [f"{head}-{k:05d}-of-{m.group(2)}{tail}" for k in range(1, n + 1)]


def missing_parts(path: str | os.PathLike) -> list[str]:
    """The parts of a local split set that do not exist (none when ``path`` is no part)."""
    path = os.fspath(path)
    if not is_split(path):
        return []
    return [p for p in split_parts(path) if not os.path.exists(p)]
