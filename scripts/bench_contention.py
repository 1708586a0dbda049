"""Speed under CPU contention: plain and speculative (n-gram) greedy decoding with and without a
competing load on the machine, for one or more builds of the core, in one run with alternating
rounds (medians). ggml's CPU threads wait for one another after every graph node; with more
runnable threads than cores a waiting thread holds a core its sibling needs, and a 2-thread
evaluation collapsed 60x on a 2-core machine while another process used the cores (issue 22).

    python scripts/bench_contention.py -m smollm2.gguf -t 2 -n 32 --rounds 5 \\
        --lib before=/path/to/old/libpyllamaspec.so --lib after=build/dev/libpyllamaspec.so
    python scripts/bench_contention.py ... --load-procs 2          # busy processes of the load (default: cores)
    python scripts/bench_contention.py ... --env nocap=after:PYLLAMASPEC_THREAD_CAP=0   # a build, with a setting

The load is --load-procs processes spinning in pure Python (nothing to share but the cores); each
measurement is a fresh process that loads the model, warms up, then times plain decoding and
n-gram speculation (the "rewrite this code" prompt, where drafts are accepted) of -n tokens.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
import pyllamaspec
from pyllamaspec import Model
path, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
code = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n"
prompt = "Rewrite this code with the variable total renamed to acc:\n" + code * 3 + "\nThe rewritten code:\n" + code
out = {}
with Model(path, n_ctx=1024, n_threads=threads) as m:
    pyllamaspec.generate(prompt, m, max_tokens=4, temperature=0)          # warm-up
    for kind, draft in (("plain", None), ("spec", "ngram")):
        t0 = time.perf_counter()
        r = pyllamaspec.generate(prompt, m, draft, max_tokens=n, temperature=0, cache_prompt=False)
        out[kind] = len(r.tokens) / (time.perf_counter() - t0)
print(json.dumps(out))
"""

SPIN = "while True: pass"


def measure(lib: str, env_extra: dict, model: str, threads: int, n: int, timeout: float) -> dict:
    env = dict(os.environ, PYLLAMASPEC_LIBRARY=lib, PYTHONPATH=str(ROOT), **env_extra)
    try:
        out = subprocess.run([sys.executable, "-c", WORKER, model, str(threads), str(n)], env=env,
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
    except subprocess.TimeoutExpired:
        return {"plain": 0.0, "spec": 0.0}          # slower than n tokens in `timeout` s
    return json.loads(out.splitlines()[-1])


class Load:
    """n busy processes while in the with-block."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(self.n)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def parse_builds(args) -> dict[str, tuple[str, dict]]:
    builds = {}
    for spec in args.lib or [f"this={os.environ.get('PYLLAMASPEC_LIBRARY', ROOT / 'build/dev/libpyllamaspec.so')}"]:
        name, lib = spec.split("=", 1)
        builds[name] = (str(pathlib.Path(lib).resolve()), {})
    for spec in args.env or []:          # NAME=BUILD:VAR=VALUE
        name, rest = spec.split("=", 1)
        base, setting = rest.split(":", 1)
        var, value = setting.split("=", 1)
        builds[name] = (builds[base][0], {var: value})
    return builds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=32, help="tokens per generation")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lib", action="append", help="NAME=PATH of a libpyllamaspec build (repeatable)")
    ap.add_argument("--env", action="append", help="NAME=BUILD:VAR=VALUE: build BUILD run with VAR set, named NAME")
    ap.add_argument("--load-procs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", type=pathlib.Path)
    args = ap.parse_args()
    builds = parse_builds(args)
    results: dict[tuple[str, str, str], list[float]] = {}
    for r in range(args.rounds):
        names = list(builds)[r % len(builds):] + list(builds)[:r % len(builds)]
        for loaded in ((False, True) if r % 2 == 0 else (True, False)):
            for name in names:
                lib, env = builds[name]
                if loaded:
                    with Load(args.load_procs):
                        got = measure(lib, env, args.model, args.threads, args.n, args.timeout)
                else:
                    got = measure(lib, env, args.model, args.threads, args.n, args.timeout)
                for kind, tps in got.items():
                    results.setdefault((name, kind, "loaded" if loaded else "idle"), []).append(tps)
                print(f"round {r + 1} {name:>12} {'loaded' if loaded else 'idle':>6}: "
                      + ", ".join(f"{k} {v:.1f} t/s" for k, v in got.items()), flush=True)
    print_table(builds, results, args)
    if args.json:
        args.json.write_text(json.dumps({" ".join(k): v for k, v in results.items()}, indent=1) + "\n")


def print_table(builds, results, args) -> None:
    print(f"\n{args.threads} threads, {args.n} tokens, medians of {args.rounds} alternated rounds; "
          f"load: {args.load_procs} busy processes on {os.cpu_count()} cores")
    print(f"{'build':>12} {'decoding':>8} {'idle t/s':>9} {'loaded t/s':>11} {'slowdown':>9}")
    for name in builds:
        for kind in ("plain", "spec"):
            idle = statistics.median(results[(name, kind, "idle")])
            busy = statistics.median(results[(name, kind, "loaded")])
            slow = f"{idle / busy:.1f}x" if busy > 0 else "timeout"
            print(f"{name:>12} {kind:>8} {idle:9.1f} {busy:11.1f} {slow:>9}")


if __name__ == "__main__":
    main()
