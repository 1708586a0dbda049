"""Before/after in one run: the same benchmark from two source trees (each with its own built
core), alternating rounds, medians.

    python scripts/bench_trees.py --tree before=/path/old:/path/old/build/libpyllamaspec.so \
        --tree after=.:build/dev/libpyllamaspec.so -m TARGET.gguf [-md DRAFT.gguf|ngram] [-t 2] [-r 7]

Each round runs `python -m pyllamaspec.bench` once per tree, in a fresh process, the order
rotating (a machine that slows within a round favours neither): with -md, plain and speculative
greedy decoding of the bench's chat prompt (--rounds 1 inside), else ppN/tgN (-p/-n, 3 runs).
A tree is LABEL=SOURCE_DIR:LIBRARY (SOURCE_DIR goes first on PYTHONPATH)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def run_once(src: str, lib: str, args: list[str]) -> object:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src), PYLLAMASPEC_LIBRARY=os.path.abspath(lib))
    p = subprocess.run([sys.executable, "-m", "pyllamaspec.bench", *args, "--json"], capture_output=True,
                       text=True, env=env, cwd=os.path.abspath(src))
    if p.returncode != 0:
        raise SystemExit(f"{src}: bench failed: {p.stderr[-2000:]}")
    out = p.stdout.strip()
    return json.loads(out[min(i for i in (out.find("["), out.find("{")) if i >= 0):])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, metavar="LABEL=SRC:LIB")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-p", "--n-prompt", type=int, default=64)
    a = ap.parse_args()
    trees = []
    for t in a.tree:
        label, _, rest = t.partition("=")
        src, _, lib = rest.partition(":")
        trees.append((label, src, lib))
    if a.model_draft:
        args = ["-m", a.model, "-md", a.model_draft, "-t", str(a.threads), "-n", str(a.n_gen), "--rounds", "1"]
        keys = ("plain_tps", "spec_tps")
    else:
        args = ["-m", a.model, "-t", str(a.threads), "-p", str(a.n_prompt), "-n", str(a.n_gen), "-r", "3"]
        keys = (f"pp{a.n_prompt}", f"tg{a.n_gen}")
    runs = {label: {k: [] for k in keys} for label, _, _ in trees}
    extra = {label: [] for label, _, _ in trees}
    for i in range(a.rounds):
        order = trees[i % len(trees):] + trees[:i % len(trees)]
        for label, src, lib in order:
            got = run_once(src, lib, args)
            if a.model_draft:
                for k in keys:
                    runs[label][k].append(got[k])
                extra[label].append((got["acceptance"], got["tokens_per_round"], got["runs_differing"]))
            else:
                for row in got:
                    runs[label][row["test"]].extend(row["runs"])
    print(f"{os.path.basename(a.model)}" + (f" + {os.path.basename(a.model_draft)}" if a.model_draft else "")
          + f", {a.threads} threads, medians of {a.rounds} alternated rounds")
    base = trees[0][0]
    for label, _, _ in trees:
        cells = ", ".join(f"{k} {statistics.median(runs[label][k]):.1f} t/s"
                          + (f" ({statistics.median(runs[label][k]) / statistics.median(runs[base][k]):.3f}x {base})"
                             if label != base else "") for k in keys)
        more = ""
        if a.model_draft:
            acc, tpr, diff = zip(*extra[label])
            more = (f"; acceptance {statistics.median(acc):.2f}, {statistics.median(tpr):.2f} tokens/round, "
                    f"runs differing from plain {sum(diff)}")
        print(f"  {label:>8}: {cells}{more}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
