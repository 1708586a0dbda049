"""A bounded load test of the OpenAI-compatible server: C clients each send R short requests
(distinct questions, greedy), all at once; reports requests/s, tokens/s, latency percentiles, and
that every request was answered (none lost, none failed, the server's own count agrees).

    python scripts/server_load.py -m SmolLM2.gguf -md draft.gguf       (starts a server)
    python scripts/server_load.py --url http://127.0.0.1:8080           (a running server)

Extra arguments after -- go to the server (e.g. -- -c 2048 -t 2 --lookup).

Requests are chats (/v1/chat/completions) unless --ids: then every server gets the same prompt
token ids on llama-server's /completion (each question rendered once, here, with the target's
chat template or --chat-template's: a model whose GGUF has none, Gemma 3 270M, is then asked
the same thing by servers whose fallback templates differ), n_predict tokens, greedy, and the
answers are compared token by token.

Several servers in one run, alternated (one at a time, the order rotating each round; medians of
the rounds), e.g. ours with one slot and four against llama-server b11434 with and without
speculation; each --server is NAME=PROGRAM:ARGS, PROGRAM "pyllamaspec" for ours (from this
checkout; "pyllamaspec@TREE": another checkout's, before/after) or a llama-server binary, ARGS
its flags ({T} and {D} stand for -m / -md's paths):

    python scripts/server_load.py -m T.gguf -md D.gguf --clients 8 --requests 16 --max-tokens 64 \
        --rounds 3 --server "np1=pyllamaspec:-m {T} -md {D} -np 1 -c 4096 -t 2" \
        --server "np4=pyllamaspec:-m {T} -md {D} -np 4 -c 4096 -t 2" \
        --server "llama-np4-spec=/path/llama-server:-m {T} -md {D} --spec-type draft-simple -np 4 -c 4096 -t 2" \
        --server "llama-np4=/path/llama-server:-m {T} -np 4 -c 4096 -t 2"

--suite LLAMA_SERVER runs those five configurations (ours -np 1 and -np 4 with the draft, ours
-np 4 plain, llama-server -np 4 with draft-simple and plain) with -t --threads; --real
smollm2,gemma3 runs them on the offline real models (each with its Q8_0 as the draft), one
after the other, in one command:

    python scripts/server_load.py --real smollm2,gemma3 --suite /work/llamacpp/build-native/bin/llama-server \
        --ids --clients 8 --requests 16 --max-tokens 64 --rounds 3 --threads 2

(--extra=-nr: the weights not repacked, both servers: Gemma 3's logits then change from 8 tokens
an evaluation on, not 4; scripts/batch_composition.py measures it.)

It prints each configuration's median tokens/s, p50/p95 latency, the ratios to the first, and
how the greedy answers compare with the first configuration's and with each other's (the same
question, the same tokens expected where the kernels do not depend on the batch's composition).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

QUESTIONS = ["What is a cat?", "Name a color.", "What is 2+2?", "Say hello.", "What is rain?",
             "Name a fruit.", "What is the sun?", "Name a tree.", "What is a car?", "Say goodbye."]
LLAMA_SERVER = "/work/llamacpp/build-native/bin/llama-server"


def _get(url: str, timeout: float = 5) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _post(url: str, body: dict) -> tuple[float, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                                 method="POST")
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t0, out


def chat(url: str, question: str, max_tokens: int) -> tuple[float, dict]:
    """A greedy chat request: (seconds, {text, tokens (None), finish, n})."""
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens, "temperature": 0}
    dt, o = _post(url + "/v1/chat/completions", body)
    ch = (o.get("choices") or [{}])[0]
    return dt, {"text": (ch.get("message") or {}).get("content"), "tokens": None,
                "finish": ch.get("finish_reason"), "n": (o.get("usage") or {}).get("completion_tokens", 0)}


def complete_ids(url: str, ids: list[int], max_tokens: int) -> tuple[float, dict]:
    """llama-server's /completion with the prompt as token ids, greedy: the same request to
    ours and to llama-server."""
    body = {"prompt": ids, "n_predict": max_tokens, "temperature": 0, "top_k": 1, "return_tokens": True}
    dt, o = _post(url + "/completion", body)
    finish = "length" if o.get("stop_type") == "limit" else "stop" if o.get("stop") else None
    return dt, {"text": o.get("content"), "tokens": o.get("tokens"), "finish": finish,
                "n": o.get("tokens_predicted", 0)}


def prompt_ids(model_path: str, template: str | None) -> list[list[int]]:
    """Each question as a one-turn chat's prompt ids (the target's template, or `template`)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from pyllamaspec import Model
    m = Model(model_path, n_ctx=256, n_threads=1)
    try:
        return [m.apply_chat_template([{"role": "user", "content": q}], tokenize=True, chat_template=template)
                for q in QUESTIONS]
    finally:
        m.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen | None, what: str = "") -> None:
    for _ in range(1500):
        if proc is not None and proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}: {what}")
        try:
            if _get(url + "/health").get("status") == "ok":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    if proc is not None:
        proc.terminate()
    sys.exit("the server did not come up")


def _start(args: list[str], program: str = "pyllamaspec") -> tuple[subprocess.Popen, str]:
    port = free_port()
    ours, _, tree = program.partition("@")       # pyllamaspec@TREE: another checkout's package
    cmd = [sys.executable, "-m", "pyllamaspec.server"] if ours == "pyllamaspec" else [program]
    env = None
    if ours == "pyllamaspec" and tree:          # that checkout's core too, where it has a dev build
        env = dict(os.environ, PYTHONPATH=tree)
        lib = os.path.join(tree, "build", "dev", "libpyllamaspec.so")
        if os.path.exists(lib):
            env["PYLLAMASPEC_LIBRARY"] = lib
    p = subprocess.Popen([*cmd, *args, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env)
    url = f"http://127.0.0.1:{port}"
    wait_up(url, p, " ".join(cmd + args))
    return p, url


def run(url: str, clients: int, requests: int, max_tokens: int, ids: list[list[int]] | None = None) -> dict:
    """The load: each client sends its requests one after the other; with ids, /completion."""
    before = _get(url + "/health").get("requests")

    def ask(c: int, i: int) -> tuple[float, dict]:
        q = (c + i) % len(QUESTIONS)
        return complete_ids(url, ids[q], max_tokens) if ids is not None else chat(url, QUESTIONS[q], max_tokens)

    def client(c: int) -> list:
        return [ask(c, i) for i in range(requests)]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        results = [r for rs in ex.map(client, range(clients)) for r in rs]
    wall = time.perf_counter() - t0
    lat = sorted(t for t, _ in results)
    ok = [o for _, o in results if o["text"] is not None and o["finish"] in ("stop", "length")]
    after = _get(url + "/health").get("requests")
    served = after - before if before is not None and after is not None else len(results)   # llama-server: no count
    q = statistics.quantiles(lat, n=20)
    tokens = sum(o["n"] for o in ok)
    answers: dict[int, list] = {}
    for c in range(clients):
        for i in range(requests):
            o = results[c * requests + i][1]
            answers.setdefault((c + i) % len(QUESTIONS), []).append(
                tuple(o["tokens"]) if o["tokens"] is not None else o["text"])
    return {"requests": len(results), "answered": len(ok), "served_by_server": served, "wall_s": round(wall, 2),
            "requests_per_s": round(len(results) / wall, 2), "tokens_per_s": round(tokens / wall, 1),
            "p50_ms": round(1e3 * statistics.median(lat), 1), "p95_ms": round(1e3 * q[18], 1),
            "max_ms": round(1e3 * lat[-1], 1), "tokens": tokens, "answers": answers,
            "empty": sum(1 for _, o in results if not o["text"])}


def _agree(a, b) -> int:
    """How many leading tokens (characters, for texts) two answers share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def answer_report(name: str, got: dict[int, list], ref: dict[int, list]) -> str:
    """How a configuration's answers compare with the reference's (the first answer of each
    question there) and among themselves (a question asked several times in one run)."""
    differ, shared, inconsistent = [], [], 0
    for q, xs in got.items():
        r = ref.get(q, [None])[0]
        inconsistent += len(set(xs)) > 1
        for x in xs:
            if r is not None and x != r:
                differ.append(q)
                shared.append(_agree(x, r))
    n = sum(len(xs) for xs in got.values())
    unit = "tokens" if got and isinstance(next(iter(got.values()))[0], tuple) else "chars"
    s = f"{name}: {len(differ)}/{n} answers differ from the reference ({len(set(differ))} of {len(got)} questions)"
    if differ:
        s += f", agreeing on their first {min(shared)}..{max(shared)} {unit} (median {statistics.median(shared):g})"
    return s + f"; {inconsistent} questions answered differently within the run"


def _configs(a: argparse.Namespace, target: str, draft: str | None) -> list[tuple[str, str, list[str]]]:
    specs = list(a.server)
    if a.suite:
        common = f"-c {a.ctx} -t {a.threads} {a.extra}".strip()
        specs = [f"ours-np1-draft=pyllamaspec:-m {{T}} -md {{D}} -np 1 {common}",
                 f"ours-np4-draft=pyllamaspec:-m {{T}} -md {{D}} -np 4 {common}",
                 f"ours-np4=pyllamaspec:-m {{T}} -np 4 {common}",
                 f"llama-np4-draft={a.suite}:-m {{T}} -md {{D}} --spec-type draft-simple -np 4 {common} -td {a.threads}",
                 f"llama-np4={a.suite}:-m {{T}} -np 4 {common}"] + specs
    confs = []
    for spec in specs:
        name, _, rest = spec.partition("=")
        program, _, args = rest.partition(":")
        confs.append((name, program, args.format(T=target, D=draft).split()))
    return confs


def compare(a: argparse.Namespace, target: str, draft: str | None, template: str | None) -> bool:
    """The configurations, one at a time, alternated over a.rounds rounds; True if every request
    of every run was answered."""
    confs = _configs(a, target, draft)
    ids = prompt_ids(target, template) if a.ids else None
    print(f"== {os.path.basename(target)} (draft {os.path.basename(draft) if draft else None}), "
          f"{'prompt ids on /completion' if ids else 'chats'}", file=sys.stderr)
    runs: dict[str, list[dict]] = {n: [] for n, _, _ in confs}
    for r in range(a.rounds):
        for name, program, args in confs[r % len(confs):] + confs[:r % len(confs)]:
            proc, url = _start(args, program)
            try:
                chat(url, "Hi", 4)                        # warm: weights paged in, graphs built
                res = run(url, a.clients, a.requests, a.max_tokens, ids)
            finally:
                proc.terminate()
                proc.wait(60)
            runs[name].append(res)
            print(f"round {r + 1} {name}: {res['tokens_per_s']} t/s, p50 {res['p50_ms']} ms, "
                  f"p95 {res['p95_ms']} ms, answered {res['answered']}/{res['requests']}", file=sys.stderr)
    _print_table(os.path.basename(target), confs, runs)
    return all(x["answered"] == x["requests"] for xs in runs.values() for x in xs)


def _print_table(model: str, confs: list, runs: dict[str, list[dict]]) -> None:
    first = confs[0][0]
    base = statistics.median(x["tokens_per_s"] for x in runs[first])
    ref = runs[first][0]["answers"]
    print(f"\n{model}: medians of {len(runs[first])} alternated rounds")
    print(f"{'server':<18}{'t/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'vs ' + first:>20}{'empty':>7}")
    for name, _, _ in confs:
        xs = runs[name]
        tps = statistics.median(x["tokens_per_s"] for x in xs)
        print(f"{name:<18}{tps:>8.1f}{statistics.median(x['p50_ms'] for x in xs):>9.0f}"
              f"{statistics.median(x['p95_ms'] for x in xs):>9.0f}{tps / base:>19.2f}x{xs[0]['empty']:>7}")
    print(f"greedy answers of each configuration's first round against {first}'s:")
    for name, _, _ in confs[1:]:
        print("  " + answer_report(name, runs[name][0]["answers"], ref))
    print("  " + answer_report(first, ref, ref))


def _real_pairs(names: str, draft_type: str = "q8_0") -> list[tuple[str, str, str | None]]:
    """(target, its draft (the target requantized: q8_0 or q4_0), template) of each offline real
    model named."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from pyllamaspec.files.convert import ensure_variant
    from pyllamaspec.files.offline import real_model_path
    out = []
    for name in names.split(","):
        t = real_model_path(name)
        d = ensure_variant(t, draft_type)        # made once, cached beside t (as the tests do)
        out.append((str(t), str(d), "gemma" if name == "gemma3" else None))   # Gemma 3 270M's GGUF has none
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (else one is started with -m/-md)")
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("--real", help="offline real models, comma-separated (smollm2,gemma3), each with a draft")
    ap.add_argument("--draft-type", default="q8_0", choices=["q8_0", "q4_0"],
                    help="with --real: the draft, the target requantized to this type")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=10, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--ids", action="store_true", help="the same prompt token ids on /completion to every server")
    ap.add_argument("--chat-template", help="with --ids: the template that renders the questions (a built-in name)")
    ap.add_argument("--server", action="append", default=[], metavar="NAME=PROGRAM:ARGS",
                    help="a configuration to compare (see the module's docstring); repeat")
    ap.add_argument("--suite", nargs="?", const=LLAMA_SERVER, metavar="LLAMA_SERVER",
                    help="the five standard configurations (see the module's docstring)")
    ap.add_argument("--threads", type=int, default=2, help="with --suite: -t")
    ap.add_argument("--ctx", type=int, default=4096, help="with --suite: -c")
    ap.add_argument("--extra", default="", help="with --suite: more flags for all five servers (e.g. --extra=-nr)")
    ap.add_argument("--rounds", type=int, default=3, help="with --server/--suite: alternated rounds")
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    if a.server or a.suite:
        pairs = _real_pairs(a.real, a.draft_type) if a.real else [(a.model, a.model_draft, a.chat_template)]
        if not pairs[0][0]:
            ap.error("give -m or --real")
        ok = [compare(a, t, d, a.chat_template or tmpl) for t, d, tmpl in pairs]
        return 0 if all(ok) else 1
    return _single(a, ap, extra)


def _single(a: argparse.Namespace, ap: argparse.ArgumentParser, extra: list[str]) -> int:
    proc = None
    url = a.url
    if url is None:
        if not a.model:
            ap.error("give --url or -m")
        proc, url = _start(["-m", a.model] + (["-md", a.model_draft] if a.model_draft else []) + extra)
    try:
        ids = prompt_ids(a.model, a.chat_template) if a.ids else None
        r = run(url, a.clients, a.requests, a.max_tokens, ids)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    r.pop("answers")
    print(json.dumps(r, indent=1))
    lost = r["requests"] - r["answered"]
    print(f"{r['requests']} requests ({a.clients} clients x {a.requests}), {r['answered']} answered, {lost} lost; "
          f"{r['requests_per_s']} requests/s; latency p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms", file=sys.stderr)
    return 0 if lost == 0 and r["served_by_server"] == r["requests"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))    # the server it started is stopped too
    sys.exit(main())
