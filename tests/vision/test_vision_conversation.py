"""Images in the CLI's conversation (-cnv), as llama-mtmd-cli's chat mode takes them: /image FILE
for the next message, --image FILE for the first, driven through stdin. The real Gemma 3 270M
with a tiny seeded projector of its width (test_vision_llamacpp.py's p640): unlike the tiny text
model, its answer depends on the image, so an image dropped or misplaced shows."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

import models_vision as mv
import pyllamaspec
from conftest import real_model
from pyllamaspec.engine.model import Model

Q = "What is in this picture?"
FLAGS = ["-c", "512", "-n", "12", "--temp", "0", "-t", "1", "--chat-template", "gemma", "-cnv", "--turn-stats"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = mv.write_tiny_vision(tmp_path_factory.mktemp("vision_cnv"))
    mv.write_gemma3_mmproj(d / "p640.gguf", n_embd_text=640, seed=1)
    (d / "broken.png").write_bytes(b"not an image")
    return d


@pytest.fixture(scope="module")
def gemma(files):
    """chat(messages) greedy through pyllamaspec.chat(), as the CLI should answer them."""
    path = real_model("gemma3")
    with Model(path, n_ctx=512) as m:
        yield path, lambda messages: pyllamaspec.chat(messages, m, mmproj=files / "p640.gguf", chat_template="gemma",
                                                      temperature=0, max_tokens=12)


def _cli(model, args, stdin: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "pyllamaspec.cli", "-m", str(model), *FLAGS, *args],
                       input=stdin.encode(), capture_output=True, timeout=300)
    p.stdout, p.stderr = p.stdout.decode(), p.stderr.decode()     # bytes: an answer's "\r\n" kept as said
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return p


def _image(path) -> dict:
    return {"type": "image", "image": path}


def _user(*parts) -> dict:
    return {"role": "user", "content": [*parts, {"type": "text", "text": Q}]}


def _turns(stderr: str) -> list[tuple[int, int]]:
    """(prompt tokens, reused) of each turn, from --turn-stats."""
    return [(int(a), int(b)) for a, b in re.findall(r"^\[prompt (\d+) tokens, (\d+) reused", stderr, re.M)]


def test_image_command_joins_the_next_message(files, gemma):
    """/image FILE then a message: the answer is chat()'s with that image part; the second turn
    resends the image (its answer is chat()'s over the whole history) and reuses the first's
    prefix, image included."""
    model, chat = gemma
    p = _cli(model, ["--mmproj", str(files / "p640.gguf")], f"/image {files / 'b.png'}\n{Q}\nAnd then?\n/exit\n")
    first = chat([_user(_image(files / "b.png"))])
    assert first.text != chat([{"role": "user", "content": Q}]).text        # the image matters here
    second = chat([_user(_image(files / "b.png")), {"role": "assistant", "content": first.text},
                   {"role": "user", "content": "And then?"}])
    assert f"{files / 'b.png'} image loaded\n" in p.stdout
    assert f"> {Q}\n{first.text}\n" in p.stdout
    assert f"> And then?\n{second.text}\n" in p.stdout
    turns = _turns(p.stderr)
    assert len(turns) == 2 and turns[0] == (len(first.prompt_tokens), 0)
    assert turns[1][1] >= turns[0][0]                  # all of the first prompt, image and all, reused


def test_image_flags_go_with_the_first_message(files, gemma):
    """--image (repeated) with -cnv: the images join the first user message, -p's or (without
    -p) the first one typed, and stay there in the turns after."""
    model, chat = gemma
    mm = ["--mmproj", str(files / "p640.gguf")]
    p = _cli(model, mm + ["--image", str(files / "a.png"), "--image", str(files / "b.png"), "-p", Q], "/exit\n")
    both = chat([_user(_image(files / "a.png"), _image(files / "b.png"))])
    assert both.text != chat([_user(_image(files / "b.png"))]).text
    assert f"> {Q}\n{both.text}\n" in p.stdout
    p = _cli(model, mm + ["--image", str(files / "b.png")], f"{Q}\n{Q}\n")
    first = chat([_user(_image(files / "b.png"))])
    second = chat([_user(_image(files / "b.png")), {"role": "assistant", "content": first.text},
                   {"role": "user", "content": Q}])
    turns = p.stdout.split(f"> {Q}\n")
    assert len(turns) == 3 and turns[1] == f"{first.text}\n\n" and turns[2].startswith(f"{second.text}\n")


def test_bad_image_commands_leave_the_conversation_going(files, gemma):
    """A missing file, a broken one, no file name, /audio, and /image without --mmproj: each a
    clear error on stderr, nothing attached, and the next message answered as plain text."""
    model, chat = gemma
    plain = chat([{"role": "user", "content": Q}]).text
    bad = [f"/image {files / 'missing.png'}", f"/image {files / 'broken.png'}", "/image", "/audio x.wav"]
    p = _cli(model, ["--mmproj", str(files / "p640.gguf")], "\n".join(bad) + f"\n{Q}\n/quit\nnever read\n")
    assert "cannot read image file" in p.stderr and "missing.png" in p.stderr
    assert "broken.png: cannot decode" in p.stderr and "image loaded" not in p.stdout
    assert "missing media filename" in p.stderr and "images only" in p.stderr
    assert f"> {Q}\n{plain}\n" in p.stdout and "never read" not in p.stdout
    p = _cli(model, [], f"/image {files / 'b.png'}\n{Q}\n")
    assert "--mmproj" in p.stderr and f"> {Q}\n{plain}\n" in p.stdout


def test_image_flag_without_projector_or_file_stops_before_the_conversation(files, gemma):
    model, _ = gemma
    base = [sys.executable, "-m", "pyllamaspec.cli", "-m", str(model), *FLAGS]
    for extra, msg in ((["--image", str(files / "b.png")], "--mmproj"),
                       (["--mmproj", str(files / "p640.gguf"), "--image", str(files / "missing.png")], "missing.png")):
        p = subprocess.run(base + extra, input="hi\n", capture_output=True, text=True, timeout=300)
        assert p.returncode == 1 and msg in p.stderr and "Traceback" not in p.stderr
