"""`python -m pyllamaspec.bench -m TARGET --prompts FILE.jsonl [-md DRAFT] [--spec-type T ...]
[--llama-server PATH [--llama-server-args "..." ...]] [--per-category N] [--chat-template NAME]
[--plot FILE.png]`: a public benchmark's questions, per task.

FILE.jsonl is in Spec-Bench's question format (hemingkx/Spec-Bench, data/spec_bench/question.jsonl:
the user fetches it), one question a line: {"question_id", "category", "turns": [str, ...]};
MT-Bench's eight categories are one task, "mt_bench". A question's turns are a conversation,
each turn answered (greedy, -n tokens at most) before the next is asked. Engines, alternated
question by question (the order rotating, so a machine that slows down favours none): our plain
decoding, one engine of ours per drafter asked for (-md: a draft model, a head, "ngram",
"suffix"; each --spec-type: llama.cpp's names), and with --llama-server the same conversations
through that binary, one server per --llama-server-args (its /v1/chat/completions, started with
-m TARGET, the threads and those flags). Per task and over all: each engine's tokens/s
(generated tokens over generation time, the prompt excluded; the median over --rounds), each
drafting engine's speed-up over plain, tokens per round and acceptance, the best of ours over
the best of llama-server's, and whether our greedy answers equal plain decoding's."""
from __future__ import annotations

import json
import os
import shlex
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field

from ..errors import InvalidArgumentError, PyllamaspecError


@dataclass
class Question:
    question_id: object
    category: str
    turns: list[str]


# Spec-Bench's multi-turn task is MT-Bench's 80 questions, filed under 8 categories; its speed.py
# counts them as one task, "mt_bench", and so does the table.
MT_BENCH = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def load_prompts(path: str, per_category: int = 0) -> list[Question]:
    """Spec-Bench's questions from a JSONL file, MT-Bench's categories as one task, "mt_bench"
    (per_category > 0: that many of each task, evenly spaced in the file's order, so a subset
    of mt_bench spans its categories)."""
    out: list[Question] = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                q = Question(d.get("question_id", i), str(d["category"]), [str(t) for t in d["turns"]])
            except (ValueError, KeyError, TypeError) as e:
                raise InvalidArgumentError(f"{path}:{i}: not a Spec-Bench question "
                                           f"({{question_id, category, turns: [...]}}): {e}") from None
            if not q.turns:
                raise InvalidArgumentError(f"{path}:{i}: a question without turns")
            if q.category in MT_BENCH:
                q.category = "mt_bench"
            out.append(q)
    if not out:
        raise InvalidArgumentError(f"{path}: no questions")
    if per_category:
        tasks = {c: [q for q in out if q.category == c] for c in dict.fromkeys(q.category for q in out)}
        keep = {id(qs[j * len(qs) // per_category]) for qs in tasks.values()
                for j in range(min(per_category, len(qs)))}
        out = [q for q in out if id(q) in keep]
    return out


@dataclass
class Turn:
    """One answered turn: tokens generated, generation seconds, drafted / accepted, rounds (0 where
    the engine does not say), the answer's tokens (ours) or text."""
    n: int
    seconds: float
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    answer: object = None


class Ours:
    """This build answering a conversation (pyllamaspec.chat), with a draft or plainly."""

    def __init__(self, target, draft, n_gen: int, **kw):
        self.target, self.draft, self.n_gen, self.kw = target, draft, n_gen, kw

    def answer(self, turns: list[str]) -> list[Turn]:
        from ..frontends.chat import chat
        msgs, out = [], []
        for t in turns:
            msgs.append({"role": "user", "content": t})
            r = chat(msgs, self.target, self.draft, max_tokens=self.n_gen, temperature=0, **self.kw)
            s = r.stats
            out.append(Turn(s.n_generated, s.t_generate, s.drafted, s.accepted, s.rounds, list(r.tokens)))
            msgs.append({"role": "assistant", "content": r.text})
        return out

    def new_round(self) -> None:
        """A round starts with nothing learned by suffix drafting: a round's later questions may
        draft from its earlier ones, not from the same question's answer of a round before."""
        from ..speculation.drafters.ngram.suffix_index import forget
        forget(self.target)

    def close(self) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """A llama-server binary, started for the run and asked over HTTP; its timings are its own
    (predicted_n, predicted_ms, draft_n, draft_n_accepted)."""

    def __init__(self, binary: str, model: str, threads: int, n_ctx: int, n_gen: int, args: str = "",
                 start_timeout: float = 300.0):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise PyllamaspecError(f"--llama-server {binary}: not an executable file")
        self.n_gen, self.port = n_gen, _free_port()
        self.log = tempfile.TemporaryFile()
        cmd = [binary, "-m", model, "-c", str(n_ctx), "-np", "1", "--port", str(self.port),
               *(["-t", str(threads)] if threads else []), *shlex.split(args)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise PyllamaspecError(f"llama-server exited ({self.proc.returncode}) before it was ready: "
                                       f"{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise PyllamaspecError(f"llama-server did not answer /health within {start_timeout:.0f} s")
            time.sleep(0.2)

    def _log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-1500:]

    def answer(self, turns: list[str]) -> list[Turn]:
        msgs, out = [], []
        for t in turns:
            msgs.append({"role": "user", "content": t})
            body = {"messages": msgs, "max_tokens": self.n_gen, "temperature": 0, "cache_prompt": True}
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/chat/completions",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=3600) as r:
                got = json.loads(r.read())
            tm = got.get("timings", {})
            text = got["choices"][0]["message"].get("content") or ""
            out.append(Turn(int(tm.get("predicted_n", 0)), float(tm.get("predicted_ms", 0.0)) / 1e3,
                            int(tm.get("draft_n", 0)), int(tm.get("draft_n_accepted", 0)), 0, text))
            msgs.append({"role": "assistant", "content": text})
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@dataclass
class Tally:
    """An engine's sums over one category in one round."""
    n: int = 0
    seconds: float = 0.0
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0

    def add(self, t: Turn) -> None:
        self.n += t.n
        self.seconds += t.seconds
        self.drafted += t.drafted
        self.accepted += t.accepted
        self.rounds += t.rounds


@dataclass
class Run:
    """Everything measured: tallies by (engine, category, round), our answers by (engine, question)."""
    engines: list[str]
    servers: list[str] = field(default_factory=list)      # the engines that are llama-server's
    tallies: dict = field(default_factory=dict)
    answers: dict = field(default_factory=dict)


def measure(questions: list[Question], engines: dict, rounds: int, progress=None) -> Run:
    """Every question through every engine, `rounds` times, the engines' order rotating."""
    names = list(engines)
    run = Run(names, [n for n, e in engines.items() if isinstance(e, LlamaServer)])
    for r in range(rounds):
        for e in engines.values():
            getattr(e, "new_round", lambda: None)()
        for i, q in enumerate(questions):
            k = (i + r) % len(names)
            for e in names[k:] + names[:k]:
                turns = engines[e].answer(q.turns)
                tally = run.tallies.setdefault((e, q.category, r), Tally())
                for t in turns:
                    tally.add(t)
                run.answers.setdefault((e, i), [t.answer for t in turns])
            if progress is not None:
                progress(r, i)
    return run


def _median_tps(run: Run, engine: str, cats: list[str], n_rounds: int) -> float:
    per_round = []
    for r in range(n_rounds):
        ts = [run.tallies.get((engine, c, r)) for c in cats]
        n, s = sum(t.n for t in ts if t), sum(t.seconds for t in ts if t)
        if s > 0:
            per_round.append(n / s)
    return statistics.median(per_round) if per_round else 0.0


def rows(run: Run, questions: list[Question], n_rounds: int) -> list[dict]:
    """Per task, then "all": each engine's tokens/s; each drafting engine's speed-up over plain,
    tokens per round, acceptance and greedy answers equal to plain's; the best of ours (the
    drafting engines of this build) and of llama-server's, and the one over the other."""
    cats = list(dict.fromkeys(q.category for q in questions))
    ours = [e for e in run.engines if e != "plain" and e not in run.servers]
    out = []
    for label, cs in [(c, [c]) for c in cats] + [("all", cats)]:
        row: dict = {"category": label, "questions": sum(q.category in cs for q in questions)}
        idx = [i for i, q in enumerate(questions) if q.category in cs]
        for e in run.engines:
            row[f"{e}_tps"] = _median_tps(run, e, cs, n_rounds)
            if e == "plain":
                continue
            tallies = [t for (en, c, _), t in run.tallies.items() if en == e and c in cs]
            drafted, accepted = sum(t.drafted for t in tallies), sum(t.accepted for t in tallies)
            n_rounds_e = sum(t.rounds for t in tallies)
            row[f"{e}_acceptance"] = accepted / drafted if drafted else 0.0
            row[f"{e}_tokens_per_round"] = (accepted + n_rounds_e) / n_rounds_e if n_rounds_e else None
            if row.get("plain_tps"):
                row[f"{e}_speedup"] = row[f"{e}_tps"] / row["plain_tps"]
            if e in ours and "plain" in run.engines:
                row[f"{e}_same_as_plain"] = sum(run.answers.get((e, i)) == run.answers.get(("plain", i))
                                                for i in idx)
        best = max(ours, key=lambda e: row[f"{e}_tps"], default=None)
        best_ls = max(run.servers, key=lambda e: row[f"{e}_tps"], default=None)
        if best is not None:
            row["best"] = best
            if f"{best}_speedup" in row:
                row["speedup"] = row[f"{best}_speedup"]
            if "plain" in run.engines:
                row["same_as_plain"] = min(row[f"{e}_same_as_plain"] for e in ours)
        if best_ls is not None:
            row["best_llama_server"] = best_ls
            if best is not None and row[f"{best_ls}_tps"]:
                row["vs_llama_server"] = row[f"{best}_tps"] / row[f"{best_ls}_tps"]
        out.append(row)
    return out


def print_table(table: list[dict], run: Run) -> None:
    """Tokens/s of every engine; then the best of ours: its speed-up over plain, tokens per round,
    acceptance, and its ratio to the best of llama-server's; our greedy answers equal to plain's."""
    engines, lls = run.engines, bool(run.servers)
    head = ["task", "n"] + [f"{e} t/s" for e in engines] + ["best of ours", "speed-up", "tok/round", "accept"] \
        + (["vs best llama-server"] if lls else []) + ["= plain"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in table:
        b = r.get("best")
        tpr = r.get(f"{b}_tokens_per_round")
        cells = [r["category"], str(r["questions"])] + [f"{r[f'{e}_tps']:.1f}" for e in engines] + [
            b or "-", f"{r['speedup']:.2f}x" if "speedup" in r else "-", f"{tpr:.2f}" if tpr else "-",
            f"{r[f'{b}_acceptance']:.2f}" if b else "-"]
        if lls:
            cells.append(f"{r['vs_llama_server']:.2f}x ({r['best_llama_server']})" if "vs_llama_server" in r else "-")
        cells.append(f"{r['same_as_plain']}/{r['questions']}" if "same_as_plain" in r else "-")
        print("| " + " | ".join(cells) + " |")


def draw(table: list[dict], engines: list[str], path: str, title: str) -> None:
    """Tokens/s per category, one bar per engine (--plot)."""
    from .plot import _check_matplotlib
    plt = _check_matplotlib()
    import numpy as np
    cats = [r["category"] for r in table]
    x = np.arange(len(cats))
    w = 0.8 / len(engines)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(cats) + 2), 4.0))
    for j, e in enumerate(engines):
        ax.bar(x + (j - (len(engines) - 1) / 2) * w, [r[f"{e}_tps"] for r in table], w, label=e)
    ax.set_xticks(x, cats)
    ax.set_ylabel("tokens/s (median)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
