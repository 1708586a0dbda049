"""pyllamaspec.files.hub: -hf user/repo[:QUANT] resolution against a local Hugging Face cache.

Every test runs with no network: the cache is built in a tmp dir exactly as huggingface_hub lays it
out (models--user--repo/{blobs/<sha256>, refs/main, snapshots/<commit>/<file> -> ../../blobs/<sha>}),
offline mode is on, and any socket use is recorded and refused (so that a test can neither hang on
a timeout nor pass through a silent network fallback). The "online" tests replace HfApi and
hf_hub_download with fakes.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import socket
import sys
import time

import pytest

pytest.importorskip("huggingface_hub")

import huggingface_hub  # noqa: E402

import models  # noqa: E402
from pyllamaspec.files import hub  # noqa: E402
from pyllamaspec.errors import InvalidArgumentError, ModelNotFoundError  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"

QUANTS_REPO = "someone/Tiny-GGUF"
QUANTS_FILES = [
    "README.md",
    ".gitattributes",
    "tiny-Q2_K.gguf",
    "tiny-IQ4_XS.gguf",
    "tiny-Q4_K_M.gguf",
    "tiny-UD-Q4_K_M.gguf",
    "tiny.Q8_0.gguf",
    "tiny-f16.gguf",
    "tiny-Q4_K_M-00001-of-00002.gguf",  # a split copy of Q4_K_M: the single file must win
    "tiny-Q4_K_M-00002-of-00002.gguf",
    "mmproj-tiny-Q4_K_M.gguf",           # a vision projector: never the model
]


def content(repo: str, name: str) -> bytes:
    return f"GGUF fake {repo} {name}\n".encode()


def make_cached_repo(cache: pathlib.Path, repo_id: str, files, *, commit: str = COMMIT,
                     ref: str | None = "main", data: dict | None = None) -> pathlib.Path:
    """Lay out ``files`` of ``repo_id`` in ``cache`` the way huggingface_hub does; return the
    snapshot folder."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snap = folder / "blobs", folder / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    if ref is not None:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / ref).write_text(commit)  # huggingface_hub writes no newline
    for name in files:
        raw = (data or {}).get(name, content(repo_id, name))
        sha = hashlib.sha256(raw).hexdigest()
        blob = blobs / sha
        blob.write_bytes(raw)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snap


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Refuse and record every attempt to open a connection or resolve a name."""
    attempts: list[str] = []

    def refuse(*args, **kwargs):
        attempts.append(repr(args[:2]))
        raise OSError("network access attempted in test_hub")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(hub, "_hub_unreachable_at", None)
    monkeypatch.setattr(hub, "hub_unreachable", lambda timeout=hub.PROBE_TIMEOUT_S: None)  # the fakes answer
    yield attempts
    assert attempts == [], f"network access attempted: {attempts}"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> pathlib.Path:
    """An empty hub cache, named by HF_HUB_CACHE, with offline mode on."""
    c = tmp_path / "hf" / "hub"
    c.mkdir(parents=True)
    return offline_hub(monkeypatch, c)


def offline_hub(monkeypatch, cache: pathlib.Path) -> pathlib.Path:
    """The hub code (and the processes a test starts) read `cache`, offline."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    return cache


@pytest.fixture
def quants_cache(cache) -> pathlib.Path:
    make_cached_repo(cache, QUANTS_REPO, QUANTS_FILES)
    return cache


def check(path: pathlib.Path, cache: pathlib.Path, repo: str, name: str) -> None:
    """``path`` is the cached snapshot file ``name`` of ``repo``, with that file's bytes."""
    assert isinstance(path, pathlib.Path)
    assert path.name == pathlib.PurePosixPath(name).name
    snap = cache / ("models--" + repo.replace("/", "--")) / "snapshots"
    assert path.resolve() == (snap / COMMIT / name).resolve()
    assert path.read_bytes() == content(repo, name)


# ---- quant selection --------------------------------------------------------------------------

def test_default_quant_is_q4_k_m(quants_cache):
    p = hub.resolve(QUANTS_REPO, cache_dir=quants_cache, offline=True)
    check(p, quants_cache, QUANTS_REPO, "tiny-Q4_K_M.gguf")


@pytest.mark.parametrize("tag,expect", [
    ("Q8_0", "tiny.Q8_0.gguf"),
    ("q8_0", "tiny.Q8_0.gguf"),
    ("Q4_K_M", "tiny-Q4_K_M.gguf"),
    ("q4_k_m", "tiny-Q4_K_M.gguf"),
    ("iq4_xs", "tiny-IQ4_XS.gguf"),
    ("F16", "tiny-f16.gguf"),
    ("UD-Q4_K_M", "tiny-UD-Q4_K_M.gguf"),
    ("Q2_K", "tiny-Q2_K.gguf"),
])
def test_explicit_quant(quants_cache, tag, expect):
    p = hub.resolve(f"{QUANTS_REPO}:{tag}", cache_dir=quants_cache, offline=True)
    check(p, quants_cache, QUANTS_REPO, expect)


def test_tag_must_be_whole(quants_cache):
    # "K_M" is the tail of Q4_K_M but not a tag of any file; "Q4_K" is a prefix of Q4_K_M.
    for tag in ("K_M", "Q4_K", "4_K_M"):
        with pytest.raises(hub.QuantNotFoundError):
            hub.resolve(f"{QUANTS_REPO}:{tag}", cache_dir=quants_cache, offline=True)


def test_missing_tag_lists_available_quants(quants_cache):
    with pytest.raises(hub.QuantNotFoundError) as ei:
        hub.resolve(f"{QUANTS_REPO}:Q5_K_M", cache_dir=quants_cache, offline=True)
    e = ei.value
    assert isinstance(e, ModelNotFoundError)
    msg = str(e)
    assert QUANTS_REPO in msg and "Q5_K_M" in msg
    for q in ("Q2_K", "IQ4_XS", "Q4_K_M", "Q8_0", "F16"):
        assert q in msg
        assert q in e.available
    assert "MMPROJ" not in " ".join(e.available)
    assert "tiny.Q8_0.gguf" in e.files and "README.md" not in e.files
    assert e.quant == "Q5_K_M" and e.repo_id == QUANTS_REPO


def test_prefers_single_file_over_split(cache):
    repo = "someone/Mixed-GGUF"
    files = ["m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf", "m-Q4_K_M.gguf",
             "Q4_K_M/m-Q4_K_M.gguf"]
    make_cached_repo(cache, repo, files)
    check(hub.resolve(repo, cache_dir=cache, offline=True), cache, repo, "m-Q4_K_M.gguf")
    check(hub.resolve(repo + ":q4_k_m", cache_dir=cache, offline=True), cache, repo, "m-Q4_K_M.gguf")


def test_split_resolves_to_its_first_part(cache):
    repo = "someone/Big-GGUF"
    files = ["Q8_0/big-Q8_0-00001-of-00003.gguf", "Q8_0/big-Q8_0-00002-of-00003.gguf",
             "Q8_0/big-Q8_0-00003-of-00003.gguf", "big-Q4_K_M.gguf"]
    make_cached_repo(cache, repo, files)
    # every part is there and the first is returned: what Model loads
    p = hub.resolve(repo + ":Q8_0", cache_dir=cache, offline=True)
    check(p, cache, repo, "Q8_0/big-Q8_0-00001-of-00003.gguf")
    for k in (2, 3):
        assert (p.parent / f"big-Q8_0-0000{k}-of-00003.gguf").is_file()
    # the same for --hf-file naming any part
    p = hub.resolve(repo, "Q8_0/big-Q8_0-00002-of-00003.gguf", cache_dir=cache, offline=True)
    check(p, cache, repo, "Q8_0/big-Q8_0-00001-of-00003.gguf")


def test_split_model_from_the_cache_loads(cache, tmp_path):
    """A real split set in the hub cache (symlinks into blobs/): resolve, then Model loads every
    part from beside the first, with the unsplit file's logits."""
    import numpy as np
    from pyllamaspec import Model

    src = tmp_path / "tiny.gguf"
    models.write_llama_gguf(src)
    parts = models.split_gguf(src, tmp_path / "parts" / "tiny-F32", n_shards=3)
    repo = "someone/TinySplit-GGUF"
    make_cached_repo(cache, repo, [f"F32/{p.name}" for p in parts],
                     data={f"F32/{p.name}": p.read_bytes() for p in parts})
    path = hub.resolve(repo + ":F32", cache_dir=cache, offline=True)
    assert path.name == parts[0].name and path.is_symlink()
    with Model(path, n_ctx=32) as a, Model(src, n_ctx=32) as b:
        assert np.array_equal(a.eval([1, 2, 3]), b.eval([1, 2, 3]))


def test_split_with_missing_part_cached(cache):
    repo = "someone/Partial-GGUF"
    make_cached_repo(cache, repo, ["p-Q4_K_M-00001-of-00002.gguf"])
    with pytest.raises(ModelNotFoundError, match="incomplete") as ei:
        hub.resolve(repo, cache_dir=cache, offline=True)
    assert "p-Q4_K_M-00002-of-00002.gguf" in str(ei.value)


def test_mmproj_is_never_the_model(cache):
    repo = "someone/Vision-GGUF"
    # the projector has the shorter name, and the same tag
    make_cached_repo(cache, repo, ["mmproj-F16.gguf", "vision-model-3b-F16.gguf"])
    check(hub.resolve(repo + ":F16", cache_dir=cache, offline=True), cache, repo,
          "vision-model-3b-F16.gguf")
    check(hub.resolve(repo, cache_dir=cache, offline=True), cache, repo, "vision-model-3b-F16.gguf")
    only = "someone/Projector-Only"
    make_cached_repo(cache, only, ["mmproj-model-f16.gguf"])
    with pytest.raises(hub.HubModelNotFoundError, match="no GGUF model"):
        hub.resolve(only, cache_dir=cache, offline=True)


def test_default_falls_back_when_no_q4_k_m(cache, caplog):
    repo = "someone/NoQ4KM-GGUF"
    make_cached_repo(cache, repo, ["n-Q8_0.gguf", "n-Q2_K.gguf", "n-Q6_K.gguf"])
    with caplog.at_level(logging.WARNING, logger="pyllamaspec.files.hub"):
        p = hub.resolve(repo, cache_dir=cache, offline=True)
    check(p, cache, repo, "n-Q6_K.gguf")  # nearest to Q4_K_M in DEFAULT_FALLBACK
    assert "Q4_K_M" in caplog.text and "n-Q6_K.gguf" in caplog.text
    # An explicit tag does not fall back.
    with pytest.raises(hub.QuantNotFoundError):
        hub.resolve(repo + ":Q4_K_M", cache_dir=cache, offline=True)


# ---- --hf-file, errors --------------------------------------------------------------------------

def test_hf_file_explicit(quants_cache):
    p = hub.resolve(QUANTS_REPO, "tiny.Q8_0.gguf", cache_dir=quants_cache, offline=True)
    check(p, quants_cache, QUANTS_REPO, "tiny.Q8_0.gguf")
    # The file wins over a tag in the spec.
    p = hub.resolve(QUANTS_REPO + ":Q2_K", "tiny-IQ4_XS.gguf", cache_dir=quants_cache, offline=True)
    check(p, quants_cache, QUANTS_REPO, "tiny-IQ4_XS.gguf")


def test_hf_file_not_cached_offline(quants_cache):
    with pytest.raises(hub.HubModelNotFoundError) as ei:
        hub.resolve(QUANTS_REPO, "tiny-Q5_K_M.gguf", cache_dir=quants_cache, offline=True)
    msg = str(ei.value)
    assert QUANTS_REPO in msg and "tiny-Q5_K_M.gguf" in msg and "offline" in msg
    assert "download" in msg and "tiny.Q8_0.gguf" in msg  # what is cached


def test_repo_absent_offline(quants_cache):
    for args in (("nobody/Missing-GGUF",), ("nobody/Missing-GGUF:Q8_0",),
                 ("nobody/Missing-GGUF", "x-Q4_K_M.gguf")):
        with pytest.raises(ModelNotFoundError) as ei:
            hub.resolve(*args, cache_dir=quants_cache, offline=True)
        e = ei.value
        assert isinstance(e, hub.HubModelNotFoundError) and e.repo_id == "nobody/Missing-GGUF"
        msg = str(e)
        assert "nobody/Missing-GGUF" in msg and "offline" in msg
        assert "huggingface-cli download" in msg and "hf download" in msg


def test_repo_without_gguf(cache):
    repo = "someone/Safetensors"
    make_cached_repo(cache, repo, ["config.json", "model.safetensors"])
    with pytest.raises(hub.HubModelNotFoundError, match="no GGUF"):
        hub.resolve(repo, cache_dir=cache, offline=True)


def test_dangling_blob_is_not_cached(cache):
    repo = "someone/Broken-GGUF"
    snap = make_cached_repo(cache, repo, ["b-Q4_K_M.gguf", "b-Q8_0.gguf"])
    (snap / "b-Q4_K_M.gguf").resolve().unlink()  # an interrupted download: link without blob
    with pytest.raises(hub.QuantNotFoundError) as ei:
        hub.resolve(repo + ":Q4_K_M", cache_dir=cache, offline=True)
    assert ei.value.available == ["Q8_0"]


def test_file_only_in_older_snapshot(cache):
    repo = "someone/Moved-GGUF"
    make_cached_repo(cache, repo, ["o-Q8_0.gguf"], commit=OLD_COMMIT, ref=None)
    make_cached_repo(cache, repo, ["o-Q4_K_M.gguf"])
    p = hub.resolve(repo + ":Q8_0", cache_dir=cache, offline=True)
    snap = cache / ("models--" + repo.replace("/", "--")) / "snapshots" / OLD_COMMIT
    assert p.resolve() == (snap / "o-Q8_0.gguf").resolve()
    check(hub.resolve(repo, cache_dir=cache, offline=True), cache, repo, "o-Q4_K_M.gguf")


@pytest.mark.parametrize("spec", ["", "gpt2", "a/b/c", "user/repo:", "/repo", "user/"])
def test_bad_spec(spec, cache):
    with pytest.raises(InvalidArgumentError):
        hub.resolve(spec, cache_dir=cache, offline=True)


def test_parse_spec():
    assert hub.parse_spec("ggml-org/gemma-3-1b-it-GGUF") == ("ggml-org/gemma-3-1b-it-GGUF", None)
    assert hub.parse_spec("u/r:q8_0") == ("u/r", "q8_0")
    assert hub.parse_spec(" u/r.x:UD-Q4_K_XL ") == ("u/r.x", "UD-Q4_K_XL")


def test_missing_huggingface_hub(monkeypatch, cache):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import raises ImportError
    with pytest.raises(hub.HubDependencyError, match="pip install huggingface-hub") as ei:
        hub.resolve(QUANTS_REPO, cache_dir=cache, offline=True)
    assert isinstance(ei.value, ImportError)


# ---- environment: cache location and offline mode from the environment -------------------------

def test_env_hf_hub_cache_and_offline(quants_cache, monkeypatch):
    # No cache_dir, no offline=: both come from HF_HUB_CACHE and HF_HUB_OFFLINE=1, read now
    # (huggingface_hub's own constants were read at its import, before the monkeypatch).
    p = hub.resolve(QUANTS_REPO + ":Q8_0")
    check(p, quants_cache, QUANTS_REPO, "tiny.Q8_0.gguf")
    assert hub.hub_cache_dir() == quants_cache


def test_env_hf_home(tmp_path, monkeypatch):
    home = tmp_path / "hfhome"
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    make_cached_repo(home / "hub", QUANTS_REPO, QUANTS_FILES)
    assert hub.hub_cache_dir() == home / "hub"
    check(hub.resolve(QUANTS_REPO), home / "hub", QUANTS_REPO, "tiny-Q4_K_M.gguf")


def test_offline_detection(monkeypatch):
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for value in ("1", "true", "YES", "on"):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert hub.is_offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert hub.is_offline() == bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def test_progress_flag_restores_bars(quants_cache):
    utils = huggingface_hub.utils
    before = utils.are_progress_bars_disabled()
    hub.resolve(QUANTS_REPO, cache_dir=quants_cache, offline=True, progress=False)
    assert utils.are_progress_bars_disabled() == before


# ---- "online" with fakes: the listing comes from HfApi, the file from hf_hub_download ------------

class FakeHub:
    def __init__(self, monkeypatch, files=None, list_error=None):
        self.files, self.list_error = files, list_error
        self.downloads: list[dict] = []
        self.listings = 0
        self.real_download = huggingface_hub.hf_hub_download
        monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", self.list_repo_files)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", self.hf_hub_download)

    def list_repo_files(self, repo_id, **kwargs):
        self.listings += 1
        if self.list_error is not None:
            raise self.list_error
        return list(self.files)

    def hf_hub_download(self, repo_id, filename, **kwargs):
        self.downloads.append(dict(repo_id=repo_id, filename=filename, **kwargs))
        if kwargs.get("local_files_only"):  # the real thing: it reads the cache only
            return self.real_download(repo_id, filename, **kwargs)
        # "download": lay the file out in the cache as huggingface_hub would
        cache = pathlib.Path(kwargs["cache_dir"])
        snap = make_cached_repo(cache, repo_id, [filename])
        return str(snap / filename)


def test_online_lists_and_downloads(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    fake = FakeHub(monkeypatch, files=QUANTS_FILES)
    p = hub.resolve(QUANTS_REPO + ":q8_0", cache_dir=cache, offline=False)
    check(p, cache, QUANTS_REPO, "tiny.Q8_0.gguf")
    assert [d["filename"] for d in fake.downloads] == ["tiny.Q8_0.gguf"]
    assert fake.downloads[0]["local_files_only"] is False
    assert pathlib.Path(fake.downloads[0]["cache_dir"]) == cache


def test_online_split_downloads_all_parts(cache, monkeypatch):
    files = ["s-Q4_K_M-00001-of-00002.gguf", "s-Q4_K_M-00002-of-00002.gguf"]
    fake = FakeHub(monkeypatch, files=files)
    p = hub.resolve("someone/S-GGUF", cache_dir=cache, offline=False)
    assert [d["filename"] for d in fake.downloads] == files
    assert p.name == files[0]


def test_online_repo_not_found(cache, monkeypatch):
    err_cls = hub._hf_error(huggingface_hub, "RepositoryNotFoundError")
    assert err_cls.__name__ == "RepositoryNotFoundError"
    err = err_cls.__new__(err_cls)
    Exception.__init__(err, "404 Client Error: Repository Not Found")
    FakeHub(monkeypatch, list_error=err)
    with pytest.raises(hub.HubModelNotFoundError, match="not found") as ei:
        hub.resolve("nobody/Nothing-GGUF", cache_dir=cache, offline=False)
    assert "nobody/Nothing-GGUF" in str(ei.value)


def test_online_unreachable_falls_back_to_cache(quants_cache, monkeypatch, caplog):
    fake = FakeHub(monkeypatch, list_error=OSError("connection refused"))
    with caplog.at_level(logging.WARNING, logger="pyllamaspec.files.hub"):
        p = hub.resolve(QUANTS_REPO + ":Q8_0", cache_dir=quants_cache, offline=False)
    check(p, quants_cache, QUANTS_REPO, "tiny.Q8_0.gguf")
    assert fake.downloads[0]["local_files_only"] is True
    assert "could not be reached" in caplog.text
    with pytest.raises(hub.HubModelNotFoundError, match="could not be reached"):
        hub.resolve("nobody/Elsewhere-GGUF", cache_dir=quants_cache, offline=False)


def test_unreachable_hub_is_remembered(quants_cache, monkeypatch):
    # offline=None and HF_HUB_OFFLINE=0: online, as far as the environment says.
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub, "is_offline", lambda: False)
    fake = FakeHub(monkeypatch, list_error=OSError("Name or service not known"))
    check(hub.resolve(QUANTS_REPO), quants_cache, QUANTS_REPO, "tiny-Q4_K_M.gguf")
    assert fake.listings == 1
    # the draft model, right after: no second wait on the Hub
    check(hub.resolve(QUANTS_REPO + ":Q2_K"), quants_cache, QUANTS_REPO, "tiny-Q2_K.gguf")
    assert fake.listings == 1
    # offline=False asks again
    hub.resolve(QUANTS_REPO + ":Q2_K", offline=False)
    assert fake.listings == 2


# ---- a real tiny model, cached, resolved and loaded ---------------------------------------------

def test_resolve_and_load_real_gguf(cache, tmp_path):
    import pyllamaspec

    src = tmp_path / "tiny.gguf"
    models.write_llama_gguf(src, dtype="F32", n_vocab=64)
    repo = "someone/TinyLlama-GGUF"
    data = {"tiny-llama-F32.gguf": src.read_bytes(), "tiny-llama-Q8_0.gguf": b"not this one"}
    make_cached_repo(cache, repo, list(data), data=data)
    p = hub.resolve(repo + ":f32", cache_dir=cache, offline=True)
    assert p.name == "tiny-llama-F32.gguf"
    with pyllamaspec.Model(p, n_ctx=32) as m:
        assert m.n_vocab == 64
        logits = m.eval([0, 5, 7])
        assert logits.shape[-1] == 64


def test_unreachable_hub_is_known_at_once(quants_cache, monkeypatch, caplog, no_network):
    """Issue 27: offline, -hf retried for 25 s before reading the cache. The probe's one refused
    connection (this file refuses them all) is enough, and the listing is not even tried."""
    fake = FakeHub(monkeypatch, files=QUANTS_FILES)
    monkeypatch.setattr(hub, "hub_unreachable", _real_probe)
    for v in hub._PROXY_VARS:
        monkeypatch.delenv(v, raising=False)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pyllamaspec.hub"):
        p = hub.resolve(QUANTS_REPO + ":Q8_0", cache_dir=quants_cache, offline=False)
    assert time.monotonic() - t0 < 2
    check(p, quants_cache, QUANTS_REPO, "tiny.Q8_0.gguf")
    assert fake.listings == 0 and "could not be reached" in caplog.text
    assert len(no_network) == 1                         # the probe, and nothing after it
    no_network.clear()


_real_probe = hub.hub_unreachable
