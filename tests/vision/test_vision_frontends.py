"""Images through the server (image_url parts, --mmproj, /props) and the CLI (--mmproj --image),
on the tiny Gemma 3 text model and projector of test_vision.py."""
from __future__ import annotations

import base64
import subprocess
import sys

import pytest

import models_vision as mv
import pyllamaspec
from pyllamaspec.engine.model import Model
from test_server import Server
from test_vision import N_EMBD, N_VOCAB

PARTS = [{"type": "text", "text": "describe"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return mv.write_tiny_vision(tmp_path_factory.mktemp("vision_fe"), N_VOCAB, N_EMBD)


def _url(path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _body(files, **kw):
    return {"messages": [{"role": "user", "content": PARTS + [{"type": "image_url", "image_url": {"url": _url(
        files / "a.png")}}]}], "max_tokens": 10, "temperature": 0, **kw}


def test_server_answers_about_an_image(files):
    args = ["-m", str(files / "text.gguf"), "-c", "256", "-t", "1", "--chat-template", "gemma"]
    s = Server(args + ["--mmproj", str(files / "mmproj.gguf"), "--lookup", "--draft-max", "4",
                       "--media-path", str(files)])
    try:
        assert s.get("/props")["modalities"]["vision"] is True
        assert s.get("/v1/models")["models"][0]["capabilities"] == ["completion", "multimodal"]   # llama-server's
        code, got = s.post("/v1/chat/completions", _body(files))
        assert code == 200, got
        with Model(files / "text.gguf", n_ctx=256) as m:
            want = pyllamaspec.chat([{"role": "user", "content": PARTS + [{"type": "image", "image": files / "a.png"}]}],
                                    m, mmproj=files / "mmproj.gguf", chat_template="gemma", temperature=0,
                                    max_tokens=10)
        assert got["choices"][0]["message"]["content"] == want.text
        assert got["usage"]["prompt_tokens"] == len(want.prompt_tokens)     # the image's 16 rows counted
        bad = _body(files)
        bad["messages"][0]["content"][1]["image_url"]["url"] = "data:image/png;base64," + base64.b64encode(
            b"not an image").decode()
        code, err = s.post("/v1/chat/completions", bad)
        assert code == 400 and "image" in err["error"]["message"]
        bad["messages"][0]["content"][1]["image_url"]["url"] = "https://example.com/cat.png"
        assert s.post("/v1/chat/completions", bad)[0] == 400
        assert s.post("/v1/chat/completions", _body(files))[0] == 200          # it lives on
        _media_path_requests(s, files, got["choices"][0]["message"]["content"])
    finally:
        s.stop()
    s = Server(args)                                                           # no projector
    try:
        assert s.get("/props")["modalities"]["vision"] is False
        assert s.get("/v1/models")["models"][0]["capabilities"] == ["completion"]
        code, err = s.post("/v1/chat/completions", _body(files))
        assert code == 400 and "mmproj" in err["error"]["message"]
    finally:
        s.stop()


def _media_path_requests(s, files, want: str) -> None:
    """llama-server's other image sources: file:// URLs under --media-path (here the fixture's
    directory) and bare base64 give the data URL's answer; a path that leaves the directory or a
    missing file is a 400 naming it."""
    def ask(url):
        body = _body(files)
        body["messages"][0]["content"][1]["image_url"]["url"] = url
        return s.post("/v1/chat/completions", body)
    for url in ("file://a.png", "file:///a.png", base64.b64encode((files / "a.png").read_bytes()).decode()):
        code, r = ask(url)
        assert code == 200 and r["choices"][0]["message"]["content"] == want, (url, r)
    for url, why in (("file://../vision_fe0/a.png", "not allowed"), ("file://missing.png", "does not exist"),
                     ("file://a.png\n", "not allowed"), ("/etc/hostname", "media-path")):
        code, err = ask(url)
        assert code == 400 and why in err["error"]["message"], (url, err)


def test_cli_image(files):
    run = [sys.executable, "-m", "pyllamaspec.cli", "-m", str(files / "text.gguf"), "-c", "256", "-n", "8",
           "--temp", "0", "-p", "describe", "--log-disable"]
    out = subprocess.run(run + ["--mmproj", str(files / "mmproj.gguf"), "--image", str(files / "a.png")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with Model(files / "text.gguf", n_ctx=256) as m:
        want = pyllamaspec.generate("describe", m, images=[files / "a.png"], mmproj=files / "mmproj.gguf",
                                    temperature=0, max_tokens=8)
    assert out.stdout.startswith("describe" + want.text)
    out = subprocess.run(run + ["--image", str(files / "a.png")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "--mmproj" in out.stderr


def test_a_slot_with_an_image_survives_a_restart(files, tmp_path):
    """/slots save and restore keep the image's own ids (the core's history): restored after a
    restart, the same image is taken from the slot (only the last token evaluated again) and
    another image at the same place is evaluated anew."""
    args = ["-m", str(files / "text.gguf"), "-c", "256", "-t", "1", "-np", "1", "--chat-template", "gemma",
            "--mmproj", str(files / "mmproj.gguf"), "--cache-ram", "0", "--slot-save-path", str(tmp_path)]
    s = Server(args)
    try:
        code, first = s.post("/v1/chat/completions", _body(files))
        assert code == 200, first
        code, out = s.post("/slots/0?action=save", {"filename": "img.bin"})
        assert code == 200, out
    finally:
        s.stop()
    s = Server(args)
    try:
        code, r = s.post("/slots/0?action=restore", {"filename": "img.bin"})
        assert code == 200 and r["n_restored"] == out["n_saved"], r
        code, again = s.post("/v1/chat/completions", _body(files))
        assert code == 200 and again["timings"]["prompt_n"] <= 2, again["timings"]
        assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
        other = _body(files)
        other["messages"][0]["content"][1]["image_url"]["url"] = _url(files / "b.png")
        code, r = s.post("/v1/chat/completions", other)
        assert code == 200 and r["timings"]["prompt_n"] >= 16, r["timings"]      # the other image's rows
    finally:
        s.stop()
