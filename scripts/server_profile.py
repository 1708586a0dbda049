"""Where the server's time goes under load: runs `python -m pyllamaspec.server` in this process
with its worker thread instrumented, drives it with scripts/server_load.py's clients, and prints
the split of the worker's rounds (Scheduler.step): the target's evaluation in the core, a draft
model's evaluations in the core, and the rest (Python: scheduling, drafting bookkeeping,
acceptance, detokenization, stop strings, the hand-off to the event loop), per round and per
token; the CPU time of each thread (the event loop's HTTP/JSON work competes with the core's
threads for the cores); and with --cprofile, the worker thread's hottest Python functions.

    python scripts/server_profile.py -m T.gguf -md D.gguf -np 4 --clients 8 --requests 4 -- -c 4096 -t 2
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import signal
import sys
import threading
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the package of the tree given by --tree (another checkout: before/after), else this one's
_tree = next((sys.argv[i + 1] for i, x in enumerate(sys.argv[:-1]) if x == "--tree"), None)
sys.path.insert(0, _tree or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import server_load  # noqa: E402

from pyllamaspec.engine import context as context_mod  # noqa: E402
from pyllamaspec.generation import lifecycle as sched_mod  # noqa: E402
from pyllamaspec.frontends.server import worker as worker_mod  # noqa: E402
from pyllamaspec.speculation import batch as batch_mod  # noqa: E402
from pyllamaspec.speculation import cost_model  # noqa: E402
from pyllamaspec.speculation import decoder as decoder_mod  # noqa: E402

ACC: dict = defaultdict(float)
CNT: dict = defaultdict(int)
STATE: dict = {"targets": set(), "phase": None, "rounds": [], "single": []}


def _timed_phase(cls, name: str, phase: str, count_running: bool = False) -> None:
    """cls.name timed as `phase` (the core's evaluations inside it counted to it)."""
    orig = getattr(cls, name)

    def timed(self, *a, **k):
        STATE["targets"].add(id(self.target._context))
        if phase == "step":
            CNT[f"steps_with_{len(self.running)}"] += 1
        t0 = time.perf_counter()
        STATE["phase"] = phase
        try:
            return orig(self, *a, **k)
        finally:
            STATE["phase"] = None
            ACC[phase] += time.perf_counter() - t0
            CNT[phase] += 1
    setattr(cls, name, timed)


def _timed_eval(name: str) -> None:
    """The core's evaluations (LocalContext.name), by phase and by model (target or draft)."""
    orig = getattr(context_mod.LocalContext, name)

    def timed(self, tokens, *a, **k):
        t0 = time.perf_counter()
        try:
            return orig(self, tokens, *a, **k)
        finally:
            dt = time.perf_counter() - t0
            phase = STATE.get("phase")
            if phase is not None:
                kind = "target" if id(self) in STATE["targets"] else "draft"
                ACC[f"{phase}_{kind}"] += dt
                CNT[f"{phase}_{kind}_evals"] += 1
                CNT[f"{phase}_{kind}_tokens"] += len(tokens)
    setattr(context_mod.LocalContext, name, timed)


def _instrument(profile: cProfile.Profile | None) -> None:
    for name in ("decode", "eval"):
        _timed_eval(name)
    _timed_phase(sched_mod.Scheduler, "step", "step")
    _timed_phase(sched_mod.Scheduler, "admit", "admit")

    choose = batch_mod.BatchRound._choose

    def recorded_choose(self, decs, caps):
        ks = choose(self, decs, caps)
        STATE["rounds"].append(max(ks, default=0))
        STATE["batch_round"] = self
        return ks
    batch_mod.BatchRound._choose = recorded_choose

    single = cost_model.DraftPolicy.choose

    def recorded_single(self, k_cap, n_catch_up=0):
        k = single(self, k_cap, n_catch_up)
        STATE["single"].append(k)
        STATE["single_policy"] = self
        return k
    cost_model.DraftPolicy.choose = recorded_single

    prefill = decoder_mod.Decoder.prefill

    def counted_prefill(self, prompt, *a, **k):
        CNT["prompts_draft_later"] += bool(k.get("draft_later"))
        CNT["prompts_target_later"] += bool(k.get("target_later"))
        return prefill(self, prompt, *a, **k)
    decoder_mod.Decoder.prefill = counted_prefill

    if hasattr(worker_mod, "Outbox"):
        flush = worker_mod.Outbox.flush

        def counted_flush(self):
            if self._items:
                CNT["wakeups"] += 1
                CNT["emits"] += len(self._items)
            return flush(self)
        worker_mod.Outbox.flush = counted_flush
    else:                                 # a tree from before the outbox: a wake-up per event
        emit = worker_mod.Job.emit

        def counted_emit(self, kind, value):
            CNT["wakeups"] += 1
            CNT["emits"] += 1
            return emit(self, kind, value)
        worker_mod.Job.emit = counted_emit

    if profile is not None:
        run_forever = worker_mod.Worker._run_forever

        def profiled(self):
            profile.enable()
            try:
                return run_forever(self)
            finally:
                profile.disable()
        worker_mod.Worker._run_forever = profiled


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each thread of this process, by name."""
    out: dict[str, float] = defaultdict(float)
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = "main (event loop)" if int(tid) == os.getpid() else name
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return dict(out)


def _split(phase: str, n: int, n_tokens: int) -> None:
    total = ACC[phase]
    py = total - ACC[f"{phase}_target"] - ACC[f"{phase}_draft"]
    for name, v in ((f"{phase} total", total), ("  target evals (core)", ACC[f"{phase}_target"]),
                    ("  draft evals (core)", ACC[f"{phase}_draft"]), ("  Python (the rest)", py)):
        print(f"{name:<28}{1e3 * v / max(n, 1):>8.2f}{100 * v / max(total, 1e-9):>7.1f}%"
              f"{1e3 * v / max(n_tokens, 1):>10.3f}")


def _report(res: dict, cpu0: dict, cpu1: dict, profile, n_tokens: int) -> None:
    print(f"package: {os.path.dirname(context_mod.__file__)}")
    print(f"load: {res['tokens']} tokens in {res['wall_s']} s = {res['tokens_per_s']} t/s, "
          f"p50 {res['p50_ms']} ms, p95 {res['p95_ms']} ms, answered {res['answered']}/{res['requests']}")
    running = ", ".join(f"{k[11:]} running: {v}" for k, v in sorted(CNT.items()) if k.startswith("steps_with_"))
    print(f"rounds: {CNT['step']} ({running}); target evals {CNT['step_target_evals']} "
          f"({CNT['step_target_tokens'] / max(CNT['step_target_evals'], 1):.2f} tokens each), draft evals "
          f"{CNT['step_draft_evals']}; prompts admitted {CNT['admit']}; "
          f"events to the event loop {CNT['emits']} in {CNT['wakeups']} wake-ups")
    print(f"{'':<28}{'ms each':>8}{'share':>8}{'ms/token':>10}   (each: per round, per prompt)")
    _split("step", CNT["step"], n_tokens)
    _split("admit", CNT["admit"], n_tokens)
    print(f"prompts evaluated with a round's batch: {CNT['prompts_target_later']}/{CNT['admit']}; "
          f"left to the draft's catch-up: {CNT['prompts_draft_later']}/{CNT['admit']}")
    inside = ACC["step"] + ACC["admit"]
    print(f"wall {res['wall_s']} s, of which the worker in rounds and prompts {inside:.2f} s "
          f"({100 * inside / res['wall_s']:.0f}%)")
    ks = STATE["single"]
    if ks:
        pol = STATE["single_policy"]
        tc = ", ".join(f"{n}: {1e3 * c:.1f}" for n, c in sorted(pol.c_target.items()))
        print(f"one-sequence rounds' draft length k: { {k: ks.count(k) for k in sorted(set(ks))} }; the last "
              f"policy: alpha {pol.alpha:.2f} (bound {pol.alpha_upper:.2f}), draft ms/token "
              f"{1e3 * (pol.c_draft or 0):.1f}, target ms by batch size {{{tc}}}")
    ks = STATE["rounds"]
    if ks:
        hist = {k: ks.count(k) for k in sorted(set(ks))}
        print(f"batch rounds' draft length k: {hist}")
        for key, pol in STATE["batch_round"]._policies.items():
            st = pol.stats
            tc = ", ".join(f"{n}: {1e3 * c:.1f}" for n, c in sorted(st.target_costs.items()))
            dc = ", ".join(f"{n}: {1e3 * c:.1f}" for n, c in sorted(st.draft_step_costs.items()))
            print(f"cost model of {key}: target ms by batch size {{{tc}}}; draft step ms by sequences {{{dc}}}")
    print("thread CPU seconds during the load:")
    for name in sorted(cpu1, key=lambda n: -(cpu1[n] - cpu0.get(n, 0))):
        d = cpu1[name] - cpu0.get(name, 0)
        if d > 0.05:
            print(f"  {name:<24}{d:>8.2f}")
    if profile is not None:
        s = io.StringIO()
        pstats.Stats(profile, stream=s).sort_stats(os.environ.get("PROFILE_SORT", "tottime")).print_stats(int(os.environ.get("PROFILE_N", "30")))
        print(s.getvalue())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--tree", help="profile the package of this source tree (its core: PYLLAMASPEC_LIBRARY)")
    ap.add_argument("--cprofile", action="store_true", help="also profile the worker thread's Python")
    ap.add_argument("--ids", action="store_true", help="the questions' prompt ids on /completion (server_load --ids)")
    ap.add_argument("--chat-template", help="with --ids: the template that renders the questions (a built-in name)")
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    profile = cProfile.Profile() if a.cprofile else None
    _instrument(profile)
    port = server_load.free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["-m", a.model] + (["-md", a.model_draft] if a.model_draft else []) + ["-np", str(a.parallel),
                                                                                    "--port", str(port), *extra]
    out: dict = {}
    ids = server_load.prompt_ids(a.model, a.chat_template) if a.ids else None

    def load() -> None:
        try:
            server_load.wait_up(url, None)
            server_load.chat(url, "Hi", 4)
            ACC.clear(), CNT.clear()
            cpu0 = _thread_cpu()
            out["res"] = server_load.run(url, a.clients, a.requests, a.max_tokens, ids)
            out["cpu"] = (cpu0, _thread_cpu())
        finally:
            os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=load, daemon=True).start()
    from pyllamaspec.frontends.server.main import main as serve
    serve(argv)
    if "res" not in out:
        return 1
    res = out["res"]
    _report(res, *out["cpu"], profile, res["tokens"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
