"""-hfd takes the draft repository's vision projector (mmproj) as the draft's (issue 42), as -hf
takes the target's: where the target has one (-mm FILE, or -hf found one) and the draft
repository has one; --no-mmproj turns both off, --mmproj-draft FILE wins. (llama.cpp b11434's
-hfd fetches no projector: its draft has none; flags/launch.wants_draft_repo_mmproj.) On
models_vision_twin's pair, whose narrow draft reads its own projector's rows as the wide target
reads its own, from a local Hugging Face cache made offline (test_vision_hf.py's way)."""
from __future__ import annotations

import base64

import pytest

pytest.importorskip("huggingface_hub")

import models_vision_twin as twin  # noqa: E402
import pyllamaspec  # noqa: E402
from pyllamaspec.engine.model import Model  # noqa: E402
from pyllamaspec.frontends.flags.args import build_parser, parse_args  # noqa: E402
from pyllamaspec.frontends.flags.checks import mmproj_flags  # noqa: E402
from pyllamaspec.frontends.flags.launch import resolve_models  # noqa: E402
from test_hub import make_cached_repo, offline_hub  # noqa: E402

TARGET = "someone/TwinTarget-GGUF"
DRAFT = "someone/TwinDraft-GGUF"
DRAFT_TEXT = "someone/TwinDraftText-GGUF"        # no projector
DRAFT_BAD = "someone/TwinDraftBad-GGUF"          # a projector that does not load
NOT_A_PROJECTOR = b"GGUF? no: not a projector"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = twin.write_twin_pair(tmp_path_factory.mktemp("vision_hfd"))
    read = {n: (d / f"{n}.gguf").read_bytes() for n in ("target", "mmproj", "draft", "draft_mmproj")}
    repos = {TARGET: {"t-F32.gguf": read["target"], "mmproj-t-F32.gguf": read["mmproj"]},
             DRAFT: {"d-F32.gguf": read["draft"], "mmproj-d-F32.gguf": read["draft_mmproj"]},
             DRAFT_TEXT: {"d-F32.gguf": read["draft"]},
             DRAFT_BAD: {"d-F32.gguf": read["draft"], "mmproj-d-F32.gguf": NOT_A_PROJECTOR}}
    for repo, data in repos.items():
        make_cached_repo(d / "hf" / "hub", repo, list(data), data=data)
    return d


@pytest.fixture
def offline(pair, monkeypatch):
    offline_hub(monkeypatch, pair / "hf" / "hub")
    return pair


def _resolved(*argv: str):
    a = parse_args(build_parser(), list(argv))
    target, draft, _ = resolve_models(a)
    return a, target, draft


def test_which_projector_the_draft_takes(offline):
    d = offline
    a, target, draft = _resolved("-hf", TARGET + ":F32", "-hfd", DRAFT + ":F32")
    assert a.hf_mmproj.endswith("mmproj-t-F32.gguf") and a.hf_mmproj_draft.endswith("mmproj-d-F32.gguf")
    assert draft.endswith("d-F32.gguf") and "TwinDraft-GGUF" in draft
    a, _, _ = _resolved("-m", str(d / "target.gguf"), "-mm", str(d / "mmproj.gguf"), "-hfd", DRAFT + ":F32")
    assert a.hf_mmproj_draft.endswith("mmproj-d-F32.gguf")                   # -mm gives the target one
    for argv in (("-m", str(d / "target.gguf"), "-hfd", DRAFT + ":F32"),      # the target has none
                 ("-hf", TARGET + ":F32", "-hfd", DRAFT + ":F32", "--no-mmproj"),          # both off
                 ("-hf", TARGET + ":F32", "-hfd", DRAFT + ":F32", "-mmd", str(d / "draft_mmproj.gguf")),  # it wins
                 ("-hf", TARGET + ":F32", "-hfd", DRAFT_TEXT + ":F32")):     # the draft repository has none
        a, _, draft = _resolved(*argv)
        assert a.hf_mmproj_draft is None and draft.endswith("d-F32.gguf"), argv
    # --no-mmproj beside -mm FILE leaves out the draft repository's projector: not "no effect"
    a, _, _ = _resolved("-m", str(d / "target.gguf"), "-mm", str(d / "mmproj.gguf"), "-hfd", DRAFT + ":F32",
                        "--no-mmproj")
    assert a.hf_mmproj_draft is None and mmproj_flags(a) == []
    a, _, _ = _resolved("-m", str(d / "target.gguf"), "-mm", str(d / "mmproj.gguf"), "--no-mmproj")
    assert "no effect with --mmproj FILE" in mmproj_flags(a)[0]


def _want(d, n: int = 16) -> str:
    with Model(d / "target.gguf", n_ctx=256) as m:
        return pyllamaspec.generate("describe it", m, images=[d / "a.png"], mmproj=d / "mmproj.gguf",
                                    temperature=0, max_tokens=n).text


def test_cli_hfd_takes_the_drafts_projector(offline, capsys):
    """-hf and -hfd with --image: the target's answer, the draft with its projector; one that does
    not load leaves the draft without one, with a warning (the answer the same)."""
    from pyllamaspec.frontends.cli.main import main
    d = offline
    base = ["-c", "256", "-n", "16", "--temp", "0", "-t", "1", "-p", "describe it", "--image", str(d / "a.png"),
            "--draft-max", "4", "--no-adaptive", "--log-disable", "-hf", TARGET + ":F32"]
    want = "describe it" + _want(d)
    for repo, warned in ((DRAFT, False), (DRAFT_BAD, True)):
        capsys.readouterr()
        assert main(base + ["-hfd", repo + ":F32"]) == 0
        out, err = capsys.readouterr()
        assert out.startswith(want), err
        assert ("not used for the draft" in err) == warned, err


def test_server_hfd_takes_the_drafts_projector(offline):
    from test_server import Server
    d = offline
    url = "data:image/png;base64," + base64.b64encode((d / "a.png").read_bytes()).decode()
    content = [{"type": "text", "text": "describe it"}, {"type": "image_url", "image_url": {"url": url}}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 16, "temperature": 0}
    args = ["-hf", TARGET + ":F32", "-c", "256", "-t", "1", "--chat-template", "gemma", "--draft-max", "4",
            "--no-adaptive", "--draft-p-min", "0"]
    rates = {}
    for repo in (DRAFT, DRAFT_TEXT):
        s = Server(args + ["-hfd", repo + ":F32"])
        try:
            code, got = s.post("/v1/chat/completions", body)
            assert code == 200, got
            t = got["timings"]
            rates[repo] = (t["draft_n_accepted"], t["draft_n"])
        finally:
            s.stop()
    acc, n = rates[DRAFT]
    assert acc == n > 0, rates                                  # its own projector's rows: all accepted
    acc0, n0 = rates[DRAFT_TEXT]
    print(f"-hfd with the draft's projector: {acc}/{n} accepted; without (zero rows): {acc0}/{n0}")
    assert acc0 < n0, rates
