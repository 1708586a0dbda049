#!/usr/bin/env python3
"""Fetch the pinned ggml source into vendor/ggml/src (git-ignored).

ggml is never committed. Its source comes from one exact registry file, named with its
sha256 in pin.json next to this script: the source distribution of libggml-python, whose
folder `ggml/` is upstream ggml. The file is downloaded once with `pip download`, checked
against the pinned hash, kept in a cache (~/.cache/pyllamaspec/ggml or
$PYLLAMASPEC_CACHE/ggml) and unpacked. A rebuild finds the unpacked tree, or at worst the
cached archive, and downloads nothing.

Usage: fetch.py [DEST]       (DEST defaults to vendor/ggml/src)
Exit status 0 and the path of the ggml tree on stdout, or non-zero with a message on stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PIN = json.loads((HERE / "pin.json").read_text())
STAMP = ".pyllamaspec-pin"


class FetchError(Exception):
    pass


def cache_dir() -> Path:
    root = os.environ.get("PYLLAMASPEC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pyllamaspec")
    return Path(root) / "ggml"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(dest_dir: Path) -> Path:
    """pip download of the exact pinned source distribution (and nothing else)."""
    spec = f"{PIN['package']}=={PIN['version']}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           f"--no-binary={PIN['package']}", "-d", str(dest_dir), spec]
    print(f"pyllamaspec: downloading {spec} (ggml source) ...", file=sys.stderr)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    path = dest_dir / PIN["filename"]
    if proc.returncode != 0 or not path.is_file():
        raise FetchError(f"could not download {spec} with pip (exit {proc.returncode}).\n"
                         f"{proc.stdout[-2000:]}\n"
                         "For an offline build, unpack ggml elsewhere and configure with "
                         "-DPYLLAMASPEC_GGML_SOURCE_DIR=/path/to/ggml")
    return path


def cached_archive() -> Path:
    cache = cache_dir()
    path = cache / PIN["filename"]
    if path.is_file() and sha256(path) == PIN["sha256"]:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        got = download(Path(tmp))
        digest = sha256(got)
        if digest != PIN["sha256"]:
            raise FetchError(f"sha256 mismatch for {PIN['filename']}: expected {PIN['sha256']}, "
                             f"got {digest}. Refusing to build from an unverified ggml.")
        os.replace(got, path)
    return path


def unpack(archive: Path, dest: Path) -> None:
    """Extract <top>/ggml/** of the archive into dest, refusing links and path escapes."""
    tmp = Path(tempfile.mkdtemp(prefix=".ggml-", dir=dest.parent))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            for m in tar.getmembers():
                parts = Path(m.name).parts
                if len(parts) < 2 or parts[1] != PIN["subdir"]:
                    continue
                if m.issym() or m.islnk() or ".." in parts or Path(m.name).is_absolute():
                    raise FetchError(f"unsafe member in archive: {m.name}")
                members.append(m)
            if not members:
                raise FetchError(f"{archive.name} has no '{PIN['subdir']}/' folder")
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(tmp, members=members, **extra)
        top = tmp / Path(members[0].name).parts[0] / PIN["subdir"]
        (top / STAMP).write_text(PIN["sha256"] + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(top, dest)
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
        unpack(cached_archive(), dest)
    except FetchError as e:
        print(f"pyllamaspec: ggml fetch failed: {e}", file=sys.stderr)
        return 1
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
