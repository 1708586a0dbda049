"""Fetch GGUF models from the Hugging Face Hub, the way llama.cpp's ``-hf user/repo[:QUANT]`` does.

``resolve("user/repo:Q8_0")`` lists the repository's files, picks the ``.gguf`` whose name carries
the quant tag, downloads it into the standard Hugging Face cache with
``huggingface_hub.hf_hub_download`` and returns its local path. Once a file is cached it resolves
with no network at all when offline mode is on (``HF_HUB_OFFLINE=1`` or ``offline=True``); the
repository listing then comes from the cached snapshot.

``huggingface_hub`` is an optional dependency (``pip install huggingface-hub``); it is imported only
when a function here needs it.

Selection rules (:func:`select_gguf`):

* a file matches the tag when its name, less ``.gguf`` and any ``-0000k-of-0000N`` split suffix,
  ends with the tag as a whole word: ``model-Q4_K_M.gguf``, ``model.Q4_K_M.gguf``,
  ``Q4_K_M.gguf``, ``Q4_K_M/model-Q4_K_M-00001-of-00002.gguf`` all match ``Q4_K_M`` (any case), but
  ``model-IQ4_K_M.gguf`` or ``model-Q4_K_M_L.gguf`` do not. Multimodal projectors (``mmproj``) are
  never picked as the model.
* among matches a single file beats a split set, then a shallower, shorter, then alphabetically
  first path wins.
* with no tag the default is ``Q4_K_M``; if the repository has none, the nearest usual quant is
  taken (see ``DEFAULT_FALLBACK``) and a warning is logged. An explicit tag that matches nothing is
  an error (:class:`QuantNotFoundError`) that lists the quants and GGUF files available.
* a split model (``-00001-of-0000N``) resolves to all its parts: :func:`resolve` downloads every
  part and returns the first, which is what :class:`~pyllamaspec.Model` (like llama.cpp) loads;
  the core finds the other parts beside it.

The vision projector (:func:`select_mmproj`, :func:`resolve_with_mmproj`), as llama.cpp's ``-hf``
finds it for the programs that take images (llama-server, llama-mtmd-cli, llama-cli):

* a candidate is a ``.gguf`` whose file name holds ``mmproj`` (any case), in the model file's
  folder or a folder above it (the repository's root included); one in a subfolder of the model's
  folder, or in another branch of the tree, is never taken;
* the deepest folder wins (the model's own before its parent), then the quant closest in bits to
  the model's (a file's bits: the first number of the tag after its name's last ``-`` or ``.``,
  ``Q4_K_M`` 4, ``F16``/``BF16`` 16, ``Q8_0`` 8; no tag 0), then the first in path order. So a
  ``Q8_0`` model takes ``mmproj-Q8_0.gguf`` over ``mmproj-F16.gguf``, and a ``Q4_K_M`` one takes
  ``mmproj-BF16.gguf`` over ``mmproj-F16.gguf`` over ``mmproj-F32.gguf``;
* a repository without one resolves to no projector (None), which is no error: the model is text
  only.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import pathlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple

from ..errors import InvalidArgumentError, ModelIOError, ModelNotFoundError, PyllamaspecError
from .split import SPLIT_RE, is_split, split_info, split_parts

__all__ = [
    "DEFAULT_QUANT", "DEFAULT_FALLBACK", "HubDependencyError", "HubModelNotFoundError",
    "QuantNotFoundError", "Selection", "parse_spec", "select_gguf", "available_quants",
    "hub_cache_dir", "is_offline", "cached_repo_files", "resolve", "select_mmproj", "resolve_with_mmproj",
    "Resolved",
]

log = logging.getLogger("pyllamaspec.hub")

DEFAULT_QUANT = "Q4_K_M"

# When no tag is given and the repository has no Q4_K_M: the nearest usual quants, in order.
DEFAULT_FALLBACK = (
    "Q4_K_M", "Q4_K_S", "Q4_0", "Q4_1", "IQ4_XS", "IQ4_NL", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1",
    "Q6_K", "Q8_0", "Q3_K_L", "Q3_K_M", "Q3_K_S", "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS", "Q2_K",
    "F16", "BF16", "F32",
)

_SPLIT_RE = SPLIT_RE
_split_info, _is_split, _split_parts = split_info, is_split, split_parts
_GGUF_RE = re.compile(r"\.gguf$", re.IGNORECASE)
# A quant tag at the end of a file stem: Q4_K_M, IQ4_XS, Q8_0, TQ1_0, F16, BF16, MXFP4_MOE, UD-Q4_K_XL...
_QUANT_TAIL_RE = re.compile(
    r"(?:^|[-._/])((?:UD-)?(?:I?Q\d+(?:_[A-Z0-9]+)*|TQ\d+_\d+|B?F\d+|FP\d+|MXFP\d+(?:_[A-Z0-9]+)*))$",
    re.IGNORECASE)
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_REPO_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_TRUE = {"1", "on", "yes", "true"}

# When the Hub could not be listed (huggingface_hub retries a failing request for ~20 s before it
# gives up), later resolves with offline=None go straight to the cache for this long: a -hf model
# and its -hfd draft then pay the wait once.
UNREACHABLE_MEMO_S = 60.0
_hub_unreachable_at: float | None = None


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


class HubDependencyError(PyllamaspecError, ImportError):
    """``huggingface_hub`` is needed (for ``-hf``) but not installed."""


class HubModelNotFoundError(ModelNotFoundError):
    """The repository, or the GGUF file asked for, could not be found (on the Hub or, offline, in
    the local cache). ``repo_id`` names the repository."""

    def __init__(self, message: str, *, repo_id: str | None = None):
        super().__init__(message)
        self.repo_id = repo_id


class QuantNotFoundError(HubModelNotFoundError):
    """No GGUF in the repository carries the requested quant tag. ``quant``, ``available`` (the quant
    tags found) and ``files`` (the GGUF files seen) say what there was."""

    def __init__(self, message: str, *, repo_id: str | None = None, quant: str | None = None,
                 available: list[str] | None = None, files: list[str] | None = None):
        super().__init__(message, repo_id=repo_id)
        self.quant = quant
        self.available = list(available or [])
        self.files = list(files or [])


# ---------------------------------------------------------------------------------------------
# pure helpers: spec parsing and file selection
# ---------------------------------------------------------------------------------------------


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"user/repo[:QUANT]"`` → ``("user/repo", "QUANT" or None)``."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError("a Hugging Face model is given as user/repo[:QUANT]; got an empty value")
    s = spec.strip()
    repo_id, sep, tag = s.partition(":")
    tag = tag.strip()
    if sep and not tag:
        raise InvalidArgumentError(f"{spec!r}: empty quant tag after ':' (expected user/repo[:QUANT])")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_REPO_PART_RE.match(p) for p in parts):
        raise InvalidArgumentError(
            f"{spec!r} is not a Hugging Face repository: expected user/repo[:QUANT], "
            "e.g. ggml-org/gemma-3-1b-it-GGUF:Q4_K_M")
    if tag and not _TAG_RE.match(tag):
        raise InvalidArgumentError(f"{spec!r}: bad quant tag {tag!r}")
    return repo_id, (tag or None)


def _is_gguf(path: str) -> bool:
    return bool(_GGUF_RE.search(path))


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _is_mmproj(path: str) -> bool:
    return "mmproj" in _basename(path).lower()


def _stem(path: str) -> str:
    """The path less ``.gguf`` and less any split suffix."""
    m = _SPLIT_RE.search(path)
    if m:
        return path[:m.start()]
    return _GGUF_RE.sub("", path)


def _quant_of(path: str) -> str | None:
    m = _QUANT_TAIL_RE.search(_stem(path))
    return m.group(1).upper() if m else None


def _tag_matches(path: str, tag: str) -> bool:
    """``tag`` ends the file stem as a whole word: after ``-``, ``.``, ``/`` or the start, or after
    ``_`` when the tag itself looks like a quant (``model_Q8_0``; but ``K_M`` is no tag of
    ``model-Q4_K_M``)."""
    seps = "-./_" if _QUANT_TAIL_RE.fullmatch(tag) else "-./"
    pattern = r"(?:^|[" + re.escape(seps) + r"])" + re.escape(tag) + r"$"
    return re.search(pattern, _stem(path), re.IGNORECASE) is not None


@dataclass(frozen=True)
class Selection:
    """The file chosen in a repository: ``filename`` is what to load (part 1 for a split model),
    ``parts`` every file to download (just ``filename`` unless split)."""

    filename: str
    parts: tuple[str, ...] = field(default=())
    quant: str | None = None

    @property
    def is_split(self) -> bool:
        return len(self.parts) > 1 or _is_split(self.filename)


def _model_candidates(files: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """GGUF model files (no mmproj), a split set collapsed to its first part: name → parts."""
    files = [f for f in files if _is_gguf(f) and not _is_mmproj(f)]
    present = set(files)
    out: dict[str, tuple[str, ...]] = {}
    for f in files:
        if not _is_split(f):
            out[f] = (f,)
            continue
        parts = _split_parts(f)
        if parts[0] in out:
            continue
        # An incomplete set keeps only the parts present: resolve() then says it is incomplete.
        out[parts[0]] = tuple(p for p in parts if p in present)
    return out


def _rank(item: tuple[str, tuple[str, ...]]):
    name, _parts = item
    return (_is_split(name), name.count("/"), len(name), name)


def available_quants(files: Iterable[str]) -> list[str]:
    """The quant tags of the GGUF model files in ``files`` (uppercase, sorted, unique)."""
    quants = {_quant_of(name) for name in _model_candidates(files)}
    return sorted(q for q in quants if q)


def _gguf_listing(files: Iterable[str]) -> list[str]:
    return sorted(f for f in files if _is_gguf(f))


def _format_list(items: list[str], limit: int = 30) -> str:
    if not items:
        return "(none)"
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def select_gguf(files: Iterable[str], quant: str | None = None, *, repo_id: str = "user/repo",
                where: str = "", hint: str = "") -> Selection:
    """Pick the GGUF in ``files`` (repository-relative paths) for ``quant`` (None: the default,
    Q4_K_M with fallback). Raises :class:`HubModelNotFoundError` when there is no GGUF at all and
    :class:`QuantNotFoundError` when an explicit tag matches nothing."""
    files = list(files)
    cands = _model_candidates(files)
    ggufs = _gguf_listing(files)
    if not cands:
        raise HubModelNotFoundError(
            f"{repo_id}: no GGUF model file{where} (files: {_format_list(sorted(files), 15)}). "
            "pyllamaspec runs GGUF models: pick a repository that has .gguf files "
            "(often named ...-GGUF)." + hint, repo_id=repo_id)
    tag = quant or DEFAULT_QUANT
    matches = sorted(((n, p) for n, p in cands.items() if _tag_matches(n, tag)), key=_rank)
    if matches:
        name, parts = matches[0]
        return Selection(name, parts, _quant_of(name) or tag.upper())
    avail = available_quants(files)
    if quant is None:
        ordered = sorted(cands.items(), key=_rank)
        pick = None
        for split in (False, True):  # a single file beats a split set across the whole list
            pick = next(((n, p) for q in DEFAULT_FALLBACK for n, p in ordered
                         if _is_split(n) == split and _tag_matches(n, q)), None)
            if pick is not None:
                break
        if pick is None:
            pick = ordered[0]
        log.warning("%s has no %s GGUF%s; using %s (ask for another with %s:QUANT; available: %s)",
                    repo_id, DEFAULT_QUANT, where, pick[0], repo_id, _format_list(avail))
        return Selection(pick[0], pick[1], _quant_of(pick[0]))
    raise QuantNotFoundError(
        f"{repo_id}: no GGUF file{where} matches the quant tag {quant!r}. "
        f"Available quants: {_format_list(avail)}. GGUF files: {_format_list(ggufs)}. "
        f"Use {repo_id}:<QUANT> with one of those, or name the file with --hf-file." + hint,
        repo_id=repo_id, quant=quant, available=avail, files=ggufs)


# A name's quant tag as llama.cpp's sibling rule reads it: what follows the stem's last - or .
# when that is letters, digits and underscores only (model-Q4_K_M: Q4_K_M; mmproj-f16: f16).
_LAST_TAG_RE = re.compile(r"[-.]([A-Za-z0-9_]+)\Z")
_FIRST_NUMBER_RE = re.compile(r"\d+")


def _quant_bits(path: str) -> int:
    """The bits of the file's quant, as llama.cpp ranks siblings: the first number in the tag
    ending its name (split suffix off): Q4_K_M 4, IQ4_XS 4, Q8_0 8, F16 and BF16 16, F32 32;
    0 when the name has no such tag or the tag no number."""
    m = _LAST_TAG_RE.search(_stem(path))
    n = _FIRST_NUMBER_RE.search(m.group(1)) if m else None
    return int(n.group()) if n else 0


def _folders(path: str) -> list[str]:
    return path.split("/")[:-1]


def select_mmproj(files: Iterable[str], model_file: str) -> str | None:
    """The vision projector (``mmproj`` GGUF) in ``files`` (repository-relative paths) for the
    model file ``model_file`` (for a split model, any of its parts), by llama.cpp's sibling rule;
    None when the repository has none beside the model.

    A candidate is a ``.gguf`` whose file name holds ``mmproj`` (any case) and whose folder is the
    model's or one above it. The deepest such folder wins; within it, the quant closest in bits
    to the model's (:func:`_quant_bits`); then the first in path order."""
    model_dirs = _folders(model_file)
    model_bits = _quant_bits(model_file)
    best: tuple[int, int, str] | None = None        # (-depth, bits apart, path): the least wins
    for f in sorted(set(files)):
        if not _is_gguf(f) or not _is_mmproj(f) or f == model_file:
            continue
        dirs = _folders(f)
        if dirs != model_dirs[:len(dirs)]:            # a subfolder or another branch: not a sibling
            continue
        key = (-len(dirs), abs(_quant_bits(f) - model_bits), f)
        if best is None or key < best:
            best = key
    return best[2] if best else None


# ---------------------------------------------------------------------------------------------
# environment: huggingface_hub, cache location, offline mode
# ---------------------------------------------------------------------------------------------


def _import_hf():
    try:
        import huggingface_hub
    except ImportError as e:
        raise HubDependencyError(
            "downloading models from the Hugging Face Hub (-hf / -hfd) needs the optional package "
            "huggingface_hub: pip install huggingface-hub  (or pip install 'pyllamaspec[hub]'); "
            "or download the .gguf yourself and pass its path with -m") from e
    return huggingface_hub


def _hf_error(hf, name: str) -> type:
    """An exception class of huggingface_hub by name, wherever this version keeps it (a class
    nothing raises when absent)."""
    for modname in ("errors", "utils"):
        mod = getattr(hf, modname, None)
        if mod is None:
            with contextlib.suppress(ImportError):
                mod = __import__(f"huggingface_hub.{modname}", fromlist=[name])
        cls = getattr(mod, name, None) if mod is not None else None
        if isinstance(cls, type):
            return cls
    return type(f"_Missing{name}", (Exception,), {})


def _env_path(value: str) -> str:
    return os.path.expandvars(os.path.expanduser(value))


def hub_cache_dir() -> pathlib.Path:
    """The Hugging Face hub cache, from the environment as it is now (huggingface_hub reads it only
    once, at import): ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    env = os.environ
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return pathlib.Path(_env_path(env[var]))
    if env.get("HF_HOME"):
        return pathlib.Path(_env_path(env["HF_HOME"])) / "hub"
    if env.get("XDG_CACHE_HOME"):
        return pathlib.Path(_env_path(env["XDG_CACHE_HOME"])) / "huggingface" / "hub"
    with contextlib.suppress(Exception):
        import huggingface_hub.constants as c  # same default, and any programmatic override
        return pathlib.Path(c.HF_HUB_CACHE)
    return pathlib.Path.home() / ".cache" / "huggingface" / "hub"


def is_offline() -> bool:
    """Offline mode: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set true now, or was when
    huggingface_hub was imported (then it refuses network access anyway)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return True
    with contextlib.suppress(Exception):
        import huggingface_hub.constants as c
        return bool(getattr(c, "HF_HUB_OFFLINE", False))
    return False


PROBE_TIMEOUT_S = 3.0
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_unreachable(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the Hub's endpoint cannot be reached (no name, no route, no answer within `timeout`),
    or None when a TCP connection to it opens. huggingface_hub retries a failing request with
    back-off for ~25 s before it gives up: offline, that was 25 s of silence before the cache was
    read. Behind a proxy the endpoint is not dialled directly, so there is nothing to probe."""
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return None
    from urllib.parse import urlsplit
    url = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    parts = urlsplit(url)
    host, port = parts.hostname or "huggingface.co", parts.port or (80 if parts.scheme == "http" else 443)
    failure: list[BaseException] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as e:
            failure.append(e)

    t = threading.Thread(target=connect, name="pyllamaspec-hub-probe", daemon=True)
    t.start()
    t.join(timeout + 0.5)                   # a name lookup that hangs is not bounded by the socket's timeout
    if t.is_alive():
        return f"no answer from {host}:{port} within {timeout:g} s"
    return f"{type(failure[0]).__name__}: {failure[0]}" if failure else None


def _repo_folder(cache: pathlib.Path, repo_id: str) -> pathlib.Path:
    # The hub cache layout: <cache>/models--<user>--<repo>/{blobs,refs,snapshots}
    return cache / ("models--" + repo_id.replace("/", "--"))


def cached_repo_files(repo_id: str, cache_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """The files of ``repo_id`` present in the local hub cache: repository-relative path → commit
    of the snapshot that holds it (the ``refs/main`` snapshot first, then newer snapshots first).
    Files whose blob is missing (broken links) are left out. Empty when the repo is not cached.
    Reads the cache on disk only."""
    cache = pathlib.Path(cache_dir) if cache_dir is not None else hub_cache_dir()
    folder = _repo_folder(cache, repo_id)
    snaps = folder / "snapshots"
    if not snaps.is_dir():
        return {}
    main = None
    with contextlib.suppress(OSError):
        main = (folder / "refs" / "main").read_text().strip() or None
    commits = [d for d in snaps.iterdir() if d.is_dir()]
    commits.sort(key=lambda d: (d.name != main, -_mtime(d)))
    out: dict[str, str] = {}
    for d in commits:
        for root, _dirs, names in os.walk(d):
            for n in names:
                p = os.path.join(root, n)
                if not os.path.exists(p):  # dangling symlink: blob missing
                    continue
                rel = pathlib.Path(p).relative_to(d).as_posix()
                out.setdefault(rel, d.name)
    return out


def _mtime(p: pathlib.Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    if enabled:
        yield
        return
    utils = None
    with contextlib.suppress(Exception):
        import huggingface_hub.utils as utils
    are_off = getattr(utils, "are_progress_bars_disabled", None)
    disable = getattr(utils, "disable_progress_bars", None)
    enable = getattr(utils, "enable_progress_bars", None)
    if disable is None or enable is None or (are_off is not None and are_off()):
        yield
        return
    disable()
    try:
        yield
    finally:
        enable()


def _is_transport_error(e: BaseException) -> bool:
    """A network-ish failure (no connection, timeout, offline mode, Hub down), as opposed to a bug."""
    if isinstance(e, (OSError, TimeoutError)):
        return True
    root = type(e).__module__.split(".", 1)[0]
    return root in {"requests", "urllib3", "httpx", "httpx2", "httpcore", "huggingface_hub", "ssl",
                    "socket"}


def _is_local_fs_error(e: BaseException) -> bool:
    """A failure of the local disk (permissions, full disk...) rather than of the network."""
    return (isinstance(e, (PermissionError, FileExistsError, IsADirectoryError, NotADirectoryError))
            or (isinstance(e, OSError) and e.errno is not None
                and e.errno in {getattr(errno, n, None) for n in ("ENOSPC", "EROFS", "EDQUOT")}))


def _offline_hint(repo_id: str, filename: str | None = None, quant: str | None = None,
                  include: str | None = None) -> str:
    if include:
        target = f"{repo_id} --include '{include}'"
    elif filename:
        target = f"{repo_id} {filename}"
    else:
        target = f"{repo_id} --include '*{quant or DEFAULT_QUANT}*.gguf'"
    return (f"Run once with network access (HF_HUB_OFFLINE unset) to download it, or fetch it "
            f"beforehand with `hf download {target}` (`huggingface-cli download {target}` with "
            "older huggingface_hub).")


# ---------------------------------------------------------------------------------------------
# resolve
# ---------------------------------------------------------------------------------------------


def resolve(spec: str, hf_file: str | None = None, *, offline: bool | None = None,
            progress: bool = True, cache_dir: str | os.PathLike | None = None,
            token: str | bool | None = None) -> pathlib.Path:
    """Local path of the GGUF named by ``spec`` (``user/repo[:QUANT]``) or, with ``hf_file``, of
    that file of ``user/repo``; downloaded into the Hugging Face cache first when needed.

    ``offline``: None → from ``HF_HUB_OFFLINE`` (see :func:`is_offline`); True → the cache only, no
    network. ``progress``: show huggingface_hub's download progress bar. ``cache_dir``: the hub
    cache (default: :func:`hub_cache_dir`). For a split model every part is downloaded and the first
    returned (what :class:`~pyllamaspec.Model` loads; the other parts lie beside it).
    ``token``: passed to huggingface_hub (default: its own, e.g. ``HF_TOKEN`` or ``hf auth login``).

    Online, the repository is listed with ``HfApi().list_repo_files``; if the Hub cannot be reached
    the local cache is used instead (with a warning). Offline, only the cache is read.

    Raises :class:`HubModelNotFoundError` (a :class:`~pyllamaspec.errors.ModelNotFoundError`) when
    the repo, the file or any GGUF cannot be found (:class:`QuantNotFoundError` when a quant tag
    matches nothing; also for a split model with a part missing),
    :class:`HubDependencyError` when huggingface_hub is missing and
    :class:`~pyllamaspec.errors.InvalidArgumentError` for a malformed spec.
    """
    return _resolve(spec, hf_file, mmproj=False, offline=offline, progress=progress, cache_dir=cache_dir,
                    token=token).model


class Resolved(NamedTuple):
    """What :func:`resolve_with_mmproj` found: the model's local path (part 1 of a split model)
    and its vision projector's, or None when the repository has none beside the model."""

    model: pathlib.Path
    mmproj: pathlib.Path | None


def resolve_with_mmproj(spec: str, hf_file: str | None = None, *, offline: bool | None = None,
                        progress: bool = True, cache_dir: str | os.PathLike | None = None,
                        token: str | bool | None = None) -> Resolved:
    """:func:`resolve`, plus the repository's vision projector for the model, as llama.cpp's
    ``-hf`` fetches it for llama-server and llama-mtmd-cli: the ``mmproj`` GGUF that
    :func:`select_mmproj` picks beside the model file (``hf_file`` or the quant's), downloaded
    into the same cache (offline, or with the Hub unreachable: found in the cache's listing, as
    the model is). ``Resolved(model, None)`` when there is none: a text model, no error.

    The arguments, the offline rules and the errors are :func:`resolve`'s; with ``hf_file`` the
    repository is listed too (online), to find the projector."""
    return _resolve(spec, hf_file, mmproj=True, offline=offline, progress=progress, cache_dir=cache_dir,
                    token=token)


def _resolve(spec: str, hf_file: str | None, *, mmproj: bool, offline: bool | None, progress: bool,
             cache_dir: str | os.PathLike | None, token: str | bool | None) -> Resolved:
    repo_id, quant = parse_spec(spec)
    if hf_file is not None:
        hf_file = hf_file.strip().replace("\\", "/").lstrip("/")
        if not hf_file:
            raise InvalidArgumentError("--hf-file: empty file name")
        if quant is not None:
            log.warning("%s: --hf-file %s given; ignoring the quant tag %r", repo_id, hf_file, quant)
    global _hub_unreachable_at
    hf = _import_hf()
    local_only = is_offline() if offline is None else bool(offline)
    cache = pathlib.Path(cache_dir) if cache_dir is not None else hub_cache_dir()
    reason = "offline mode is on (HF_HUB_OFFLINE=1 or offline=True)"
    if (offline is None and not local_only and _hub_unreachable_at is not None
            and time.monotonic() - _hub_unreachable_at < UNREACHABLE_MEMO_S):
        local_only = True
        reason = "the Hugging Face Hub could not be reached a moment ago"
    files: list[str] | None = None      # the repository listing, when we have one
    cached: dict[str, str] | None = None
    why = hub_unreachable() if not local_only else None
    if why:
        local_only = True
        _hub_unreachable_at = time.monotonic()
        reason = f"the Hugging Face Hub could not be reached ({why})"
        log.warning("%s: %s; looking in the local cache", repo_id, reason)

    if hf_file is not None:
        parts = tuple(_split_parts(hf_file)) if _is_split(hf_file) else (hf_file,)
        sel = Selection(parts[0], parts, _quant_of(hf_file))
    if hf_file is None or mmproj:               # the listing: to pick the model, or its projector
        if not local_only:
            try:
                files = _list_remote(hf, repo_id, token)
            except HubModelNotFoundError:
                raise
            except Exception as e:  # noqa: BLE001 - classified below
                if not _is_transport_error(e):
                    raise
                local_only = True
                _hub_unreachable_at = time.monotonic()
                reason = f"the Hugging Face Hub could not be reached ({type(e).__name__}: {e})"
                log.warning("%s: %s; looking in the local cache", repo_id, reason)
        if local_only:
            cached = cached_repo_files(repo_id, cache)
            if not cached:
                raise HubModelNotFoundError(
                    f"{repo_id}: not in the Hugging Face cache ({cache}) and {reason}. "
                    + _offline_hint(repo_id, hf_file, quant), repo_id=repo_id)
            files = list(cached)
    elif local_only:
        cached = cached_repo_files(repo_id, cache)
        files = list(cached)
    if hf_file is None:
        sel = select_gguf(
            files, quant, repo_id=repo_id, where=" in the local cache" if local_only else "",
            hint=(f" (Only cached files can be seen: {reason}. " + _offline_hint(repo_id, None, quant)
                  + ")") if local_only else "")

    if sel.is_split:
        n_parts = _split_info(sel.filename)[1]
        if len(sel.parts) != n_parts:
            missing = [p for p in _split_parts(sel.filename) if p not in sel.parts]
            raise HubModelNotFoundError(
                f"{repo_id}: split model {sel.filename} is incomplete"
                f"{' in the local cache' if local_only else ''} (missing {_format_list(missing, 5)})."
                + (" " + _offline_hint(repo_id, include=_stem(sel.filename) + "-*.gguf")
                   if local_only else ""), repo_id=repo_id)

    projector = select_mmproj(files or (), sel.filename) if mmproj else None
    if projector is not None:
        log.info("%s: vision projector %s (for %s)", repo_id, projector, sel.filename)
    paths = []
    with _progress_bars(progress):
        for name in sel.parts + ((projector,) if projector else ()):
            paths.append(_download(hf, repo_id, name, cache=cache, local_only=local_only,
                                   cached=cached, reason=reason, token=token))
    return Resolved(paths[0], paths[-1] if projector else None)


def _list_remote(hf, repo_id: str, token) -> list[str]:
    repo_not_found = _hf_error(hf, "RepositoryNotFoundError")
    gated = _hf_error(hf, "GatedRepoError")
    validation = _hf_error(hf, "HFValidationError")
    try:
        return list(hf.HfApi().list_repo_files(repo_id, token=token))
    except gated as e:
        raise HubModelNotFoundError(_gated_message(repo_id), repo_id=repo_id) from e
    except repo_not_found as e:
        raise HubModelNotFoundError(_not_found_message(repo_id), repo_id=repo_id) from e
    except validation as e:
        raise InvalidArgumentError(f"{repo_id!r}: not a valid Hugging Face repository id ({e})") from e


def _gated_message(repo_id: str) -> str:
    return (f"{repo_id}: the repository is gated: accept its terms on "
            f"https://huggingface.co/{repo_id} and log in (`hf auth login`) or set HF_TOKEN")


def _not_found_message(repo_id: str) -> str:
    return (f"{repo_id}: repository not found on the Hugging Face Hub (check the name; a private "
            "repository needs `hf auth login` or HF_TOKEN)")


def _download(hf, repo_id: str, filename: str, *, cache: pathlib.Path, local_only: bool,
              cached: dict[str, str] | None, reason: str, token) -> pathlib.Path:
    local_missing = _hf_error(hf, "LocalEntryNotFoundError")
    remote_missing = (_hf_error(hf, "RemoteEntryNotFoundError"), _hf_error(hf, "EntryNotFoundError"))
    repo_not_found = _hf_error(hf, "RepositoryNotFoundError")
    gated = _hf_error(hf, "GatedRepoError")
    revision = None
    if local_only:
        if cached is None:
            cached = cached_repo_files(repo_id, cache)
        if filename not in cached:
            if cached:
                msg = (f"{repo_id}: {filename} is not in the Hugging Face cache ({cache}) and {reason}."
                       f" Cached GGUF files of {repo_id}: {_format_list(_gguf_listing(cached))}. ")
            else:
                msg = f"{repo_id}: not in the Hugging Face cache ({cache}) and {reason}. "
            raise HubModelNotFoundError(msg + _offline_hint(repo_id, filename), repo_id=repo_id)
        revision = cached[filename]  # the commit of the snapshot that holds it: no ref, no network
    try:
        path = hf.hf_hub_download(repo_id, filename, cache_dir=str(cache), revision=revision,
                                  local_files_only=local_only, token=token)
    except local_missing as e:
        raise HubModelNotFoundError(
            f"{repo_id}: {filename} is not in the Hugging Face cache ({cache}) and could not be "
            f"downloaded ({e}). " + _offline_hint(repo_id, filename), repo_id=repo_id) from e
    except gated as e:
        raise HubModelNotFoundError(_gated_message(repo_id), repo_id=repo_id) from e
    except repo_not_found as e:
        raise HubModelNotFoundError(_not_found_message(repo_id), repo_id=repo_id) from e
    except remote_missing as e:
        listing = ""
        with contextlib.suppress(Exception):
            listing = " GGUF files in the repository: " + _format_list(
                _gguf_listing(hf.HfApi().list_repo_files(repo_id, token=token))) + "."
        raise HubModelNotFoundError(
            f"{repo_id}: no file {filename} in the repository.{listing}", repo_id=repo_id) from e
    except Exception as e:  # noqa: BLE001
        if _is_local_fs_error(e):
            raise ModelIOError(
                f"{repo_id}: could not store {filename} in the Hugging Face cache ({cache}): "
                f"{type(e).__name__}: {e}") from e
        if not _is_transport_error(e):
            raise
        raise HubModelNotFoundError(
            f"{repo_id}: could not download {filename} ({type(e).__name__}: {e}) and it is not in "
            f"the Hugging Face cache ({cache}). Check the network connection. "
            + _offline_hint(repo_id, filename), repo_id=repo_id) from e
    return pathlib.Path(path)
