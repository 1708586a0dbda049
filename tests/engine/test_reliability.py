"""Nothing reachable from Python aborts, corrupts or leaks (issue 11): a Model shared between
threads, close() during an eval, interrupts and cancels from any thread, failed loads that
release what they acquired, and arguments checked where they enter."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import models
import pyllamaspec
from pyllamaspec import Cancel, Model
from pyllamaspec.errors import (EvaluationInterrupted, InvalidArgumentError, ModelClosedError,
                                PyllamaspecError, TokenOutOfRangeError)

LONG = (np.arange(4000) % 1000 + 10).astype(np.int32)     # ~10 s of prompt for SmolLM2 on 2 cores


@pytest.fixture(scope="module")
def tiny(synth_model):
    return synth_model(dtype="F32")


def _in_thread(fn):
    """Runs fn in a thread; returns (thread, box) where box gets ("ok", value) or ("error", exc)."""
    box = []

    def run():
        try:
            box.append(("ok", fn()))
        except BaseException as e:      # noqa: BLE001 - the test inspects it
            box.append(("error", e))
    t = threading.Thread(target=run)
    t.start()
    return t, box


def _wait_until_busy(m: Model, timeout: float = 10.0) -> None:
    """Waits until an eval holds m's context (the call is inside the core)."""
    t0 = time.perf_counter()
    while not m._users.exclusive.locked():
        assert time.perf_counter() - t0 < timeout, "the eval never started"
        time.sleep(0.005)
    time.sleep(0.2)


# ---- threads ---------------------------------------------------------------------------------

@pytest.mark.cpu_only
def test_close_during_an_eval_on_another_thread(smollm2_path):
    """close() interrupts the running eval, waits for it, then frees: no use after free (the
    audit's segfault), the eval raises, and every later call says the model is closed."""
    m = Model(smollm2_path, n_ctx=4096, n_threads=2)
    m.eval([1, 2, 3])
    t, box = _in_thread(lambda: m.eval(LONG, logits="none"))
    _wait_until_busy(m)
    t0 = time.perf_counter()
    m.close()
    closed_in = time.perf_counter() - t0
    t.join(30)
    assert not t.is_alive()
    kind, err = box[0]
    assert kind == "error" and isinstance(err, EvaluationInterrupted), box
    assert closed_in < 2.0, f"close() took {closed_in:.2f} s"
    assert m.closed
    for call in (lambda: m.eval([1]), lambda: m.n_past, lambda: m.truncate(0), lambda: m.tokenize("a"),
                 lambda: m.metadata, lambda: m.set_threads(1)):
        with pytest.raises(ModelClosedError, match="closed"):
            call()
    m.close()                                       # twice is fine


@pytest.mark.cpu_only
def test_an_eval_waiting_for_the_lock_does_not_start_after_close(smollm2_path):
    m = Model(smollm2_path, n_ctx=4096, n_threads=2)
    t1, box1 = _in_thread(lambda: m.eval(LONG, logits="none"))
    _wait_until_busy(m)
    t2, box2 = _in_thread(lambda: m.eval(LONG, logits="none"))   # queued behind the first
    time.sleep(0.2)
    m.close()
    t1.join(30), t2.join(30)
    assert box1[0][0] == "error" and box2[0][0] == "error"
    assert isinstance(box2[0][1], (ModelClosedError, EvaluationInterrupted)), box2


def test_two_threads_evaluating_one_model_are_serialized(tiny):
    """Each eval runs alone: the evals of one token by 4 threads see the prefixes 1..N of the
    same sequence, exactly the rows a sequential run gives (the audit saw GGML_ASSERT aborts
    and 60/60 wrong results)."""
    n_threads, per_thread, tok = 4, 15, 7
    N = n_threads * per_thread
    with Model(tiny, n_ctx=64, n_threads=1) as ref:
        expected = np.stack([ref.eval([tok], logits="last")[0] for _ in range(N)])
    with Model(tiny, n_ctx=64, n_threads=1) as m:
        rows: list[np.ndarray] = []
        barrier = threading.Barrier(n_threads)

        def work():
            barrier.wait()
            for _ in range(per_thread):
                rows.append(m.eval([tok], logits="last")[0].copy())
        threads = [threading.Thread(target=work) for _ in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert m.n_past == N
    matched = sorted(int(np.argmin(np.abs(expected - r).max(axis=1))) for r in rows)
    assert matched == list(range(N))
    for r in rows:
        assert np.abs(expected - r).max(axis=1).min() == 0.0


@pytest.mark.slow
@pytest.mark.cpu_only
def test_tokenizing_alongside_an_eval(smollm2_path):
    """Tokenizer calls do not wait for the context: they run while an eval does."""
    with Model(smollm2_path, n_ctx=4096, n_threads=1) as m:
        t, box = _in_thread(lambda: m.eval(LONG[:1500], logits="none"))
        _wait_until_busy(m)
        t0 = time.perf_counter()
        ids = m.tokenize("Hello world")
        waited = time.perf_counter() - t0
        busy = m._users.exclusive.locked()
        t.join(60)
        assert ids == m.tokenize("Hello world") and box[0][0] == "ok"
        assert busy and waited < 0.5


# ---- interrupts and cancels -------------------------------------------------------------------

@pytest.mark.cpu_only
def test_interrupt_from_another_thread(smollm2_path):
    with Model(smollm2_path, n_ctx=4096, n_threads=2) as m:
        m.eval([1, 2, 3])
        t, box = _in_thread(lambda: m.eval(LONG, logits="none"))
        _wait_until_busy(m)
        t0 = time.perf_counter()
        m.interrupt()
        t.join(30)
        assert time.perf_counter() - t0 < 1.0
        assert box[0][0] == "error" and isinstance(box[0][1], EvaluationInterrupted)
        assert m.n_past == 3                        # the cache as it was
        assert m.eval([5], logits="last").shape == (1, m.n_vocab)


def test_an_interrupt_between_evals_stops_the_next_one_only(tiny):
    with Model(tiny, n_ctx=16, n_threads=1) as m:
        m.interrupt()                               # nothing running: the next eval takes it
        with pytest.raises(EvaluationInterrupted):
            m.eval([1, 2])
        assert m.n_past == 0
        m.eval([1, 2])                              # consumed: this one runs
        m.interrupt()
        m.clear_interrupt()                         # withdrawn
        m.eval([3])
        assert m.n_past == 3


@pytest.mark.cpu_only
def test_cancel_stops_a_generation_and_keeps_its_tokens(smollm2_path):
    with Model(smollm2_path, n_ctx=4096, n_threads=2) as m:
        # during the prompt: stops within a node, not at the prompt's end (~10 s)
        cancel = Cancel()
        threading.Timer(0.5, cancel.set).start()
        t0 = time.perf_counter()
        r = pyllamaspec.generate(LONG.tolist(), m, max_tokens=8, cancel=cancel, temperature=0)
        assert r.finish_reason == "cancelled" and r.tokens == [] and time.perf_counter() - t0 < 3.0
        # during decoding, with a drafter: the tokens so far are kept
        cancel = Cancel()
        got = []
        for piece in pyllamaspec.generate("Once upon a time", m, "ngram", max_tokens=400, temperature=0,
                                          cancel=cancel, stream=True):
            got.append(piece)
            if len(got) == 5:
                cancel.set()
        assert 5 <= len(got) < 40
        # a cancel set after its generation ended does not stop the model's next user
        late = Cancel()
        r = pyllamaspec.generate("Hi", m, max_tokens=2, temperature=0, cancel=late)
        late.set()
        assert r.finish_reason in ("length", "stop")
        assert m.eval([1], logits="last").shape == (1, m.n_vocab)


def test_cancel_set_before_the_generation(smollm2_path):
    with Model(smollm2_path, n_ctx=512, n_threads=2) as m:
        cancel = Cancel()
        cancel.set()
        r = pyllamaspec.generate("Hello", m, max_tokens=8, cancel=cancel)
        assert r.finish_reason == "cancelled" and r.tokens == []
        r = pyllamaspec.generate("Hello", m, max_tokens=3, temperature=0)
        assert len(r.tokens) == 3


# ---- failed loads release what they acquired -------------------------------------------------

def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _bad_files(tiny, tmp_path) -> dict:
    big = tmp_path / "big.gguf"
    models.write_llama_gguf(big, n_embd=256, n_ff=512, n_layer=4, n_vocab=512)
    bad = {kind: models.corrupt_copy(big, tmp_path / f"{kind}.gguf", kind)
           for kind in ("truncated_data", "half", "truncated_kv", "magic", "n_tensors_huge", "tensor_type")}
    bad["missing"] = tmp_path / "missing.gguf"
    bad["directory"] = tmp_path
    models.write_unknown_arch_gguf(tmp_path / "arch.gguf", arch="mamba9")
    bad["unknown_arch"] = tmp_path / "arch.gguf"
    models.write_llama_gguf(tmp_path / "notensor.gguf", drop_tensors=["blk.1.ffn_up.weight"])
    bad["missing_tensor"] = tmp_path / "notensor.gguf"
    return bad


@pytest.mark.parametrize("use_mmap", [True, False], ids=["mmap", "read"])
def test_failed_loads_leak_nothing(tiny, tmp_path, use_mmap):
    """100 failed loads of each kind of bad file: no file descriptor and no memory kept (the
    audit saw +1 fd and ~3.5 MiB per truncated file: a throwing constructor ran no destructor)."""
    bad = _bad_files(tiny, tmp_path)
    bad_ctx = dict(type_k="q4_0")                   # a context that fails after the model loaded
    cases = [(k, p, {}) for k, p in bad.items()] + [("context", tiny, bad_ctx)]
    for kind, path, kw in cases:
        def attempt():
            with pytest.raises(PyllamaspecError):
                Model(path, use_mmap=use_mmap, **kw)
        for _ in range(5):                          # warm up: allocator pools, lazy imports
            attempt()
        fds, rss = _fds(), _rss()
        for _ in range(100):
            attempt()
        grew = (_rss() - rss) / 2**20
        assert _fds() == fds, f"{kind}: {_fds() - fds} file descriptors leaked over 100 loads"
        assert grew < 8, f"{kind}: RSS grew {grew:.1f} MiB over 100 failed loads"


def _split_cases(tmp_path) -> list:
    """Broken split sets (tests/models.py BAD_SPLITS), and a whole set whose context fails."""
    big, other = tmp_path / "big.gguf", tmp_path / "other.gguf"
    models.write_llama_gguf(big, n_embd=256, n_ff=512, n_layer=4, n_vocab=512)
    models.write_llama_gguf(other, n_embd=256, n_ff=512, n_layer=3, n_vocab=512)
    cases = [(k, p, {}) for k, (p, _) in models.bad_split_sets(big, other, tmp_path / "bad").items()]
    small = tmp_path / "small.gguf"
    models.write_llama_gguf(small)                  # head size 8: no q4_0 cache (blocks of 32)
    whole = models.split_gguf(small, tmp_path / "whole" / "small", n_shards=3)[0]
    return cases + [("split_context", whole, dict(type_k="q4_0"))]


@pytest.mark.parametrize("use_mmap", [True, False], ids=["mmap", "read"])
def test_failed_split_loads_leak_nothing(tmp_path, use_mmap):
    """The same for split models: every shard opened before the failure (its fd, its parsed
    header, its mapping) is released."""
    for kind, path, kw in _split_cases(tmp_path):
        def attempt():
            with pytest.raises(PyllamaspecError):
                Model(path, use_mmap=use_mmap, **kw)
        for _ in range(5):
            attempt()
        fds, rss = _fds(), _rss()
        for _ in range(100):
            attempt()
        grew = (_rss() - rss) / 2**20
        assert _fds() == fds, f"{kind}: {_fds() - fds} file descriptors leaked over 100 loads"
        assert grew < 8, f"{kind}: RSS grew {grew:.1f} MiB over 100 failed loads"


def test_failed_loads_of_a_truncated_real_model_leak_nothing(smollm2_path, tmp_path):
    """A real model's metadata (its vocabulary: ~3.5 MiB parsed) cut short in its tensor data."""
    cut = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as f:
        cut.write_bytes(f.read(8 << 20))
    for _ in range(3):
        with pytest.raises(pyllamaspec.ModelFormatError, match="truncated"):
            Model(cut)
    fds, rss = _fds(), _rss()
    for _ in range(100):
        with pytest.raises(pyllamaspec.ModelFormatError):
            Model(cut)
    assert _fds() == fds and (_rss() - rss) / 2**20 < 16


# ---- arguments are checked where they enter ---------------------------------------------------

def test_the_audits_bad_arguments(tiny, tmp_path):
    nowhere = tmp_path / "not-loaded.gguf"          # a path that would fail only if loading began
    with Model(tiny, n_ctx=16, n_threads=1) as m:
        with pytest.raises(InvalidArgumentError, match=r"n_threads must be in \[0, \d+\]"):
            m.set_threads(10**6)
        with pytest.raises(TokenOutOfRangeError):
            m.eval(np.array([2**32 + 5], np.int64))   # not token 5
        with pytest.raises(InvalidArgumentError, match="integer"):
            m.eval([5.9])
        with pytest.raises(InvalidArgumentError):
            m.eval(np.array([5.0]))
        for bad in (1.9, "1", True, 2**31, None):
            with pytest.raises(InvalidArgumentError):
                m.truncate(bad)
        with pytest.raises(InvalidArgumentError, match="out"):
            m.eval([1], out=[0.0] * 64)
        assert m.n_past == 0
    for kw in (dict(n_ctx=2**31), dict(n_ctx=2.0), dict(n_threads=10**6), dict(n_batch=2**40)):
        with pytest.raises(InvalidArgumentError):
            Model(tiny, **kw)
    for kw in (dict(top_k=10**12), dict(n_draft=10**9), dict(n_ctx=2**31), dict(max_tokens=1.5),
               dict(temperature=float("nan")), dict(seed=-1), dict(n_threads=10**6), dict(cancel=object())):
        with pytest.raises(InvalidArgumentError):
            pyllamaspec.generate("x", nowhere, nowhere, **kw)


WEIRD = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                  st.text(max_size=3), st.none(), st.lists(st.integers(-3, 3), max_size=2),
                  st.sampled_from([np.int64(3), np.float32(0.5), np.uint64(2**63 + 1), np.bool_(True)]))
GENERATE_ARGS = ["max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "n_draft", "n_min", "p_min",
                 "ngram", "draft_vocab", "n_ctx", "n_threads", "n_gpu_layers", "adaptive"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(GENERATE_ARGS), value=WEIRD)
def test_generate_arguments_property(tmp_path, name, value):
    """Any value of any numeric argument: InvalidArgumentError, or (a valid value) the missing
    model file: checked before loading, never a TypeError, OverflowError or MemoryError."""
    nowhere = tmp_path / "not-loaded.gguf"
    with pytest.raises((InvalidArgumentError, pyllamaspec.ModelNotFoundError)):
        pyllamaspec.generate("x", nowhere, **{name: value})


@pytest.fixture(scope="module")
def shared_tiny(tiny):
    with Model(tiny, n_ctx=32, n_threads=1) as m:
        yield m


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(["eval", "truncate", "set_threads", "set_output_ids", "token_to_piece", "detokenize"]),
       value=st.one_of(WEIRD, st.lists(WEIRD, max_size=3),
                       st.builds(np.array, st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=3))))
def test_model_arguments_property(shared_tiny, op, value):
    """Model calls with any argument: our exceptions only, and a refused call changes nothing."""
    m = shared_tiny
    m.truncate(0)
    m.eval([1, 2])
    try:
        if op == "eval":
            m.eval(value, logits="none")
        elif op == "detokenize":
            m.detokenize(value)
        else:
            getattr(m, op)(value)
    except PyllamaspecError:
        assert m.n_past == 2
    finally:
        m.set_output_ids(None)
        m.set_threads(1)


def test_a_named_pipe_is_refused_not_waited_on(tmp_path, smollm2_path):
    """Issue 48, item 6: -m pointing at a FIFO hung in open() (waiting for a writer)."""
    import os
    import subprocess
    import sys
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    for code in (f"from pyllamaspec import Model; Model({str(fifo)!r})",
                 f"from pyllamaspec import Tokenizer; Tokenizer({str(fifo)!r})"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "not a regular file (a named pipe)" in r.stderr, r.stderr[-500:]
    for args in (["-m", str(fifo)], ["-m", str(smollm2_path), "-md", str(fifo), "-no-cnv"]):
        r = subprocess.run([sys.executable, "-m", "pyllamaspec.cli", *args, "-p", "hi", "-n", "1"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "named pipe" in r.stderr, r.stderr[-500:]
