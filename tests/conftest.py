"""Shared fixtures: synthetic models written once per session, the offline real models, and the
llama.cpp reference outputs."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import sys

import pytest

# The helpers here (models.py, oracle.py, ...) import as top-level modules, as scripts/ import
# them; the test files sit in folders by layer (files/, engine/, ...) and some import another's
# fixtures or helpers by its basename (from test_server import Server): every folder on the
# path, whatever subset pytest collects. (Basenames stay unique: pytest's default import mode
# refuses two test modules of one name.)
_TESTS = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(_TESTS)] + sorted(str(d) for d in _TESTS.iterdir() if d.is_dir() and any(d.glob("test_*.py")))

import models  # noqa: E402
from pypi_index import Index  # noqa: E402

# A suite started in the background (`.ci/run &` from a script) inherits SIGINT ignored, and so
# would every program the Ctrl-C tests start (an ignored signal stays ignored across exec, and
# Python then installs no KeyboardInterrupt): Ctrl-C is what those tests send, so the suite
# takes it back. (A handler, unlike SIG_IGN, is reset to the default in a child.)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = _TESTS.parent

_ON_CPU = [False]     # the running test is marked cpu_only


def _offload_by_default() -> None:
    """PYLLAMASPEC_TEST_GPU_LAYERS=N runs the suite with N layers on the GPU (-1: all) wherever
    a test does not choose (scripts/gpu_check.sh): every Model defaults to n_gpu_layers=N, except
    in tests marked cpu_only."""
    n = os.environ.get("PYLLAMASPEC_TEST_GPU_LAYERS")
    if not n:
        return
    from pyllamaspec.engine import model
    init = model.Model.__init__

    def offloaded(self, path, **kwargs):
        if not _ON_CPU[0]:
            kwargs.setdefault("n_gpu_layers", int(n))
        init(self, path, **kwargs)
    model.Model.__init__ = offloaded


_offload_by_default()


@pytest.fixture(autouse=True)
def _backend_markers(request):
    """cpu_kernels: the test checks a property of ggml's CPU kernels (bit-identical results across
    batch shapes, ...): skipped when the suite offloads to a GPU, whose kernels round otherwise.
    cpu_only: the test checks behaviour around CPU steps (interrupts within a node, thread
    budgets): its Models stay on the CPU when the suite offloads."""
    import tolerances
    if request.node.get_closest_marker("cpu_kernels") and tolerances.backend() != "cpu":
        pytest.skip(f"a property of ggml's CPU kernels; on {tolerances.backend()} compare with llama.cpp's own "
                    f"results there ({tolerances.MEASURE})")
    _ON_CPU[0] = request.node.get_closest_marker("cpu_only") is not None
    yield
    _ON_CPU[0] = False


def reference_dir() -> pathlib.Path:
    """llama.cpp's outputs on the real models (tests/data/reference, copied from the team's
    shared folder with its README), or $PYLLAMASPEC_REFERENCE."""
    env = os.environ.get("PYLLAMASPEC_REFERENCE")
    return pathlib.Path(env) if env else REPO / "tests" / "data" / "reference"


def _must_have() -> bool:
    # CI sets this: there a missing model or reference is a failure, not a skip.
    return os.environ.get("PYLLAMASPEC_REQUIRE_MODELS", "") not in ("", "0")


def load_reference(kind: str, model: str) -> list[dict]:
    path = reference_dir() / f"{kind}_shared_{model}.jsonl"
    if not path.is_file():
        pytest.fail(f"reference file {path} not found")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def real_model(name: str) -> pathlib.Path:
    try:
        return models.real_model_path(name)
    except models.ModelUnavailable as e:
        if _must_have():
            pytest.fail(f"real model {name} unavailable: {e}")
        pytest.skip(f"real model {name} unavailable: {e}")


@pytest.fixture(scope="session")
def smollm2_path() -> pathlib.Path:
    return real_model("smollm2")


@pytest.fixture(scope="session")
def gemma3_path() -> pathlib.Path:
    return real_model("gemma3")


@pytest.fixture(scope="session")
def qwen35_path(tmp_path_factory) -> pathlib.Path:
    """The default tiny random hybrid (tests/models_qwen35.py), written once."""
    from models_qwen35 import write_qwen35_gguf
    path = tmp_path_factory.mktemp("qwen35") / "qwen35.gguf"
    write_qwen35_gguf(path)
    return path


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("synthetic")


_SYNTH: dict[tuple, pathlib.Path] = {}


@pytest.fixture(scope="session")
def synth_model(synth_dir):
    """synth_model(**kwargs) -> path of a tiny random GGUF written by tests/models.py (cached)."""
    def make(**kwargs) -> pathlib.Path:
        key = tuple(sorted(kwargs.items()))
        if key not in _SYNTH:
            name = "m" + str(len(_SYNTH)) + ".gguf"
            path = synth_dir / name
            models.write_llama_gguf(path, **kwargs)
            _SYNTH[key] = path
        return _SYNTH[key]
    return make


@pytest.fixture(params=[True, False], ids=["pep691-json", "pep503-html"])
def index(request, monkeypatch):
    """A package index on loopback (PEP 691 JSON or PEP 503 HTML), the only one the registry
    code may use during the test."""
    idx = Index(json_api=request.param)
    monkeypatch.setenv("PYLLAMASPEC_INDEX_URL", idx.url)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    yield idx
    idx.server.shutdown()
