"""-hf takes the repository's vision projector (mmproj), as llama.cpp's -hf does for llama-server
and llama-mtmd-cli: the CLI (-hf with --image) and the server (-hf, then image_url parts) on the
tiny Gemma 3 text model and projector of test_vision.py, from a local Hugging Face cache made
offline (test_hub.py's layout; HF_HUB_OFFLINE=1, for the CLI run here and the servers started)."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("huggingface_hub")

import models_vision as mv  # noqa: E402
import pyllamaspec  # noqa: E402
from pyllamaspec.engine.model import Model  # noqa: E402
from test_hub import make_cached_repo, offline_hub  # noqa: E402
from test_vision import N_EMBD, N_VOCAB  # noqa: E402
from test_vision_frontends import _body  # noqa: E402

NOT_A_PROJECTOR = b"GGUF? no: not a projector"
# The model in F32/, its projector beside it (F16: 16 bits apart) and three decoys that do not load:
# beside it at a farther quant (Q8_0: 24 apart), in the folder above at the model's quant, and in
# another branch (F16/). Picking any decoy fails the run.
VISION = "someone/TinyVision-GGUF"
TEXT = "someone/TinyText-GGUF"                 # no projector at all
BAD = "someone/BadProjector-GGUF"              # a projector that does not load
ODD = "someone/OtherVision-GGUF"               # a projector of a type this engine does not run


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = mv.write_tiny_vision(tmp_path_factory.mktemp("vision_hf"), N_VOCAB, N_EMBD)
    mv.write_gemma3_mmproj(d / "odd.gguf", n_embd_text=N_EMBD, seed=5, extra_kv={"clip.projector_type": "qwen2vl"})
    cache = d / "hf" / "hub"
    text, mmproj = (d / "text.gguf").read_bytes(), (d / "mmproj.gguf").read_bytes()
    repos = {
        VISION: {"F32/tiny-vision-F32.gguf": text, "F32/mmproj-tiny-vision-F16.gguf": mmproj,
                 "F32/mmproj-tiny-vision-Q8_0.gguf": NOT_A_PROJECTOR, "mmproj-tiny-vision-F32.gguf": NOT_A_PROJECTOR,
                 "F16/mmproj-tiny-vision-F32.gguf": NOT_A_PROJECTOR, "README.md": b"a tiny vision model"},
        TEXT: {"tiny-text-F32.gguf": text},
        BAD: {"tiny-F32.gguf": text, "mmproj-tiny-F32.gguf": NOT_A_PROJECTOR},
        ODD: {"tiny-F32.gguf": text, "mmproj-tiny-F32.gguf": (d / "odd.gguf").read_bytes()},
    }
    for repo, data in repos.items():
        make_cached_repo(cache, repo, list(data), data=data)
    return d


@pytest.fixture
def offline_cache(files, monkeypatch):
    """The processes started read that cache, offline."""
    offline_hub(monkeypatch, files / "hf" / "hub")
    return files


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in this process (as a user runs it, less the start-up): (exit status, stdout, stderr)."""
    from pyllamaspec.frontends.cli.main import main
    capsys.readouterr()
    rc = main(["-c", "256", "-n", "8", "--temp", "0", "-t", "1", "-p", "describe", "--log-disable", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_hf_with_image(offline_cache, capsys):
    files = offline_cache
    with Model(files / "text.gguf", n_ctx=256) as m:
        want = "describe" + pyllamaspec.generate("describe", m, images=[files / "a.png"], mmproj=files / "mmproj.gguf",
                                                 temperature=0, max_tokens=8).text
        text_only = "describe" + pyllamaspec.generate("describe", m, temperature=0, max_tokens=8).text
    image = ["--image", str(files / "a.png")]
    rc, out, err = _cli(capsys, "-hf", VISION + ":F32", *image)     # the repository's projector, by the sibling rule
    assert rc == 0 and out.startswith(want), err
    rc, out, err = _cli(capsys, "-hf", VISION, "--hf-file", "F32/tiny-vision-F32.gguf", *image)
    assert rc == 0 and out.startswith(want), err
    rc, out, err = _cli(capsys, "-hf", VISION + ":F32", "--no-mmproj", *image)
    assert rc == 1 and "--no-mmproj" in err and VISION in err
    # no projector in the repository: a text model, no error; --image then says why it cannot
    rc, out, err = _cli(capsys, "-hf", TEXT + ":F32")
    assert rc == 0 and out.startswith(text_only), err
    rc, out, err = _cli(capsys, "-hf", TEXT + ":F32", *image)
    assert rc == 1 and "has no mmproj" in err and "--mmproj" in err
    # --mmproj FILE wins over the repository's (which does not even load)
    rc, out, err = _cli(capsys, "-hf", BAD + ":F32", "--mmproj", str(files / "mmproj.gguf"), *image)
    assert rc == 0 and out.startswith(want), err
    rc, out, err = _cli(capsys, "-hf", BAD + ":F32", *image)                  # ...which it would have taken
    assert rc == 1 and "mmproj-tiny-F32.gguf" in err
    rc, out, err = _cli(capsys, "-hf", BAD + ":F32")          # without --image: text only, with a warning
    assert rc == 0 and out.startswith(text_only) and "warning" in err and "text only" in err, err


def test_cli_mmproj_flags_without_effect(offline_cache, capsys):
    files = offline_cache
    from pyllamaspec.frontends.cli.main import main
    assert main(["-m", str(files / "text.gguf"), "-c", "256", "-n", "2", "-t", "1", "-p", "describe", "--no-mmproj",
                 "--mmproj-offload"]) == 0
    err = capsys.readouterr().err
    assert "--no-mmproj has no effect without -hf" in err
    assert "--mmproj-offload has no effect: the vision projector runs on the CPU here" in err


def test_server_hf_loads_the_projector(offline_cache):
    from test_server import Server
    files = offline_cache
    args = ["-c", "256", "-t", "1", "--chat-template", "gemma"]
    s = Server(["-hf", VISION + ":F32", *args])
    try:
        assert s.get("/props")["modalities"]["vision"] is True
        code, got = s.post("/v1/chat/completions", _body(files))
        assert code == 200, got
        with Model(files / "text.gguf", n_ctx=256) as m:
            want = pyllamaspec.chat([{"role": "user", "content": [{"type": "text", "text": "describe"},
                                                                 {"type": "image", "image": files / "a.png"}]}],
                                    m, mmproj=files / "mmproj.gguf", chat_template="gemma", temperature=0,
                                    max_tokens=10)
        assert got["choices"][0]["message"]["content"] == want.text
    finally:
        s.stop()
    for flags in (["-hf", VISION + ":F32", "--no-mmproj"], ["-hf", TEXT + ":F32"]):
        s = Server(flags + args)                            # text only, no error
        try:
            assert s.get("/props")["modalities"]["vision"] is False
            code, err = s.post("/v1/chat/completions", _body(files))
            assert code == 400 and "mmproj" in err["error"]["message"]
        finally:
            s.stop()


def test_server_hf_projector_of_another_type(offline_cache):
    """A projector type this engine does not run yet, found by -hf: the server serves the text model
    with a warning (llama-server would load it); given by --mmproj, it is an error."""
    from test_server import Server
    files = offline_cache
    s = Server(["-hf", ODD + ":F32", "-c", "256", "-t", "1"])
    try:
        assert s.get("/props")["modalities"]["vision"] is False
    finally:
        s.stop()
    log = s.proc.stdout.read()
    assert "qwen2vl" in log and "text only" in log
    bad = subprocess.run([sys.executable, "-m", "pyllamaspec.server", "-m", str(files / "text.gguf"), "-c", "256",
                          "--mmproj", str(files / "odd.gguf"), "--port", "0"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1 and "qwen2vl" in bad.stderr
