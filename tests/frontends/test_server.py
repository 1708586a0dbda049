"""The OpenAI-compatible server: a real server process on 127.0.0.1 (SmolLM2 target, its q4_0
conversion as draft, or n-gram lookup), talked to with the official openai client.

The server and the in-process references evaluate in batches of 32 on one thread (see
test_chat.py: then cached and fresh evaluations give the same bits), so greedy answers must be
identical to pyllamaspec.chat / generate with the same settings."""
from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

import pyllamaspec
from pyllamaspec import Model

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

N = 8                     # tokens per answer: cheap on a loaded 2-core machine
N_CTX = 512
MODEL_FLAGS = ["-c", str(N_CTX), "-b", "32", "-t", "1"]
DRAFT_FLAGS = ["--draft-max", "4", "--no-adaptive", "--draft-p-min", "0"]
DRAFT_KW = dict(n_draft=4, adaptive=False, p_min=0.0)
KEY = "sk-test-key"
Q = [{"role": "user", "content": "What is a cat?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `python -m pyllamaspec.server` process, up once /health answers."""

    def __init__(self, args: list[str], api_key: str | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        env = dict(os.environ, PYTHONPATH=str(pathlib.Path(pyllamaspec.__file__).parent.parent))
        self.proc = subprocess.Popen([sys.executable, "-m", "pyllamaspec.server", *args, "--port", str(self.port)]
                                     + (["--api-key", api_key] if api_key else []),
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited ({self.proc.returncode}): {self.proc.stdout.read()}")
            try:
                self.health()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        pytest.fail("the server did not answer /health within 60 s")

    def health(self, timeout: float = 5) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=timeout) as r:
            return json.loads(r.read())

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def client(self, **kw) -> "openai.OpenAI":
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.api_key or "none",
                             **{"max_retries": 0, "timeout": 120, **kw})

    def post(self, path: str, body, headers: dict | None = None) -> tuple[int, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json", **(headers or {})}
        if self.api_key and "Authorization" not in h:
            h["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url + path, data=data, headers=h, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def draft_path(smollm2_path):
    from pyllamaspec.files.convert import ensure_variant
    return ensure_variant(smollm2_path, "q4_0")


@pytest.fixture(scope="module")
def server(smollm2_path, draft_path):
    s = Server(["-m", str(smollm2_path), "-md", str(draft_path), "-a", "smol", *MODEL_FLAGS, *DRAFT_FLAGS,
                "--slots-debug"])                # the tests read /health's counters
    yield s
    assert s.health()["status"] == "ok"          # still healthy after everything
    s.stop()


@pytest.fixture(scope="module")
def local(smollm2_path, draft_path):
    """The same models in this process: the reference answers."""
    with Model(smollm2_path, n_ctx=N_CTX, n_batch=32, n_threads=1) as t, \
            Model(draft_path, n_ctx=N_CTX, n_batch=32, n_threads=1, tokenizer=False) as d:
        yield t, d


def _chat(client, messages, **kw):
    return client.chat.completions.create(model="smol", messages=messages, **{"max_tokens": N, "temperature": 0, **kw})


def test_models_and_health(server):
    assert [m.id for m in server.client().models.list().data] == ["smol"]
    h = server.health()
    assert h["status"] == "ok" and h["busy"] is False


def test_chat_equals_pyllamaspec_chat(server, local):
    r = _chat(server.client(), Q)
    ref = pyllamaspec.chat(Q, *local, max_tokens=N, temperature=0, **DRAFT_KW)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == ref.text and ref.text
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(ref.prompt_tokens) and r.usage.completion_tokens == len(ref.tokens)
    t = r.model_extra["timings"]
    assert t["predicted_n"] == N and t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
    assert t["cache_n"] + t["prompt_n"] == r.usage.prompt_tokens and t["tokens_per_round"] >= 1


def test_chat_stream(server):
    c = server.client()
    whole = _chat(c, Q).choices[0].message.content
    chunks = list(_chat(c, Q, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert finals[0].model_extra["timings"]["predicted_n"] == N
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == N


def test_sampling_parameters_reach_the_sampler(server, local):
    """Seeded sampling with every parameter set: the same text as pyllamaspec.chat's."""
    kw = dict(temperature=1.5, top_p=0.9, seed=42, presence_penalty=0.5, frequency_penalty=0.2)
    extra = {"repeat_penalty": 1.1, "top_k": 20, "min_p": 0.01}                 # llama-server's extras
    got = _chat(server.client(), Q, **kw, extra_body=extra).choices[0].message.content
    ref = pyllamaspec.chat(Q, *local, max_tokens=N, **kw, **extra, **DRAFT_KW)
    assert got == ref.text
    other = pyllamaspec.chat(Q, *local, max_tokens=N, **{**kw, "seed": 43}, **extra, **DRAFT_KW)
    assert _chat(server.client(), Q, **{**kw, "seed": 43}, extra_body=extra).choices[0].message.content == other.text


def test_sse_ends_with_done(server):
    body = json.dumps({"prompt": "Hi", "max_tokens": 2, "stream": True}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", method="POST", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"


def test_completion_and_logprobs(server, local):
    prompt = "The capital of France is"
    r = server.client().completions.create(model="smol", prompt=prompt, max_tokens=N, temperature=0, logprobs=3)
    ref = pyllamaspec.generate(prompt, *local, max_tokens=N, temperature=0, logprobs=3, **DRAFT_KW)
    ch = r.choices[0]
    assert ch.text == ref.text and r.object == "text_completion"
    lp = ch.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(ref.tokens)
    assert "".join(lp.tokens) == ch.text
    assert lp.token_logprobs == pytest.approx([t.logprob for t in ref.logprobs], abs=1e-5)
    assert all(len(d) <= 3 and max(d.values()) == pytest.approx(v, abs=1e-5)     # greedy: the best is taken
               for d, v in zip(lp.top_logprobs, lp.token_logprobs))
    assert lp.text_offset[0] == len(prompt) and lp.text_offset == sorted(lp.text_offset)


def test_chat_logprobs(server):
    r = _chat(server.client(), Q, logprobs=True, top_logprobs=2)
    streamed = [e for ch in _chat(server.client(), Q, logprobs=True, top_logprobs=2, stream=True)
                if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in r.choices[0].logprobs.content]
    content = r.choices[0].logprobs.content
    assert len(content) == N and "".join(e.token for e in content) == r.choices[0].message.content
    for e in content:
        assert bytes(e.bytes).decode() == e.token and e.logprob <= 0
        assert len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob) and e.logprob >= e.top_logprobs[1].logprob


def test_prefix_reuse_across_requests(server):
    c = server.client()
    msgs = [{"role": "system", "content": "Answer in one short sentence."}, *Q]
    first = _chat(c, msgs)
    msgs += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "And a dog?"}]
    r = _chat(c, msgs)
    t = r.model_extra["timings"]
    assert t["cache_n"] >= first.usage.prompt_tokens and t["prompt_n"] < 20       # only the new turn
    assert r.usage.prompt_tokens_details.cached_tokens == t["cache_n"]


def test_concurrent_clients_answer_as_sequential(server):
    c = server.client()
    questions = [[{"role": "user", "content": q}] for q in ("Name a color.", "What is 2+2?", "Say hello.")]
    sequential = [_chat(c, m).choices[0].message.content for m in questions]
    with ThreadPoolExecutor(6) as ex:       # each question twice, all at once, in another order
        together = list(ex.map(lambda m: _chat(server.client(), m).choices[0].message.content,
                               questions[::-1] + questions))
    assert together == sequential[::-1] + sequential


def test_disconnect_stops_generation_and_health_answers(server):
    c = server.client()
    before = server.health()
    stream = c.completions.create(model="smol", prompt="Count from 1 to 1000: 1, 2, 3, 4,", max_tokens=400,
                                  temperature=0, stream=True)
    got = 0
    for ch in stream:
        got += bool(ch.choices and ch.choices[0].text)
        if got == 3:
            t0 = time.perf_counter()
            h = server.health(timeout=5)                 # answered while the generation runs
            assert time.perf_counter() - t0 < 2 and h["busy"] is True
            break
    stream.close()
    deadline = time.monotonic() + 30
    while (h := server.health())["cancelled"] == before["cancelled"] and time.monotonic() < deadline:
        time.sleep(0.05)
    last = h["last_cancel"]
    assert h["cancelled"] == before["cancelled"] + 1 and not h["busy"]
    assert last["tokens"] < 100 and last["tokens_after_cancel"] <= 5        # within one round (4 drafts + 1)
    t0 = time.perf_counter()
    assert _chat(c, Q).choices[0].finish_reason == "length"
    assert time.perf_counter() - t0 < 20


def test_disconnect_without_stream(server):
    """A client that times out on a whole (non-streamed) answer: its generation stops too."""
    before = server.health()["cancelled"]
    with pytest.raises(openai.APITimeoutError):
        server.client(timeout=1.5).completions.create(model="smol", prompt="Count from 1 to 1000: 1, 2, 3, 4,",
                                                      max_tokens=400, temperature=0)
    deadline = time.monotonic() + 30
    while (h := server.health())["cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert h["cancelled"] == before + 1 and h["last_cancel"]["tokens"] < 400


BAD = [
    (b"{not json", 400, "not valid JSON"),
    ([1, 2], 400, "JSON object"),
    ({"messages": "hi"}, 400, "'messages' must be an array"),
    ({"messages": []}, 400, "'messages' is empty"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "role 'wizard'"),
    ({"messages": [{"role": "user"}]}, 400, "no content"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "content must be"),
    ({"messages": Q, "temperature": "hot"}, 400, "'temperature' must be a number"),
    ({"messages": Q, "max_tokens": True}, 400, "'max_tokens' must be an integer"),
    ({"messages": Q, "max_tokens": N_CTX + 1}, 400, "beyond the context"),
    ({"messages": Q, "max_tokens": N_CTX - 10}, 400, "max_tokens asks for"),
    ({"messages": [{"role": "user", "content": "word " * N_CTX}]}, 400, "more than the context"),
    ({"messages": Q, "n": 2}, 400, "n > 1"),
    ({"messages": Q, "tools": [{"type": "function"}]}, 400, "tools[0] must be"),
    ({"messages": Q, "tool_choice": "required"}, 400, "'tool_choice' needs 'tools'"),
    ({"messages": Q, "top_logprobs": 2}, 400, "needs 'logprobs'"),
    ({"messages": Q, "stop": [1]}, 400, "'stop' must be"),
    ({"messages": Q, "stream_options": {"include_usage": True}}, 400, "only allowed with 'stream'"),
    ({"messages": Q, "top_p": 0}, 400, "'top_p' must be in"),
]


@pytest.mark.parametrize("body,status,words", BAD, ids=[w for _, _, w in BAD])
def test_bad_chat_requests(server, body, status, words):
    code, err = server.post("/v1/chat/completions", body)
    assert code == status and words in err["error"]["message"]
    assert set(err["error"]) >= {"message", "type", "code"}


def test_bad_completion_requests(server):
    for body, words in [({"prompt": ["a", "b"]}, "several prompts"), ({"prompt": ""}, "empty"),
                        ({"prompt": [10**9]}, "outside the vocabulary"), ({"prompt": "x", "echo": True}, "echo"),
                        ({"prompt": "x", "logprobs": 50}, "'logprobs' must be in")]:
        code, err = server.post("/v1/completions", body)
        assert code == 400 and words in err["error"]["message"], (body, err)
    code, err = server.post("/v1/nothing", {})
    assert code == 404 and "error" in err
    assert server.health()["status"] == "ok"


def test_lookup_server_and_api_key(smollm2_path, local):
    s = Server(["-m", str(smollm2_path), "--lookup", "-n", "3", *MODEL_FLAGS], api_key=KEY)
    try:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0).models.list()
        code, err = s.post("/v1/chat/completions", {"messages": Q}, headers={"Authorization": ""})
        assert code == 401 and "API key" in err["error"]["message"]
        assert s.health()["status"] == "ok"           # /health needs no key
        r = _chat(s.client(), Q)
        ref = pyllamaspec.chat(Q, local[0], "ngram", max_tokens=N, temperature=0)
        assert r.choices[0].message.content == ref.text
        assert "draft_n" in r.model_extra["timings"]
        r = s.client().chat.completions.create(model="x", messages=Q, temperature=0)     # -n: 3 by default
        assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"
    finally:
        s.stop()


def test_import_without_server_dependencies():
    code = ("import sys; sys.modules['starlette'] = None; import pyllamaspec; "
            "assert 'uvicorn' not in sys.modules; from pyllamaspec.server import main; sys.exit(main([]))")
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(pyllamaspec.__file__).parent.parent))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and 'pip install "pyllamaspec[server]"' in p.stderr and "starlette" in p.stderr
