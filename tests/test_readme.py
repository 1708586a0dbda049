"""Every code block of README.md runs as written (issue 27, 7): the Python blocks in order in one
interpreter (a reader's session: later blocks use what earlier ones defined), each bash block in
its own shell, the C block compiled against the core and run on a real model. ```text blocks
are output listings and are not run; any other language fails the inventory test.

Two things are not run here, each for a stated reason: `pip install .` (tests/test_install.py
builds and installs it from empty caches) and `pytest -q tests` (it is this suite; .ci/run runs
that very line). The ports a block listens on (8080, 50052) are swapped for free ones, so that
the test cannot collide with another server on the machine.

The blocks fetch the offline models, start servers and time the demo: slow, so marked slow."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO

README = REPO / "README.md"
LANGS = {"python", "bash", "c", "text"}
TIMEOUT = 1800
INSTALL = "pip install . && "
SUITE = 'pip install ".[test]" && pytest -q tests'


def blocks() -> list[tuple[str, str, int]]:
    """(language, code, line number) of each fenced block."""
    out, lines = [], README.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if m:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i] != "```":
                body.append(lines[i])
                i += 1
            out.append((m.group(1), "\n".join(body) + "\n", start))
        i += 1
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp: pathlib.Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("PYLLAMASPEC_PROGRESS", None)
    return env


def test_every_block_is_accounted_for():
    found = blocks()
    assert found, "README.md has no code blocks"
    bad = [(lang, line) for lang, _, line in found if lang not in LANGS]
    assert bad == [], f"blocks with no runner (language, line): {bad}"
    bash = [code for lang, code, _ in found if lang == "bash"]
    assert bash[0].strip().startswith(INSTALL) and bash[1].strip() == SUITE
    assert SUITE in (REPO / ".ci" / "run").read_text()            # the suite's own line, run by CI


@pytest.mark.slow
def test_python_blocks(tmp_path, smollm2_path, gemma3_path):
    code = [(c, line) for lang, c, line in blocks() if lang == "python"]
    script = "import traceback, sys\nns = {}\n"
    for c, line in code:
        script += (f"print('--- README.md:{line}', flush=True)\n"
                   f"exec(compile({c!r}, 'README.md:{line}', 'exec'), ns)\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, f"{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    assert p.stdout.count("--- README.md:") == len(code)
    assert "Traceback" not in p.stderr


def _bash_blocks() -> list[tuple[str, int]]:
    return [(c, line) for lang, c, line in blocks() if lang == "bash"]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_bash_blocks())), ids=lambda i: f"block{i}")
def test_bash_block(index, tmp_path, smollm2_path, gemma3_path):
    code, line = _bash_blocks()[index]
    if code.strip() == SUITE:
        pytest.skip("the test suite itself (.ci/run runs this line)")
    if code.startswith(INSTALL):
        code = code[len(INSTALL):]                     # the install: tests/test_install.py
    code = code.replace("8080", str(_free_port())).replace("50052", str(_free_port()))
    rc, out, err = _run_bash(code, tmp_path)
    assert rc == 0, f"README.md:{line}\n{out[-3000:]}\n{err[-5000:]}"
    assert "Traceback" not in err and "error:" not in err, err[-3000:]


def _run_bash(code: str, cwd) -> tuple[int, str, str]:
    """bash -e the block in a session of its own, its output in files (not pipes: a server the
    block started in the background would hold a pipe open, and a failed block would then wait
    out TIMEOUT); whatever the block left running is stopped when bash ends."""
    with open(cwd / "stdout", "w+") as o, open(cwd / "stderr", "w+") as e:
        p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=_env(cwd), stdout=o,
                             stderr=e, text=True, start_new_session=True)
        try:
            rc = p.wait(timeout=TIMEOUT)
        finally:
            _kill_session(p.pid)
        o.seek(0), e.seek(0)
        return rc, o.read(), e.read()


def test_a_failed_block_stops_what_it_started(tmp_path):
    """A block that fails with a background process still running returns at once, and the
    process is gone (before: the test waited out TIMEOUT on the process's open pipe)."""
    t0 = time.monotonic()
    rc, _, _ = _run_bash(f"sleep 300 & echo $! > {tmp_path}/pid; false", tmp_path)
    assert rc != 0 and time.monotonic() - t0 < 60
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _kill_session(pgid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@pytest.mark.slow
def test_c_block(tmp_path, smollm2_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    from pyllamaspec.engine import _native
    [(code, line)] = [(c, line) for lang, c, line in blocks() if lang == "c"]
    src = tmp_path / "example.c"
    src.write_text(code)
    lib = pathlib.Path(_native._lib_path)
    exe = tmp_path / "example"
    subprocess.run([cc, str(src), "-I", str(REPO / "csrc" / "include"), "-L", str(lib.parent),
                    f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}", "-o", str(exe)], check=True,
                   capture_output=True, timeout=300)
    p = subprocess.run([str(exe), str(smollm2_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"README.md:{line}: {p.stdout}{p.stderr}"
    assert re.fullmatch(r"5 prompt tokens, next: .+\n", p.stdout), p.stdout     # "The capital of France is"
