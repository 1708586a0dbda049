"""Every code block of README.md and of each page in docs/ runs as written (issue 27, 7; issue 41).
Per file: the Python blocks in order in one interpreter (a reader's session: later blocks use what
earlier ones defined; a docs page defines at the top of its first block what it needs from the
README's quick start), each bash block in its own shell, a C block written to example.c and built
and run by the bash block that follows it, as written. ```text blocks are output listings and are
not run; any other language fails the inventory test.

Two things are not run here, in any file, each for a stated reason: `pip install .`
(tests/project/test_install.py builds and installs it from empty caches) and `pytest -q tests` (it is this
suite; .ci/run runs that very line). The ports a block listens on (8080, 50052) are swapped for
free ones, so that the test cannot collide with another server on the machine.

The blocks fetch the offline models, start servers and time the demo: slow, so marked slow. The
links between the pages are checked without running anything, and the README stays a front page
that leads to every page."""
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
DOCS = [README] + sorted((REPO / "docs").glob("*.md"))
LANGS = {"python", "bash", "c", "text"}
TIMEOUT = 1800
INSTALL = "pip install . && "
SUITE = 'pip install ".[test]" && pytest -q tests'
FRONT_PAGE_LINES = 300                      # issue 41: the README is a front page, the rest is in docs/


def _name(doc: pathlib.Path) -> str:
    return doc.relative_to(REPO).as_posix()


def blocks(doc: pathlib.Path = README) -> list[tuple[str, str, int]]:
    """(language, code, line number) of each fenced block of one file."""
    out, lines = [], doc.read_text().splitlines()
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


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_block_is_accounted_for(doc):
    found = blocks(doc)
    bad = [(lang, line) for lang, _, line in found if lang not in LANGS]
    assert bad == [], f"{_name(doc)}: blocks with no runner (language, line): {bad}"
    for i, (lang, _, line) in enumerate(found):
        if lang == "c":                                   # built and run by the bash block after it
            assert i + 1 < len(found) and found[i + 1][0] == "bash" and "example.c" in found[i + 1][1], \
                f"{_name(doc)}:{line}: a C block needs a bash block right after it that builds example.c"
    if doc == README:
        bash = [code for lang, code, _ in found if lang == "bash"]
        assert bash[0].strip().startswith(INSTALL) and bash[1].strip() == SUITE
        assert SUITE in (REPO / ".ci" / "run").read_text()            # the suite's own line, run by CI


def _docs_with(lang: str) -> list[pathlib.Path]:
    return [d for d in DOCS if any(b[0] == lang for b in blocks(d))]


@pytest.mark.slow
@pytest.mark.parametrize("doc", _docs_with("python"), ids=_name)
def test_python_blocks(doc, tmp_path, smollm2_path, gemma3_path):
    name = _name(doc)
    code = [(c, line) for lang, c, line in blocks(doc) if lang == "python"]
    script = "import traceback, sys\nns = {}\n"
    for c, line in code:
        script += (f"print('--- {name}:{line}', flush=True)\n"
                   f"exec(compile({c!r}, '{name}:{line}', 'exec'), ns)\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, f"{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    assert p.stdout.count(f"--- {name}:") == len(code)
    assert "Traceback" not in p.stderr


def _bash_blocks() -> list[tuple[pathlib.Path, int, str, int]]:
    """(file, index among its bash blocks, code, line) of every bash block, the C blocks' builds
    included (test_c_block runs those; test_bash_block skips them)."""
    out = []
    for doc in DOCS:
        found = [b for b in blocks(doc) if b[0] == "bash"]
        out += [(doc, i, code, line) for i, (_, code, line) in enumerate(found)]
    return out


def _builds_c(doc: pathlib.Path, line: int) -> bool:
    """Whether the bash block at `line` follows a C block (so it builds that block)."""
    found = blocks(doc)
    return any(b[2] == line and i > 0 and found[i - 1][0] == "c" for i, b in enumerate(found))


@pytest.mark.slow
@pytest.mark.parametrize("doc, index, code, line", _bash_blocks(),
                         ids=[f"{_name(d)}-block{i}" for d, i, _, _ in _bash_blocks()])
def test_bash_block(doc, index, code, line, tmp_path, smollm2_path, gemma3_path):
    if code.strip() == SUITE:
        pytest.skip("the test suite itself (.ci/run runs this line)")
    if _builds_c(doc, line):
        pytest.skip("the C block's build: test_c_block runs it")
    if code.startswith(INSTALL):
        code = code[len(INSTALL):]                     # the install: tests/project/test_install.py
    code = code.replace("8080", str(_free_port())).replace("50052", str(_free_port()))
    rc, out, err = _run_bash(code, tmp_path)
    assert rc == 0, f"{_name(doc)}:{line}\n{out[-3000:]}\n{err[-5000:]}"
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


def _c_blocks() -> list[tuple[pathlib.Path, str, int, str]]:
    """(file, C code, line, the bash block after it that builds and runs it as example.c)."""
    out = []
    for doc in DOCS:
        found = blocks(doc)
        out += [(doc, code, line, found[i + 1][1]) for i, (lang, code, line) in enumerate(found)
                if lang == "c" and i + 1 < len(found)]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("doc, code, line, build", _c_blocks(), ids=[f"{_name(d)}:{n}" for d, _, n, _ in _c_blocks()])
def test_c_block(doc, code, line, build, tmp_path, smollm2_path):
    """The C program, built against the library and header `pip install .` installed, by the
    commands the page gives, and run on SmolLM2."""
    if not shutil.which("cc"):
        pytest.skip("no C compiler (cc)")
    (tmp_path / "example.c").write_text(code)
    rc, out, err = _run_bash(build, tmp_path)
    assert rc == 0, f"{_name(doc)}:{line}: {out}{err}"
    assert re.fullmatch(r"5 prompt tokens, next: .+\n", out), out     # "The capital of France is"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(doc: pathlib.Path) -> list[str]:
    """The lines of a file outside its fenced blocks."""
    out, fenced = [], False
    for ln in doc.read_text().splitlines():
        if ln.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(ln)
    return out


def _anchors(doc: pathlib.Path) -> set[str]:
    return {_slug(m.group(1)) for ln in _prose(doc) if (m := re.match(r"^#+\s+(.*)$", ln))}


def _links(doc: pathlib.Path) -> list[str]:
    """The relative link targets of a file's prose (inline code and web addresses left out)."""
    text = "\n".join(re.sub(r"`[^`\n]*`", "", ln) for ln in _prose(doc))
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_links_resolve(doc):
    """Every link between the pages names a file that exists, and a heading that it has."""
    bad = []
    for target in _links(doc):
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert bad == [], f"{_name(doc)}: {bad}"


def test_readme_is_a_front_page():
    """The README stays a front page that leads to every page of docs/ (issue 41)."""
    n = len(README.read_text().splitlines())
    assert n <= FRONT_PAGE_LINES, f"README.md has {n} lines: move reference or measurements to docs/"
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in _links(README)}
    assert [_name(d) for d in DOCS[1:] if d.resolve() not in linked] == []
