"""Where a Model's tokens are evaluated: a context (its KV cache and the compute that fills it).

Model (model.py) drives one Context and never asks which: LocalContext runs the core in this
process; RemoteContext (remote.py) runs it in a worker process whose layers live on ggml RPC
servers, so that a lost server is an RpcError here, not an abort."""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from . import _native
from ._native import ffi, lib
from ..errors import UnsupportedModelError

# KV cache types by name (ggml_type values); "auto" is the core's PSL_KV_AUTO: f32 where every
# layer's cache is in CPU memory and small enough, else f16 (psl_context_params.type_k)
KV_TYPES = {"auto": -1, "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}


def kv_type_name(t: int) -> str:
    return next((k for k, v in KV_TYPES.items() if v == t), str(t))


class Context(ABC):
    """The operations a Model delegates. Calls come one at a time (the Model's lock), except
    interrupt() and clear_interrupt(), which any thread may call at any time."""

    n_ctx: int
    n_batch: int
    n_threads: int
    max_rollback: int          # how far truncate() rolls back in O(1) (a hybrid's snapshot ring)
    memory: dict               # kv_bytes, n_cells, recurrent_bytes: what the cache of past tokens holds
    n_seq_max: int = 1         # sequences it holds at once (ids 0 .. n_seq_max - 1)
    alive: bool = True         # False once its state is lost (a dead RPC worker)
    info: dict | None = None   # the loaded model's ModelInfo fields, where the model is elsewhere

    @abstractmethod
    def n_past(self) -> int: ...

    @abstractmethod
    def eval(self, tokens: np.ndarray, mode: int, out: np.ndarray, rows: int) -> None:
        """Evaluates int32 tokens; writes `rows` rows of logits into out (mode: 0 none, 1 last,
        2 all). Raises on failure, the cache as it was."""

    @abstractmethod
    def embed(self, tokens: np.ndarray, out: np.ndarray) -> None:
        """Evaluates int32 tokens like eval; writes each one's final hidden state (n x n_embd)."""

    @abstractmethod
    def truncate(self, n_keep: int) -> None: ...

    # -- sequences (psl_context_decode and the psl_context_seq_* calls) ---------------------
    @abstractmethod
    def decode(self, tokens: np.ndarray, n_seq_id: np.ndarray | None, seq_id: np.ndarray | None,
               flags: np.ndarray | None, out: np.ndarray, rows: int) -> None:
        """Evaluates a batch of several sequences (int32 tokens; int32 n_seq_id and the flat int32
        seq_id, None: all sequence 0; int8 flags, None: every row): `rows` rows into out."""

    @abstractmethod
    def seq_n_past(self, seq: int) -> int: ...

    @abstractmethod
    def seq_truncate(self, seq: int, n_keep: int) -> None: ...

    @abstractmethod
    def seq_copy(self, src: int, dst: int, n: int) -> None: ...

    def seq_eval_rows(self, seq: int, rows: np.ndarray, ids: np.ndarray, non_causal: bool, mode: int,
                      out: np.ndarray, grid: tuple[int, int] | None = None) -> None:
        """Evaluates float32 rows (n x n_embd: an image's, from a projector) in place of token
        embeddings at seq's next positions, its history holding the int32 ids there
        (psl_context_seq_eval_rows); grid: the rows' (nx, ny), or None."""
        raise UnsupportedModelError("images are not supported on this context (a model on RPC servers)")

    @abstractmethod
    def seq_mtp_draft(self, seq: int, token: int, step: int, out: np.ndarray) -> None: ...

    @abstractmethod
    def seq_mtp_draft_nodes(self, seq: int, tokens: np.ndarray, parents: np.ndarray, out: np.ndarray) -> None:
        """MTP draft nodes of a token tree (int32 tokens, parents: nodes of the draft so far)."""

    def n_cells_used(self) -> int:
        return self.n_past()

    def seq_state(self, seq: int) -> bytes:
        """A sequence's state (psl_context_seq_state_get): its tokens and their K/V rows."""
        raise UnsupportedModelError("a sequence's state is not saved over RPC")

    def seq_set_state(self, seq: int, state: bytes) -> None:
        """The sequence holds that state (psl_context_seq_state_set), or is left as it was."""
        raise UnsupportedModelError("a sequence's state is not loaded over RPC")

    def seq_stale(self, seq: int) -> bool:
        """Whether its next eval replays its tokens (psl_context_seq_stale)."""
        return False

    def seq_checkpoint(self, seq: int) -> bytes:
        """A hybrid's recurrent state after the sequence's last position (psl_context_seq_checkpoint_get)."""
        raise UnsupportedModelError("checkpoints are not taken over RPC")

    def seq_set_checkpoint(self, seq: int, blob: bytes) -> None:
        """The sequence, cut back to the checkpoint's position, takes it (psl_context_seq_checkpoint_set)."""
        raise UnsupportedModelError("checkpoints are not set over RPC")

    @abstractmethod
    def clear(self) -> None: ...

    @abstractmethod
    def set_output_ids(self, ids: np.ndarray) -> None:
        """Restricts the output head to ids (empty: all of them)."""

    @abstractmethod
    def add_output_ids(self, ids: np.ndarray) -> None: ...

    @abstractmethod
    def perf(self, reset: bool) -> dict[str, float]: ...

    @abstractmethod
    def set_threads(self, n_threads: int) -> int:
        """Returns the thread count now in use."""

    @abstractmethod
    def interrupt(self) -> None: ...

    @abstractmethod
    def clear_interrupt(self) -> None: ...

    def set_catch_sigint(self, on: bool) -> None:
        """Whether SIGINT interrupts an eval (the worker of a remote context gets Ctrl-C from
        this process instead)."""

    @abstractmethod
    def enable_mtp(self) -> None: ...

    @abstractmethod
    def mtp_draft(self, token: int, step: int, out: np.ndarray) -> None: ...

    @abstractmethod
    def attach_head(self, head) -> None:
        """Attaches a draft head's psl_model (ffi.NULL detaches)."""

    @abstractmethod
    def head_draft(self, token: int, step: int, out: np.ndarray) -> None: ...

    @abstractmethod
    def head_block(self, token: int, n: int, out: np.ndarray) -> None: ...

    @abstractmethod
    def devices(self, n_layer: int) -> list[str]:
        """The device of each layer, then the output head's."""

    @abstractmethod
    def close(self) -> None: ...


class LocalContext(Context):
    """A psl_context of the core, in this process."""

    def __init__(self, model, n_ctx: int, n_batch: int, n_threads: int, type_k: int, type_v: int,
                 n_seq_max: int = 0):
        self._model = model                      # the psl_model it was made from (owned by Model)
        cp = lib.psl_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_threads = n_ctx, n_batch, n_threads
        cp.type_k, cp.type_v, cp.n_seq_max = type_k, type_v, n_seq_max
        out = ffi.new("psl_context **")
        _native.check(lib.psl_context_new(model, ffi.addressof(cp), out))
        self._ctx = out[0]
        self._read_params()
        self.max_rollback = lib.psl_context_max_rollback(self._ctx)
        kv, cells, rs = ffi.new("uint64_t *"), ffi.new("int32_t *"), ffi.new("uint64_t *")
        _native.check(lib.psl_context_memory(self._ctx, kv, cells, rs))
        self.memory = {"kv_bytes": int(kv[0]), "n_cells": int(cells[0]), "recurrent_bytes": int(rs[0]),
                       "type_k": self.type_k, "type_v": self.type_v}
        self.n_seq_max = lib.psl_context_n_seq_max(self._ctx)

    def _read_params(self) -> None:
        got = ffi.new("psl_context_params *")
        _native.check(lib.psl_context_get_params(self._ctx, got))
        self.n_ctx, self.n_batch, self.n_threads = got.n_ctx, got.n_batch, got.n_threads
        self.type_k, self.type_v = kv_type_name(got.type_k), kv_type_name(got.type_v)   # "auto" resolved

    def n_past(self) -> int:
        return lib.psl_context_n_past(self._ctx)

    def eval(self, tokens: np.ndarray, mode: int, out: np.ndarray, rows: int) -> None:
        _native.check(lib.psl_context_eval(self._ctx, ffi.from_buffer("int32_t[]", tokens), len(tokens), mode,
                                           ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def embed(self, tokens: np.ndarray, out: np.ndarray) -> None:
        _native.check(lib.psl_context_embed(self._ctx, ffi.from_buffer("int32_t[]", tokens), len(tokens),
                                            ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def truncate(self, n_keep: int) -> None:
        _native.check(lib.psl_context_truncate(self._ctx, n_keep))

    def decode(self, tokens: np.ndarray, n_seq_id: np.ndarray | None, seq_id: np.ndarray | None,
               flags: np.ndarray | None, out: np.ndarray, rows: int) -> None:
        b = ffi.new("psl_batch *")
        keep = [ffi.from_buffer("int32_t[]", tokens)]
        b.n_tokens, b.tokens = len(tokens), keep[0]
        if seq_id is not None:
            keep.append(ffi.from_buffer("int32_t[]", seq_id))
            b.seq_id = keep[-1]
        if n_seq_id is not None:
            keep.append(ffi.from_buffer("int32_t[]", n_seq_id))
            b.n_seq_id = keep[-1]
        if flags is not None:
            keep.append(ffi.from_buffer("int8_t[]", flags))
            b.logits = keep[-1]
        _native.check(lib.psl_context_decode(self._ctx, b, ffi.from_buffer("float[]", out, require_writable=True),
                                             out.size))

    def seq_n_past(self, seq: int) -> int:
        return lib.psl_context_seq_n_past(self._ctx, seq)

    def seq_eval_rows(self, seq: int, rows: np.ndarray, ids: np.ndarray, non_causal: bool, mode: int,
                      out: np.ndarray, grid: tuple[int, int] | None = None, draft_token: int = 0) -> None:
        layout = ffi.new("psl_rows_layout *")
        layout.non_causal = bool(non_causal)
        layout.grid_x, layout.grid_y = grid if grid is not None else (0, 0)
        layout.draft_token = draft_token
        _native.check(lib.psl_context_seq_eval_rows(
            self._ctx, seq, ffi.from_buffer("float[]", rows), rows.shape[0], rows.shape[1],
            ffi.from_buffer("int32_t[]", ids), layout, mode,
            ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def seq_truncate(self, seq: int, n_keep: int) -> None:
        _native.check(lib.psl_context_seq_truncate(self._ctx, seq, n_keep))

    def seq_copy(self, src: int, dst: int, n: int) -> None:
        _native.check(lib.psl_context_seq_copy(self._ctx, src, dst, n))

    def seq_state(self, seq: int) -> bytes:
        size = ffi.new("int64_t *")
        _native.check(lib.psl_context_seq_state_size(self._ctx, seq, size))
        n = size[0]
        buf = bytearray(n)
        _native.check(lib.psl_context_seq_state_get(self._ctx, seq, ffi.from_buffer("uint8_t[]", buf), n))
        return bytes(buf)

    def seq_set_state(self, seq: int, state: bytes) -> None:
        _native.check(lib.psl_context_seq_state_set(self._ctx, seq, ffi.from_buffer("uint8_t[]", state), len(state)))

    def seq_stale(self, seq: int) -> bool:
        return bool(lib.psl_context_seq_stale(self._ctx, seq))

    def seq_checkpoint(self, seq: int) -> bytes:
        size = ffi.new("int64_t *")
        _native.check(lib.psl_context_seq_checkpoint_size(self._ctx, seq, size))
        buf = bytearray(size[0])
        _native.check(lib.psl_context_seq_checkpoint_get(self._ctx, seq, ffi.from_buffer("uint8_t[]", buf), len(buf)))
        return bytes(buf)

    def seq_set_checkpoint(self, seq: int, blob: bytes) -> None:
        _native.check(lib.psl_context_seq_checkpoint_set(self._ctx, seq, ffi.from_buffer("uint8_t[]", blob), len(blob)))

    def seq_mtp_draft(self, seq: int, token: int, step: int, out: np.ndarray) -> None:
        _native.check(lib.psl_context_seq_mtp_draft(self._ctx, seq, token, step,
                                                    ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def seq_mtp_draft_nodes(self, seq: int, tokens: np.ndarray, parents: np.ndarray, out: np.ndarray) -> None:
        _native.check(lib.psl_context_seq_mtp_draft_nodes(
            self._ctx, seq, len(tokens), ffi.from_buffer("int32_t[]", tokens), ffi.from_buffer("int32_t[]", parents),
            ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def n_cells_used(self) -> int:
        return lib.psl_context_n_cells_used(self._ctx)

    def clear(self) -> None:
        lib.psl_context_clear(self._ctx)

    def set_output_ids(self, ids: np.ndarray) -> None:
        _native.check(lib.psl_context_set_output_ids(self._ctx, ffi.from_buffer("int32_t[]", ids), len(ids)))

    def add_output_ids(self, ids: np.ndarray) -> None:
        _native.check(lib.psl_context_add_output_ids(self._ctx, ffi.from_buffer("int32_t[]", ids), len(ids)))

    def perf(self, reset: bool) -> dict[str, float]:
        raw = ffi.new("psl_perf *")
        _native.check(lib.psl_context_get_perf(self._ctx, raw))
        if reset:
            lib.psl_context_reset_perf(self._ctx)
        return {"t_eval": raw.t_eval_us * 1e-6, "n_evals": int(raw.n_evals), "n_tokens": int(raw.n_tokens),
                "n_threads_last": int(raw.n_threads_last), "n_compactions": int(raw.n_compactions)}

    def set_threads(self, n_threads: int) -> int:
        _native.check(lib.psl_context_set_threads(self._ctx, n_threads))
        self._read_params()
        return self.n_threads

    def interrupt(self) -> None:
        lib.psl_context_interrupt(self._ctx)

    def clear_interrupt(self) -> None:
        lib.psl_context_clear_interrupt(self._ctx)

    def set_catch_sigint(self, on: bool) -> None:
        lib.psl_context_set_catch_sigint(self._ctx, on)

    def enable_mtp(self) -> None:
        _native.check(lib.psl_context_enable_mtp(self._ctx))

    def mtp_draft(self, token: int, step: int, out: np.ndarray) -> None:
        _native.check(lib.psl_context_mtp_draft(self._ctx, token, step,
                                                ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def attach_head(self, head) -> None:
        _native.check(lib.psl_context_attach_head(self._ctx, head))

    def head_draft(self, token: int, step: int, out: np.ndarray) -> None:
        _native.check(lib.psl_context_head_draft(self._ctx, token, step,
                                                 ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def head_block(self, token: int, n: int, out: np.ndarray) -> None:
        _native.check(lib.psl_context_head_block(self._ctx, token, n,
                                                 ffi.from_buffer("float[]", out, require_writable=True), out.size))

    def devices(self, n_layer: int) -> list[str]:
        return [ffi.string(lib.psl_model_layer_device(self._model, il)).decode()
                for il in list(range(n_layer)) + [-1]]

    def close(self) -> None:
        if self._ctx != ffi.NULL:
            lib.psl_context_free(self._ctx)
            self._ctx = ffi.NULL
