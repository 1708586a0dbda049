"""Sequence states on disk (the server's /slots save and restore, the CLI's --prompt-cache): a file
is a header naming what the state belongs to (the model, by a hash of its file's head and its
size; its architecture; the KV cache types; the tokens) and the core's state bytes
(ContextSequence.save_state). A file of another model or cache type, or a truncated one, is
refused with an InvalidArgumentError before anything changes. Files are written atomically (a
temporary file renamed over the name)."""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile

from ..errors import InvalidArgumentError, ModelIOError

MAGIC = b"PSLSTATE"
VERSION = 1
HASHED = 16 << 20          # the model file's first bytes that name it (metadata, tensor table)


def model_id(model) -> str:
    """A model's name for state files: sha256 of its file's first HASHED bytes and its size
    (cached on the Model)."""
    known = getattr(model, "_state_id", None)
    if known is None:
        with open(model.path, "rb") as f:
            head = f.read(HASHED)
        known = hashlib.sha256(head + str(os.path.getsize(model.path)).encode()).hexdigest()
        model._state_id = known
    return known


def _header(model, tokens: list[int]) -> dict:
    return {"version": VERSION, "model": model_id(model), "arch": model.info.arch,
            "type_k": model.memory.get("type_k"), "type_v": model.memory.get("type_v"), "n_tokens": len(tokens)}


def write(path: str, model, tokens: list[int], state: bytes) -> int:
    """Writes a state file atomically; returns its size in bytes."""
    head = json.dumps(_header(model, tokens)).encode()
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)            # as an open() would make it, not mkstemp's 0600
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + struct.pack("<I", len(head)) + head + state)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(MAGIC) + 4 + len(head) + len(state)


def read(path: str, model) -> tuple[dict, bytes]:
    """(header, state bytes) of a state file written for this model and its cache types."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelIOError(f"cannot read the state file {os.path.basename(path)}: {e.strerror}") from None
    if len(data) < len(MAGIC) + 4 or not data.startswith(MAGIC):
        raise InvalidArgumentError(f"{os.path.basename(path)} is not a pyllamaspec state file")
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    try:
        head = json.loads(data[len(MAGIC) + 4:len(MAGIC) + 4 + n])
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidArgumentError(f"{os.path.basename(path)}: its header is damaged") from None
    want = _header(model, [])
    for key in ("version", "model", "arch", "type_k", "type_v"):
        if not isinstance(head, dict) or head.get(key) != want[key]:
            what = {"model": "another model", "arch": "another architecture", "version": "another version"}.get(
                key, "another KV cache type")
            raise InvalidArgumentError(f"{os.path.basename(path)} holds the state of {what} "
                                       f"({key}: {head.get(key) if isinstance(head, dict) else None!r}, "
                                       f"here {want[key]!r})")
    return head, data[len(MAGIC) + 4 + n:]


__all__ = ["write", "read", "model_id"]
