"""llama.cpp's own spread on each fixture: the same llama.cpp b11434 built for several CPUs (ggml's
variants: native, AVX2-only, generic), each run on the fixtures' models and prompts, compared with
one another and with the committed fixtures (made on another machine). The tests' tolerances
(tests/tolerances.py) come from these numbers; the record it writes is
tests/data/reference/llamacpp_spread.json. Not run in CI: it needs llama.cpp builds.

    # per variant, a llama.cpp build B (e.g. cmake -DGGML_NATIVE=OFF [-DGGML_AVX2=OFF ...]) and its probes:
    g++ -O2 -std=c++17 scripts/llamacpp_logits.cpp -I $L/include -I $L/ggml/include $B/src/libllama.a \\
        $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl -o DIR/logits
    g++ ... scripts/llamacpp_mtp.cpp -I $L/src ... -o DIR/mtp       (the same link line)
    PYLLAMASPEC_LIBRARY=... python scripts/fixture_spread.py native=DIR1 avx2=DIR2 generic=DIR3 [--out OUT.json]

What it measures, per fixture (the tests' metrics):
- tiny models (moe, qwen35, mtp): the largest relative logit difference, max |a - b| / max |b| per row;
  where two runs' argmax differ, the reference's top-2 margin relative to the row's largest logit;
- real models (gen_shared prompts): median and max |dlogit| over the top-5 ids both runs list, batched
  prompt rows; the greedy continuations' first differing step and its margin; llama.cpp's batched
  against token-by-token rows (prompt + continuation, `seq` mode) within each build;
- chat answers (chat_shared prompt ids, 32 greedy steps): first differing step and its margin.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "data" / "reference"
REAL = {"smollm2": "smollm2-135m-q4_1", "gemma3": "gemma-3-270m-q4_k_m"}
TINY = {"moe": ("moe_reference.py", "logits", "moe_llamacpp.json"),
        "qwen35": ("qwen35_reference.py", "logits", "qwen35_tiny_llamacpp.json"),
        "mtp": ("mtp_reference.py", "mtp", "qwen35_mtp_llamacpp.json")}
N_GEN = 32


# ---- running the probes --------------------------------------------------------------------

def run_tiny(kind: str, probe_dir: pathlib.Path, tmp: pathlib.Path) -> dict:
    script, probe, _ = TINY[kind]
    out = tmp / f"{kind}-{probe_dir.name}.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(ROOT / "scripts" / script), str(probe_dir / probe), str(out)], check=True,
                   env=env, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())["models"]


def _parse_top(fields: list[str]) -> list[tuple[int, float]]:
    return [(int(a), float(b)) for a, b in (x.split(":") for x in fields)]


def run_real(probe: pathlib.Path, model: pathlib.Path, prompts: list[list[int]], mode: list[str]) -> dict:
    """{prompt index: {"rows": [top5 per position], "gen": [top5 per greedy step]}}."""
    text = "".join(" ".join(map(str, p)) + "\n" for p in prompts)
    env = dict(os.environ, PROBE_THREADS=os.environ.get("PROBE_THREADS", "2"))
    res = subprocess.run([str(probe), str(model), "0", *mode], input=text, capture_output=True, text=True,
                         check=True, env=env)
    out: dict[int, dict] = {i: {"rows": [], "gen": []} for i in range(len(prompts))}
    for line in res.stdout.splitlines():
        f = line.split()
        key = "gen" if f[1] == "g" else "rows"
        out[int(f[0])][key].append(_parse_top(f[3:] if key == "gen" else f[2:]))
    return out


# ---- comparisons ---------------------------------------------------------------------------

def rel_rows(a, b) -> tuple[float, float]:
    """Largest per-row max |a - b| / max |b|, and the largest top-2 margin of b (relative to the
    row's largest |logit|) among rows whose argmax differs (0 if none)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = np.abs(b).max(-1)
    rel = float((np.abs(a - b).max(-1) / scale).max())
    top2 = np.sort(b, -1)[..., -2:]
    margin = (top2[..., 1] - top2[..., 0]) / scale
    flips = a.argmax(-1) != b.argmax(-1)
    return rel, float(margin[flips].max()) if flips.any() else 0.0


def compare_tiny(kind: str, a: dict, b: dict) -> dict[str, dict]:
    res = {}
    for name in b:
        rel, flip = 0.0, 0.0
        for i, (ra, rb) in enumerate(zip(a[name]["logits"], b[name]["logits"])):
            if kind == "mtp":        # chained steps: comparable while both fed the same tokens
                same = next((k for k, (x, y) in enumerate(zip(a[name]["step_tokens"][i], b[name]["step_tokens"][i]))
                             if x != y), len(rb))
                ra, rb = ra[:same], rb[:same]
            r, f = rel_rows(ra, rb)
            rel, flip = max(rel, r), max(flip, f)
        res[name] = {"rel": rel, "argmax_flip_margin": flip}
    return res


def top5_deltas(rows_a, rows_b) -> list[float]:
    d = []
    for ta, tb in zip(rows_a, rows_b):
        other = dict(tb)
        d += [abs(v - other[t]) for t, v in ta if t in other]
    return d


def first_divergence(gen_a, gen_b) -> dict | None:
    """The first greedy step where the chosen ids differ, with both runs' top-2 margins there."""
    for s, (ta, tb) in enumerate(zip(gen_a, gen_b)):
        if ta[0][0] != tb[0][0]:
            return {"step": s, "margins": [ta[0][1] - ta[1][1], tb[0][1] - tb[1][1]]}
    return None


def real_summary(a: dict, b: dict) -> dict:
    d = [x for i in b for x in top5_deltas(a[i]["rows"], b[i]["rows"])]
    divs = [first_divergence(a[i]["gen"], b[i]["gen"]) for i in b if a[i]["gen"] and b[i]["gen"]]
    divs = [x for x in divs if x]
    return {"median": float(np.median(d)), "max": float(np.max(d)), "n": len(d),
            "diverged": len(divs), "max_margin_at_divergence": max((max(x["margins"]) for x in divs), default=0.0)}


def fixture_as_probe_output(records: list[dict]) -> dict:
    return {i: {"rows": [[tuple(e) for e in top] for top in r["prompt_top"]],
                "gen": [[tuple(e) for e in g["top"]] for g in r["gen"]]} for i, r in enumerate(records)}


# ---- one variant -------------------------------------------------------------------------------

def _jsonl(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_variant(probe_dir: pathlib.Path, models: dict[str, pathlib.Path], tmp: pathlib.Path) -> dict:
    got = {kind: run_tiny(kind, probe_dir, tmp) for kind in TINY}
    for key, ref in REAL.items():
        recs = _jsonl(REF / f"gen_shared_{ref}.jsonl")
        got[key] = run_real(probe_dir / "logits", models[key], [r["ids"] for r in recs], ["gen", str(N_GEN)])
        full = [r["ids"] + [g["id"] for g in r["gen"]] for r in recs]
        got[key + "-batched"] = run_real(probe_dir / "logits", models[key], full, [])
        got[key + "-seq"] = run_real(probe_dir / "logits", models[key], full, ["seq"])
    chats = _jsonl(REF / f"chat_shared_{REAL['smollm2']}.jsonl")
    got["chat"] = run_real(probe_dir / "logits", models["smollm2"], [c["prompt_ids"] for c in chats],
                           ["gen", str(N_GEN)])
    return got


def compare(a: dict, b: dict) -> dict:
    out = {kind: compare_tiny(kind, a[kind], b[kind]) for kind in TINY}
    for key in REAL:
        out[key] = real_summary(a[key], b[key])
    out["chat"] = real_summary(a["chat"], b["chat"])
    return out


def against_fixtures(run: dict) -> dict:
    fixtures = {kind: json.loads((REF / TINY[kind][2]).read_text())["models"] for kind in TINY}
    out = {kind: compare_tiny(kind, run[kind], fixtures[kind]) for kind in TINY}
    for key, ref in REAL.items():
        out[key] = real_summary(run[key], fixture_as_probe_output(_jsonl(REF / f"gen_shared_{ref}.jsonl")))
    return out


def batch_dependence(run: dict) -> dict:
    return {key: real_summary(run[key + "-seq"], run[key + "-batched"]) for key in REAL}


# ---- main --------------------------------------------------------------------------------------

def print_table(record: dict) -> None:
    for label, cmp in record["pairs"].items():
        print(f"== {label}")
        for kind in TINY:
            print("   " + kind + ": " + ", ".join(f"{n} {v['rel']:.2e} (flip margin {v['argmax_flip_margin']:.2e})"
                                                for n, v in cmp[kind].items()))
        for key in [*REAL, "chat"]:
            if key in cmp:
                v = cmp[key]
                print(f"   {key}: median {v['median']:.4f} max {v['max']:.4f} over {v['n']}; greedy diverged "
                      f"{v['diverged']}, largest margin at a divergence {v['max_margin_at_divergence']:.3f}")
    for name, v in record["batched_vs_sequential"].items():
        print(f"== batched vs token by token, {name}: " + ", ".join(
            f"{k} median {x['median']:.4f} max {x['max']:.4f}" for k, x in v.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+", help="NAME=DIR: DIR holds the `logits` and `mtp` probes of one build")
    ap.add_argument("--out", type=pathlib.Path, help="write the record (JSON) here")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT)]
    from pyllamaspec.files.offline import real_model_path
    models = {key: real_model_path(key) for key in REAL}
    variants = dict(v.split("=", 1) for v in args.variants)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {name: run_variant(pathlib.Path(d), models, pathlib.Path(tmp)) for name, d in variants.items()}
    pairs = {f"{a} vs {b}": compare(runs[a], runs[b]) for a, b in itertools.combinations(runs, 2)}
    pairs.update({f"{a} vs committed fixtures": against_fixtures(runs[a]) for a in runs})
    record = {"source": "scripts/fixture_spread.py: llama.cpp b11434 (ggml 0.26.0), CPU, one build per variant",
              "cpu": _cpu_name(), "variants": variants, "pairs": pairs,
              "batched_vs_sequential": {a: batch_dependence(runs[a]) for a in runs}}
    print_table(record)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.out}")


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
