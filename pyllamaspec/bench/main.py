"""Benchmark: prompt processing (ppN) and decoding (tgN) tokens/s, like llama-bench; the
target's cost curve; speculative decoding against plain decoding.

    python -m pyllamaspec.bench -m MODEL.gguf [-m OTHER.gguf] -t 2 [-p 64] [-n 64] [-r 5] [--json]
    python -m pyllamaspec.bench -m MODEL.gguf -t 2 --llama-cpp /path/to/venv/bin/python
    python -m pyllamaspec.bench -m A.gguf -m B.gguf -t 2 --vs-lib OLD/libpyllamaspec.so --llama-bench BIN
    python -m pyllamaspec.bench -m A.gguf -m B.gguf --fidelity [--vs-lib OLD/libpyllamaspec.so]
    python -m pyllamaspec.bench -m MODEL.gguf --curve [--llama-bench BIN] [--plot curve.png]   (bench/curve.py)
    python -m pyllamaspec.bench -m TARGET.gguf -md DRAFT.gguf|ngram [-n 128] [--rounds 5] [--llama-cpp PY]
    python -m pyllamaspec.bench -m TARGET.gguf -md DRAFT.gguf --plot pair.png   (a picture: bench/plot.py)
    python -m pyllamaspec.bench -m TARGET.gguf -md EAGLE3-or-DFLASH-HEAD.gguf [--spec-type ngram-mod,draft-eagle3]
    python -m pyllamaspec.bench -m TARGET.gguf --prompts question.jsonl --spec-type suffix [--per-category 10]
        [--llama-server PATH --llama-server-args='--spec-type ngram-mod'] [--plot tasks.png]   (bench/spec_bench.py)

Other engines time the same models in the same run, alternating rounds with this build, and the
ratios are printed (bench_engines.py): --vs-lib, another build of the core (say, on the previous
ggml pin); --llama-bench, llama.cpp's own benchmark binary; --llama-cpp, an interpreter that has
llama-cpp-python installed (in its own environment), which with -md also replays llama.cpp's
speculative-simple loop on the same pair and prompt. --fidelity compares logits and greedy tokens
with llama.cpp's reference outputs (tests/data/reference), for this build and each --vs-lib.

ppN evaluates N random tokens in one call on an empty cache; tgN evaluates N tokens one call
at a time (each producing logits), as llama-bench does. Each figure is the median of -r
repetitions after one warm-up. The Python overhead of a one-token eval is the wall time of
Model.eval minus the time the core itself reports for it. --curve times one call of n = 1..16
tokens with all logits after 128 tokens of context, beside llama-bench's ppN after as many
(--llama-bench, alternated over --rounds) and a roofline from the measured bandwidth and peak.
-md decodes greedily, plainly and with the drafter in turn, and reports medians, acceptance,
the time split and peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from contextlib import ExitStack, closing
from dataclasses import asdict, dataclass, field

import numpy as np

from ..engine._native import system_info
from ..engine.model import Model
from ..errors import InvalidArgumentError
from ..generation.drafts import open_draft
from . import curve, engines
from .engines import llama_cpp_probe

# The speculative run's default request ("rewrite this code with one change"): an answer
# that repeats much of the prompt, where drafting, by a model or by prompt lookup, can gain most.
SPEC_CODE = (
    'def load_config(path):\n'
    '    with open(path) as f:\n'
    '        data = json.load(f)\n'
    '    if "name" not in data:\n'
    '        raise ValueError("config has no name")\n'
    '    return data\n'
    '\n'
    '\n'
    'def save_config(path, data):\n'
    '    with open(path, "w") as f:\n'
    '        json.dump(data, f, indent=2)\n'
    '\n'
    '\n'
    'def merge_configs(base, override):\n'
    '    result = dict(base)\n'
    '    for key, value in override.items():\n'
    '        result[key] = value\n'
    '    return result\n'
)
SPEC_MESSAGE = ("Rewrite this code with one change: rename the function merge_configs to combine_configs. "
                "Output only the code.\n\n" + SPEC_CODE)

# chat templates by the special token that opens a turn
_TEMPLATES = {"<start_of_turn>": "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n",
              "<|im_start|>": "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"}


def chat_prompt(m: Model, message: str) -> str:
    """`message` as a user turn in the model's chat format (Gemma or ChatML), or as is."""
    for opener, template in _TEMPLATES.items():
        if len(m.tokenize(opener, add_special=False, parse_special=True)) == 1:
            return template.format(message)
    return message


@dataclass
class Result:
    model: str
    file_type: str
    size_mib: float
    params_m: float
    threads: int
    test: str
    tokens_per_s: float            # median
    stdev: float
    runs: list[float] = field(default_factory=list)


def _median_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.median(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def bench_pp(m: Model, n: int, reps: int, rng: np.random.Generator) -> list[float]:
    out = []
    for r in range(reps + 1):
        toks = rng.integers(0, m.n_vocab, n, dtype=np.int32)
        m.clear()
        t0 = time.perf_counter()
        m.eval(toks, logits="last")
        dt = time.perf_counter() - t0
        if r:                                   # the first run warms up
            out.append(n / dt)
    return out


def bench_tg(m: Model, n: int, reps: int, rng: np.random.Generator) -> tuple[list[float], float, float]:
    """Returns t/s per run, and the Python overhead per call (seconds, fraction of the call)."""
    out, overhead, frac = [], [], []
    buf = np.empty((1, m.n_vocab), np.float32)
    for r in range(reps + 1):
        toks = rng.integers(0, m.n_vocab, n, dtype=np.int32)
        m.clear()
        m.perf(reset=True)
        t0 = time.perf_counter()
        for i in range(n):
            m.eval(toks[i:i + 1], logits="last", out=buf)
        dt = time.perf_counter() - t0
        core = m.perf()["t_eval"]
        if r:
            out.append(n / dt)
            overhead.append((dt - core) / n)
            frac.append((dt - core) / dt)
    return out, statistics.median(overhead), statistics.median(frac)


def run(paths: list[str], threads: int, n_prompt: int, n_gen: int, reps: int, n_gpu_layers: int,
        verbose: bool = True, use_mmap: bool | None = None) -> list[Result]:
    results: list[Result] = []
    rng = np.random.default_rng(0)
    for path in paths:
        with Model(path, n_ctx=max(512, n_prompt + n_gen + 8), n_batch=max(512, n_prompt),
                   n_threads=threads, n_gpu_layers=n_gpu_layers, use_mmap=use_mmap) as m:
            i = m.info
            base = dict(model=f"{i.arch} {i.name}".strip(), file_type=i.file_type_name,
                        size_mib=i.size_bytes / 2**20, params_m=i.n_params / 1e6, threads=m.n_threads)
            if n_prompt:
                runs = bench_pp(m, n_prompt, reps, rng)
                results.append(Result(test=f"pp{n_prompt}", tokens_per_s=_median_sd(runs)[0],
                                      stdev=_median_sd(runs)[1], runs=runs, **base))
                if verbose:
                    _print_row(results[-1])
            if n_gen:
                runs, ov, frac = bench_tg(m, n_gen, reps, rng)
                results.append(Result(test=f"tg{n_gen}", tokens_per_s=_median_sd(runs)[0],
                                      stdev=_median_sd(runs)[1], runs=runs, **base))
                if verbose:
                    _print_row(results[-1])
                    print(f"    a one-token eval outside the core's graph compute (Python, the call, the "
                          f"batch's setup): {ov * 1e6:.1f} us ({frac * 100:.2f}% of the call)")
    return results


def ours(n_gpu_layers: int = 0, use_mmap: bool | None = None) -> engines.Engine:
    """This build as a benchmark engine (bench_engines.compare)."""
    def time_model(path, threads, n_prompt, n_gen, reps):
        rng = np.random.default_rng(0)
        with Model(path, n_ctx=max(512, n_prompt + n_gen + 8), n_batch=max(512, n_prompt), n_threads=threads,
                   n_gpu_layers=n_gpu_layers, use_mmap=use_mmap) as m:
            return {"pp": bench_pp(m, n_prompt, reps, rng) if n_prompt else [],
                    "tg": bench_tg(m, n_gen, reps, rng)[0] if n_gen else []}
    return time_model


def bench_tokenizer(paths: list[str], reps: int, verbose: bool = True) -> list[Result]:
    """Tokenization MB/s of each file's tokenizer (no weights loaded): the median of reps runs
    over ~1 MB of English after one warm-up run."""
    from ..engine.vocab import Tokenizer, tokenizer_throughput
    out = []
    for path in paths:
        with Tokenizer(path) as tok:
            mbs = tokenizer_throughput(tok, repeat=reps)
            info = tok.vocab_info
            out.append(Result(model=path.rsplit("/", 1)[-1], file_type=info.type, size_mib=0.0,
                              params_m=0.0, threads=1, test="tokenize MB/s", tokens_per_s=mbs, stdev=0.0))
            if verbose:
                print(f"tokenize {out[-1].model}: {mbs:.1f} MB/s ({info.type}, {info.n_tokens} tokens, 1 thread)")
    return out


def cost_curve(path: str, threads: int, n_max: int = 16, reps: int = 5) -> list[tuple[int, float]]:
    """The target's time (ms, median) to evaluate n = 1..n_max tokens in one call with all
    logits, after 128 tokens of context: the curve speculation lives on (bench/curve.py)."""
    return sorted(curve.ours(path, threads, range(1, n_max + 1), reps).items())


def bench_speculative(target_path: str, draft: str | None, message: str, threads: int, n_gen: int, n_draft: int,
                      p_min: float | None, rounds: int, adaptive: bool, llama_cpp: str | None = None,
                      verbose: bool = True, chat: bool = True, spec_type: str | None = None) -> dict:
    """Plain greedy decoding of the target against speculative decoding with `draft` (a model or
    head path, or "ngram") and llama.cpp's `spec_type` names, alternating `rounds` times in one
    process; medians, and the speculative runs' acceptance, tokens per round and time split. With
    `llama_cpp` (an interpreter with llama-cpp-python) each round also times llama.cpp's plain
    decoding and its speculative-simple loop on the same pair, prompt and draft settings."""
    import resource

    from ..generation.generate import generate
    with ExitStack() as stack:
        target = stack.enter_context(Model(target_path, n_ctx=2048, n_threads=threads))
        d = dm = open_draft(draft, target, stack, n_ctx=2048, n_threads=threads)
        ids = target.tokenize(chat_prompt(target, message) if chat else message, parse_special=True)
        plain_tps, spec_tps, stats, same, lc_plain, lc_spec, lc_acc, lc_same = [], [], [], [], [], [], [], []
        for i in range(rounds):
            # alternate which goes first, so a machine that slows or speeds up within a round
            # favours neither
            runs = [lambda: generate(ids, target, max_tokens=n_gen, temperature=0),
                    lambda: generate(ids, target, d, max_tokens=n_gen, temperature=0, n_draft=n_draft,
                                     p_min=p_min, adaptive=adaptive, spec_type=spec_type)]
            r, s = [f() for f in runs] if i % 2 == 0 else [f() for f in runs[::-1]][::-1]
            plain_tps.append(r.stats.generate_tps)
            same.append(_first_difference(s.tokens, r.tokens))
            spec_tps.append(s.stats.generate_tps)
            stats.append(s.stats)
            if llama_cpp and isinstance(dm, Model):
                got = llama_cpp_probe(llama_cpp, "--spec", target_path, draft, target.n_threads, n_gen, n_draft,
                                      0.75 if p_min is None else p_min, ",".join(map(str, ids)))
                lc_plain.append(got["plain_tps"])
                lc_spec.append(got["spec_tps"])
                lc_acc.append(got["accepted"] / max(1, got["drafted"]))
                lc_same.append(got["tokens"] == r.tokens)
        st = stats[len(stats) // 2]
        kv = sum(_kv_bytes(m) for m in (target, dm) if isinstance(m, Model))
        files = sum(os.path.getsize(p) for p in (target_path, draft) if p not in (None, "ngram"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    row = dict(target=os.path.basename(target_path), draft=os.path.basename(draft or spec_type), n_gen=n_gen,
               n_prompt=len(ids), n_draft=n_draft, p_min=p_min, adaptive=adaptive,
               plain_tps=statistics.median(plain_tps), spec_tps=statistics.median(spec_tps),
               plain_runs=plain_tps, spec_runs=spec_tps,
               acceptance=st.acceptance_rate, tokens_per_round=st.mean_accepted, rounds=st.rounds,
               t_draft=st.t_draft / st.t_generate, t_target=st.t_target / st.t_generate,
               t_loop=st.t_loop / st.t_generate, peak_rss=peak, files_plus_kv=files + kv,
               first_difference=min((x for x in same if x is not None), default=None),
               runs_differing=sum(x is not None for x in same), draft_mode=st.draft_mode)
    row["ratio"] = row["spec_tps"] / row["plain_tps"]
    if lc_spec:
        row.update(llama_cpp_plain_tps=statistics.median(lc_plain), llama_cpp_spec_tps=statistics.median(lc_spec),
                   llama_cpp_acceptance=statistics.median(lc_acc), llama_cpp_same_tokens=all(lc_same),
                   llama_cpp_plain_runs=lc_plain, llama_cpp_spec_runs=lc_spec)
        row["spec_vs_llama_cpp_spec"] = row["spec_tps"] / row["llama_cpp_spec_tps"]
        row["plain_vs_llama_cpp_plain"] = row["plain_tps"] / row["llama_cpp_plain_tps"]
    if verbose:
        print(f"{row['target']} + {row['draft']}: {len(ids)}-token prompt, {n_gen} tokens, greedy, "
              f"n_draft {n_draft}, p_min {'auto' if p_min is None else p_min}, {'cost model' if adaptive else 'fixed draft length'}; "
              f"medians of {rounds}" + (f"; {st.draft_mode} (counts in target tokens)" if st.draft_mode else ""))
        print(f"plain {row['plain_tps']:.1f} t/s, speculative {row['spec_tps']:.1f} t/s, ratio {row['ratio']:.3f}; "
              f"acceptance {row['acceptance']:.2f}, {row['tokens_per_round']:.2f} tokens/round; time: draft "
              f"{100 * row['t_draft']:.1f}%, target {100 * row['t_target']:.1f}%, python loop {100 * row['t_loop']:.1f}%")
        if lc_spec:
            print(f"llama.cpp: plain {row['llama_cpp_plain_tps']:.1f} t/s, speculative-simple "
                  f"{row['llama_cpp_spec_tps']:.1f} t/s (acceptance {row['llama_cpp_acceptance']:.2f}); "
                  f"ours/theirs: plain {row['plain_vs_llama_cpp_plain']:.3f}, speculative "
                  f"{row['spec_vs_llama_cpp_spec']:.3f}; same tokens: {row['llama_cpp_same_tokens']}")
        diff = row["first_difference"]
        print("greedy output identical to plain decoding in every run" if diff is None else
              f"greedy output differs from plain decoding in {row['runs_differing']} of {rounds} runs, from "
              f"token {diff} on (a near-tie that batched and one-token evaluation round differently)")
        print(f"peak RSS {peak / 2**20:.0f} MiB; model files + KV caches {row['files_plus_kv'] / 2**20:.0f} MiB "
              f"(ratio {peak / row['files_plus_kv']:.2f})")
    return row


def _first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where a and b differ, or None if they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _kv_bytes(m: Model) -> int:
    i = m.info
    return 2 * i.n_layer * m.n_ctx * i.n_head_kv * (i.n_embd_head_k + i.n_embd_head_v)   # f16 cells


def _print_header() -> None:
    print(f"| {'model':<36} | {'type':>6} | {'size MiB':>8} | {'params M':>8} | {'thr':>3} | "
          f"{'test':>6} | {'t/s':>16} |")
    print("|" + "|".join("-" * w for w in (38, 8, 10, 10, 5, 8, 18)) + "|")


def _print_row(r: Result) -> None:
    print(f"| {r.model[:36]:<36} | {r.file_type:>6} | {r.size_mib:8.1f} | {r.params_m:8.1f} | "
          f"{r.threads:3d} | {r.test:>6} | {r.tokens_per_s:8.1f} ± {r.stdev:5.1f} |", flush=True)


def plot_pair(a: argparse.Namespace) -> int:
    """--plot: measure the pair (bench/plot.py) and draw it."""
    from . import plot
    if not a.model_draft or a.model_draft == "ngram":
        print("error: --plot needs a draft model (-md DRAFT.gguf)", file=sys.stderr)
        return 2
    plot._check_matplotlib()
    ids_of = lambda t: t.tokenize(a.prompt if a.raw_prompt else chat_prompt(t, a.prompt), parse_special=True)  # noqa: E731
    m = plot.measure(a.model[0], a.model_draft, ids_of, a.threads, a.n_gen or 64, a.rounds, a.draft_max)
    plot.draw(m, a.plot)
    fixed = ", ".join(f"k={k}: {v:.1f}" for k, v in m.fixed.items())
    print(f"{m.label}: plain {m.plain:.1f} t/s; fixed {fixed}; adaptive {m.adaptive:.1f} t/s "
          f"({m.adaptive / m.plain:.2f}x); the cost model expects k = {m.chosen} to pay best "
          f"(medians of {a.rounds} rounds) -> {a.plot}")
    return 0


def bench_prompts(a: argparse.Namespace) -> int:
    """--prompts: Spec-Bench's questions per task (bench/spec_bench.py); one engine of ours per
    --spec-type (or -md alone), one llama-server per --llama-server-args."""
    from . import spec_bench
    if a.plot:
        from .plot import _check_matplotlib
        _check_matplotlib()
    questions = spec_bench.load_prompts(a.prompts, a.per_category)
    n_gen = a.n_gen or 64
    kinds = a.spec_types or ([None] if a.model_draft else [])
    if sum("suffix" in (k or "") or a.model_draft == "suffix" for k in kinds) > 1:
        raise InvalidArgumentError("one suffix engine a run: suffix drafters of one target share what they learn")
    with ExitStack() as stack:
        target = stack.enter_context(Model(a.model[0], n_ctx=a.ctx_size, n_threads=a.threads))
        draft = open_draft(a.model_draft, target, stack, spec_type=kinds[0] if kinds else None,
                           n_ctx=a.ctx_size, n_threads=a.threads)
        tmpl = {"chat_template": a.chat_template} if a.chat_template else {}
        engines = {"plain": spec_bench.Ours(target, None, n_gen, **tmpl)}
        for k in kinds:
            engines[k or os.path.basename(str(a.model_draft))] = spec_bench.Ours(
                target, draft, n_gen, spec_type=k, n_draft=a.draft_max, p_min=a.draft_p_min,
                adaptive=not a.no_adaptive, **tmpl)
        # llama-server takes a built-in template's name in its non-Jinja path (with Jinja, the
        # name would be the template's text)
        ls_tmpl = f" --no-jinja --chat-template {shlex.quote(a.chat_template)}" if a.chat_template else ""
        for args in a.llama_server_args or [""]:
            if a.llama_server:
                name = "llama-server" + (f" {args}" if len(a.llama_server_args) > 1 else "")
                engines[name] = stack.enter_context(closing(spec_bench.LlamaServer(
                    a.llama_server, a.model[0], a.threads, a.ctx_size, n_gen, args + ls_tmpl)))
        progress = None if a.json else \
            lambda r, i: print(f"\rround {r + 1}/{a.rounds}, question {i + 1}/{len(questions)}", end="",
                               file=sys.stderr, flush=True)
        run = spec_bench.measure(questions, engines, a.rounds, progress)
    table = spec_bench.rows(run, questions, a.rounds)
    label = ", ".join(e for e in engines if e != "plain" and e not in run.servers)
    if a.json:
        json.dump(table, sys.stdout, indent=1)
        print()
    else:
        print(f"\n{os.path.basename(a.model[0])}, ours: {label or 'plain only'}; {len(questions)} questions, "
              f"-n {n_gen}, greedy, medians of {a.rounds} rounds")
        spec_bench.print_table(table, run)
    if a.plot:
        spec_bench.draw(table, list(engines), a.plot, f"{os.path.basename(a.model[0])}: {label or 'plain'}")
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pyllamaspec.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", required=True, help="GGUF model (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    ap.add_argument("-p", "--n-prompt", type=int, default=64)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0)
    ap.add_argument("--mmap", dest="mmap", action="store_true", default=None,
                    help="weights mapped, by every engine (llama-bench: -lm mmap, its default on a CPU)")
    ap.add_argument("--no-mmap", dest="mmap", action="store_false",
                    help="weights read into memory, by every engine (llama-bench: -lm none); with neither, "
                         "each engine's default (ours: engine/load_mode.py)")
    ap.add_argument("--tokenizer", action="store_true",
                    help="also measure tokenization throughput (MB/s, one thread, ~1 MB of English)")
    ap.add_argument("--llama-cpp", metavar="PYTHON",
                    help="an interpreter with llama-cpp-python: compare with llama.cpp in the same run")
    ap.add_argument("--llama-bench", metavar="PATH", help="llama.cpp's llama-bench binary: compare in the same run")
    ap.add_argument("--vs-lib", metavar="[LABEL=]LIB", action="append", default=[],
                    help="another build of the core (libpyllamaspec.so): compare in the same run (repeatable)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds for the comparisons")
    ap.add_argument("--fidelity", action="store_true",
                    help="logits and greedy tokens against llama.cpp's reference outputs (and --vs-lib's)")
    ap.add_argument("--reference", default=str(engines.REFERENCE_DIR), help="folder of llama.cpp's gen_*.jsonl")
    ap.add_argument("-md", "--model-draft", help="speculative run: draft model or EAGLE-3 / DFlash head, or "
                                                "'ngram' (prompt lookup)")
    ap.add_argument("--spec-type", dest="spec_types", action="append", default=[],
                    help="speculative run: llama.cpp's --spec-type names (default: what -md is); with --prompts "
                         "repeatable, an engine each (--spec-type suffix --spec-type ngram-mod)")
    ap.add_argument("--prompt", default=SPEC_MESSAGE,
                    help="user message of the speculative run (put in the model's chat format)")
    ap.add_argument("--raw-prompt", action="store_true", help="use --prompt as it is, without the chat format")
    ap.add_argument("--draft-max", type=int, default=16, help="as llama.cpp's --draft-max")
    ap.add_argument("--draft-p-min", type=float, default=None,
                    help="as llama.cpp's --draft-p-min (default: ours decides per token, llama.cpp's side 0.75)")
    ap.add_argument("--no-adaptive", action="store_true", help="speculative run with a fixed draft length")
    ap.add_argument("--curve", action="store_true", help="the target's cost of n = 1..16 tokens in one call "
                    "(with --llama-bench: llama-bench's ppN beside it; --plot: drawn)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--prompts", metavar="FILE.jsonl", help="Spec-Bench's questions ({question_id, category, "
                    "turns}): per task tokens/s of plain decoding and of each -md / --spec-type, speed-up, "
                    "tokens per round")
    ap.add_argument("--per-category", type=int, default=0, help="with --prompts: N questions of each task, evenly "
                    "spaced in the file (0: all)")
    ap.add_argument("-c", "--ctx-size", type=int, default=4096, help="with --prompts: the context size")
    ap.add_argument("--chat-template", metavar="NAME", help="with --prompts: a built-in chat template (gemma, "
                    "chatml, llama3, ...) for every engine, llama-server's too (its --no-jinja --chat-template "
                    "NAME); without it each engine's own choice")
    ap.add_argument("--llama-server", metavar="PATH", help="with --prompts: llama.cpp's llama-server binary, "
                    "asked the same conversations, alternated with ours")
    ap.add_argument("--llama-server-args", action="append", default=[],
                    help="with --llama-server: its own flags as one string, its drafting ones say "
                         "(--llama-server-args='--spec-type ngram-mod'); repeatable, a server each")
    ap.add_argument("--plot", metavar="FILE.png", help="with --prompts: tokens/s per category and engine; with "
                    "-md: draw the verification cost curve, the cost model's choice and tokens/s by draft length, "
                    "plain against speculative (needs matplotlib)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if len(a.spec_types) > 1 and not a.prompts:
        ap.error("--spec-type more than once is for --prompts (a chain of kinds is one comma-separated value)")
    a.spec_type = a.spec_types[0] if a.spec_types else None
    if a.repetitions < 1 or a.n_prompt < 0 or a.n_gen < 0 or a.threads < 0:
        ap.error("repetitions must be >= 1; sizes and threads >= 0")
    if a.curve:
        if a.plot:
            from .plot import _check_matplotlib
            _check_matplotlib()
        curves = {p: curve.measure(p, a.threads, a.rounds, a.llama_bench) for p in a.model}
        if a.json:
            json.dump({p: asdict(c) for p, c in curves.items()}, sys.stdout, indent=1)
            print()
        else:
            for p, c in curves.items():
                curve.print_curves(p, c)
        if a.plot:
            curve.draw(curves, a.plot)
        return 0
    if a.prompts:
        from ..errors import PyllamaspecError
        try:
            return bench_prompts(a)
        except (PyllamaspecError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if a.plot:
        return plot_pair(a)
    if a.model_draft or a.spec_type:
        row = bench_speculative(a.model[0], a.model_draft, a.prompt, a.threads, a.n_gen or 64, a.draft_max,
                                a.draft_p_min, a.rounds, not a.no_adaptive, a.llama_cpp, verbose=not a.json,
                                chat=not a.raw_prompt, spec_type=a.spec_type)
        if a.json:
            json.dump(row, sys.stdout, indent=1)
            print()
        return 0
    if a.fidelity:
        rows = engines.fidelity_rows(a.model, a.threads, a.reference, a.n_gpu_layers)
        if a.json:
            json.dump(rows, sys.stdout, indent=1)
            print()
            return 0
        print("| build      | model                            | median |dlogit| | max | argmax = llama.cpp | greedy tokens equal |")
        engines.print_fidelity("this", rows)
        for label, lib in map(engines.split_label, a.vs_lib):
            engines.print_fidelity(label, engines.other_build_fidelity(lib, a.model, a.threads))
        return 0
    others = {}
    for label, lib in map(engines.split_label, a.vs_lib):
        others[label] = engines.other_build(lib, a.mmap)
    if a.llama_bench:
        others["llama-bench"] = engines.llama_bench(a.llama_bench, a.mmap)
    if a.llama_cpp:
        others["llama-cpp-py"] = engines.llama_cpp_python(a.llama_cpp)
    if others:
        if not a.json:
            print(f"this build: {system_info()}")
            for label, lib in map(engines.split_label, a.vs_lib):
                print(f"{label} ({lib}): {engines.other_build_info(lib)}")
            print(f"medians of {a.rounds} alternating rounds x {a.repetitions} runs, {a.threads or 'all'} threads")
            engines.print_compare_header(list(others))
        rows = engines.compare(a.model, ours(a.n_gpu_layers, a.mmap), others, a.threads or os.cpu_count(), a.n_prompt,
                               a.n_gen, a.repetitions, a.rounds, verbose=not a.json)
        if a.json:
            json.dump(rows, sys.stdout, indent=1)
            print()
        return 0
    if not a.json:
        print(f"pyllamaspec bench | {system_info()}")
        _print_header()
    results = run(a.model, a.threads, a.n_prompt, a.n_gen, a.repetitions, a.n_gpu_layers,
                  verbose=not a.json, use_mmap=a.mmap) if (a.n_prompt or a.n_gen) else []
    if a.tokenizer:
        results += bench_tokenizer(a.model, a.repetitions, verbose=not a.json)
    if a.json:
        json.dump([asdict(r) for r in results], sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
