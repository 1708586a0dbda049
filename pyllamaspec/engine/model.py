"""Model: a GGUF model loaded in the core, with its own KV cache (context)."""
from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import EvaluationInterrupted, InvalidArgumentError, ModelIOError, ModelNotFoundError
from ..files import split as _split
from . import _args, _native, remote as rpc_mod
from ._native import Exclusive, Users, ffi, lib
from .context import KV_TYPES, Context, LocalContext
from .load_mode import resolve_mmap
from .head import DraftHead  # noqa: F401  (a type of attach_head's argument)
from . import prompt_cache
from .metadata import meta_value
from .prompt_cache import PromptCache
from .sequence import MAX_CHECKPOINTS, ContextSequence, SequencePool, check_out, common_prefix, logits_mode
from . import vocab_bridge
from .vocab import VocabMixin

# llama.cpp's llama_ftype names for general.file_type.
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
              17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}

# GGUF metadata value types (gguf_type).


@dataclass(frozen=True)
class ModelInfo:
    """Hyper-parameters and sizes of a loaded model."""
    arch: str
    name: str
    n_vocab: int
    n_ctx_train: int
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_embd_head_k: int
    n_embd_head_v: int
    n_ff: int
    n_rot: int
    rope_freq_base: float
    rope_freq_scale: float
    norm_eps: float
    file_type: int
    size_bytes: int
    n_params: int
    n_gpu_layers: int
    tied_output: bool
    n_embd_inp: int = 0       # the width of an image's rows: n_embd, or wider with deepstack (Qwen3-VL)

    @property
    def file_type_name(self) -> str:
        return FILE_TYPES.get(self.file_type, f"type {self.file_type}")


# How generate(), the CLI and the benchmark load a draft model given as a path.
DRAFT_OPTIONS = dict(tokenizer=False, prefetch=False)


class Model(VocabMixin, _native.Closeable):
    """A GGUF model and one context (KV cache) to evaluate tokens with.

    >>> with Model("SmolLM2-135M-Instruct.Q4_1.gguf", n_ctx=512) as m:
    ...     logits = m.eval(m.tokenize("Hello"))      # [n, n_vocab] float32
    ...     m.truncate(1)                             # roll the cache back to one token

    A split model (llama.cpp's gguf-split: ``name-00001-of-0000N.gguf`` ...) loads from its first
    part; the other parts are found beside it (see models/README.md).

    eval() returns a numpy array the core wrote into directly (no copy). The context's cache
    advances with every eval; truncate(n) rolls it back in O(1).

    Threads: a Model may be shared. Calls that use its context (eval, truncate, n_past, ...)
    run one at a time, in the order they get its lock; tokenizer and metadata calls run
    alongside them. close() interrupts a running eval, waits for the calls in flight, then
    frees the model; any call after that raises ModelClosedError. interrupt() stops an eval from
    any thread (EvaluationInterrupted). Ctrl-C stops an eval at once (KeyboardInterrupt).

    Sequences: the context holds up to n_seq_max token sequences (sequence.py), sharing its
    n_ctx cells. eval, truncate, n_past and cached_tokens are sequence 0's; a generation leases
    a sequence of its own (lease()), so generations on threads that share the Model never mix,
    and decode() evaluates the tokens of several sequences in one batch.

    use_mmap: True maps the file (llama.cpp's default), False reads the weights into memory
    backed by huge pages; None (the default) reads them in on Linux where that is faster and the
    file is small next to the free memory, else maps it (engine/load_mode.py says when, and
    why). The choice made is self.use_mmap.

    type_k / type_v: the KV cache's types ("f16", "f32", "auto", "q8_0", ...): f16, the default,
    answers as llama.cpp does; f32 attends faster on a CPU but may part from it; "auto": f32 where
    the cache is in CPU memory and takes at most 512 MiB (docs/speculation.md, "KV cache types"). self.memory
    says what was chosen. deterministic=True (CPU only): a row's logits do not depend on how many
    rows or sequences share its evaluation, so greedy speculation equals plain greedy decoding
    (ggml's reference kernels: self.kernels; slower).

    cache_ram (MiB, 0: none): a prompt cache in host memory (engine/prompt_cache.py, llama-server's
    --cache-ram): what a sequence lets go of is kept, and a later prompt sharing more of it is
    resumed from there instead of evaluated again.

    For a draft model, tokenizer=False skips building the tokenizer (its target tokenizes, and
    a 262k-token vocabulary takes ~20 MiB) and prefetch=False leaves mapped weights to be
    faulted in on first use (with a restricted head, most of a large vocabulary's output
    matrix is never read). See DRAFT_OPTIONS.

    rpc=["host:port", ...] puts the layers on ggml RPC servers and the local devices, by free
    memory or tensor_split (one share per device: the servers', then the local ones); the
    context then runs in a worker process so that a lost server is an RpcError here, and no
    call may take longer than rpc_timeout seconds (see pyllamaspec.rpc; n_gpu_layers is
    ignored: the split decides).
    """

    def __init__(self, path: str | os.PathLike, *, n_ctx: int = 0, n_batch: int = 512,
                 n_threads: int | None = None, n_gpu_layers: int = 0, use_mmap: bool | None = None,
                 use_repack: bool = True,
                 type_k: str = "f16", type_v: str = "f16", tokenizer: bool = True, prefetch: bool = True,
                 rpc: Sequence[str] | str | None = None, tensor_split: Sequence[float] | None = None,
                 rpc_timeout: float = 60.0, rpc_isolate: bool = True, n_seq_max: int = 0, deterministic: bool = False,
                 cache_ram: int = 0):
        self._lib, self._ffi = lib, ffi
        self._model = ffi.NULL
        self._context: Context | None = None
        self._users = Users("model")
        self._excl = Exclusive(self._users)
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(f"a model path is a str or os.PathLike, got {type(path).__name__}")
        path = os.fspath(path)
        if not isinstance(path, str):
            raise InvalidArgumentError(f"a model path is a str or os.PathLike, got {path!r}")
        n_ctx = _args.integer("n_ctx", n_ctx, 0, _args.MAX_CTX)
        n_batch = _args.integer("n_batch", n_batch)
        n_threads = _args.integer("n_threads", 0 if n_threads is None else n_threads, 0, lib.psl_max_threads())
        n_gpu_layers = _args.integer("n_gpu_layers", n_gpu_layers, -1)
        n_seq_max = _args.integer("n_seq_max", n_seq_max, 0, lib.PSL_SEQ_MAX)
        cache_ram = _args.integer("cache_ram", cache_ram, 0)
        for name, t in (("type_k", type_k), ("type_v", type_v)):
            if not isinstance(t, str) or t not in KV_TYPES:
                raise InvalidArgumentError(f"{name} must be one of {sorted(KV_TYPES)}, got {t!r}")
        _args.boolean("deterministic", deterministic)
        if not os.path.exists(path):
            raise ModelNotFoundError(f"model file not found: {path}")
        self.path = path
        self.deterministic = deterministic
        # mapped, or read into huge pages (engine/load_mode.py: None decides)
        use_mmap = self.use_mmap = resolve_mmap(use_mmap, path, n_gpu_layers)
        servers = rpc_mod.endpoints(rpc)
        split = rpc_mod.split_values(tensor_split, servers)
        ctx_kw = dict(n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads)
        load_kw = dict(use_mmap=use_mmap, use_repack=use_repack, prefetch=prefetch, deterministic=deterministic)
        try:
            if servers and rpc_isolate:
                self._open_remote(path, servers, split, rpc_timeout, type_k=type_k, type_v=type_v, **load_kw, **ctx_kw)
            else:
                self._open_local(path, servers, split, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                                 tokenizer=tokenizer, **load_kw)
                self._context = LocalContext(self._model, type_k=KV_TYPES[type_k], type_v=KV_TYPES[type_v],
                                             n_seq_max=n_seq_max, **ctx_kw)
        except BaseException:
            self.close()
            raise
        c = self._context
        if threading.current_thread() is threading.main_thread():
            c.set_catch_sigint(True)             # Ctrl-C stops a long eval
        self.n_ctx, self.n_batch, self.n_threads = c.n_ctx, c.n_batch, c.n_threads
        # how far truncate() rolls back in O(1): n_ctx, or a hybrid's recurrent snapshot ring
        self.max_rollback: int = c.max_rollback
        # what the cache of past tokens holds: kv_bytes over n_cells cells, recurrent_bytes
        self.memory: dict[str, int | str] = dict(c.memory)   # with the KV cache types chosen (type_k, type_v)
        # a remote context reports the model it loaded; this process holds a stub of it
        self.info = ModelInfo(**c.info) if c.info is not None else self._read_info()
        self.n_vocab = self.info.n_vocab
        self.output_ids: np.ndarray | None = None   # see set_output_ids
        self._metadata: dict[str, Any] | None = None
        self.head: "DraftHead | None" = None        # the draft head attached (attach_head)
        self._draft_modes: "weakref.WeakKeyDictionary[Model, str]" = weakref.WeakKeyDictionary()  # check_draft
        # The sequences (each keeps the ids in its cache, in order, as the core keeps only K/V:
        # a new prompt then evaluates only what follows its longest common prefix with them)
        self.n_seq_max: int = c.n_seq_max
        self.mtp_enabled = False             # enable_mtp()
        self._pool = SequencePool(self, c.n_seq_max)
        self._seq0 = self._pool.get(0)
        # states sequences let go of, for later prompts (engine/prompt_cache.py; cache_ram MiB, 0: none)
        self.prompt_cache = PromptCache(cache_ram << 20, reach=self.max_rollback) if cache_ram else None
        self.n_ctx_checkpoints = MAX_CHECKPOINTS  # a hybrid's checkpoints a sequence keeps (sequence.py)
        self._sig = threading.Lock()             # interrupts of a sequence vs. the call running
        self._running: ContextSequence | None = None

    def _open_local(self, path: str, servers: list[str], split: list[float] | None, *, n_gpu_layers: int,
                    n_threads: int, tokenizer: bool, **load: bool) -> None:
        """Loads the model in this process (its layers on local devices, or on RPC servers
        driven from here: rpc_isolate=False, as the worker process does). load: use_mmap,
        use_repack, prefetch and deterministic, psl_model_params' fields of those names."""
        mp = lib.psl_model_default_params()
        mp.n_gpu_layers, mp.n_threads, mp.load_vocab = n_gpu_layers, n_threads, bool(tokenizer)
        for name, value in load.items():
            setattr(mp, name, bool(value))
        keep = rpc_mod.set_params(mp, servers, split)      # the strings live through the load
        out = ffi.new("psl_model **")
        try:
            self._check(lib.psl_model_load(os.fsencode(path), ffi.addressof(mp), out))
        except ModelIOError as e:
            # the core names the shard it could not open; a part that is not there is "not found"
            if not isinstance(e, ModelNotFoundError) and _split.missing_parts(path):
                raise ModelNotFoundError(str(e), e.status) from None
            raise
        del keep
        self._model = out[0]

    @classmethod
    def from_pretrained(cls, repo_id: str, filename_or_quant: str | None = None, *,
                        cache_dir: str | os.PathLike | None = None, offline: bool | None = None,
                        token: str | bool | None = None, progress: bool = True, **kwargs: Any) -> "Model":
        """A model from a Hugging Face repository (llama-cpp-python's Llama.from_pretrained):

            Model.from_pretrained("user/repo-GGUF", "Q4_K_M", n_ctx=4096)
            Model.from_pretrained("user/repo-GGUF", "*q8_0.gguf")      # a glob, as llama-cpp-python

        filename_or_quant: a quant tag (None: Q4_K_M, else the nearest; see pyllamaspec.hub), a
        file name, or a glob that matches one model file. The file comes from the Hugging Face
        cache, downloaded first when needed (offline: HF_HUB_OFFLINE=1 or offline=True, the cache
        only); cache_dir, token and progress go to the download, the other keyword arguments to
        Model(). Needs huggingface_hub (pip install "pyllamaspec[hub]")."""
        from ..files.pretrained import resolve_pretrained
        path = resolve_pretrained(repo_id, filename_or_quant, cache_dir=cache_dir, offline=offline, token=token,
                                  progress=progress)
        return cls(path, **kwargs)

    def _open_remote(self, path: str, servers: list[str], split: list[float] | None, timeout: float,
                     **kw: Any) -> None:
        """The layers on RPC servers, driven by a worker process (see pyllamaspec.rpc): ggml's RPC
        client aborts its process when a server fails, which must not be this one. This process
        keeps the tokenizer and the metadata (a stub model of the file's vocabulary)."""
        self._context = r = rpc_mod.RemoteContext(path, servers, split, timeout, kw)
        out = ffi.new("psl_model **")
        self._check(lib.psl_model_load_stub(os.fsencode(path), r.info["n_vocab"], out))
        self._model = out[0]

    @property
    def devices(self) -> list[str]:
        """The device of each layer, then the output head's (e.g. "RPC0", "CPU")."""
        with self._users:
            return self._context.devices(self.info.n_layer)

    @property
    def kernels(self) -> str:
        """Which ggml kernels multiply the weights, a line per weight type and buffer (repacked,
        sgemm or tiled for batches, vec_dot, deterministic's vec_dot at every size, another device's):
        where two machines' logits differ, the path each took. Empty for weights in an RPC worker."""
        with self._users:
            return ffi.string(lib.psl_model_kernels(self._model)).decode()

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Free the context and the model: a running eval (on another thread) is interrupted,
        the calls in flight end first. Safe to call twice, from any thread."""
        if "_users" not in self.__dict__:          # __init__ failed before there was anything
            return
        self._users.close(self._free, stop=self._stop)
        if "_pool" in self.__dict__:
            self._pool.wake()                      # leases waiting for a sequence give up

    def _stop(self) -> None:
        if self._context is not None:
            self._context.interrupt()

    def _free(self) -> None:
        if self._context is not None:
            self._context.close()
            self._context = None
        if self._model != ffi.NULL:
            lib.psl_model_free(self._model)
            self._model = ffi.NULL

    @property
    def closed(self) -> bool:
        return self._users.closing or self._context is None

    def __repr__(self) -> str:
        if self.closed:
            return f"<Model {self.path!r} (closed)>"
        i = self.info
        return (f"<Model {i.arch} {i.name!r} {i.file_type_name} n_params={i.n_params} "
                f"n_ctx={self.n_ctx} n_past={self.n_past}>")

    @staticmethod
    def _check(status: int) -> None:
        _native.check(status)

    # -- information ------------------------------------------------------------------------
    def _read_info(self) -> ModelInfo:
        raw = ffi.new("psl_model_info *")
        self._check(lib.psl_model_get_info(self._model, raw))
        values = {}
        for f in ModelInfo.__dataclass_fields__:
            v = getattr(raw, f)
            if f in ("arch", "name"):
                v = ffi.string(v).decode("utf-8", "replace")
            values[f] = v
        return ModelInfo(**values)

    @property
    def metadata(self) -> dict[str, Any]:
        """All GGUF key/values: numbers, strings, and arrays (numpy arrays or lists of str)."""
        if self._metadata is None:
            with self._users:
                meta = {}
                for i in range(lib.psl_model_meta_count(self._model)):
                    key = ffi.new("char **")
                    self._check(lib.psl_model_meta_key(self._model, i, key))
                    meta[ffi.string(key[0]).decode("utf-8", "replace")] = meta_value(self._model, i)
                self._metadata = meta
        return self._metadata

    def meta(self, key: str, default: Any = None) -> Any:
        """One GGUF metadata value (without reading all of them)."""
        if not isinstance(key, str):
            raise InvalidArgumentError(f"a metadata key is a str, got {key!r}")
        with self._users:
            i = lib.psl_model_meta_find(self._model, key.encode())
            return default if i < 0 else meta_value(self._model, i)

    # -- evaluation -------------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        """Tokens in the KV cache (sequence 0)."""
        return self._seq0.n_past

    @property
    def cached_tokens(self) -> list[int]:
        """The token ids the KV cache holds (sequence 0), in order (a copy)."""
        return self._seq0.cached_tokens

    def sequence(self, seq_id: int) -> ContextSequence:
        """Sequence seq_id of the context (0 .. n_seq_max - 1), leased or not."""
        return self._pool.get(seq_id)

    def lease(self, prompt: Sequence[int] | None = None, *, wait: bool = True, stop=None) -> ContextSequence | None:
        """A sequence of its own for a generation (release() it, or use it as a context
        manager): the free one whose cache shares most of prompt, which then holds the longest
        prefix of prompt that any sequence holds (copied: shared cells). Waits while every
        sequence is leased (None if not wait; stop() true: EvaluationInterrupted)."""
        s = self._pool.lease(None if prompt is None else list(prompt), wait, stop)
        if s is not None and prompt:
            try:
                self._through_cache(prompt_cache.keep, s, prompt)   # what it lets go of is kept
                self._adopt_prefix(s, list(prompt))
                self._through_cache(prompt_cache.restore, s, prompt)  # a kept state may serve
            except BaseException:
                s.release()
                raise
        return s

    def lease_spare(self, n: int) -> list[ContextSequence]:
        """Up to n free sequences now (fewer, or none, when others hold them; no waiting), for
        one round's token tree (release() each after it)."""
        return self._pool.spare(n)

    def _through_cache(self, step, s: ContextSequence, prompt) -> None:
        if self.prompt_cache is not None:
            with self._excl:
                step(self.prompt_cache, s, list(prompt))

    def _adopt_prefix(self, s: ContextSequence, prompt: list[int]) -> None:
        with self._excl:
            src, n = self._pool.best_source(prompt, s)
            if src is not None and n > common_prefix(s._cache_ids, prompt):
                self._context.seq_copy(src.id, s.id, n)
                s._cache_ids = src._cache_ids[:n]
                s.checkpoints.update((p, b) for p, b in src.checkpoints.items() if p <= n)

    def _call(self, seq: ContextSequence | None, fn, interruptible: bool = True):
        """fn(context) under the Model's lock; an eval of seq (interruptible) can be stopped by
        seq.interrupt() alone."""
        with self._excl:
            c = self._context
            if seq is None or not interruptible:
                return fn(c)
            with self._sig:
                if seq._interrupt:
                    seq._interrupt = False
                    raise EvaluationInterrupted("evaluation interrupted", 10)
                self._running = seq
            try:
                return fn(c)
            except EvaluationInterrupted:
                seq._interrupt = False               # consumed
                raise
            finally:
                with self._sig:
                    self._running = None
                    if seq._sent:                    # consumed by the eval, or withdrawn now
                        seq._sent = False
                        c.clear_interrupt()

    def _interrupt_seq(self, seq: ContextSequence) -> None:
        with self._sig:
            seq._interrupt = True
            if self._running is seq:
                seq._sent = True
                self._users.signal(lambda: self._context.interrupt())

    def _sync(self, seq: ContextSequence, evaluated: list[int]) -> None:
        # After an eval of `evaluated`, whatever became of it: the core holds them all (done,
        # even if a KeyboardInterrupt arrived the moment the call returned) or none (a failed
        # eval leaves the cache as it was); should it ever keep part, forget the ids past what
        # it holds rather than lie.
        ids = seq._cache_ids
        if not self._context.alive:
            ids.clear()
            return
        n = self._context.seq_n_past(seq.id)
        if n == len(ids) + len(evaluated):
            ids.extend(evaluated)
        elif n != len(ids):
            del ids[min(n, len(ids)):]
            if n > len(ids):                       # unknown tokens: nothing may be reused
                self._context.seq_truncate(seq.id, 0)
                ids.clear()

    def _make_room(self, n_new: int, using: dict) -> None:
        """Empties sequences nobody holds (least recently used first) while the cells would not
        take n_new more tokens, for sequences `using` ({sequence: its new tokens}) that can
        take them; nothing when emptying them all could not make room."""
        c = self._context
        if self.n_seq_max == 1 or c.n_cells_used() + n_new <= self.n_ctx:
            return
        if any(len(s._cache_ids) + k > self.n_ctx for s, k in using.items()):
            return                                 # a sequence past n_ctx: refused anyway
        held = sum(len(s._cache_ids) for s in self._pool.all() if s.leased or s in using)
        if held + n_new > self.n_ctx:
            return
        for s in self._pool.idle():
            if c.n_cells_used() + n_new <= self.n_ctx:
                return
            if s not in using:
                prompt_cache.keep(self.prompt_cache, s, None)
                c.seq_truncate(s.id, 0)
                s._cache_ids.clear()

    def reuse_prefix(self, ids: Sequence[int]) -> int:
        """Truncates the cache (sequence 0) to its longest common prefix with ids; returns its
        length (the tokens of ids that need no evaluation)."""
        return self._seq0.reuse_prefix(ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = False, *,
                            chat_template: str | None = None, **kwargs: Any) -> "str | list[int]":
        """Renders a conversation with the model's chat template (Hugging Face's name and
        meaning): the prompt text, or with tokenize=True its token ids as llama.cpp makes them
        (special tokens parsed, no doubled BOS). chat_template: a built-in name
        (chat_template.BUILTIN_TEMPLATES), a file or Jinja source in place of the model's own;
        without either, ChatML (with a warning). Other keyword arguments (tools, ...) reach the
        template. Errors: InvalidArgumentError (ChatTemplateError from the template)."""
        from .chat_template import model_template, prompt_ids
        if not isinstance(tokenize, bool):
            raise InvalidArgumentError(f"tokenize must be True or False, got {tokenize!r}")
        tmpl = model_template(self, chat_template)
        text = tmpl.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)
        return prompt_ids(self, text, tmpl) if tokenize else text

    def eval(self, tokens: Sequence[int] | np.ndarray, logits: str = "all",
             out: np.ndarray | None = None) -> np.ndarray:
        """Evaluate tokens at positions [n_past, n_past + n) in one call and append them to the cache.

        tokens: integers in [0, n_vocab) (a list or an integer numpy array).
        logits: "all" → [n, n_vocab], "last" → [1, n_vocab], "none" → [0, n_vocab].
        out: an optional float32 C-contiguous array to write into (reused across calls).
        Ctrl-C stops a long evaluation at once: KeyboardInterrupt, the cache as it was; so does
        interrupt() from another thread, with EvaluationInterrupted.
        Returns the logits array, written by the core in place. Sequence 0's; see lease().
        """
        return self._eval_one(self._seq0, tokens, logits, out)

    def _eval_one(self, seq: ContextSequence, tokens, logits: str, out: np.ndarray | None) -> np.ndarray:
        mode = logits_mode(logits)
        toks = _args.token_ids("tokens", tokens, self.n_vocab)
        n = toks.shape[0]
        rows = n if mode == 2 else (1 if mode == 1 and n else 0)
        out = check_out(out, rows, self.n_vocab)
        evaluated = toks.tolist()

        def run(c: Context) -> None:
            self._make_room(n, {seq: n})
            try:
                if seq.id == 0:                  # the one-sequence call (a remote context's too)
                    c.eval(toks, mode, out, rows)
                else:
                    flags = np.full(n, 1 if mode == 2 else 0, np.int8)
                    if mode == 1 and n:
                        flags[-1] = 1
                    c.decode(toks, None, np.full(n, seq.id, np.int32), flags, out, rows)
            finally:
                self._sync(seq, evaluated)
        self._call(seq, run)
        return out.reshape(-1)[:rows * self.n_vocab].reshape(rows, self.n_vocab)

    def decode(self, parts: Sequence[tuple[ContextSequence, Sequence[int] | np.ndarray, str]],
               out: np.ndarray | None = None) -> list[np.ndarray]:
        """Evaluates the tokens of several sequences in one batch: parts are (sequence, tokens,
        logits) with logits "all", "last", "none" or an int n (the rows of its last n tokens: a
        prompt evaluated with its first round), one part per sequence; returns each part's
        logits rows (views of one array; out, if given, is that array). On failure every
        sequence is as it was. Not stopped by one sequence's interrupt()."""
        seqs, toks, flags = [], [], []
        for s, t, lg in parts:
            if s in seqs:
                raise InvalidArgumentError(f"sequence {getattr(s, 'id', s)} appears twice in one decode()")
            a = _args.token_ids("tokens", t, self.n_vocab)
            if isinstance(lg, (int, np.integer)) and not isinstance(lg, bool):
                _args.integer("logits", int(lg), 0, len(a))
                f = np.zeros(len(a), bool)
                f[len(a) - int(lg):] = True
            else:
                mode = logits_mode(lg)
                f = np.full(len(a), mode == 2, bool)
                if mode == 1 and len(a):
                    f[-1] = True
            seqs.append(s), toks.append(a), flags.append(f)
        tokens = np.concatenate(toks) if toks else np.zeros(0, np.int32)
        owners = [s for s, a in zip(seqs, toks) for _ in range(len(a))]
        rows = self.decode_batch(tokens, owners, np.concatenate(flags) if flags else np.zeros(0, bool), out)
        res, r = [], 0
        for f in flags:
            k = int(f.sum())
            res.append(rows[r:r + k])
            r += k
        return res

    def decode_batch(self, tokens: Sequence[int] | np.ndarray, seqs: Sequence["ContextSequence | Sequence[ContextSequence]"],
                     logits: Sequence[bool] | np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """psl_context_decode: token i joins the sequence seqs[i] (or each of a list of them: a
        token several sequences share, a node of a token tree, attending as the first; see
        csrc/engine/batch.h), each sequence's tokens continuing it; logits[i] asks for token i's
        row (None: every row). Returns the rows in batch order [n_rows, n_vocab]."""
        toks = _args.token_ids("tokens", tokens, self.n_vocab)
        n = len(toks)
        lists = [list(x) if isinstance(x, (list, tuple)) else [x] for x in seqs]
        if len(lists) != n:
            raise InvalidArgumentError(f"{n} tokens but {len(lists)} sequence entries")
        for ss in lists:
            for s in ss:
                if not isinstance(s, ContextSequence) or s.model is not self:
                    raise InvalidArgumentError("decode_batch() takes sequences of this model")
        flag = np.ones(n, np.int8) if logits is None else np.asarray(logits, bool).astype(np.int8)
        if flag.shape != (n,):
            raise InvalidArgumentError(f"logits must have one flag per token ({n})")
        n_seq_id = np.array([len(ss) for ss in lists], np.int32)
        seq_id = np.array([s.id for ss in lists for s in ss], np.int32)
        rows = int(flag.sum())
        out = check_out(out, rows, self.n_vocab)
        evaluated: dict[ContextSequence, list[int]] = {}
        for t, ss in zip(toks.tolist(), lists):
            for s in ss:
                evaluated.setdefault(s, []).append(t)
        simple = bool((n_seq_id == 1).all())

        def run(c: Context) -> None:
            self._make_room(n, {s: len(ev) for s, ev in evaluated.items()})
            try:
                c.decode(toks, None if simple else n_seq_id, seq_id, flag, out, rows)
            finally:
                for s, ev in evaluated.items():
                    self._sync(s, ev)
        self._call(None, run)
        return out.reshape(-1)[:rows * self.n_vocab].reshape(rows, self.n_vocab)

    def embed_tokens(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """Evaluate tokens like eval() (appended to the cache) and return each one's final hidden
        state, the output norm's row before the head: [n, n_embd] float32 (what llama.cpp's
        embeddings pool). See embed() for a pooled, normalized embedding of a text."""
        toks = _args.token_ids("tokens", tokens, self.n_vocab)
        out = np.empty((toks.shape[0], self.info.n_embd), dtype=np.float32)
        evaluated = toks.tolist()

        def run(c: Context) -> None:             # sequence 0's, as psl_context_embed is
            self._make_room(len(evaluated), {self._seq0: len(evaluated)})
            try:
                c.embed(toks, out)
            finally:
                self._sync(self._seq0, evaluated)
        self._call(self._seq0, run)
        return out

    def embed(self, text: "str | Sequence[int]", pooling: str = "mean", normalize: int = 2) -> np.ndarray:
        """The embedding of a text (or token ids) as llama-server makes it with --embeddings: the
        cache (sequence 0: it waits while a generation holds it) emptied, the text tokenized with special tokens (BOS where the model adds one), its
        final hidden states pooled ("mean" over all tokens, "last": the last token's, "none": every
        row, [n, n_embd], not normalized, as llama-server) and normalized (llama.cpp's
        embd_normalize: 2 Euclidean (default), 1 taxicab, 0 max absolute into int16's range, -1
        none, p > 2 the p-norm). Sequence 0 then holds the text."""
        from .embedding import check_pooling, normalize as norm, pool
        check_pooling(pooling)
        ids = self.tokenize(text, add_special=True, parse_special=True) if isinstance(text, str) else list(text)
        if not ids:
            raise InvalidArgumentError("nothing to embed: the input has no tokens")
        with self._pool.lease_id(0):             # sequence 0 alone: other generations' stay
            self._seq0.clear()
            rows = pool(self.embed_tokens(ids), pooling)
        return rows if pooling == "none" else norm(rows, normalize)

    def check_draft(self, draft: "Model") -> str:
        """How `draft` can draft for this model: "same" (it tokenizes exactly as this model) or
        "cross-vocabulary" (its drafts are text this model tokenizes again); raises where they
        cannot be bridged (vocab_bridge.py)."""
        return vocab_bridge.draft_mode(self, self._a_draft(draft), self._draft_modes)

    def vocab_difference(self, draft: "Model") -> str | None:
        """None where `draft` tokenizes exactly as this model, else the first difference."""
        return vocab_bridge.vocab_difference(self, self._a_draft(draft))

    @staticmethod
    def _a_draft(draft: "Model") -> "Model":
        if not isinstance(draft, Model):
            raise InvalidArgumentError(f"a draft is a Model, got {type(draft).__name__}")
        return draft

    def truncate(self, n_keep: int) -> None:
        """Keep the first n_keep tokens of the cache (sequence 0; O(1) rollback)."""
        self._seq0.truncate(n_keep)

    def set_output_ids(self, ids: "np.ndarray | list[int] | None") -> None:
        """Compute logits only for these token ids (the others read -inf); None: all of them.

        A draft model's head over its likely tokens drafts several times faster when the
        vocabulary is large (Gemma 3: 262k rows, most of a token's cost); the target's
        verification keeps the output exact."""
        a = np.empty(0, np.int32) if ids is None else _args.token_ids("output ids", ids, self.n_vocab)
        with self._excl:
            self._context.set_output_ids(a)
            self.output_ids = None if len(a) == 0 else a.copy()

    def add_output_ids(self, ids: "np.ndarray | list[int]") -> None:
        """Add ids to the restricted head (those in it already are skipped): one row copied
        for each new one."""
        a = _args.token_ids("output ids", np.asarray(ids).reshape(-1) if isinstance(ids, np.ndarray) else ids,
                            self.n_vocab)
        with self._excl:
            if self.output_ids is None:
                raise InvalidArgumentError("the output head is not restricted (set_output_ids first)")
            self._context.add_output_ids(a)
            new = np.setdiff1d(np.unique(a), self.output_ids, assume_unique=True)
            self.output_ids = np.concatenate([self.output_ids, new.astype(np.int32)])

    def common_token_ids(self, n: int) -> np.ndarray:
        """Up to n token ids a restricted draft head should cover, sorted (from this model's
        vocabulary: special, byte and single-character tokens, then BPE merges by rank)."""
        n = min(_args.integer("n", n), self.n_vocab)        # more than n_vocab: all of them
        out = np.empty(n, np.int32)
        got = ffi.new("int32_t *")
        with self._users:
            self._check(lib.psl_vocab_draft_ids(self._model, n, ffi.from_buffer("int32_t[]", out), got))
        return out[:got[0]]

    # -- MTP drafting (the file's NextN layers; pyllamaspec.mtp_drafter) --------------------
    @property
    def n_mtp_layers(self) -> int:
        """MTP (NextN) blocks this model can draft with: 0 or 1."""
        with self._users:
            return lib.psl_model_n_mtp_layers(self._model)

    def enable_mtp(self) -> None:
        """From now on every eval also fills the MTP block's cache (what is cached is replayed
        once); UnsupportedError when the file has no MTP layers."""
        with self._excl:
            self._context.enable_mtp()
            self.mtp_enabled = True          # a token then takes one sequence (tree/verify.py lays trees out whole)

    def mtp_draft(self, token: int, step: int, out: np.ndarray | None = None) -> np.ndarray:
        """One chained MTP step (psl_context_mtp_draft): step 0 runs `token`, the one after the
        cache, with the target's last hidden state; step s the step s - 1 draft token. Returns
        the n_vocab logits of the token after it; the cache is unchanged."""
        return self._mtp_draft(self._seq0, token, step, out)

    def _mtp_draft(self, seq: ContextSequence, token: int, step: int, out: np.ndarray | None) -> np.ndarray:
        token = _args.integer("token", token, -_args.INT32_MAX - 1)
        step = _args.integer("step", step, -_args.INT32_MAX - 1)
        if out is None:
            out = np.empty(self.n_vocab, np.float32)
        elif out.dtype != np.float32 or not out.flags.c_contiguous:
            raise InvalidArgumentError("out must be a C-contiguous float32 array")
        self._call(seq, lambda c: c.mtp_draft(token, step, out) if seq.id == 0
                   else c.seq_mtp_draft(seq.id, token, step, out))
        return out

    def _mtp_draft_nodes(self, seq: ContextSequence, tokens, parents, out: np.ndarray | None) -> np.ndarray:
        toks = np.ascontiguousarray(tokens, np.int32)
        par = np.ascontiguousarray(parents, np.int32)
        if toks.ndim != 1 or par.shape != toks.shape or not len(toks):
            raise InvalidArgumentError("tokens and parents must be two non-empty vectors of one length")
        if out is None:
            out = np.empty((len(toks), self.n_vocab), np.float32)
        elif out.dtype != np.float32 or not out.flags.c_contiguous or out.size < len(toks) * self.n_vocab:
            raise InvalidArgumentError(f"out must be a C-contiguous float32 array of {len(toks)} x {self.n_vocab}")
        self._call(seq, lambda c: c.seq_mtp_draft_nodes(seq.id, toks, par, out))
        return out.reshape(-1)[:len(toks) * self.n_vocab].reshape(len(toks), self.n_vocab)

    # -- draft heads (EAGLE-3, DFlash: engine/head.py) --------------------------------------
    def attach_head(self, head: "DraftHead | None") -> None:
        """From now on every eval keeps the inputs of the layers `head` reads and gives them to
        it (None detaches); checked against this model (UnsupportedModelError names a misfit).
        The cache is cleared: the next evals give the head its features. The head stays attached
        (its features kept across generations, so prompts still reuse the cache) until another
        head or None replaces it; attaching the head attached already changes nothing."""
        if head is not None and not isinstance(head, DraftHead):
            raise InvalidArgumentError(f"a draft head is a DraftHead, got {type(head).__name__}")
        with self._excl:
            if head is self.head:
                return
            if head is None:
                self._context.attach_head(ffi.NULL)
            else:
                with head._users:
                    self._context.attach_head(head._model)
            self.head = head
            # the core cleared every sequence; a head follows sequence 0 alone, so generations
            # lease only it while one is attached
            for s in self._pool.all():
                s._cache_ids.clear()
            self._pool.limit = 1 if head is not None else self.n_seq_max

    def head_draft(self, token: int, step: int, out: np.ndarray | None = None) -> np.ndarray:
        """One chained EAGLE-3 step (psl_context_head_draft): step 0 runs `token`, the one after
        the cache; step s the step s - 1 draft token. The n_vocab logits of the token after it."""
        token = _args.integer("token", token, -_args.INT32_MAX - 1)
        step = _args.integer("step", step, -_args.INT32_MAX - 1)
        out = self._logits_out(out, 1)
        with self._excl:
            self._context.head_draft(token, step, out)
        return out.reshape(-1)[:self.n_vocab]

    def head_block(self, token: int, n: int, out: np.ndarray | None = None) -> np.ndarray:
        """A DFlash block [token, mask x n] after the cache, one pass (psl_context_head_block):
        [n, n_vocab] logits of the n draft positions."""
        token = _args.integer("token", token, -_args.INT32_MAX - 1)
        n = _args.integer("n", n, 1, _args.MAX_DRAFT)
        out = self._logits_out(out, n)
        with self._excl:
            self._context.head_block(token, n, out)
        return out.reshape(-1)[:n * self.n_vocab].reshape(n, self.n_vocab)

    def _logits_out(self, out: np.ndarray | None, rows: int) -> np.ndarray:
        if out is None:
            return np.empty((rows, self.n_vocab), np.float32)
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous \
                or not out.flags.writeable or out.size < rows * self.n_vocab:
            raise InvalidArgumentError(f"out must be a writeable C-contiguous float32 array of {rows} x n_vocab")
        return out

    def clear(self) -> None:
        """Empty the KV cache: every sequence, but those leased by a generation running now."""
        with self._excl:
            seqs = self._pool.all()
            if not any(s.leased for s in seqs):
                self._context.clear()
                for s in seqs:
                    s._cache_ids.clear()
                return
            for s in seqs:
                if not s.leased or s is self._seq0:
                    self._context.seq_truncate(s.id, 0)
                    s._cache_ids.clear()

    def perf(self, reset: bool = False) -> dict[str, float]:
        """Wall time spent inside the core's eval (seconds), calls and tokens since the last reset,
        and the CPU threads the last eval ran with (n_threads_last: fewer than n_threads while
        other processes keep the cores busy, see docs/building.md)."""
        with self._excl:
            return self._context.perf(bool(reset))

    def interrupt(self) -> None:
        """Stops the eval running now on another thread or, if none is, the next one to start:
        it raises EvaluationInterrupted, the cache as it was. Safe from any thread (a server's
        per-request cancel; see pyllamaspec.Cancel, which also withdraws a late request)."""
        self._users.signal(lambda: self._context.interrupt())

    def catch_sigint(self, enabled: bool) -> None:
        """Whether Ctrl-C (SIGINT) interrupts this model's evaluations (on by default for a
        Model made on the main thread). A program that owns Ctrl-C itself (a server) turns it
        off and stops evaluations with interrupt() / pyllamaspec.Cancel instead."""
        if not isinstance(enabled, (bool, np.bool_)):
            raise InvalidArgumentError(f"enabled must be True or False, got {enabled!r}")
        self._users.signal(lambda: self._context.set_catch_sigint(bool(enabled)))

    def clear_interrupt(self) -> None:
        """Withdraws an interrupt() that no eval has consumed yet."""
        self._users.signal(lambda: self._context.clear_interrupt())

    def set_threads(self, n_threads: int) -> None:
        """CPU threads for evaluation: 1 to 4x the hardware threads (0: the default)."""
        n = _args.integer("n_threads", n_threads, 0, lib.psl_max_threads())
        with self._excl:
            self.n_threads = self._context.set_threads(n)
