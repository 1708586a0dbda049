"""Embeddings (psl_context_embed, Model.embed) against llama.cpp's: llama-server b11434 with
--embeddings --pooling mean|last on the real models (tests/data/reference/embeddings_llamacpp.json,
made by scripts/embeddings_reference.py).

Tolerance: on the machine the fixture was made on ours equal llama.cpp's to the 7 digits stored
(1 - cos < 1e-7). Across matmul paths of the same build (Gemma 3 evaluated one token at a time
against in one batch: other kernels, as another CPU's instruction set would pick) we measured
1 - cos up to 1.6e-3 and |difference| up to 1.0e-2 per component; MAX_1_MINUS_COS is 1e-2, six
times that. Negative controls: another text (1 - cos ~0.4) and the other pooling."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import reference_dir
from pyllamaspec import InvalidArgumentError, Model, TokenOutOfRangeError
from pyllamaspec.engine.embedding import normalize

MAX_1_MINUS_COS = 1e-2


def reference() -> dict:
    return json.loads((reference_dir() / "embeddings_llamacpp.json").read_text())


def _cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_embeddings_match_llama_cpp(name, request):
    path = request.getfixturevalue(f"{name}_path")
    ref = reference()
    want = ref["models"][name]
    assert want["file"] == path.name
    with Model(path, n_ctx=512, n_threads=2) as m:
        for pooling in ("mean", "last"):
            other = "last" if pooling == "mean" else "mean"
            for i, text in enumerate(ref["texts"]):
                got = m.embed(text, pooling)
                assert got.shape == (m.info.n_embd,) and np.linalg.norm(got) == pytest.approx(1, abs=1e-5)
                assert 1 - _cos(got, want[pooling][i]) < MAX_1_MINUS_COS, (pooling, i)
                j = (i + 1) % len(ref["texts"])
                assert 1 - _cos(got, want[pooling][j]) > 10 * MAX_1_MINUS_COS          # another text
                assert 1 - _cos(got, want[other][i]) > 10 * MAX_1_MINUS_COS            # the other pooling


def test_embed_tokens_rows_and_cache(smollm2_path):
    with Model(smollm2_path, n_ctx=128, n_batch=4, n_threads=1) as m:
        ids = m.tokenize("The quick brown fox jumps over the lazy dog")
        rows = m.embed_tokens(ids)
        assert rows.shape == (len(ids), m.info.n_embd) and rows.dtype == np.float32
        assert m.n_past == len(ids) and m.cached_tokens == ids                 # appended to the cache
        # split over n_batch = 4 and evaluated whole: the same rows; the last one pools as "last"
        m.clear()
        assert np.allclose(m.embed("The quick brown fox jumps over the lazy dog", "none"), rows, atol=1e-4)
        assert np.allclose(m.embed(ids, "last"), normalize(rows[-1]), atol=1e-5)
        assert np.allclose(m.embed(ids, "mean", normalize=-1), rows.mean(0), atol=1e-5)
        with pytest.raises(InvalidArgumentError, match="pooling"):
            m.embed("x", "cls")
        with pytest.raises(TokenOutOfRangeError):
            m.embed_tokens([m.n_vocab])
        with pytest.raises(InvalidArgumentError, match="no tokens"):
            m.embed([])


def test_normalizations_as_llama_cpp():
    v = np.array([3.0, -4.0, 0.0], np.float32)
    assert normalize(v, 2).tolist() == pytest.approx([0.6, -0.8, 0.0])
    assert normalize(v, 1).tolist() == pytest.approx([3 / 7, -4 / 7, 0.0])
    assert normalize(v, 0).tolist() == pytest.approx([3 * 32760 / 4, -32760, 0.0])
    assert normalize(v, -1).tolist() == v.tolist()
    assert normalize(v, 3).tolist() == pytest.approx((v / (27 + 64) ** (1 / 3)).tolist())
    assert normalize(np.zeros(3, np.float32)).tolist() == [0, 0, 0]
    with pytest.raises(InvalidArgumentError):
        normalize(v, -2)
