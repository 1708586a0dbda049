"""A bench command with and without an environment setting, in one run: rounds alternate which
goes first, each in a process of its own (`python -m pyllamaspec.bench ARGS --rounds 1 --json`),
and the medians are printed. For a switch that brings back ggml's kernel in place of ours, e.g.
the attention of a few query rows (csrc/kernels/attention_rows.h):

    python scripts/ab_env.py PYLLAMASPEC_ATTN_ROWS=ggml -- -m smollm2.gguf --curve -t 2
    python scripts/ab_env.py PYLLAMASPEC_ATTN_ROWS=ggml -- -m smollm2.gguf -md ngram -n 128 -t 2
        [--rounds 3] [--llama-speculative-simple BIN]   (-md MODEL: also llama.cpp's loop, same prompt)

--curve prints ms at n = 1, 2, 4, 8, 16 (and the ratio to 1); -md prints plain and speculative
tokens/s, tokens per round and whether every speculative output equalled plain's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from types import SimpleNamespace

NS = (1, 2, 4, 8, 16)


def bench(args: list[str], env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "pyllamaspec.bench", *args, "--rounds", "1", "--json"],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout[out.stdout.index("{"):])


def summary(rows: list[dict]) -> str:
    if "plain_tps" in rows[0]:
        med = {k: statistics.median(r[k] for r in rows) for k in ("plain_tps", "spec_tps", "tokens_per_round")}
        same = all(r["runs_differing"] == 0 for r in rows)
        return (f"plain {med['plain_tps']:.1f} t/s, speculative {med['spec_tps']:.1f} t/s "
                f"({med['spec_tps'] / med['plain_tps']:.2f}x), {med['tokens_per_round']:.2f} tokens/round, "
                f"outputs {'equal to' if same else 'NOT equal to'} plain")
    parts = []
    for model in rows[0]:
        ms = {n: statistics.median(r[model]["ours"][str(n)] for r in rows) for n in NS}
        parts.append(os.path.basename(model) + ": " + ", ".join(f"{n}: {ms[n]:.1f}" + ("" if n == 1 else f" ({ms[n] / ms[1]:.2f}x)")
                                             for n in NS) + " ms")
    return "; ".join(parts)


def speculative_simple(binary: str, args: list[str]) -> float | None:
    """llama.cpp's speculative-simple on -m/-md with bench's chat prompt, as bench_tree_chain.py
    runs it (greedy, 16 drafted tokens at most): its decode tokens/s."""
    from bench_tree_chain import run_llamacpp   # scripts/ is this script's first import path

    from pyllamaspec import Model
    from pyllamaspec.bench.main import SPEC_MESSAGE, chat_prompt
    target, draft = args[args.index("-m") + 1], args[args.index("-md") + 1]
    with Model(target, n_ctx=512) as m:
        prompt = chat_prompt(m, SPEC_MESSAGE)
    threads = int(args[args.index("-t") + 1]) if "-t" in args else 2
    return run_llamacpp(os.path.dirname(binary), target, draft, prompt,
                        SimpleNamespace(n_gen=128, draft_max=16, threads=threads))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("setting", help="NAME=VALUE, set in the other side's environment")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--llama-speculative-simple", metavar="BIN")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a, args = ap.parse_args(argv[:cut]), argv[cut + 1:]   # after "--": bench's arguments
    name, _, value = a.setting.partition("=")
    base = {k: v for k, v in os.environ.items() if k != name}
    sides = {"as is": base, a.setting: {**base, name: value}}
    rows: dict[str, list[dict]] = {s: [] for s in sides}
    lcs: list[float] = []
    for r in range(a.rounds):
        for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            rows[side].append(bench(args, sides[side]))
        if a.llama_speculative_simple and "-md" in args:
            tps = speculative_simple(a.llama_speculative_simple, args)
            if tps is not None:
                lcs.append(tps)
    for side, got in rows.items():
        print(f"{side}: {summary(got)}")
    if lcs:
        print(f"llama-speculative-simple: {statistics.median(lcs):.1f} t/s (median of {len(lcs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
