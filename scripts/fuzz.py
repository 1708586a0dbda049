#!/usr/bin/env python3
"""Structure-aware fuzzer of pyllamaspec's GGUF loading and tokenizer, through the Python API.

    python scripts/fuzz.py [--kind gguf|tokenizer|grammar|template|both|all] [--cases N] [--seconds S] [--jobs J]
                           [--seed K] [--save DIR] [--timeout T] [--batch B]
    python scripts/fuzz.py --replay FINDING.json|FILE.gguf
    python scripts/fuzz.py --kind gguf --seed K --case I         (one case again, by number)

gguf: seeds (tiny synthetic models of every architecture, quantized and not, and the headers of
the real models) are parsed and mutated field by field (counts, lengths, types, dimensions,
offsets set to boundary values), entry by entry (key/values and tensor infos duplicated, removed,
retyped; vocabularies damaged) and byte by byte (flips, truncation); each file is loaded as a
Model (then evaluated) or a Tokenizer. tokenizer: text of many scripts, invalid UTF-8, special
token fragments and long runs through tokenize / detokenize / streaming detokenization on the
real models' tokenizers, with out-of-range ids; plain text must come back byte for byte.
grammar: GBNF text and JSON schemas as a client may send them (issue 48's hostile cases at random
sizes, random grammars and schemas, mutated), compiled on a real vocabulary and followed for a
few tokens, each within a time and a memory bound (fuzz_grammar.py). template: Jinja chat
templates (the issue's hostile ones at random sizes, random string-building templates, mutated),
rendered within a time and a memory bound (fuzz_template.py). both: gguf and tokenizer; all:
every kind.

Isolation without a Python start-up per case: the parent imports pyllamaspec and loads the
tokenizers once, then forks a child per batch of cases. A child that dies (a signal, an exit
status) or runs a case past --timeout is a crash or a hang; the case it was running is run again
alone in a fresh child to pin it (a hang must also outlast twice the timeout there). A Python
exception that is not a PyllamaspecError is a finding too. With a sanitized core
(PYLLAMASPEC_LIBRARY pointing at a build of scripts/sanitize.sh) the script re-executes itself
with the sanitizer runtime preloaded and per-process logs, and counts every report, attributed
to its case. Everything is deterministic from --seed. Exits 1 on any finding.
"""
from __future__ import annotations

import argparse
import base64
import collections
import json
import os
import pathlib
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]   # fuzz_gguf, fuzz_tok, sanitizer_logs; models.py

import sanitizer_logs  # noqa: E402

LOGS_ENV = "PYLLAMASPEC_FUZZ_LOGS"


# ---- a sanitized core: preload its runtime, log per process ---------------------------------------

def _sanitizer_reexec() -> None:
    """Re-executes this script with ASan's runtime preloaded when PYLLAMASPEC_LIBRARY is a sanitized
    build (see scripts/sanitize.sh for why each setting)."""
    lib = os.environ.get("PYLLAMASPEC_LIBRARY")
    if os.environ.get(LOGS_ENV) or not lib or not os.path.isfile(lib):
        return
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}   # ldd lists a preload without a path
    out = subprocess.run(["ldd", lib], capture_output=True, text=True, env=env).stdout
    found = dict(re.findall(r"^\s*(libasan|libstdc\+\+)\.so\S*\s+=>\s+(\S+)", out, re.M))
    if "libasan" not in found:
        return
    logs = tempfile.mkdtemp(prefix="pyllamaspec-fuzz-logs-")
    os.environ.update({
        LOGS_ENV: logs,
        "LD_PRELOAD": " ".join(found[k] for k in ("libasan", "libstdc++") if k in found),
        "PYTHONMALLOC": "malloc",
        "ASAN_OPTIONS": f"detect_leaks=0:abort_on_error=0:log_path={logs}/asan",
        "UBSAN_OPTIONS": f"print_stacktrace=1:halt_on_error=0:report_error_type=1:log_path={logs}/ubsan",
    })
    os.execv(sys.executable, [sys.executable] + sys.argv)


def _log_files(pid: int) -> list[pathlib.Path]:
    logs = os.environ.get(LOGS_ENV)
    return [pathlib.Path(logs) / f"{p}.{pid}" for p in ("asan", "ubsan")] if logs else []


# ---- the cases -------------------------------------------------------------------------------------

class Context:
    """What the parent prepares once and every child shares: seeds, tokenizers, a scratch dir."""

    def __init__(self, args, kinds: list[str]):
        self.args = args
        self.work = pathlib.Path(tempfile.mkdtemp(prefix="pyllamaspec-fuzz-"))
        self.seeds, self.toks, self.n_vocab = [], {}, {}
        if args.replay:
            kinds = ["tokenizer"] if args.replay.endswith(".json") else []
        if "gguf" in kinds:
            self._gguf_seeds()
        if "tokenizer" in kinds or "grammar" in kinds:
            self._tokenizers()

    def _real_models(self):
        from pyllamaspec.files.offline import REAL_MODEL_NAMES, ModelUnavailable, real_model_path
        for name in REAL_MODEL_NAMES:
            try:
                yield name, real_model_path(name)
            except ModelUnavailable as e:
                if self.args.require_models:
                    raise
                print(f"fuzz: real model {name} unavailable ({e}); fuzzing without it", file=sys.stderr)

    def _gguf_seeds(self) -> None:
        import fuzz_gguf
        self.seeds = fuzz_gguf.synthetic_seeds(self.work)
        for name, path in self._real_models():
            self.seeds += fuzz_gguf.real_seeds(path, name)

    def _tokenizers(self) -> None:
        import models
        import pyllamaspec
        synth = self.work / "tok-synth.gguf"
        models.write_gguf(synth, n_vocab=300)
        paths = {"synth": synth, **dict(self._real_models())}
        for name, path in paths.items():
            self.toks[name] = pyllamaspec.Tokenizer(path)
            self.n_vocab[name] = self.toks[name].vocab_info.n_tokens

    def case(self, kind: str, index: int) -> dict:
        rng = random.Random(f"{self.args.seed}/{kind}/{index}")
        if kind == "gguf":
            import fuzz_gguf
            data, target, what = fuzz_gguf.make_case(rng, self.seeds)
            return {"kind": "gguf", "target": target, "what": what, "data_b64": base64.b64encode(data).decode()}
        if kind == "grammar":
            import fuzz_grammar
            return fuzz_grammar.make_case(rng, sorted(self.toks))
        if kind == "template":
            import fuzz_template
            return fuzz_template.make_case(rng)
        import fuzz_tok
        return fuzz_tok.make_case(rng, sorted(self.toks), self.n_vocab)


class Unexpected(Exception):
    pass


def run_case(ctx: Context, case: dict) -> str:
    """Runs one case in this (child) process: "ok" or "refused" (a PyllamaspecError); raises
    Unexpected for any other exception or a broken invariant."""
    import fuzz_tok
    import pyllamaspec
    try:
        if case["kind"] == "gguf":
            _run_gguf(ctx, case)
        elif case["kind"] == "grammar":
            import fuzz_grammar
            fuzz_grammar.run_case(case, ctx.toks[case["model"]])
        elif case["kind"] == "template":
            import fuzz_template
            fuzz_template.run_case(case)
        else:
            fuzz_tok.run_case(case, ctx.toks[case["model"]])
        return "ok"
    except pyllamaspec.PyllamaspecError:
        return "refused"
    except Exception as e:
        raise Unexpected("".join(traceback.format_exception_only(type(e), e)).strip()
                         + "\n" + "".join(traceback.format_tb(e.__traceback__)[-3:])) from e


def _run_gguf(ctx: Context, case: dict) -> None:
    import pyllamaspec
    path = ctx.work / f"case-{os.getpid()}.gguf"
    path.write_bytes(base64.b64decode(case["data_b64"]))
    if case["target"] == "model":
        with pyllamaspec.Model(path, n_ctx=32, n_threads=1) as m:
            m.metadata
            m.eval([1 % m.n_vocab, 2 % m.n_vocab, 3 % m.n_vocab])
            m.detokenize(m.tokenize("Hello world <|im_start|> 123", parse_special=True))
    elif case["target"] == "projector":
        import numpy as np
        from pyllamaspec.vision import Projector
        with Projector(path, 1) as p:
            s = p.info.image_size
            if s <= 64:
                p.encode_pixels(np.zeros((3, s, s), np.float32))
    else:
        with pyllamaspec.Tokenizer(path) as t:
            ids = t.tokenize(b"Hello world <|im_start|><start_of_turn> 123 \xff\xfe", parse_special=True)
            t.detokenize(ids + [0, t.vocab_info.n_tokens - 1])


# ---- the child ------------------------------------------------------------------------------------

def child(ctx: Context, w: int, kind: str, indices: list[int], cases: dict | None = None) -> None:
    """Runs the cases, telling the parent "S i" before each and a JSON result line after."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)       # Ctrl-C is the parent's to handle
    logs = _log_files(os.getpid())
    size, total = 0, 0
    try:
        for i in indices:
            os.write(w, f"S {i}\n".encode())
            case = cases[i] if cases else ctx.case(kind, i)
            try:
                _self_test(ctx.args.self_test, i)
                status, detail = run_case(ctx, case), ""
            except Unexpected as e:
                status, detail = "unexpected", str(e)
            reports = 0
            if logs and sum(p.stat().st_size for p in logs if p.exists()) != size:   # this case wrote a report
                size = sum(p.stat().st_size for p in logs if p.exists())
                now = sanitizer_logs.count(p for p in logs if p.exists()).total
                reports, total = now - total, now
            msg = json.dumps({"i": i, "status": status, "reports": reports, "detail": detail})
            os.write(w, f"D {msg}\n".encode())
    finally:
        os._exit(0)


def _self_test(what: str | None, i: int) -> None:
    # --self-test: a fuzzer that cannot fail proves nothing; case 3 of each kind misbehaves
    if what and i == 3:
        if what == "crash":
            os.abort()
        if what == "hang":
            time.sleep(3600)
        if what == "exception":
            raise Unexpected("ValueError: self-test")


# ---- the parent -----------------------------------------------------------------------------------

class Job:
    """Cases of one kind for one child. pin: the failure of a batch that this lone re-run checks."""

    def __init__(self, kind: str, indices: list[int], pin: dict | None = None, cases: dict | None = None):
        self.kind, self.indices, self.pin, self.cases = kind, indices, pin, cases


class Slot:
    """A running child."""

    def __init__(self, pid: int, fd: int, job: Job):
        self.pid, self.fd, self.job = pid, fd, job
        self.buf = b""
        self.cur: int | None = None     # the case started and not finished
        self.t0 = time.monotonic()
        self.done: list[int] = []
        self.reported = 0               # sanitizer reports the child attributed to its cases
        self.hung = False


class Fuzzer:
    FINDINGS = ("crashes", "hangs", "reports", "unexpected")

    def __init__(self, ctx: Context, args, kinds: list[str], jobs: list[Job] | None = None):
        self.ctx, self.args, self.kinds = ctx, args, kinds
        self.pending = collections.deque(jobs or [])
        self.generate = jobs is None
        self.active: dict[int, Slot] = {}
        self.next_index = {k: args.start for k in kinds}
        self.issued = self.turn = 0
        self.cases = collections.Counter()
        self.outcomes = collections.Counter()
        self.found = collections.Counter()
        self.slow = 0
        self.saved = 0
        self.t_start = self.t_progress = time.monotonic()
        self.interrupted = False

    # -- scheduling --
    def _next_job(self) -> Job | None:
        if self.pending:
            return self.pending.popleft()
        a = self.args
        if not self.generate or self.issued >= a.cases or time.monotonic() - self.t_start >= a.seconds:
            return None
        kind = self.kinds[self.turn % len(self.kinds)]
        self.turn += 1
        n = min(a.batch, a.cases - self.issued, max(1, a.cases // len(self.kinds)))   # kinds take turns
        first = self.next_index[kind]
        self.next_index[kind] += n
        self.issued += n
        return Job(kind, list(range(first, first + n)))

    def _spawn(self, job: Job) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            # (not under ASan: it maps terabytes of shadow memory)
            if self.args.memory_gib and not os.environ.get(LOGS_ENV) and "libasan" not in os.environ.get("LD_PRELOAD", ""):
                import resource
                lim = self.args.memory_gib << 30
                resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
            child(self.ctx, w, job.kind, job.indices, job.cases)
        os.close(w)
        self.active[r] = Slot(pid, r, job)

    def run(self) -> None:
        try:
            while True:
                while len(self.active) < self.args.jobs:
                    job = self._next_job()
                    if job is None:
                        break
                    self._spawn(job)
                if not self.active:
                    break
                ready, _, _ = select.select(list(self.active), [], [], 0.2)
                for fd in ready:
                    self._read(self.active[fd])
                self._check_timeouts()
                self._progress()
        except KeyboardInterrupt:
            self.interrupted = True
            for s in self.active.values():
                os.kill(s.pid, signal.SIGKILL)
                os.waitpid(s.pid, 0)

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        for s in self.active.values():
            limit = self.args.timeout * (2 if s.job.pin else 1)
            if s.cur is not None and not s.hung and now - s.t0 > limit:
                s.hung = True
                os.kill(s.pid, signal.SIGKILL)

    def _read(self, s: Slot) -> None:
        data = os.read(s.fd, 1 << 16)
        if not data:
            self._finish(s)
            return
        s.buf += data
        *lines, s.buf = s.buf.split(b"\n")
        for line in lines:
            if line.startswith(b"S "):
                s.cur, s.t0 = int(line[2:]), time.monotonic()
            elif line.startswith(b"D "):
                res = json.loads(line[2:])
                s.cur = None
                s.done.append(res["i"])
                s.reported += res["reports"]
                if not s.job.pin:
                    self._result(s.job, res)

    def _result(self, job: Job, res: dict) -> None:
        i = res["i"]
        self.cases[job.kind] += 1
        self.outcomes[(job.kind, res["status"])] += 1
        if res["status"] == "unexpected":
            self._finding("unexpected", job, i, res["detail"])
        if res["reports"]:
            self._finding("reports", job, i, f"{res['reports']} sanitizer report(s)", n=res["reports"])

    def _finish(self, s: Slot) -> None:
        _, status = os.waitpid(s.pid, 0)
        os.close(s.fd)
        del self.active[s.fd]
        (self.ctx.work / f"case-{s.pid}.gguf").unlink(missing_ok=True)
        job = s.job
        # the case that was running, or the last one run (a child can die on its way out)
        i = s.cur if s.cur is not None else s.done[-1] if s.done else job.indices[0]
        failure = None
        if s.cur is not None:
            failure = "hang" if s.hung else _describe(status)
        elif status != 0:
            failure = _describe(status) + " after its last case"
        logs = _log_files(s.pid)
        if not job.pin and logs:   # reports the child could not attribute: written as it died
            extra = sanitizer_logs.count(p for p in logs if p.exists()).total - s.reported
            if extra > 0:
                self._finding("reports", job, i, f"{extra} sanitizer report(s) as the child died", n=extra)
        if failure is None:
            if job.pin:
                self._pin_passed(job)
            return
        what = "hangs" if s.hung else "crashes"
        if job.pin:
            self._finding(what, job, i, f"{failure} (alone in a fresh child)")
            return
        if s.cur is not None:
            self.cases[job.kind] += 1
            self.outcomes[(job.kind, what)] += 1
            rest = job.indices[job.indices.index(i) + 1:]
            if rest:
                self.pending.appendleft(Job(job.kind, rest, cases=job.cases))
        pin = {"failure": failure, "what": what, "batch": s.done + ([i] if s.cur is not None else []), "job": job}
        self.pending.appendleft(Job(job.kind, [i], pin=pin, cases=job.cases))

    def _pin_passed(self, job: Job) -> None:
        pin = job.pin
        i = job.indices[0]
        if pin["what"] == "hangs":
            self.slow += 1
            print(f"fuzz: {job.kind} case {i} was slow (over {self.args.timeout:g} s in a batch, not alone)",
                  file=sys.stderr)
        else:   # the process died, but not with this case alone: the sequence is the finding
            self._finding("crashes", pin["job"], i, f"{pin['failure']}; not alone: after cases {pin['batch']}",
                          batch=pin["batch"])

    # -- findings --
    def _finding(self, what: str, job: Job, i: int, detail: str, n: int = 1, batch=None) -> None:
        self.found[what] += n
        a = self.args
        replay = f"python scripts/fuzz.py --kind {job.kind} --seed {a.seed} --case {i}"
        print(f"fuzz: FINDING ({what}) {job.kind} case {i}: {detail.splitlines()[0] if detail else ''}\n"
              f"      again: {replay}", file=sys.stderr)
        if len(detail.splitlines()) > 1:
            print("      " + "\n      ".join(detail.splitlines()[1:]), file=sys.stderr)
        if not a.save or self.saved >= a.max_saved:
            return
        self.saved += 1
        out = pathlib.Path(a.save)
        out.mkdir(parents=True, exist_ok=True)
        cases = [job.cases[k] if job.cases else self.ctx.case(job.kind, k) for k in (batch or [i])]
        stem = f"{job.kind}-s{a.seed}-{i}-{what}"
        record = {"finding": what, "detail": detail, "seed": a.seed, "index": i, "replay": replay,
                  "case": cases[-1], "sequence": cases if batch else None}
        (out / f"{stem}.json").write_text(json.dumps(record, indent=1))
        if job.kind == "gguf":
            (out / f"{stem}.gguf").write_bytes(base64.b64decode(cases[-1]["data_b64"]))

    def _progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.t_progress >= self.args.progress:
            self.t_progress = now
            print(f"fuzz: [{now - self.t_start:7.0f} s] {self.line()}", file=sys.stderr, flush=True)

    def line(self) -> str:
        total = sum(self.cases.values())
        rate = total / max(1e-9, time.monotonic() - self.t_start)
        f = self.found
        return (f"cases={total} crashes={f['crashes']} hangs={f['hangs']} reports={f['reports']} "
                f"unexpected={f['unexpected']} cases_per_s={rate:.1f}")

    def summary(self) -> str:
        parts = []
        for kind in sorted(self.cases):
            outs = ", ".join(f"{st} {n}" for (k, st), n in sorted(self.outcomes.items()) if k == kind)
            parts.append(f"fuzz: {kind}: {self.cases[kind]} cases ({outs})")
        if self.slow:
            parts.append(f"fuzz: {self.slow} slow case(s), not hangs when run alone")
        parts.append(f"summary: {self.line()} seconds={time.monotonic() - self.t_start:.1f} "
                     f"jobs={self.args.jobs} seed={self.args.seed} sanitized={'yes' if os.environ.get(LOGS_ENV) else 'no'}")
        return "\n".join(parts)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"killed by {signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig}"
    return f"exit status {os.WEXITSTATUS(status)}"


# ---- main -----------------------------------------------------------------------------------------

def _replay_jobs(path: str) -> list[Job]:
    if path.endswith(".json"):
        rec = json.loads(pathlib.Path(path).read_text())
        cases = rec.get("sequence") or [rec.get("case", rec)]
        kind = cases[-1]["kind"]
        return [Job(kind, list(range(len(cases))), cases=dict(enumerate(cases)))]
    data = base64.b64encode(pathlib.Path(path).read_bytes()).decode()
    cases = {t: {"kind": "gguf", "target": t, "what": path, "data_b64": data} for t in ("model", "tokenizer")}
    return [Job("gguf", [0], cases={0: cases["model"]}), Job("gguf", [0], cases={0: cases["tokenizer"]})]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("gguf", "tokenizer", "grammar", "template", "both", "all"), default="both")
    ap.add_argument("--cases", type=int, default=None, help="cases in all (default 1000 unless --seconds)")
    ap.add_argument("--seconds", type=float, default=None, help="stop starting cases after this long")
    ap.add_argument("--jobs", type=int, default=1, help="children at a time")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first case number of each kind")
    ap.add_argument("--case", type=int, default=None, help="run this one case of --kind")
    ap.add_argument("--batch", type=int, default=50, help="cases per child")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per case (default 10, sanitized 60)")
    ap.add_argument("--save", default=None, help="directory for the inputs of findings (JSON, and .gguf)")
    ap.add_argument("--max-saved", type=int, default=100)
    ap.add_argument("--replay", default=None, help="a saved finding (.json) or a GGUF file to run")
    ap.add_argument("--memory-gib", type=int, default=8, help="address-space limit per child (0: none)")
    ap.add_argument("--progress", type=float, default=60.0, help="seconds between progress lines")
    ap.add_argument("--require-models", action="store_true", help="fail when a real model is unavailable")
    ap.add_argument("--self-test", choices=("crash", "hang", "exception"), default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.case is not None:
        if a.kind in ("both", "all"):
            ap.error("--case needs one --kind: gguf, tokenizer, grammar or template")
        a.start, a.cases, a.batch = a.case, 1, 1
    if a.cases is None:
        a.cases = 10**12 if a.seconds is not None else 1000
    if a.seconds is None:
        a.seconds = float("inf")
    if a.timeout is None:
        a.timeout = 60.0 if os.environ.get(LOGS_ENV) else 10.0
    return a


def main(argv=None) -> int:
    _sanitizer_reexec()
    a = parse_args(argv)
    kinds = {"both": ["gguf", "tokenizer"], "all": ["gguf", "tokenizer", "grammar", "template"]}.get(a.kind, [a.kind])
    ctx = Context(a, kinds)
    try:
        fz = Fuzzer(ctx, a, kinds, _replay_jobs(a.replay) if a.replay else None)
        fz.run()
        print(fz.summary(), flush=True)
    finally:
        shutil.rmtree(ctx.work, ignore_errors=True)
    n_found = sum(fz.found[k] for k in Fuzzer.FINDINGS)
    logs = os.environ.get(LOGS_ENV)
    if logs:
        if n_found:
            print(f"fuzz: sanitizer logs kept in {logs}", file=sys.stderr)
        else:
            shutil.rmtree(logs, ignore_errors=True)
    if n_found:
        return 1
    return 130 if fz.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
