"""The benchmark's other engines, timed in the same run as this build, and fidelity against
llama.cpp's reference outputs.

Engines: another build of this core (`--vs-lib LIB`: the same benchmark run by a subprocess
with PYLLAMASPEC_LIBRARY=LIB, e.g. a build on the previous ggml pin), llama.cpp's own
`llama-bench` binary (`--llama-bench PATH`), and llama.cpp through llama-cpp-python's low-level
API (`--llama-cpp PYTHON`, an interpreter of another environment; see llamacpp_probe.py).
Rounds alternate between the engines, the order rotating, so a machine that slows down within
a round favours none; every figure is a median over all rounds' runs.

Fidelity (`--fidelity`): the reference files (tests/data/reference/gen_*.jsonl, llama.cpp's
top-5 logits at every prompt position and its 32 greedy tokens) are matched to a model by
tokenization; the row reports the median and max |our logit - llama.cpp's| over those entries,
how often our argmax is theirs, and how many greedy tokens agree before the first difference.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from ..engine.model import Model

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "reference"

# an engine times one model: (path, threads, n_prompt, n_gen, reps) -> {"pp": [t/s], "tg": [t/s]}
Engine = Callable[[str, int, int, int, int], dict]


def _run_json(cmd: list[str], env: dict | None = None, what: str = "") -> object:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{what or cmd[0]} failed: {proc.stderr[-2000:]}")
    out = proc.stdout.strip()
    return json.loads(out[out.index("["):] if out.lstrip()[:1] != "{" else out)


def llama_cpp_probe(python: str, *args) -> dict:
    """Runs llamacpp_probe.py with `python` (an interpreter with llama-cpp-python); its JSON."""
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_probe.py")
    proc = subprocess.run([python, probe, *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"llama.cpp probe failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def llama_cpp_python(python: str) -> Engine:
    return lambda path, t, p, n, r: llama_cpp_probe(python, path, t, p, n, r)


def llama_bench(binary: str, use_mmap: bool | None = None) -> Engine:
    """llama.cpp's llama-bench: its own pp/tg loop, flash attention on as ours is."""
    def run(path, threads, n_prompt, n_gen, reps):
        rows = _run_json([binary, "-m", path, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen),
                          "-r", str(reps), "-fa", "1", "-lm", {None: "auto", True: "mmap", False: "none"}[use_mmap],
                          "-o", "json"],
                         what="llama-bench")
        out = {"pp": [], "tg": []}
        for row in rows:
            out["pp" if row["n_prompt"] else "tg"] += list(row["samples_ts"])
        return out
    return run


def split_label(arg: str) -> tuple[str, str]:
    """--vs-lib [LABEL=]LIB: (label, library); the label defaults to the library's folder."""
    label, sep, lib = arg.partition("=")
    if not sep:
        lib, label = arg, os.path.basename(os.path.dirname(os.path.abspath(arg))) or arg
    return label, lib


def other_build(library: str, use_mmap: bool | None = None) -> Engine:
    """This benchmark in a subprocess that loads another build of the core."""
    env = dict(os.environ, PYLLAMASPEC_LIBRARY=os.path.abspath(library))

    def run(path, threads, n_prompt, n_gen, reps):
        rows = _run_json([sys.executable, "-m", "pyllamaspec.bench", "-m", path, "-t", str(threads),
                          "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "--json"]
                         + {None: [], True: ["--mmap"], False: ["--no-mmap"]}[use_mmap], env, library)
        return {r["test"][:2]: r["runs"] for r in rows}
    return run


def other_build_info(library: str) -> str:
    env = dict(os.environ, PYLLAMASPEC_LIBRARY=os.path.abspath(library))
    return subprocess.run([sys.executable, "-c", "import pyllamaspec; print(pyllamaspec.system_info())"],
                          capture_output=True, text=True, env=env).stdout.strip()


def compare(paths: list[str], ours: Engine, engines: dict[str, Engine], threads: int, n_prompt: int,
            n_gen: int, reps: int, rounds: int, verbose: bool = True) -> list[dict]:
    """pp/tg of each model by this build and each engine, `rounds` alternating rounds of `reps`
    runs each; per test the medians and this build's ratio to each engine."""
    names = ["ours", *engines]
    fns = {"ours": ours, **engines}
    rows = []
    for path in paths:
        runs = {e: {"pp": [], "tg": []} for e in names}
        for i in range(rounds):
            order = names[i % len(names):] + names[:i % len(names)]
            for e in order:
                got = fns[e](path, threads, n_prompt, n_gen, reps)
                for k in ("pp", "tg"):
                    runs[e][k] += got.get(k, [])
        for test, n in (("pp", n_prompt), ("tg", n_gen)):
            if not n:
                continue
            row = dict(model=os.path.basename(path), test=f"{test}{n}",
                       **{e: statistics.median(runs[e][test]) for e in names},
                       runs={e: runs[e][test] for e in names})
            for e in engines:
                row[f"ours/{e}"] = row["ours"] / row[e]
            rows.append(row)
            if verbose:
                cells = " | ".join(f"{row[e]:11.1f}" for e in names)
                ratios = " | ".join(f"{row[f'ours/{e}']:12.3f}" for e in engines)
                print(f"| {row['model'][:32]:<32} | {row['test']:<5} | {cells} | {ratios} |", flush=True)
    return rows


def print_compare_header(engines: list[str]) -> None:
    names = ["ours", *engines]
    print(f"| {'model':<32} | {'test':<5} | " + " | ".join(f"{n[:11]:>11}" for n in names) + " | "
          + " | ".join(f"{'/' + n[:11]:>12}" for n in engines) + " |")
    print("|" + "|".join("-" * w for w in [34, 7] + [13] * len(names) + [14] * len(engines)) + "|")


# ---- fidelity ------------------------------------------------------------------------------------

def reference_for(m: Model, ref_dir: Path = REFERENCE_DIR) -> list[dict] | None:
    """The gen_*.jsonl records whose prompts this model's tokenizer turns into their ids."""
    for f in sorted(Path(ref_dir).glob("gen_*.jsonl")):
        refs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        if refs and all(max(r["ids"]) < m.n_vocab and m.tokenize(r["text"]) == r["ids"] for r in refs):
            return refs
    return None


def fidelity(m: Model, refs: list[dict]) -> dict:
    """Our logits against llama.cpp's on its reference prompts (all prompt tokens in one batch,
    as it evaluated them) and our greedy continuation against its 32 tokens."""
    deltas, agree, total, same = [], 0, 0, []
    for r in refs:
        m.clear()
        lg = m.eval(r["ids"])
        for i, top in enumerate(r["prompt_top"]):
            deltas += [abs(float(lg[i, t]) - v) for t, v in top]
            agree += int(lg[i].argmax()) == top[0][0]
            total += 1
        tok, n = int(lg[-1].argmax()), 0
        for step in r["gen"]:
            if tok != step["id"]:
                break
            n += 1
            tok = int(m.eval([tok], logits="last")[0].argmax())
        same.append(n)
    return dict(median=float(np.median(deltas)), max=float(np.max(deltas)), entries=len(deltas),
                argmax_agree=agree / total, greedy_same=same, greedy_of=[len(r["gen"]) for r in refs])


def fidelity_rows(paths: list[str], threads: int, ref_dir: Path = REFERENCE_DIR,
                  n_gpu_layers: int = 0) -> list[dict]:
    rows = []
    for path in paths:
        # the references were made on llama.cpp's default F16 cache: the same here
        with Model(path, n_ctx=512, n_threads=threads, n_gpu_layers=n_gpu_layers, type_k="f16", type_v="f16") as m:
            refs = reference_for(m, ref_dir)
            if refs is not None:
                rows.append(dict(model=os.path.basename(path), **fidelity(m, refs)))
    return rows


def other_build_fidelity(library: str, paths: list[str], threads: int) -> list[dict]:
    env = dict(os.environ, PYLLAMASPEC_LIBRARY=os.path.abspath(library))
    cmd = [sys.executable, "-m", "pyllamaspec.bench", "-t", str(threads), "--fidelity", "--json"]
    for p in paths:
        cmd += ["-m", p]
    return _run_json(cmd, env, library)


def print_fidelity(build: str, rows: list[dict]) -> None:
    for r in rows:
        g = sum(r["greedy_same"]), sum(r["greedy_of"])
        print(f"| {build:<10} | {r['model'][:32]:<32} | {r['median']:.4f} | {r['max']:.4f} | "
              f"{100 * r['argmax_agree']:5.1f}% | {g[0]}/{g[1]} |")
