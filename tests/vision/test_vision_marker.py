"""The server's media marker and /completion's prompt object, as llama-server b11434 has them:
a marker drawn at random per process (LLAMA_MEDIA_MARKER pins it) and shown by /props, so a
client's text that spells <__media__> stays text; {"prompt_string", "multimodal_data"} prompts
answered with --mmproj as generate(images=) answers. Two server processes for the whole module."""
from __future__ import annotations

import base64
import re

import pytest

import models_vision as mv
import pyllamaspec
from pyllamaspec.engine.model import Model
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector
from test_server import Server
from test_vision import N_EMBD, N_VOCAB

FORM = re.compile(r"<__media_[0-9A-Za-z]{32}__>")      # llama-server's "<__media_" + random_string() + "__>"
PINNED = "<my-image>"
GREEDY = {"n_predict": 8, "temperature": 0}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return mv.write_tiny_vision(tmp_path_factory.mktemp("vision_marker"), N_VOCAB, N_EMBD)


def _server(files, env_marker: str | None, mmproj: bool) -> Server:
    args = ["-m", str(files / "text.gguf"), "-c", "256", "-t", "1", "--chat-template", "gemma"]
    with pytest.MonkeyPatch.context() as mp:             # the process's environment, at its start
        if env_marker is None:
            mp.delenv("LLAMA_MEDIA_MARKER", raising=False)
        else:
            mp.setenv("LLAMA_MEDIA_MARKER", env_marker)
        return Server(args + (["--mmproj", str(files / "mmproj.gguf")] if mmproj else []))


@pytest.fixture(scope="module")
def mm(files):
    """With --mmproj, its marker drawn at random."""
    s = _server(files, None, True)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def plain(files):
    """No --mmproj, its marker pinned by LLAMA_MEDIA_MARKER."""
    s = _server(files, PINNED, False)
    yield s
    s.stop()


def _b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _obj(text: str, data: list) -> dict:
    return {"prompt": {"prompt_string": text, "multimodal_data": data}, **GREEDY}


def test_marker_random_per_process_pinned_by_env(mm, plain, monkeypatch):
    theirs = mm.get("/props")["media_marker"]
    assert FORM.fullmatch(theirs), theirs
    monkeypatch.delenv("LLAMA_MEDIA_MARKER", raising=False)
    vp.server_marker.cache_clear()
    try:
        mine = vp.server_marker()
        assert FORM.fullmatch(mine) and mine != theirs            # this process drew its own
        assert vp.server_marker() == mine                         # once per process
        monkeypatch.setenv("LLAMA_MEDIA_MARKER", PINNED)
        vp.server_marker.cache_clear()
        assert vp.server_marker() == PINNED
    finally:
        monkeypatch.undo()
        vp.server_marker.cache_clear()
    assert plain.get("/props")["media_marker"] == PINNED
    assert mm.get("/props")["media_marker"] == theirs             # the same for the process's life


def test_completion_multimodal_data_equals_generate(mm, files, monkeypatch):
    marker = mm.get("/props")["media_marker"]
    prompt = "look <__media__> then <__media__> and say"
    data = [_b64(files / "a.png"), _b64(files / "b.png")]
    code, got = mm.post("/completion", _obj(prompt.replace("<__media__>", marker), data))
    assert code == 200, got
    monkeypatch.setenv("LLAMA_MEDIA_MARKER", marker)              # the server's: generate() keeps <__media__>
    with Model(files / "text.gguf", n_ctx=256) as m:
        want = pyllamaspec.generate(prompt, m, images=[files / "a.png", files / "b.png"],
                                    mmproj=files / "mmproj.gguf", temperature=0, max_tokens=8)
    assert got["content"] == want.text and want.text
    assert got["tokens_evaluated"] == len(want.prompt_tokens)     # the images' 2 x 16 rows counted
    # /completions, the prompt in a one-element array, unpadded base64 with a line break
    odd = [d.rstrip("=")[:40] + "\n" + d.rstrip("=")[40:] for d in data]
    body = _obj(prompt.replace("<__media__>", marker), odd)
    body["prompt"] = [body["prompt"]]
    code, again = mm.post("/completions", body)
    assert code == 200 and again["content"] == want.text, again


def test_text_spelling_the_default_marker_stays_text(mm, files):
    marker = mm.get("/props")["media_marker"]
    url = "data:image/png;base64," + _b64(files / "a.png")
    chat = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what does <__media__> mean here"},
        {"type": "image_url", "image_url": {"url": url}}]}], "max_tokens": 8, "temperature": 0}
    code, got = mm.post("/v1/chat/completions", chat)
    assert code == 200, got
    code, tmpl = mm.post("/apply-template", chat)
    text = tmpl["prompt"]
    assert code == 200 and text.count(marker) == 1 and "<__media__>" in text
    with Model(files / "text.gguf", n_ctx=256) as m, Projector(files / "mmproj.gguf") as p:
        ids = vp.tokenize(m, text, [p.encode(files / "a.png")], "gemma3", True, marker).ids
        spelled = m.tokenize("<__media__>", add_special=False, parse_special=True)
    assert got["usage"]["prompt_tokens"] == len(ids)
    assert any(ids[i:i + len(spelled)] == spelled for i in range(len(ids)))     # its text tokens
    code, same = mm.post("/completion", _obj(text, [_b64(files / "a.png")]))
    assert code == 200 and same["content"] == got["choices"][0]["message"]["content"]
    assert same["tokens_evaluated"] == len(ids) and "<__media__>" in same["prompt"]
    # without multimodal_data a marker is text as well (llama-server tokenizes prompt_string as any prompt)
    code, text_only = mm.post("/completion", {"prompt": {"prompt_string": "a " + marker}, **GREEDY})
    tokens = mm.post("/tokenize", {"content": "a " + marker, "add_special": True})[1]["tokens"]
    assert code == 200 and text_only["tokens_evaluated"] == len(tokens) > 3


@pytest.mark.parametrize("text_markers, data, words", [
    (1, ["A", "A"], "number of media markers in text (1) does not match number of bitmaps (2)"),
    (2, ["A"], "number of media markers in text (2) does not match number of bitmaps (1)"),
    (0, ["A"], "does not match number of bitmaps (1)"),
    (1, ["@@not base64@@"], "multimodal_data[0] is not valid base64"),
    (1, ["data:image/png;base64,AAAA"], "data URL"),
    (1, [base64.b64encode(b"not an image").decode()], "Failed to load image or audio file (multimodal_data[0])"),
    (1, "AAAA", "must be an array of base64 strings"),
    (1, [7], "must be an array of base64 strings"),
])
def test_bad_multimodal_data(mm, files, text_markers, data, words):
    marker = mm.get("/props")["media_marker"]
    data = [_b64(files / "a.png") if d == "A" else d for d in data] if isinstance(data, list) else data
    text = "see <__media__> " + " and ".join([marker] * text_markers)
    code, err = mm.post("/completion", _obj(text, data))
    assert code == 400 and words in err["error"]["message"], err
    assert mm.health()["status"] == "ok"


def test_bad_prompt_objects_and_no_mmproj(mm, plain, files):
    a = [_b64(files / "a.png")]
    code, err = mm.post("/completion", {"prompt": {"multimodal_data": a}, **GREEDY})
    assert code == 400 and "a JSON object containing a prompt string" in err["error"]["message"]
    code, err = mm.post("/completion", {"prompt": {"prompt_string": [1, 2], "multimodal_data": a}, **GREEDY})
    assert code == 400 and "'prompt_string' must be a string" in err["error"]["message"]
    code, err = mm.post("/v1/completions", {"prompt": {"prompt_string": "x", "multimodal_data": a}, "max_tokens": 4})
    assert code == 400 and "/completion" in err["error"]["message"]
    code, err = plain.post("/completion", _obj("see " + PINNED, a))
    msg = err["error"]["message"]
    assert code == 400 and "Multimodal data provided" in msg and "--mmproj" in msg
    marker = mm.get("/props")["media_marker"]
    code, ok = mm.post("/completion", _obj("see " + marker, a))             # it lives on
    assert code == 200 and ok["tokens_evaluated"] > 16
