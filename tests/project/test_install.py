"""A fresh machine installs it (issue 10): every PEP 517 entry point builds the core from an
empty cache, fetching the pinned ggml itself.

Each test copies the repository's files (nothing built or fetched comes along), gives the build
an empty HOME (so an empty ~/.cache/pyllamaspec and an empty pip cache) and no cache variables,
builds and installs the way a user would, then, in a fresh interpreter outside the checkout,
imports the result, checks that system_info names the pinned ggml and that the library is the
one just built, and evaluates a tiny model. The pinned archive must have landed in the empty
cache: the fetch ran. These tests need the package index (the build's own requirements come
from it too); without a network they skip, saying so (in CI they fail)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest

import models
from conftest import REPO, _must_have

# three builds from empty caches (ggml included): the slow set, run by .ci/run after the README's command
pytestmark = pytest.mark.slow

PIN = json.loads((REPO / "vendor" / "ggml" / "pin.json").read_text())
TIMEOUT = 1800

CHECK = r"""
import sys
import numpy as np
import pyllamaspec
from pyllamaspec.engine import _native
info = pyllamaspec.system_info()
print(info)
print("library", _native._lib_path)
print("package", pyllamaspec.__file__)
with pyllamaspec.Model(sys.argv[1], n_ctx=64) as m:
    logits = m.eval([1, 2, 3], logits="all")
    assert logits.shape == (3, m.n_vocab) and np.isfinite(logits).all()
print("eval ok")
"""


@pytest.fixture(scope="module", autouse=True)
def _index_reachable():
    url = os.environ.get("PYLLAMASPEC_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    try:
        urllib.request.urlopen(f"{url.rstrip('/')}/scikit-build-core/", timeout=20).close()
    except OSError as e:
        msg = f"no network: installing needs the package index ({url}: {e})"
        if _must_have():
            pytest.fail(msg)
        pytest.skip(msg)


def _copy_repo(dst: Path) -> Path:
    """The repository's files as a user's clone has them: tracked and new ones, no ignored ones."""
    if (REPO / ".git").exists():
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout.decode()
        for rel in filter(None, out.split("\0")):
            src = REPO / rel
            if src.is_file():
                (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst / rel)
    else:
        shutil.copytree(REPO, dst, ignore=shutil.ignore_patterns("build", "dist", ".venv", "__pycache__", "src"))
    assert not (dst / "vendor" / "ggml" / "src").exists()
    return dst


class Fresh:
    """A copy of the repository and an environment with empty caches."""

    def __init__(self, root: Path):
        self.root = root
        self.src = _copy_repo(root / "pyllamaspec-src")
        self.home = root / "home"
        self.home.mkdir()
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("PYLLAMASPEC_", "XDG_CACHE", "PIP_CACHE", "PYTHONPATH", "CMAKE_ARGS"))}
        self.env["HOME"] = str(self.home)
        for k in ("PYLLAMASPEC_INDEX_URL",):         # where the registry is stays as it was
            if k in os.environ:
                self.env[k] = os.environ[k]
        self.model = root / "tiny.gguf"
        models.write_llama_gguf(self.model)

    def run(self, *cmd, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(c) for c in cmd], env=env or self.env, cwd=cwd or self.root,
                              capture_output=True, text=True, timeout=TIMEOUT)
        if proc.returncode != 0:
            pytest.fail(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                        f"{proc.stderr[-6000:]}")
        return proc

    def check(self, python, extra_path: list[str] | None = None) -> str:
        """Imports the installed package in a fresh interpreter, outside the checkout."""
        env = dict(self.env)
        if extra_path:
            env["PYTHONPATH"] = os.pathsep.join(extra_path)
        out = self.run(python, "-c", CHECK, self.model, env=env).stdout
        assert out.startswith(f"ggml {PIN['ggml_version']} ({PIN['package']} {PIN['version']}"), out
        assert "eval ok" in out
        archive = self.home / ".cache" / "pyllamaspec" / "ggml" / PIN["filename"]
        assert archive.is_file(), "the build did not fetch the pinned ggml into the empty cache"
        return out


@pytest.fixture()
def fresh(tmp_path) -> Fresh:
    return Fresh(tmp_path)


def _library_line(out: str) -> Path:
    return Path(next(line for line in out.splitlines() if line.startswith("library ")).split(" ", 1)[1])


def _site_packages() -> list[str]:
    """This interpreter's site-packages (numpy, cffi) for an environment that lacks them."""
    return sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def test_pip_install_isolated_in_a_new_venv(fresh):
    """The README's first command on a new machine: a new virtual environment, `pip install .`
    (pip's isolated build, the default, where pip itself is not importable)."""
    venv = fresh.root / "venv"
    fresh.run(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    fresh.run(py, "-m", "pip", "install", "--disable-pip-version-check", fresh.src)
    out = fresh.check(py)
    assert str(_library_line(out)).startswith(str(venv))


def test_pip_install_editable(fresh):
    """`pip install -e .`: the Python files stay in the checkout, the core is built for it."""
    venv = fresh.root / "venv"
    fresh.run(sys.executable, "-m", "venv", "--without-pip", venv)
    py = venv / "bin" / "python"
    fresh.run(sys.executable, "-m", "pip", "--python", py, "install", "--disable-pip-version-check", "--no-deps",
              "-e", fresh.src)
    out = fresh.check(py, _site_packages())
    assert f"package {fresh.src / 'pyllamaspec' / '__init__.py'}" in out


@pytest.mark.skipif(importlib.util.find_spec("build") is None or importlib.util.find_spec("scikit_build_core") is None,
                    reason="needs the `build` package and scikit-build-core")
def test_python_m_build_sdist_then_wheel_without_isolation(fresh):
    """`python -m build --no-isolation` (a packager's build: the backend and cmake from this
    environment, not a fresh one; the isolated builds are the other tests'): an sdist, then a
    wheel built from that sdist (which has no ggml in it)."""
    dist = fresh.root / "dist"
    fresh.run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, fresh.src)
    sdist = next(dist.glob("pyllamaspec-*.tar.gz"))
    wheel = next(dist.glob("pyllamaspec-*.whl"))
    with tarfile.open(sdist) as t:
        names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
    assert "vendor/ggml/fetch.py" in names and "vendor/ggml/pin.json" in names and "pyllamaspec/files/pypi.py" in names
    assert not any(n.startswith(("vendor/ggml/src/", "build/")) for n in names)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "pyllamaspec/pyllamaspec.h" in names and any(n.startswith("pyllamaspec/libpyllamaspec.") for n in names)
    target = fresh.root / "target"
    fresh.run(sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "--target",
              target, wheel)
    out = fresh.check(sys.executable, [str(target)])
    assert str(_library_line(out)).startswith(str(target))
