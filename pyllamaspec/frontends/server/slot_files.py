"""llama-server's slot files (--slot-save-path DIR; POST /slots/{id}?action=save|restore|erase with
{"filename"}): a slot's sequence state written to a file in DIR (engine/state_file.py: a header
naming the model, its architecture and cache types, written atomically), read back into an idle
sequence of the target, whence the next request that shares its prefix resumes (with --cache-ram
also into the prompt cache), or erased. Filenames are plain names inside DIR; a file of another
model or cache type, a truncated one, a name outside DIR: a 400, and nothing changes. These run on
the worker thread once no slot is busy (Worker.run_exclusive)."""
from __future__ import annotations

import os
import time

from ...engine import state_file
from ...errors import InvalidArgumentError, ModelIOError, PyllamaspecError
from .openai_format import APIError


def _path(directory: str, filename) -> str:
    if not isinstance(filename, str) or not filename:
        raise APIError("'filename' must be a non-empty string", param="filename")
    if (os.path.basename(filename) != filename or filename in (".", "..") or filename.startswith(".")
            or "\\" in filename or "\0" in filename or len(filename) > 255):
        raise APIError(f"invalid filename {filename[:80]!r}: a plain name inside the slot save path", param="filename")
    return os.path.join(directory, filename)


def save(worker, directory: str, slot: int, filename) -> dict:
    path = _path(directory, filename)
    seq = worker.slot_seq.get(slot)
    if seq is None or not seq.cached_tokens:
        raise APIError(f"slot {slot} holds nothing to save", param="id_slot")
    t0 = time.perf_counter()
    tokens = seq.cached_tokens
    try:
        n = state_file.write(path, worker.target, tokens, seq.save_state())
    except PyllamaspecError as e:
        raise APIError(f"slot {slot} cannot be saved: {e}", 400) from None
    return {"id_slot": slot, "filename": filename, "n_saved": len(tokens), "n_written": n,
            "timings": {"save_ms": 1e3 * (time.perf_counter() - t0)}}


def restore(worker, directory: str, slot: int, filename) -> dict:
    path = _path(directory, filename)
    if not os.path.isfile(path):
        raise APIError(f"no slot file {filename!r}", 404, param="filename", type="not_found_error")
    t0 = time.perf_counter()
    target = worker.target
    try:
        head, state = state_file.read(path, target)
        # the slot's last sequence, else the sequence of its number: no slot runs meanwhile
        seq = worker.slot_seq.get(slot) or target.sequence(min(slot, target.n_seq_max - 1))
        seq.load_state(state)
    except (InvalidArgumentError, ModelIOError) as e:
        raise APIError(str(e), 400, param="filename") from None
    if target.prompt_cache is not None:
        target.prompt_cache.put(seq.cached_tokens, state)
    worker.hold(slot, seq)
    return {"id_slot": slot, "filename": filename, "n_restored": head["n_tokens"], "n_read": os.path.getsize(path),
            "timings": {"restore_ms": 1e3 * (time.perf_counter() - t0)}}


def erase(worker, slot: int) -> dict:
    seq = worker.slot_seq.pop(slot, None)
    n = len(seq.cached_tokens) if seq is not None else 0
    if seq is not None and not seq.leased:
        seq.clear()
    return {"id_slot": slot, "n_erased": n}


__all__ = ["save", "restore", "erase"]
