"""Model.from_pretrained against a local Hugging Face cache, offline (no socket may open): quant
tags, file names, globs (llama-cpp-python's way), split sets, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")

import models  # noqa: E402
from pyllamaspec import InvalidArgumentError, Model, ModelNotFoundError  # noqa: E402
from test_hub import cache, make_cached_repo, no_network  # noqa: E402,F401 - the fixtures

REPO = "someone/Tiny-GGUF"


@pytest.fixture
def repo(cache, tmp_path):  # noqa: F811
    """A repository with two real tiny models (F32, and Q8_0 of other weights), a split F16 set,
    a decoy and an mmproj."""
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    models.write_llama_gguf(a, dtype="F32", n_vocab=64)
    models.write_llama_gguf(b, dtype="F32", n_vocab=64, seed=7)
    parts = models.split_gguf(a, tmp_path / "parts" / "tiny-F16", n_shards=2)
    data = {"tiny-F32.gguf": a.read_bytes(), "tiny-Q8_0.gguf": b.read_bytes(),
            "mmproj-tiny-F32.gguf": b"not a model", "README.md": b"hello"}
    data.update({p.name: p.read_bytes() for p in parts})
    make_cached_repo(cache, REPO, list(data), data=data)
    return {"a": a, "b": b, "parts": parts}


def _logits(m: Model) -> np.ndarray:
    return m.eval([1, 2, 3]).copy()


def test_quant_tag_file_and_glob(repo):
    with Model(repo["a"], n_ctx=32) as a, Model(repo["b"], n_ctx=32) as b:
        want_a, want_b = _logits(a), _logits(b)
    for spec, want in [("F32", want_a), ("q8_0", want_b), ("tiny-Q8_0.gguf", want_b), ("*F32.gguf", want_a),
                       ("*q8_0*", want_b), ("F16", want_a), ("*F16*", want_a)]:
        with Model.from_pretrained(REPO, spec, n_ctx=32) as m:
            assert m.n_ctx == 32 and np.array_equal(_logits(m), want), spec
            assert "models--someone--Tiny-GGUF" in m.path


def test_default_quant_falls_back(repo):
    # no Q4_K_M here: the nearest usual quant (Q8_0 before F16/F32)
    with Model.from_pretrained(REPO, offline=True, n_ctx=32) as m:
        assert m.path.endswith("tiny-Q8_0.gguf")


@pytest.mark.parametrize("args,err,words", [
    (("someone/Tiny-GGUF", "Q2_K"), ModelNotFoundError, "Q2_K"),
    (("someone/Tiny-GGUF", "*Q5*"), ModelNotFoundError, "matches"),
    (("someone/Tiny-GGUF", "tiny-*.gguf"), InvalidArgumentError, "several"),
    (("someone/Other-GGUF", "F32"), ModelNotFoundError, "not in the Hugging Face cache"),
    (("someone/Tiny-GGUF:F32", None), InvalidArgumentError, "second argument"),
    (("not a repo", "F32"), InvalidArgumentError, "user/repo"),
    (("someone/Tiny-GGUF", ""), InvalidArgumentError, "filename_or_quant"),
])
def test_errors(repo, args, err, words):
    with pytest.raises(err, match=words):
        Model.from_pretrained(*args, n_ctx=32)


def test_model_arguments_are_checked(repo):
    with pytest.raises(InvalidArgumentError, match="n_ctx"):
        Model.from_pretrained(REPO, "F32", n_ctx=-1)
