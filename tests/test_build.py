"""The pinned ggml fetch step (vendor/ggml/fetch.py) and the CMake glue refuse what they must."""
from __future__ import annotations

import importlib.util
import io
import shutil
import subprocess
import tarfile

import pytest

from conftest import REPO

FETCH = REPO / "vendor" / "ggml" / "fetch.py"


@pytest.fixture()
def fetch(monkeypatch, tmp_path):
    """fetch.py as a module, with its cache in tmp_path."""
    monkeypatch.setenv("PYLLAMASPEC_CACHE", str(tmp_path / "cache"))
    spec = importlib.util.spec_from_file_location("ggml_fetch", FETCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_sdist(path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_pin_is_the_issue_s(fetch):
    assert fetch.PIN["package"] == "libggml-python" and fetch.PIN["version"] == "0.20.2.post1"
    assert fetch.PIN["sha256"] == "e47ff53506342959ffb3ce15380b82828fea10ec5f208f9ef6915895f1a7a176"


def test_wrong_hash_stops_the_fetch(fetch, monkeypatch, tmp_path, capsys):
    def download(dest):                      # what a tampered registry file would look like
        p = dest / fetch.PIN["filename"]
        _fake_sdist(p, {"libggml_python-0.20.2.post1/ggml/include/ggml.h": b"// not the pinned file\n"})
        return p
    monkeypatch.setattr(fetch, "download", download)
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 1
    err = capsys.readouterr().err
    assert "sha256 mismatch" in err and fetch.PIN["sha256"] in err
    assert not (tmp_path / "src").exists()
    assert not (tmp_path / "cache" / "ggml" / fetch.PIN["filename"]).exists()


def test_failed_download_is_a_clear_error(fetch, monkeypatch, tmp_path, capsys):
    def download(dest):
        raise fetch.FetchError("could not download libggml-python==0.20.2.post1 with pip (exit 1)")
    monkeypatch.setattr(fetch, "download", download)
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 1
    assert "could not download" in capsys.readouterr().err


def test_cached_archive_is_verified_and_unpacked(fetch, monkeypatch, tmp_path):
    archive = tmp_path / "x.tar.gz"
    _fake_sdist(archive, {"top/ggml/include/ggml.h": b"// ok\n", "top/other/file": b"x"})
    monkeypatch.setitem(fetch.PIN, "sha256", fetch.sha256(archive))
    cache = tmp_path / "cache" / "ggml"
    cache.mkdir(parents=True)
    shutil.copy(archive, cache / fetch.PIN["filename"])
    monkeypatch.setattr(fetch, "download", lambda dest: pytest.fail("the cached archive must be used"))
    dest = tmp_path / "src"
    assert fetch.main(["fetch.py", str(dest)]) == 0
    assert (dest / "include" / "ggml.h").read_bytes() == b"// ok\n"
    assert not (dest / "other").exists()          # only the ggml/ folder is taken
    assert fetch.main(["fetch.py", str(dest)]) == 0   # stamped: nothing to do the second time


def test_archive_with_a_path_escape_is_refused(fetch, monkeypatch, tmp_path, capsys):
    archive = tmp_path / "evil.tar.gz"
    _fake_sdist(archive, {"top/ggml/../../../evil": b"x"})
    monkeypatch.setitem(fetch.PIN, "sha256", fetch.sha256(archive))
    cache = tmp_path / "cache" / "ggml"
    cache.mkdir(parents=True)
    shutil.copy(archive, cache / fetch.PIN["filename"])
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 1
    assert "unsafe member" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not on PATH")
def test_cmake_refuses_a_bad_ggml_source_dir(tmp_path):
    proc = subprocess.run(["cmake", "-S", str(REPO), "-B", str(tmp_path / "b"),
                           f"-DPYLLAMASPEC_GGML_SOURCE_DIR={tmp_path}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "is not a ggml source tree" in proc.stderr
