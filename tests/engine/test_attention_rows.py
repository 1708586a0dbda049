"""Our attention for a few query rows (csrc/kernels/attention_rows.cpp) against ggml's own flash
attention, which PYLLAMASPEC_ATTN_ROWS=ggml brings back (read when a graph is built).

Ours keeps ggml's row-path arithmetic: Q rounded to F16, Q.K summed in ggml_vec_dot_f16's order
for this build's registers, expf cell by cell, the V accumulator rounded to F16 at every cell. On
x86 (AVX2, AVX-512) and without SIMD its numbers are therefore ggml's to the bit; where ggml
accumulates in native F16 arithmetic (AVX512-FP16 from heads of 128, ARM's FP16 from 32) ggml's
own kernel runs, so the comparisons hold there too."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamaspec import Model


def _logits(path, monkeypatch, kernel: str, context, rows, **kw) -> np.ndarray:
    """All rows' logits of `rows` evaluated in one call after `context`."""
    if kernel == "ggml":
        monkeypatch.setenv("PYLLAMASPEC_ATTN_ROWS", "ggml")
    else:
        monkeypatch.delenv("PYLLAMASPEC_ATTN_ROWS", raising=False)
    with Model(str(path), n_ctx=512, n_threads=2, **kw) as m:
        m.eval(np.asarray(context, np.int32), logits="none")
        return np.array(m.eval(np.asarray(rows, np.int32), logits="all")).reshape(len(rows), -1)


# heads of 16 (below every SIMD step: all in double, in order), 64 (one AVX-512 step), 80 (a step
# and a remainder) and 128 (two AVX-512 steps)
@pytest.mark.parametrize("head_dim", [16, 64, 80, 128])
@pytest.mark.parametrize("n_rows", [1, 2, 5, 16])
def test_equals_ggml_to_the_bit(synth_model, monkeypatch, head_dim, n_rows):
    path = synth_model(n_embd=64, n_head=4, n_head_kv=2, head_dim=head_dim, n_layer=2, dtype="F32", seed=7)
    rng = np.random.default_rng(n_rows)
    context, rows = rng.integers(0, 64, 40), rng.integers(0, 64, n_rows)
    ours = _logits(path, monkeypatch, "ours", context, rows)
    ggml = _logits(path, monkeypatch, "ggml", context, rows)
    np.testing.assert_array_equal(ours, ggml)
    # negative control: a context one token apart moves the rows
    other = context.copy()
    other[3] = (other[3] + 1) % 64
    assert np.abs(_logits(path, monkeypatch, "ggml", other, rows) - ggml).max() > 1e-3


@pytest.mark.parametrize("n_rows", [1, 8])
def test_real_model_equals_ggml_to_the_bit(smollm2_path, monkeypatch, n_rows):
    # SmolLM2: heads of 64, three query heads to a K/V head, 128 cells of context
    rng = np.random.default_rng(3)
    context = [1, *rng.integers(100, 40000, 127)]
    rows = rng.integers(100, 40000, n_rows)
    ours = _logits(smollm2_path, monkeypatch, "ours", context, rows)
    np.testing.assert_array_equal(ours, _logits(smollm2_path, monkeypatch, "ggml", context, rows))


def test_the_kernel_record_names_the_attention(smollm2_path, monkeypatch):
    # the equality tests above compare ours with ggml's only if the switch switches: the model's
    # kernel record says which attention its graphs take
    monkeypatch.delenv("PYLLAMASPEC_ATTN_ROWS", raising=False)
    with Model(str(smollm2_path), n_ctx=256) as m:
        line = next(x for x in m.kernels.splitlines() if x.startswith("attention, below 64"))
    assert "ours" in line or "native F16" in line, line
    monkeypatch.setenv("PYLLAMASPEC_ATTN_ROWS", "ggml")
    with Model(str(smollm2_path), n_ctx=256) as m:
        assert "attention, below 64 query rows: ggml's" in m.kernels
