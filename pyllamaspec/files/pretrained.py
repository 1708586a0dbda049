"""Model.from_pretrained: a GGUF from a Hugging Face repository (llama-cpp-python's
Llama.from_pretrained), through hub.resolve and its cache, offline mode and errors.

The second argument names the file by a quant tag (``"Q4_K_M"``, hub's selection rules), an exact
file name (``"model-Q8_0.gguf"``) or a glob (``"*q8_0.gguf"``, llama-cpp-python's way, here in any
case), which must match one model file (or one split set, loaded from its first part)."""
from __future__ import annotations

import fnmatch
import os
import pathlib

from ..errors import InvalidArgumentError
from . import hub

_GLOB = set("*?[")


def _listing(repo_id: str, *, offline: bool | None, cache_dir, token) -> tuple[list[str], str]:
    """(the repository's files, where they were seen): the Hub's listing online, the cache's offline
    or when the Hub cannot be reached."""
    cache = pathlib.Path(cache_dir) if cache_dir is not None else hub.hub_cache_dir()
    local_only = hub.is_offline() if offline is None else bool(offline)
    if not local_only:
        hf = hub._import_hf()
        try:
            return hub._list_remote(hf, repo_id, token), ""
        except hub.HubModelNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - a transport error falls back to the cache
            if not hub._is_transport_error(e):
                raise
    files = list(hub.cached_repo_files(repo_id, cache))
    if not files:
        raise hub.HubModelNotFoundError(f"{repo_id}: not in the Hugging Face cache ({cache}) and the Hub "
                                        "cannot be used (offline)", repo_id=repo_id)
    return files, " in the local cache"


def _match_glob(repo_id: str, pattern: str, files: list[str], where: str) -> str:
    cands = hub._model_candidates(files)            # split sets collapsed to their first part
    pat = pattern.lower()                           # repositories spell quants either way: Q8_0, q8_0
    hits = sorted(name for name, parts in cands.items()
                  if any(fnmatch.fnmatchcase(p.lower(), pat) or fnmatch.fnmatchcase(os.path.basename(p).lower(), pat)
                         for p in parts))
    if not hits:
        raise hub.HubModelNotFoundError(
            f"{repo_id}: no GGUF model file{where} matches {pattern!r} (GGUF files: "
            f"{hub._format_list(hub._gguf_listing(files))})", repo_id=repo_id)
    if len(hits) > 1:
        raise InvalidArgumentError(f"{repo_id}: {pattern!r} matches several model files{where}: "
                                   f"{hub._format_list(hits)}; name one")
    return hits[0]


def resolve_pretrained(repo_id: str, filename_or_quant: str | None = None, *, cache_dir=None,
                       offline: bool | None = None, token: str | bool | None = None,
                       progress: bool = True) -> pathlib.Path:
    """The local path of the GGUF that from_pretrained loads (downloaded into the cache first when
    needed and allowed)."""
    if not isinstance(repo_id, str) or ":" in repo_id:
        raise InvalidArgumentError(f"repo_id is 'user/repo' (the quant goes in the second argument), "
                                   f"got {repo_id!r}")
    hub.parse_spec(repo_id)                              # a malformed id fails here, offline
    kw = dict(cache_dir=cache_dir, offline=offline, token=token, progress=progress)
    if filename_or_quant is None:
        return hub.resolve(repo_id, **kw)
    if not isinstance(filename_or_quant, str) or not filename_or_quant.strip():
        raise InvalidArgumentError(f"filename_or_quant must be a quant tag, a file name or a glob, "
                                   f"got {filename_or_quant!r}")
    name = filename_or_quant.strip()
    if _GLOB & set(name):
        files, where = _listing(repo_id, offline=offline, cache_dir=cache_dir, token=token)
        return hub.resolve(repo_id, _match_glob(repo_id, name, files, where), **kw)
    if name.lower().endswith(".gguf") or "/" in name:
        return hub.resolve(repo_id, name, **kw)
    return hub.resolve(f"{repo_id}:{name}", **kw)


__all__ = ["resolve_pretrained"]
