"""Qwen3-VL / Qwen3.5 images end to end (issue 42): our qwen3vl_merger encoder's rows placed at
2-D M-RoPE positions in the tiny qwen35 (a hybrid), through generate(), the server and the CLI.
The greedy answer equals llama.cpp b11434's (tests/data/reference/vision_qwen3vl.json, made by
scripts/vision_reference_qwen.py: libmtmd's encoder and llama_decode) up to its first near tie;
greedy speculation (a draft model reading the image's rows, n-gram lookup) equals plain, drafts
accepted; a prompt's prefix is reused across its image on the hybrid and stops at another image;
the image's rows count in the prompt's tokens.

Near tie: a step whose top two logits in llama.cpp's recording are closer than 4 x its own spread
on this case (the fixture's ``spread``: 1 thread against 2, flash attention off against on; at most
1.6e-3) may go either way on another CPU; the comparison stops there."""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

import models_vision_qwen as mq
import pyllamaspec
from conftest import reference_dir
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import InvalidArgumentError
from pyllamaspec.vision.projector import Projector
from test_server import Server

REF = json.loads((reference_dir() / "vision_qwen3vl.json").read_text())
CASES = REF["cases"]
TEXT, VISION_START = "tiny_qwen35.gguf", 270


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return mq.write_reference_files(tmp_path_factory.mktemp("vision_qwen"), REF)


def _projector(files, c) -> Projector:
    return Projector(files / f"{c['projector']}.gguf", image_min_tokens=c["image_min_tokens"],
                     image_max_tokens=c["image_max_tokens"])


def _prompt(c) -> str:
    return c["prompt_before"] + "<__media__>" + c["prompt_after"]


def _llamacpp_answer(c) -> list[int]:
    """The recorded greedy ids, up to (not including) the first near tie or end of generation."""
    near = 4 * max(v["logits"] for v in c["spread"].values())
    ids = []
    for g in c["gen"]:
        if g["eog"] or g["top"][0][1] - g["top"][1][1] < near:
            break
        ids.append(g["id"])
    return ids


def _gen(files, m, c, draft=None, image=None, **kw):
    with _projector(files, c) as p:
        return pyllamaspec.generate(_prompt(c), m, draft, images=[files / f"{image or c['image']}.png"], mmproj=p,
                                    temperature=0, **kw)


@pytest.mark.parametrize("c", CASES, ids=[c["image"] for c in CASES])
def test_greedy_answer_is_llamacpps(files, c):
    want = _llamacpp_answer(c)
    assert len(want) >= 2, "the fixture's case should hold at least two clear steps"
    with Model(files / TEXT, n_ctx=256) as m:
        r = _gen(files, m, c, max_tokens=c["n_gen"], cache_prompt=False)
    assert r.tokens[:len(want)] == want
    image = next(ch for ch in c["chunks"] if ch["type"] == "image")
    text = sum(len(ch["ids"]) for ch in c["chunks"] if ch["type"] == "text")
    assert len(r.prompt_tokens) == text + image["n_tokens"]            # the image's rows are prompt tokens


def test_greedy_speculation_with_a_qwen_image_equals_plain(files):
    c = CASES[1]                                                       # the largest image: 60 rows
    with Model(files / TEXT, n_ctx=256) as m, Model(files / TEXT, n_ctx=256) as d:
        plain = _gen(files, m, c, max_tokens=24, cache_prompt=False)
        assert len(plain.tokens) == 24
        for drafter in (d, "ngram"):
            spec = _gen(files, m, c, drafter, max_tokens=24, cache_prompt=False, adaptive=False, n_draft=4)
            assert spec.tokens == plain.tokens, drafter
        # the target itself as the draft model reads the target's rows at the image's 2-D
        # positions on its own (hybrid) sequence: every draft accepted (19 of 19; with
        # placeholders there, as before test_vision_draft.py's change: 13 of 38)
        spec = _gen(files, m, c, d, max_tokens=24, cache_prompt=False, adaptive=False, n_draft=4)
        assert spec.stats.accepted == spec.stats.drafted > 0, spec.stats


def test_prefix_reuse_across_a_qwen_image_on_a_hybrid(files):
    c = CASES[0]
    with Model(files / TEXT, n_ctx=256) as m:
        first = _gen(files, m, c, max_tokens=6)
        again = _gen(files, m, c, max_tokens=6)
        assert again.tokens == first.tokens
        assert again.stats.n_reused == len(again.prompt_tokens) - 1     # the whole prompt kept
        other = _gen(files, m, c, image="tiny", max_tokens=6)
        assert other.stats.n_reused == other.prompt_tokens.index(VISION_START) + 1
        fresh = _gen(files, m, c, image="tiny", max_tokens=6, cache_prompt=False)
        assert fresh.tokens == other.tokens


def test_image_token_limits(files):
    c = CASES[1]                                                       # 100 x 60
    with _projector(files, dict(c, image_min_tokens=None, image_max_tokens=None)) as p:
        assert p.encode(files / "big.png").n_tokens > 64              # the type's limits: 8 .. 4096
    with _projector(files, c) as p:
        assert p.encode(files / "big.png").n_tokens <= c["image_max_tokens"]
    for lo, hi in ((0, -1), (None, 0)):
        Projector(files / "q32.gguf", image_min_tokens=lo, image_max_tokens=hi).close()
    for kw in (dict(image_min_tokens=64, image_max_tokens=16), dict(image_max_tokens=-5),
               dict(image_min_tokens=2.5)):
        with pytest.raises(InvalidArgumentError):
            Projector(files / "q32.gguf", **kw)


def _url(path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def test_server_and_cli_answer_about_a_qwen_image(files):
    c = CASES[0]
    limits = ["--image-min-tokens", str(c["image_min_tokens"]), "--image-max-tokens", str(c["image_max_tokens"])]
    with Model(files / TEXT, n_ctx=256) as m:
        want = _gen(files, m, c, max_tokens=8, cache_prompt=False)
    s = Server(["-m", str(files / TEXT), "-c", "256", "-t", "1", "--mmproj", str(files / "q32.gguf"), *limits,
                "--lookup", "--draft-max", "4"])
    try:
        assert s.get("/props")["modalities"]["vision"] is True
        marker = s.get("/props")["media_marker"]
        body = {"prompt": {"prompt_string": _prompt(c).replace("<__media__>", marker),
                           "multimodal_data": [base64.b64encode((files / "wide.png").read_bytes()).decode()]},
                "n_predict": 8, "temperature": 0, "return_tokens": True}
        code, got = s.post("/completion", body)
        assert code == 200, got
        assert got["tokens"] == want.tokens and got["content"] == want.text
        assert got["tokens_evaluated"] == len(want.prompt_tokens)      # the image's rows counted
        bad = dict(body, prompt=dict(body["prompt"], multimodal_data=[base64.b64encode(b"no image").decode()]))
        assert s.post("/completion", bad)[0] == 400
        assert s.post("/completion", body)[0] == 200                  # it lives on
    finally:
        s.stop()
    out = subprocess.run([sys.executable, "-m", "pyllamaspec.cli", "-m", str(files / TEXT), "-c", "256", "-n", "8",
                          "--temp", "0", "-p", _prompt(c), "--log-disable", "--mmproj", str(files / "q32.gguf"),
                          "--image", str(files / "wide.png"), *limits], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert want.text in out.stdout
