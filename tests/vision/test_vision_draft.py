"""A draft model sees the image (issue 42): it reads the target's rows at an image where they fit
its width (as llama.cpp's common/speculative.cpp), else its own projector's (draft_mmproj= /
--mmproj-draft), else zero rows. On models_vision_twin's pair, whose narrow draft computes what
the wide target does, drafts after an image are then all accepted, where a draft that sees
placeholders there (the behaviour before) has almost none accepted; greedy output is the
target's either way."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import models_vision_twin as twin
import pyllamaspec
from pyllamaspec.engine.model import Model
from pyllamaspec.errors import InvalidArgumentError
from pyllamaspec.speculation.drafters.model import DraftModelDrafter
from pyllamaspec.vision import prompt as vp
from pyllamaspec.vision.projector import Projector

PROMPT = "<__media__>describe it"
SPEC = dict(adaptive=False, n_draft=4)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return twin.write_twin_pair(tmp_path_factory.mktemp("vision_draft"))


def _gen(pair, m, draft=None, image="a.png", **kw):
    kw = {"cache_prompt": False, **kw}
    return pyllamaspec.generate(PROMPT, m, draft, images=[pair / image], mmproj=pair / "mmproj.gguf",
                                temperature=0, max_tokens=32, **kw)


def _placeholders(monkeypatch) -> None:
    """The draft as before: placeholder tokens at the image (it is given no rows)."""
    monkeypatch.setattr(DraftModelDrafter, "see_images", lambda self, images: None)


def _rate(r) -> tuple[int, int]:
    return r.stats.accepted, r.stats.drafted


def test_the_pair_computes_alike(pair):
    """The twin construction holds: the draft's logits are the target's times sqrt(2) (the tied
    head of a token table scaled by 1/sqrt(2)), at text and after an image's rows."""
    with Model(pair / "target.gguf", n_ctx=128) as m, Model(pair / "draft.gguf", n_ctx=128) as d, \
            Projector(pair / "mmproj.gguf") as pt, Projector(pair / "draft_mmproj.gguf") as pd:
        wide, narrow = pt.encode(pair / "a.png"), pd.encode(pair / "a.png")
        assert np.array_equal(wide.rows[:, :32], narrow.rows) and not wide.rows[:, 32:].any()
        out = []
        for model, img in ((m, wide), (d, narrow)):
            s = model.sequence(0)
            s.eval([2, 3], logits="none")
            s.eval_rows(img.rows, vp.image_ids(img), img.non_causal)
            out.append(s.eval([5], logits="last")[0])
        # float32 sums over other widths: measured 4.5e-4 of the largest logit (a.png; b.png
        # 2.6e-4), 1 thread or 2
        assert np.abs(out[0] * 2 ** 0.5 - out[1]).max() < 1e-3 * np.abs(out[1]).max()


@pytest.mark.parametrize("image", ["a.png", "b.png"])
def test_a_draft_as_wide_reads_the_targets_rows(pair, image, monkeypatch):
    """The draft = the target: every draft is accepted (25 of 25 on both images; placeholders:
    0 of 118)."""
    with Model(pair / "target.gguf", n_ctx=256) as m, Model(pair / "target.gguf", n_ctx=256) as d:
        plain = _gen(pair, m, image=image)
        spec = _gen(pair, m, d, image=image, **SPEC)
        assert spec.tokens == plain.tokens
        acc, drafted = _rate(spec)
        assert acc == drafted > 20, spec.stats
        _placeholders(monkeypatch)
        before = _gen(pair, m, d, image=image, **SPEC)
        assert before.tokens == plain.tokens
        assert before.stats.acceptance_rate < 0.1, before.stats           # measured: 0 of 118


def test_a_narrow_draft_with_its_own_projector(pair, monkeypatch):
    """The narrow draft with draft_mmproj=: output the target's, every draft accepted (25 of
    25); without it, zero rows (a warning, as llama.cpp's): 1 of 114; placeholders: 0 of 118."""
    with Model(pair / "target.gguf", n_ctx=256) as m, Model(pair / "draft.gguf", n_ctx=256) as d:
        plain = _gen(pair, m)
        own = _gen(pair, m, d, draft_mmproj=pair / "draft_mmproj.gguf", **SPEC)
        assert own.tokens == plain.tokens
        acc, drafted = _rate(own)
        assert acc == drafted > 20, own.stats
        with pytest.warns(UserWarning, match="zero rows"):
            zeros = _gen(pair, m, d, **SPEC)
        assert zeros.tokens == plain.tokens and zeros.stats.acceptance_rate < 0.1, zeros.stats
        with Projector(pair / "draft_mmproj.gguf") as p:                   # a Projector object serves too
            assert _gen(pair, m, d, draft_mmproj=p, **SPEC).tokens == plain.tokens
        _placeholders(monkeypatch)
        before = _gen(pair, m, d, draft_mmproj=pair / "draft_mmproj.gguf", **SPEC)
        assert before.tokens == plain.tokens and before.stats.acceptance_rate < 0.1, before.stats


def test_the_drafts_cache_across_turns(pair):
    """Prefix reuse by image in the draft's cache: the same prompt again reuses it all, another
    image stops at it, a cache that holds part of an image evaluates it again whole."""
    with Model(pair / "target.gguf", n_ctx=256) as m, Model(pair / "draft.gguf", n_ctx=256) as d:
        kw = dict(draft_mmproj=pair / "draft_mmproj.gguf", cache_prompt=True, **SPEC)
        first = _gen(pair, m, d, **kw)
        again = _gen(pair, m, d, **kw)
        n = len(again.prompt_tokens)
        assert again.tokens == first.tokens and again.stats.n_draft_reused == n - 1
        assert again.stats.accepted == again.stats.drafted > 20
        start = first.prompt_tokens.index(270) + 1                     # after <start_of_image>
        other = _gen(pair, m, d, image="b.png", **kw)
        assert other.stats.n_draft_reused == start
        assert other.tokens == _gen(pair, m, image="b.png").tokens
        assert other.stats.accepted == other.stats.drafted > 20
        # the draft's cache made to hold a's first 8 rows only: it evaluates the image whole
        ids = first.prompt_tokens
        with Projector(pair / "draft_mmproj.gguf") as p:
            rows = p.encode(pair / "a.png")
        d.clear()
        s = d.sequence(0)
        s.eval(ids[:start], logits="none")
        s.eval_rows(rows.rows[:8], ids[start:start + 8], rows.non_causal)
        part = _gen(pair, m, d, **kw)
        assert part.stats.n_draft_reused == start
        assert part.tokens == first.tokens and part.stats.accepted == part.stats.drafted > 20


def test_bad_draft_projectors(pair):
    with Model(pair / "target.gguf", n_ctx=256) as m, Model(pair / "draft.gguf", n_ctx=256) as d:
        with pytest.raises(InvalidArgumentError, match="64 wide; the draft model takes 32"):
            _gen(pair, m, d, draft_mmproj=pair / "mmproj.gguf")
        for no_model in (None, "ngram"):
            with pytest.raises(InvalidArgumentError, match="needs a draft model"):
                _gen(pair, m, no_model, draft_mmproj=pair / "draft_mmproj.gguf")
        with pytest.raises(InvalidArgumentError, match="draft_mmproj must be"):
            _gen(pair, m, d, draft_mmproj=3)
        assert _gen(pair, m, d, draft_mmproj=pair / "draft_mmproj.gguf", **SPEC).tokens   # they live on


def _cli(pair, *extra: str) -> subprocess.CompletedProcess:
    run = [sys.executable, "-m", "pyllamaspec.cli", "-m", str(pair / "target.gguf"), "-c", "256", "-n", "16",
           "--temp", "0", "-p", "describe it", "--mmproj", str(pair / "mmproj.gguf"), "--image", str(pair / "a.png"),
           "--draft-max", "4", "--no-adaptive", "--log-disable", *extra]
    return subprocess.run(run, capture_output=True, text=True, timeout=120)


def test_cli_mmproj_draft(pair):
    with Model(pair / "target.gguf", n_ctx=256) as m:
        want = pyllamaspec.generate("describe it", m, images=[pair / "a.png"], mmproj=pair / "mmproj.gguf",
                                    temperature=0, max_tokens=16)
    for flag in ("--mmproj-draft", "-mmd"):
        out = _cli(pair, "-md", str(pair / "draft.gguf"), flag, str(pair / "draft_mmproj.gguf"))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("describe it" + want.text)
    out = _cli(pair, "-md", str(pair / "draft.gguf"), "-mmd", str(pair / "mmproj.gguf"))
    assert out.returncode == 1 and "64 wide; the draft model takes 32" in out.stderr
    out = _cli(pair, "-mmd", str(pair / "draft_mmproj.gguf"))
    assert out.returncode == 1 and "needs a draft model" in out.stderr


def test_server_mmproj_draft(pair):
    """--mmproj-draft on the server: the chat's answer is the target's, every draft accepted."""
    import base64
    from test_server import Server
    url = "data:image/png;base64," + base64.b64encode((pair / "a.png").read_bytes()).decode()
    content = [{"type": "text", "text": "describe it"}, {"type": "image_url", "image_url": {"url": url}}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 16, "temperature": 0}
    with Model(pair / "target.gguf", n_ctx=256) as m:
        want = pyllamaspec.chat([{"role": "user", "content": [content[0], {"type": "image", "image": pair / "a.png"}]}],
                                m, mmproj=pair / "mmproj.gguf", chat_template="gemma", temperature=0, max_tokens=16)
    args = ["-m", str(pair / "target.gguf"), "-c", "256", "-t", "1", "--chat-template", "gemma",
            "--mmproj", str(pair / "mmproj.gguf"), "-md", str(pair / "draft.gguf"), "--draft-max", "4",
            "--no-adaptive", "--draft-p-min", "0"]      # chains (the cost model may pick a tree by timing)
    s = Server(args + ["-mmd", str(pair / "draft_mmproj.gguf")])
    try:
        code, got = s.post("/v1/chat/completions", body)
        assert code == 200, got
        assert got["choices"][0]["message"]["content"] == want.text
        t = got["timings"]
        assert t["draft_n_accepted"] == t["draft_n"] > 0, t
    finally:
        s.stop()
    for bad, why in ((["-md", str(pair / "draft.gguf"), "--mmproj-draft", str(pair / "mmproj.gguf")],
                      "64 wide; the draft model takes 32"), ([], "needs a draft model")):
        out = subprocess.run([sys.executable, "-m", "pyllamaspec.server", *args[:8], *bad,
                              *(["--mmproj-draft", str(pair / "draft_mmproj.gguf")] if not bad else [])],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 1 and why in out.stderr, out.stderr


def test_chat_turns_with_a_draft_projector(pair):
    """chat() takes draft_mmproj= too; the second turn resends the image: the draft keeps it (its
    cache reused past the image) and its drafts are all accepted."""
    msg = [{"role": "user", "content": [{"type": "text", "text": "describe it"},
                                        {"type": "image", "image": pair / "a.png"}]}]
    kw = dict(mmproj=pair / "mmproj.gguf", chat_template="gemma", temperature=0, max_tokens=12, **SPEC)
    with Model(pair / "target.gguf", n_ctx=256) as m, Model(pair / "draft.gguf", n_ctx=256) as d:
        plain = [pyllamaspec.chat(msg, m, cache_prompt=False, **kw)]
        turn2 = msg + [{"role": "assistant", "content": plain[0].text}, {"role": "user", "content": "more"}]
        plain.append(pyllamaspec.chat(turn2, m, cache_prompt=False, **kw))
        got = [pyllamaspec.chat(x, m, d, draft_mmproj=pair / "draft_mmproj.gguf", **kw) for x in (msg, turn2)]
        assert [g.text for g in got] == [p.text for p in plain]
        image_end = got[1].prompt_tokens.index(271)                    # <end_of_image>
        assert got[1].stats.n_draft_reused > image_end
        assert all(g.stats.accepted == g.stats.drafted > 0 for g in got), [g.stats for g in got]


def test_a_draft_that_takes_no_rows_sees_placeholders(pair, monkeypatch):
    """A draft architecture that takes no rows (the core's PSL_ERR_UNSUPPORTED: gpt-oss, the MoE
    kinds) drafts on with the placeholder tokens there, as before; the output is the target's."""
    from pyllamaspec.engine.sequence import ContextSequence
    from pyllamaspec.errors import UnsupportedModelError
    real = ContextSequence.eval_rows
    with Model(pair / "target.gguf", n_ctx=256) as m, Model(pair / "target.gguf", n_ctx=256) as d:
        def refuse(self, *a, **kw):
            if self.model is d:
                raise UnsupportedModelError("embedding rows (an image) are not supported yet")
            return real(self, *a, **kw)
        monkeypatch.setattr(ContextSequence, "eval_rows", refuse)
        plain = _gen(pair, m)
        spec = _gen(pair, m, d, **SPEC)
        assert spec.tokens == plain.tokens and spec.stats.acceptance_rate < 0.1, spec.stats


CROSS = "sees only the text around an image"


@pytest.fixture(scope="module")
def other(pair):
    """A draft of another vocabulary (280 ids, the target's 272; text bridges them) and 32 wide,
    as draft_mmproj.gguf's rows are."""
    import models
    import models_vision as mv
    path = pair / "other_vocab.gguf"
    models.write_gguf(path, arch="gemma3", n_vocab=280, n_embd=32, n_head=4, n_head_kv=2, n_ff=48, seed=7,
                      head_dim=8, extra_kv=mv.image_marker_kv(280))
    return path


def test_a_draft_of_another_vocabulary_refuses_a_projector(pair, other):
    """A draft of another vocabulary drafts re-tokenized text: it would never read its projector's
    rows, so draft_mmproj= is an error (it was silently ignored), with images or without."""
    with Model(pair / "target.gguf", n_ctx=256) as m, Model(other, n_ctx=256) as d:
        assert m.check_draft(d) == "cross-vocabulary"
        plain = _gen(pair, m)
        assert _gen(pair, m, d, **SPEC).tokens == plain.tokens      # drafting across the image as text
        with Projector(pair / "draft_mmproj.gguf") as pd:
            for proj in (pair / "draft_mmproj.gguf", pd):
                with pytest.raises(InvalidArgumentError, match=CROSS):
                    _gen(pair, m, d, draft_mmproj=proj, **SPEC)
        with pytest.raises(InvalidArgumentError, match=CROSS):
            pyllamaspec.generate("describe it", m, d, draft_mmproj=pair / "draft_mmproj.gguf", max_tokens=4)
        with pytest.raises(InvalidArgumentError, match=CROSS):
            _gen(pair, m, str(other), draft_mmproj=pair / "draft_mmproj.gguf")          # a path as the draft
        assert _gen(pair, m, d, **SPEC).tokens == plain.tokens                            # they live on


def test_cli_and_server_refuse_a_projector_for_another_vocabulary(pair, other):
    out = _cli(pair, "-md", str(other), "-mmd", str(pair / "draft_mmproj.gguf"))
    assert out.returncode == 1 and CROSS in out.stderr, out.stderr
    out = _cli(pair, "-md", str(other))                                         # without it: runs
    assert out.returncode == 0, out.stderr
    out = subprocess.run([sys.executable, "-m", "pyllamaspec.server", "-m", str(pair / "target.gguf"), "-c", "256",
                          "--mmproj", str(pair / "mmproj.gguf"), "-md", str(other), "-mmd",
                          str(pair / "draft_mmproj.gguf"), "--port", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and CROSS in out.stderr, out.stderr
