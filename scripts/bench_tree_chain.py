"""Plain vs chain vs token tree, greedy, on the real model pairs: tokens per round and tokens/s,
alternated rounds, medians (issue 28).

    python scripts/bench_tree_chain.py [-t 2] [-r 5] [-n 128] [--draft-max 4] [--tree-nodes 0]
        [--pairs smollm2,gemma3] [--prompts story,code] [--auto] [--adaptive]
        [--llamacpp /work/llamacpp/build-native/bin] [--json]

Pairs (the models of pyllamaspec.files.offline, variants made by files.convert.ensure_variant):
  smollm2: SmolLM2-135M-Instruct Q4_1 target, its Q4_0 as the draft;
  gemma3:  Gemma 3 270M F16 target, the Q4_K_M file as the draft (the F16 is that file's
           weights written as F16: the real F16 is not reachable offline, so the pair agrees on
           nearly every token and a tree has nothing to add at depths a chain fills);
  gemma3-q4_0: the same F16 target, its Q4_0 (requantized from the Q4_K_M: a weaker draft).
Each round runs every mode once on every prompt, the order of the modes rotating (a machine that
slows within a round favours none); each figure is the median over rounds. Modes: plain
(no draft), chain (tree=False), tree (tree=True: n_draft is the depth, the default shape: the
top-2 children at the first two levels, --tree-nodes the budget), and with --auto the cost
model's choice (tree=None, adaptive). --adaptive lets the cost model size chain and tree (else
fixed n_draft, p_min 0, as llama-speculative-simple drafts). With --llamacpp DIR, each round also
runs DIR/llama-speculative-simple on the same pair, prompt and --draft-max (its decoded t/s),
the chain reference the issue's ratios are against (llama.cpp b11434). Greedy outputs of chain
and tree are checked equal to plain (a mismatch is reported, never hidden).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time

PROMPTS = {
    "story": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "code": "Write a Python function that reads a CSV file and returns its rows as a list of "
            "dictionaries, with type hints and a docstring.",
}


def pair_paths(name: str) -> tuple[str, str]:
    from pyllamaspec.files.convert import ensure_variant
    from pyllamaspec.files.offline import real_model_path
    base = real_model_path(name.split("-")[0])
    if name == "smollm2":
        return str(base), str(ensure_variant(base, "q4_0"))
    if name == "gemma3":
        return str(ensure_variant(base, "f16")), str(base)
    if name == "gemma3-q4_0":
        return str(ensure_variant(base, "f16")), str(ensure_variant(base, "q4_0"))
    raise SystemExit(f"unknown pair {name!r} (smollm2, gemma3, gemma3-q4_0)")


_LEARNED: dict = {}


def own_learning(target, mode: str) -> None:
    """Each mode keeps what the cost model learned (pair_stats.registry: costs by batch size,
    draft cost, acceptance) to itself, as if it ran alone: a forced tree's measurements must not
    steer the chain's or the cost model's choices in the same process."""
    from pyllamaspec.speculation.pair_stats import registry
    _LEARNED.setdefault((id(target), mode), ({}, {}))
    with registry._lock:
        registry._by_target[target] = _LEARNED[(id(target), mode)]


def run_mode(mode: str, prompt: str, target, draft, a) -> dict:
    from pyllamaspec.generation.generate import generate
    own_learning(target, mode)
    kw = dict(max_tokens=a.n_gen, temperature=0)
    if mode != "plain":
        fixed = {} if a.adaptive else dict(adaptive=False, p_min=0.0)
        tree = {"chain": False, "tree": True, "auto": None}[mode]
        kw.update(n_draft=a.draft_max, tree=tree, tree_nodes=a.tree_nodes, **fixed)
        if mode == "auto":
            kw.update(adaptive=True)
            kw.pop("p_min", None)
    r = generate(prompt, target, draft if mode != "plain" else None, **kw)
    s = r.stats
    return {"tps": s.generate_tps, "tpr": s.mean_accepted if mode != "plain" else 1.0, "tokens": r.tokens,
            "tree_rounds": s.tree_rounds, "rounds": s.rounds,
            "nodes": s.tree_nodes / s.tree_rounds if s.tree_rounds else 0.0, "shape": s.tree_shape}


def run_llamacpp(bindir: str, target: str, draft: str, prompt: str, a) -> float | None:
    cmd = [f"{bindir}/llama-speculative-simple", "-m", target, "-md", draft, "-p", prompt, "-n", str(a.n_gen),
           "--spec-type", "draft-simple", "--spec-draft-n-max", str(a.draft_max), "--spec-draft-n-min", "0",
           "--spec-draft-p-min", "0", "--temp", "0", "-t", str(a.threads), "-td", str(a.threads), "-c", "2048",
           "--seed", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", p.stderr)
    return float(m.group(1)) if m else None


def bench_pair(name: str, a) -> list[dict]:
    from pyllamaspec import Model
    from pyllamaspec.bench.main import chat_prompt
    tpath, dpath = pair_paths(name)
    modes = ["plain", "chain", "tree"] + (["auto"] if a.auto else [])
    rows = []
    with Model(tpath, n_ctx=2048, n_threads=a.threads) as target, \
         Model(dpath, n_ctx=2048, n_threads=a.threads, tokenizer=False) as draft:
        for pname in a.prompts.split(","):
            prompt = chat_prompt(target, PROMPTS[pname])
            runs: dict[str, list[dict]] = {m: [] for m in modes + (["llama.cpp"] if a.llamacpp else [])}
            for rnd in range(a.rounds):
                order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
                for m in order:
                    runs[m].append(run_mode(m, prompt, target, draft, a))
                if a.llamacpp:
                    tps = run_llamacpp(a.llamacpp, tpath, dpath, prompt, a)
                    runs["llama.cpp"].append({"tps": tps or 0.0, "tpr": 0.0})
            plain_tokens = runs["plain"][0]["tokens"]
            for m, rs in runs.items():
                row = {"pair": name, "prompt": pname, "mode": m,
                       "tps": statistics.median(r["tps"] for r in rs),
                       "tokens_per_round": statistics.median(r["tpr"] for r in rs)}
                if m in ("chain", "tree", "auto"):
                    row["same_as_plain"] = all(r["tokens"] == plain_tokens for r in rs)
                    row["tree_rounds"] = statistics.median(r["tree_rounds"] for r in rs)
                    row["rounds"] = statistics.median(r["rounds"] for r in rs)
                    row["nodes_per_tree"] = statistics.median(r["nodes"] for r in rs)
                    row["shape"] = rs[-1]["shape"]
                rows.append(row)
    return rows


def print_rows(rows: list[dict]) -> None:
    print(f"{'pair':8} {'prompt':6} {'mode':10} {'tok/s':>8} {'tok/round':>9} {'vs chain':>8} {'trees':>7} "
          f"{'nodes':>6} same")
    chain = {(r["pair"], r["prompt"]): r for r in rows if r["mode"] == "chain"}
    for r in rows:
        c = chain.get((r["pair"], r["prompt"]))
        ratio = f"{r['tps'] / c['tps']:.3f}" if c and c["tps"] else "-"
        trees = f"{r.get('tree_rounds', 0):.0f}/{r.get('rounds', 0):.0f}" if "rounds" in r else ""
        print(f"{r['pair']:8} {r['prompt']:6} {r['mode']:10} {r['tps']:8.2f} {r['tokens_per_round']:9.2f} "
              f"{ratio:>8} {trees:>7} {r.get('nodes_per_tree', 0):6.1f} {r.get('same_as_plain', '')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--tree-nodes", type=int, default=0)
    ap.add_argument("--pairs", default="smollm2,gemma3")
    ap.add_argument("--prompts", default="story,code")
    ap.add_argument("--auto", action="store_true", help="also the cost model's choice (tree=None, adaptive)")
    ap.add_argument("--adaptive", action="store_true", help="the cost model sizes chain and tree drafts")
    ap.add_argument("--llamacpp", metavar="BINDIR", help="also llama.cpp's llama-speculative-simple from BINDIR")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = [r for name in a.pairs.split(",") for r in bench_pair(name, a)]
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        print_rows(rows)
        print(f"({time.perf_counter() - t0:.0f} s; medians of {a.rounds} alternated rounds, {a.n_gen} tokens, "
              f"{a.threads} threads, greedy, draft-max {a.draft_max})")
    return 0 if all(r.get("same_as_plain", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
