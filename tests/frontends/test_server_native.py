"""llama-server's own routes on our server (issue 27, 5): /completion with its fields (n_probs,
stream, stop, cache_prompt, id_slot, ignore_eos), /tokenize, /detokenize, /props, /slots,
/metrics, /v1/embeddings and /embedding (against llama-server's own embeddings), constraint fields
refused by name, and the chat page at / used in a real headless browser.

Like test_server.py: a real server process (SmolLM2 target, its q4_0 as draft, batches of 32 on
one thread) and the same models in this process as the reference."""
from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request

import numpy as np
import pytest

import pyllamaspec
from browser import Browser
from test_server import DRAFT_FLAGS, DRAFT_KW, MODEL_FLAGS, N, Server, draft_path, local  # noqa: F401 (fixtures)

N_PROBS = 2


@pytest.fixture(scope="module")
def srv(smollm2_path, draft_path):
    s = Server(["-m", str(smollm2_path), "-md", str(draft_path), "-a", "smol", *MODEL_FLAGS, *DRAFT_FLAGS,
                "--temp", "0", "-n", "12", "--metrics", "--embeddings", "--pooling", "mean", "--slots-debug"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def bare(smollm2_path):
    """A server started without --metrics or --embeddings (as llama-server: those routes say so)."""
    s = Server(["-m", str(smollm2_path), *MODEL_FLAGS, "--no-slots"])
    yield s
    s.stop()


def get(s: Server, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(s.url + path, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sse(s: Server, path: str, body: dict) -> list[dict]:
    req = urllib.request.Request(s.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    return [json.loads(e[6:]) for e in events]


def test_completion_equals_generate_with_n_probs(srv, local):
    prompt = "The capital of France is"
    code, r = srv.post("/completion", {"prompt": prompt, "n_predict": N, "temperature": 0, "n_probs": N_PROBS})
    ref = pyllamaspec.generate(prompt, *local, max_tokens=N, temperature=0, logprobs=N_PROBS, **DRAFT_KW)
    assert code == 200 and r["content"] == ref.text and r["stop"] is True and r["stop_type"] == "limit"
    assert r["tokens_predicted"] == N and r["tokens_evaluated"] == len(ref.prompt_tokens) and r["id_slot"] == 0
    probs = r["completion_probabilities"]
    assert [p["id"] for p in probs] == ref.tokens
    assert [p["logprob"] for p in probs] == pytest.approx([t.logprob for t in ref.logprobs], abs=1e-5)
    assert all(len(p["top_logprobs"]) == N_PROBS and bytes(p["bytes"]).decode() == p["token"] for p in probs)
    assert r["generation_settings"]["n_probs"] == N_PROBS and r["timings"]["predicted_n"] == N


def test_prompt_as_token_ids(srv, local):
    """llama-server's prompt as token ids (taken as they are: no BOS added) on /completion and
    /v1/completions: the answer of the same ids given to generate, and of the text they spell;
    a mixed prompt (texts and ids) too. What scripts/server_load.py --ids sends both servers."""
    t = local[0]
    ids = t.tokenize("The capital of France is", add_special=True)
    ref = pyllamaspec.generate(ids, *local, max_tokens=N, temperature=0, **DRAFT_KW)
    code, r = srv.post("/completion", {"prompt": ids, "n_predict": N, "temperature": 0, "return_tokens": True})
    assert code == 200 and r["tokens"] == ref.tokens and r["content"] == ref.text
    assert r["tokens_evaluated"] == len(ids)
    code, r = srv.post("/v1/completions", {"prompt": ids, "max_tokens": N, "temperature": 0})
    assert code == 200 and r["choices"][0]["text"] == ref.text
    code, r = srv.post("/completion", {"prompt": ["The capital", *t.tokenize(" of France is")], "n_predict": N,
                                       "temperature": 0, "return_tokens": True})
    assert code == 200 and r["tokens"] == ref.tokens
    code, r = srv.post("/completion", {"prompt": ids[1:], "n_predict": N, "temperature": 0, "return_tokens": True})
    assert code == 200 and r["tokens_evaluated"] == len(ids) - 1     # negative control: no BOS added to ids


def test_completion_stream_and_stop_word(srv):
    body = {"prompt": "Count: 1, 2, 3,", "n_predict": N, "temperature": 0, "return_tokens": True}
    code, whole = srv.post("/completion", body)
    events = sse(srv, "/completion", {**body, "stream": True})
    assert "".join(e["content"] for e in events) == whole["content"]
    assert [t for e in events for t in e["tokens"]] == whole["tokens"] and len(whole["tokens"]) == N
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert events[-1]["timings"]["predicted_n"] == N                 # no [DONE]: llama-server's native stream
    word = whole["content"].split()[1]
    code, cut = srv.post("/completion", {**body, "stop": [word]})
    assert cut["stop_type"] == "word" and cut["stopping_word"] == word
    assert cut["content"] == whole["content"][:whole["content"].index(word)]


def test_cache_prompt_and_id_slot(srv):
    body = {"prompt": "A long enough prompt about cats and dogs.", "n_predict": 2, "temperature": 0}
    srv.post("/completion", body)
    _, again = srv.post("/completion", body)
    _, fresh = srv.post("/completion", {**body, "cache_prompt": False})
    assert again["timings"]["cache_n"] > 0 and fresh["timings"]["cache_n"] == 0       # issue 27: was ignored
    assert fresh["content"] == again["content"]
    for slot in (0, -1, 3):                     # llama-server's auto -np: 4 slots
        assert srv.post("/completion", {**body, "id_slot": slot})[0] == 200
    code, err = srv.post("/completion", {**body, "id_slot": 4})
    assert code == 400 and "4 slots" in err["error"]["message"]


def test_ignore_eos(srv):
    chat = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    _, short = srv.post("/completion", {"prompt": chat, "n_predict": 64, "temperature": 0})
    _, long = srv.post("/completion", {"prompt": chat, "n_predict": 64, "temperature": 0, "ignore_eos": True})
    assert short["stop_type"] == "eos" and short["tokens_predicted"] < 64
    assert long["stop_type"] == "limit" and long["tokens_predicted"] == 64


def test_constraints_hold_on_the_native_routes(srv):
    """Issue 27: `grammar: root ::= "a"` gave "-as": an ignored constraint is the worst answer.
    The grammar now holds on llama-server's own route as on OpenAI's (issue 26)."""
    _, r = srv.post("/completion", {"prompt": "x", "grammar": 'root ::= "a"', "n_predict": 8, "temperature": 0})
    assert r["content"] == "a", r
    _, r = srv.post("/v1/completions", {"prompt": "x", "grammar": "root ::= [a-z]+", "max_tokens": 6,
                                        "temperature": 0})
    text = r["choices"][0]["text"]
    assert text and text.isalpha() and text.islower(), r


@pytest.mark.parametrize("path, field, value", [
    ("/completion", "grammar_lazy", True), ("/v1/chat/completions", "grammar_triggers", [{"type": 0, "value": "<"}]),
    ("/completion", "mirostat", 2)])
def test_what_is_missing_is_refused_by_name(srv, path, field, value):
    """What this server does not do (lazy grammars, mirostat) is refused, never ignored."""
    body = {"messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"prompt": "x"}
    code, err = srv.post(path, {**body, field: value})
    assert code == 400 and err["error"]["param"] == field and f"'{field}'" in err["error"]["message"]


def test_tokenize_detokenize(srv, local):
    t, _ = local
    text = "Hello world, <|im_start|>!"
    _, r = srv.post("/tokenize", {"content": text})
    assert r["tokens"] == t.tokenize(text, add_special=False, parse_special=True)
    _, r2 = srv.post("/tokenize", {"content": text, "with_pieces": True, "parse_special": False})
    assert [p["id"] for p in r2["tokens"]] == t.tokenize(text, add_special=False, parse_special=False)
    assert "".join(p["piece"] for p in r2["tokens"]) == text
    _, mixed = srv.post("/tokenize", {"content": ["Hello", 42, " world"]})
    assert mixed["tokens"] == t.tokenize("Hello", add_special=False) + [42] + t.tokenize(" world", add_special=False)
    _, d = srv.post("/detokenize", {"tokens": r["tokens"]})
    assert d["content"] == text
    assert srv.post("/detokenize", {"tokens": [10**9]})[0] == 400


def test_props_slots_metrics(srv, local):
    t, _ = local
    code, body = get(srv, "/props")
    props = json.loads(body)
    assert code == 200 and props["total_slots"] == 4 and props["model_alias"] == "smol"   # -np auto
    assert props["default_generation_settings"]["n_ctx"] == t.n_ctx
    assert props["chat_template"] == t.meta("tokenizer.chat_template") and props["endpoint_metrics"] is True
    _, r = srv.post("/completion", {"prompt": "Once upon a time", "n_predict": 5, "temperature": 0})
    slots = json.loads(get(srv, "/slots")[1])
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and not any(s["is_processing"] for s in slots)
    assert slots[0]["generated"] == r["content"] and slots[0]["n_prompt_tokens"] == r["tokens_evaluated"]
    assert slots[0]["params"]["n_predict"] == 5 and slots[0]["speculative"] is True

    def metrics() -> dict[str, float]:
        code, text = get(srv, "/metrics")
        assert code == 200
        values = dict(re.findall(r"^llamacpp:(\w+) (\S+)$", text, re.M))
        assert len(values) == text.count("# TYPE ")                  # one sample per declared metric
        return {k: float(v) for k, v in values.items()}
    before = metrics()
    _, r = srv.post("/completion", {"prompt": "Once upon a time, in", "n_predict": 7, "temperature": 0})
    after = metrics()
    assert after["tokens_predicted_total"] - before["tokens_predicted_total"] == 7
    assert after["requests_total"] - before["requests_total"] == 1
    assert after["spec_decode_num_draft_tokens_total"] - before["spec_decode_num_draft_tokens_total"] == \
        r["timings"]["draft_n"]


def _cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_embeddings_match_llama_server(srv):
    """/v1/embeddings against llama-server's (scripts/embeddings_reference.py; tolerance in
    test_embeddings.py, where it is measured)."""
    from test_embeddings import MAX_1_MINUS_COS, reference
    ref = reference()
    texts, want = ref["texts"], ref["models"]["smollm2"]["mean"]
    code, r = srv.post("/v1/embeddings", {"input": texts, "model": "smol"})
    assert code == 200 and r["object"] == "list" and [d["index"] for d in r["data"]] == [0, 1, 2]
    for d, w in zip(r["data"], want):
        assert 1 - _cos(d["embedding"], w) < MAX_1_MINUS_COS
        assert np.linalg.norm(d["embedding"]) == pytest.approx(1, abs=1e-5)
    assert 1 - _cos(r["data"][0]["embedding"], want[1]) > 10 * MAX_1_MINUS_COS        # negative control
    _, b64 = srv.post("/v1/embeddings", {"input": texts[0], "encoding_format": "base64"})
    vec = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), "<f4")
    assert vec.tolist() == pytest.approx(r["data"][0]["embedding"], abs=1e-7)
    _, native = srv.post("/embedding", {"content": texts[0]})
    assert len(native) == 1 and len(native[0]["embedding"]) == 1            # pooled: one row
    assert native[0]["embedding"][0] == pytest.approx(r["data"][0]["embedding"], abs=1e-6)


def test_routes_off_say_how_to_turn_them_on(bare):
    for path, flag in (("/metrics", "--metrics"), ("/slots", "--slots")):
        code, body = get(bare, path)
        assert code == 501 and flag in body
    code, err = bare.post("/v1/embeddings", {"input": "x"})
    assert code == 501 and "--embeddings" in err["error"]["message"]


def test_chat_page_in_a_real_browser(srv, local):
    """The page at /: a message typed and sent in headless Chromium streams back the answer the
    server gives (greedy here: pyllamaspec.chat's), with its speed and draft acceptance."""
    q = "What is the capital of France?"
    ref = pyllamaspec.chat([{"role": "user", "content": q}], *local, max_tokens=12, temperature=0, **DRAFT_KW)
    with Browser() as b:
        b.open(srv.url + "/")
        assert "pyllamaspec" in b.eval("document.title") and "smol" in b.eval("document.title")
        b.eval(f"document.getElementById('input').value = {json.dumps(q)}; "
               "document.getElementById('form').requestSubmit(); true")
        b.wait_for("document.querySelector('.stats') && document.querySelector('.stats').textContent.length > 0",
                   timeout=120)
        answer = b.eval("document.querySelector('.msg.assistant').textContent")
        stats = b.eval("document.querySelector('.stats').textContent")
        user = b.eval("document.querySelector('.msg.user').textContent")
    assert user == q and answer == ref.text and ref.text
    assert "t/s" in stats and "drafted" in stats and "accepted" in stats
