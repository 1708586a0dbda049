"""Our products of a few activation rows (csrc/kernels/matmul_rows.cpp) against ggml's own,
which PYLLAMASPEC_MATMUL_ROWS=ggml brings back (read when a graph is built).

Ours keeps ggml's vec_dot arithmetic per row (activations quantized by ggml's from_float, the
same integer sums, block scales and lane order), so a row's numbers are ggml's one-token numbers
to the bit, whatever rows share the call. The comparisons are exact: against a deterministic
model (ggml's reference path, vec_dot for every row at every batch size) and against the rows
evaluated one token at a time. There is no tolerance to set: any difference is a failure."""
from __future__ import annotations

import numpy as np
import pytest

import pyllamaspec
from pyllamaspec import Model

INFO = pyllamaspec.system_info()
# where the kernel exists: x86 builds with AVX2, FMA and F16C (ggml's CPU variant says which)
OURS = all(f"{isa} = 1" in INFO for isa in ("AVX2", "FMA", "F16C"))
needs_ours = pytest.mark.skipif(not OURS, reason="matmul_rows has kernels for x86 with AVX2/FMA/F16C only")
# ggml's AMX buffer (Sapphire Rapids and later) takes Q4_0/Q4_1/Q8_0/K-quant weights before ours can:
# a model that is not deterministic then multiplies them in AMX tiles, whose batches are ggml's affair
AMX = "AMX_INT8 = 1" in INFO


def _switch(monkeypatch, kernel: str) -> None:
    if kernel == "ggml":
        monkeypatch.setenv("PYLLAMASPEC_MATMUL_ROWS", "ggml")
    else:
        monkeypatch.delenv("PYLLAMASPEC_MATMUL_ROWS", raising=False)


def _batched(path, monkeypatch, kernel: str, context, rows, n_threads: int = 2, **kw) -> np.ndarray:
    """All rows' logits of `rows` evaluated in one call after `context`."""
    _switch(monkeypatch, kernel)
    with Model(str(path), n_ctx=512, n_threads=n_threads, **kw) as m:
        m.eval(np.asarray(context, np.int32), logits="none")
        return np.array(m.eval(np.asarray(rows, np.int32), logits="all")).reshape(len(rows), -1)


def _one_at_a_time(path, monkeypatch, context, rows, kernel: str = "ggml", **kw) -> np.ndarray:
    """The rows' one-token products a row at a time: ggml's vec_dot (PYLLAMASPEC_MATMUL_ROWS=ggml),
    or ours, whose one-row products are plain decoding's."""
    _switch(monkeypatch, kernel)
    with Model(str(path), n_ctx=512, n_threads=2, **kw) as m:
        m.eval(np.asarray(context, np.int32), logits="none")
        return np.stack([np.array(m.eval(np.asarray([t], np.int32), logits="all")).reshape(-1) for t in rows])


# Q8_0, Q4_1 or F16 matrices everywhere (tied head: the embedding is the output head too); rows:
# the smallest batch, one chunk of registers (8; F16: 2), a chunk and a remainder (9, 13; F16: 3),
# the most (16; F16: 4)
CASES = [(t, n) for t in ("Q8_0", "Q4_1") for n in (2, 3, 8, 9, 13, 16)] + [("F16", n) for n in (2, 3, 4)] + \
    [("Q4_0", n) for n in (2, 9, 16)] + [("Q5_K", n) for n in (1, 2, 5, 8)]   # Q5_K: ours at 1-8 rows


# Q4_0 weights are ours only where ggml did not repack them (matmul_rows_twins: its repacked gemv and
# gemm are faster): the tests load them plain
def _plain(dtype: str) -> dict:
    return {"use_repack": False} if dtype == "Q4_0" else {}


# the models' widths: K types (Q5_K, written by tests/kquants.py) store rows in blocks of 256
def _dims(dtype: str) -> dict:
    return {"n_embd": 256, "n_ff": 256} if dtype.endswith("_K") else {"n_embd": 64, "n_ff": 96}


@needs_ours
@pytest.mark.parametrize("dtype,n_rows", CASES)
def test_equals_ggml_vec_dot_to_the_bit(synth_model, monkeypatch, dtype, n_rows):
    path = synth_model(**_dims(dtype), n_head=4, n_head_kv=2, n_layer=2, dtype=dtype, tied=True, seed=11)
    rng = np.random.default_rng(n_rows)
    context, rows = rng.integers(0, 64, 40), rng.integers(0, 64, n_rows)
    # against ggml's reference path (vec_dot for every row at every batch size, the context too)
    kw = _plain(dtype)
    ours = _batched(path, monkeypatch, "ours", context, rows, deterministic=True, **kw)
    np.testing.assert_array_equal(ours, _batched(path, monkeypatch, "ggml", context, rows, deterministic=True, **kw))
    # against ggml's one-token products, a row at a time, after the same context: batch-invariant
    ours = _batched(path, monkeypatch, "ours", context, rows, **kw)
    if not AMX or dtype == "F16":
        np.testing.assert_array_equal(ours, _one_at_a_time(path, monkeypatch, context, rows, **kw))
        # ours one row at a time (plain decoding's path) gives the same numbers too
        np.testing.assert_array_equal(ours, _one_at_a_time(path, monkeypatch, context, rows, "ours", **kw))
    # negative control: a context one token apart moves the rows
    other = context.copy()
    other[3] = (other[3] + 1) % 64
    assert np.abs(_batched(path, monkeypatch, "ours", other, rows, **kw) - ours).max() > 1e-3


# An odd vocabulary (the tied head's rows: 67, a thread's share 33 or 34) takes the AVX-512 kernels'
# two weight rows at a time and a single row at the end of a share; rows as in CASES (F16: pairs
# up to 3 rows, then a weight row at a time)
ODD_CASES = [(t, n) for t in ("Q8_0", "Q4_1", "Q4_0") for n in (2, 9, 16)] + [("F16", n) for n in (2, 3, 4)] + \
    [("Q5_K", n) for n in (2, 5, 8)]


@needs_ours
@pytest.mark.parametrize("dtype,n_rows", ODD_CASES)
def test_weight_rows_in_pairs_equal_a_row_at_a_time(synth_model, monkeypatch, dtype, n_rows):
    path = synth_model(**_dims(dtype), n_head=4, n_head_kv=2, n_layer=1, n_vocab=67, dtype=dtype, tied=True, seed=7)
    rng = np.random.default_rng(n_rows + 100)
    context, rows = rng.integers(0, 67, 24), rng.integers(0, 67, n_rows)
    kw = _plain(dtype)
    ours = _batched(path, monkeypatch, "ours", context, rows, deterministic=True, **kw)
    np.testing.assert_array_equal(ours, _batched(path, monkeypatch, "ggml", context, rows, deterministic=True, **kw))
    # PYLLAMASPEC_MATMUL_ROWS=avx2: ours a weight row at a time (the AVX2 loops), the same bits
    monkeypatch.setenv("PYLLAMASPEC_MATMUL_ROWS", "avx2")
    with Model(str(path), n_ctx=512, n_threads=2, deterministic=True, **kw) as m:
        m.eval(np.asarray(context, np.int32), logits="none")
        single = np.array(m.eval(np.asarray(rows, np.int32), logits="all")).reshape(len(rows), -1)
        assert "rows: ours (kernels/matmul_rows" in m.kernels, m.kernels
    np.testing.assert_array_equal(ours, single)
    # negative control: a context one token apart moves the rows
    other = context.copy()
    other[3] = (other[3] + 1) % 67
    assert np.abs(_batched(path, monkeypatch, "ours", other, rows, deterministic=True, **kw) - ours).max() > 1e-3


# A thread pairs weight row i with row i + half its share (two prefetch streams), a single row left
# at an odd share: the tied head's 67 rows at 1 and 3 threads (shares 67; 22, 22, 23), the layers'
# 64 and 96 (even and odd shares at 3 threads)
@needs_ours
@pytest.mark.parametrize("dtype,n_threads", [(t, n) for t in ("Q8_0", "Q4_1", "F16", "Q4_0", "Q5_K") for n in (1, 3)])
def test_pairs_half_a_share_apart_at_any_thread_count(synth_model, monkeypatch, dtype, n_threads):
    path = synth_model(**_dims(dtype), n_head=4, n_head_kv=2, n_layer=1, n_vocab=67, dtype=dtype, tied=True, seed=5)
    rng = np.random.default_rng(n_threads)
    context, rows = rng.integers(0, 67, 24), rng.integers(0, 67, 5)
    kw = _plain(dtype)
    ours = _batched(path, monkeypatch, "ours", context, rows, n_threads, deterministic=True, **kw)
    np.testing.assert_array_equal(ours, _batched(path, monkeypatch, "ggml", context, rows, n_threads,
                                                 deterministic=True, **kw))


@needs_ours
@pytest.mark.parametrize("n_rows", [2, 8, 16])
def test_real_models_equal_ggml_to_the_bit(smollm2_path, gemma3_path, monkeypatch, n_rows):
    # SmolLM2: Q4_1 layers, Q8_0 head; Gemma 3 Q4_K_M: Q4_K, Q6_K, Q5_0 and Q8_0 (where ggml repacks
    # Q4_K, ours reads a plain copy: its one-token rows are ours, and ggml's repacked gemv differs)
    rng = np.random.default_rng(5)
    context = [2, *rng.integers(100, 40000, 127)]
    rows = rng.integers(100, 40000, n_rows)
    for path in (smollm2_path, gemma3_path):
        ours = _batched(path, monkeypatch, "ours", context, rows, deterministic=True)
        np.testing.assert_array_equal(ours, _batched(path, monkeypatch, "ggml", context, rows, deterministic=True))
        if not AMX:
            ours = _batched(path, monkeypatch, "ours", context, rows)
            np.testing.assert_array_equal(ours, _one_at_a_time(path, monkeypatch, context, rows, "ours"))
            if path == smollm2_path:   # no repacked weights: ggml's one-token vec_dot, to the bit
                np.testing.assert_array_equal(ours, _one_at_a_time(path, monkeypatch, context, rows))


def test_the_kernel_record_names_the_products(smollm2_path, gemma3_path, monkeypatch):
    # the equality tests compare ours with ggml's only if the switch switches: the kernel record
    # says which products the graphs take
    _switch(monkeypatch, "ours")
    with Model(str(smollm2_path), n_ctx=256) as m:
        rec = m.kernels
    ours = "1-16 rows: ours (kernels/matmul_rows"
    for line in rec.splitlines():
        if line.startswith(("q4_1 x210 CPU", "q8_0 x1 CPU")):
            assert (ours in line) == OURS, rec
    if OURS and not AMX:
        with Model(str(gemma3_path), n_ctx=256) as m:
            lines = m.kernels.splitlines()
        for kind in ("q6_K x9 CPU:", "q5_0 x81 CPU:", "q8_0 x10 CPU:"):
            assert any(x.startswith(kind) and ours in x for x in lines), m.kernels
        # Q4_K, which ggml repacks: a plain copy for ours, from one row (TensorLoader::plain_twins)
        assert any(x.startswith("q4_K x27 CPU") and "1-16 rows: ours" in x for x in lines), m.kernels
    _switch(monkeypatch, "ggml")
    with Model(str(smollm2_path), n_ctx=256) as m:
        assert "matmul_rows" not in m.kernels, m.kernels


@needs_ours
def test_f16_weights_stay_out_of_the_amx_buffer(synth_model, monkeypatch):
    # ggml's AMX buffer only copies F16 weights (no tile kernel): a CPU-only model keeps them in the
    # plain buffer, where ours takes 1-4 rows (TensorLoader::amx_copies_only); the same without AMX
    _switch(monkeypatch, "ours")
    path = synth_model(n_embd=64, n_head=4, n_head_kv=2, n_ff=96, n_layer=2, dtype="F16", tied=True, seed=11)
    with Model(str(path), n_ctx=256) as m:
        lines = m.kernels.splitlines()
    f16 = [x for x in lines if x.startswith("f16 ")]
    assert f16 and all(x.startswith("f16 x") and " CPU: " in x and "1-4 rows: ours" in x for x in f16), lines


@needs_ours
def test_q4_0_is_ours_where_plain_and_ggml_s_where_repacked(synth_model, monkeypatch):
    # matmul_rows_twins: ggml's repacked Q4_0 gemv / gemm are faster than ours, so a repacked Q4_0
    # weight gets no plain copy; loaded plain, ours takes its 1-16 rows
    _switch(monkeypatch, "ours")
    path = synth_model(n_embd=64, n_head=4, n_head_kv=2, n_ff=96, n_layer=2, dtype="Q4_0", tied=True, seed=3)
    with Model(str(path), n_ctx=256, use_repack=False) as m:
        plain = [x for x in m.kernels.splitlines() if x.startswith("q4_0 ")]
    assert plain and all("1-16 rows: ours (kernels/matmul_rows" in x for x in plain), plain
    if "REPACK = 1" in INFO and not AMX:
        with Model(str(path), n_ctx=256) as m:
            lines = [x for x in m.kernels.splitlines() if x.startswith("q4_0 ") and "REPACK" in x]
        assert lines and all("matmul_rows" not in x for x in lines), lines


def test_the_test_writers_q5_k_blocks_round_trip():
    """tests/kquants.py's Q5_K blocks read back through gguf-py's dequantizer within half a step
    of each 32 values' grid (the negative control: a block's qh cleared loses the fifth bits)."""
    import gguf
    from kquants import quantize_q5_k
    x = np.random.default_rng(3).standard_normal((4, 512)).astype(np.float32)
    q = quantize_q5_k(x)
    back = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q5_K)
    step = (x.reshape(-1, 32).max(1) - np.minimum(x.reshape(-1, 32).min(1), 0)) / 31
    err = np.abs(back - x).reshape(-1, 32).max(1)
    # half a step, and the 6-bit scales' and mins' rounding: 0.49-0.57 of a step over 5 seeds
    assert (err <= 0.65 * step).all(), (err / step).max()
    q[:, 16:48] = 0                                     # the first block's qh: fifth bits gone
    assert np.abs(gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q5_K) - x).max() > 0.5


@needs_ours
def test_q5_k_is_ours_up_to_eight_rows(synth_model):
    # from 9 rows ggml's tiled vec_dot is the faster (matmul_rows_max)
    path = synth_model(**_dims("Q5_K"), n_head=4, n_head_kv=2, n_layer=1, dtype="Q5_K", tied=True, seed=3)
    with Model(str(path), n_ctx=64) as m:
        line = next(x for x in m.kernels.splitlines() if x.startswith("q5_K"))
    assert "1-8 rows: ours (kernels/matmul_rows" in line and "9+ rows:" in line, line
