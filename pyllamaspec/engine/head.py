"""DraftHead: an EAGLE-3, DFlash or Gemma 4 assistant draft head (a GGUF file of architecture
"eagle3", "dflash" or "gemma4-assistant").

A head has no context of its own: it is attached to its target (Model.attach_head), whose every
eval then keeps the inputs of the target layers the head reads and hands them to it, in the core
(csrc/engine/head.h; an assistant reads the target's final hidden rows and attends over its
cache). Drafting goes through the target: Model.head_draft (chained steps: EAGLE-3, the
assistant) and Model.head_block (a DFlash block)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import InvalidArgumentError, ModelNotFoundError, UnsupportedModelError
from . import _native
from ._native import Users, ffi, lib

# general.architecture of a head -> its llama.cpp --spec-type
HEAD_TYPES = {"eagle3": "draft-eagle3", "dflash": "draft-dflash", "gemma4-assistant": "draft-mtp"}
_KINDS = {1: "eagle3", 2: "dflash", 3: "gemma4-assistant"}


def file_arch(path: str | os.PathLike) -> str:
    """general.architecture of a GGUF file, read without loading its weights."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelNotFoundError(f"model file not found: {path}")
    buf = ffi.new("char[64]")
    _native.check(lib.psl_file_arch(os.fsencode(path), buf, 64))
    return ffi.string(buf).decode("utf-8", "replace")


@dataclass(frozen=True)
class HeadInfo:
    """kind: "eagle3", "dflash" or "gemma4-assistant"; the target layers whose inputs it reads; the target hidden size
    it was trained on; the rows of its output (its draft vocabulary); DFlash's block size (the
    anchor included) and mask token (0 and -1 for EAGLE-3)."""
    kind: str
    target_layers: tuple[int, ...]
    n_embd_target: int
    n_draft_vocab: int
    block_size: int
    mask_token: int


class DraftHead(_native.Closeable):
    """An EAGLE-3 or DFlash head, loaded for a target (Model.attach_head); n_gpu_layers puts its
    layers on the GPU (the target's must be there too)."""

    def __init__(self, path: str | os.PathLike, *, n_gpu_layers: int = 0, use_mmap: bool = True):
        self._model = ffi.NULL
        self._users = Users("draft head")
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(f"a head path is a str or os.PathLike, got {type(path).__name__}")
        self.path = os.fspath(path)
        arch = file_arch(self.path)
        if arch not in HEAD_TYPES:
            raise UnsupportedModelError(f"'{self.path}' is a {arch or 'GGUF'} model, not a draft head "
                                        f"(eagle3, dflash, gemma4-assistant)")
        mp = lib.psl_model_default_params()
        mp.n_gpu_layers = n_gpu_layers
        mp.use_mmap = bool(use_mmap)
        mp.load_vocab = False
        mp.prefetch = False
        out = ffi.new("psl_model **")
        _native.check(lib.psl_model_load(os.fsencode(self.path), ffi.addressof(mp), out))
        self._model = out[0]
        raw = ffi.new("psl_head_info *")
        _native.check(lib.psl_model_head_info(self._model, raw))
        self.info = HeadInfo(_KINDS[raw.kind], tuple(raw.target_layers[i] for i in range(raw.n_target_layers)),
                             raw.n_embd_target, raw.n_draft_vocab, raw.block_size, raw.mask_token)
        mi = ffi.new("psl_model_info *")
        _native.check(lib.psl_model_get_info(self._model, mi))
        self.n_vocab = mi.n_vocab

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def spec_type(self) -> str:
        """llama.cpp's --spec-type for this head."""
        return HEAD_TYPES[self.info.kind]

    def close(self) -> None:
        """Frees this handle; a target it is attached to keeps the head alive until detached."""
        if "_users" not in self.__dict__:
            return
        self._users.close(self._free)

    def _free(self) -> None:
        if self._model != ffi.NULL:
            lib.psl_model_free(self._model)
            self._model = ffi.NULL

    @property
    def closed(self) -> bool:
        return self._users.closing

    def __repr__(self) -> str:
        return f"<DraftHead {self.info.kind} {self.path!r}>" if not self.closed else f"<DraftHead {self.path!r} (closed)>"
