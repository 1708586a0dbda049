"""llama.cpp's logits on tiny seeded Qwen3-VL text models (``qwen3vl``, ``qwen3vlmoe``:
tests/models_qwen3vl.py write_qwen3vl_gguf), text only, as a test fixture with llama.cpp's own
spread: tests/data/reference/qwen3vl_llamacpp.json, in arch_reference.py's layout (per model the
writer's arguments, the file's sha256, the prompts, every logit of every position), so that
tests/arch_checks.py's compare_with_llamacpp reads it. The recorded run: scripts/llamacpp_logits.cpp
`all` (context 512, F16 KV cache, one batch a prompt), 2 threads, flash attention auto; the spread
(arch_checks' measured_spread reads every spread_* key): the same build with 1 thread
(spread_threads) and with flash attention off (spread_flash_attn_off), max over rows of
max |a - b| / max |a|. (arch_reference.py measures across AVX-512 and AVX2 builds; one build of
b11434 is at hand here, /work/ref/build.) Not run in CI.

    L=llama.cpp sources b11434, B=its static build
    g++ -O1 -std=c++17 scripts/llamacpp_logits.cpp -I $L/include -I $L/ggml/include -I $L/src \\
        -o /tmp/llamacpp_logits $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a \\
        $B/ggml/src/libggml-base.a -ldl -lm -fopenmp -lpthread
    python scripts/qwen3vl_reference.py --probe /tmp/llamacpp_logits
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]

from arch_reference import PROMPTS, sha256, spread  # noqa: E402
from models_qwen3vl import write_qwen3vl_gguf  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "qwen3vl_llamacpp.json"
RUNS = {"recorded": {"PROBE_THREADS": "2"}, "threads": {"PROBE_THREADS": "1"},
        "flash_attn_off": {"PROBE_THREADS": "2", "PROBE_FLASH_ATTN": "off"}}
MODELS = {
    # Qwen3-VL-2B-like: GQA 2:1, IMROPE sections, no deepstack key
    "dense": dict(seed=71, n_deepstack=None),
    # deepstack announced (3 slices): a text token's slices are zero, its logits as without
    "deepstack": dict(seed=73, n_deepstack=2, rope_sections=(3, 3, 2, 0), rope_base=1000.0),
    # Qwen3-VL-30B-A3B-like: 4 experts, 2 a token
    "moe": dict(seed=72, moe=True),
    "moe_q8_0": dict(seed=74, moe=True, dtype="Q8_0", n_embd=64, head_dim=32, n_ff_exp=32,
                     rope_sections=(6, 5, 5, 0)),
}


def run(probe: str, path: pathlib.Path, env: dict) -> list:
    text = "".join(" ".join(map(str, p)) + "\n" for p in PROMPTS)
    out = subprocess.run([probe, str(path), "0", "all"], input=text, capture_output=True, text=True, check=True,
                         env=dict(os.environ, **env))
    logits: list = [[] for _ in PROMPTS]
    for line in out.stdout.splitlines():
        f = line.split()
        logits[int(f[0])].append([float(v) for v in f[2:]])
    return logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", required=True, help="scripts/llamacpp_logits.cpp, compiled")
    ap.add_argument("--out", type=pathlib.Path, default=OUT)
    args = ap.parse_args()
    result = {"source": "llama.cpp b11434, CPU, scripts/llamacpp_logits.cpp `all`, context 512, F16 KV cache, one "
                        "batch per prompt, 2 threads; spread_threads: 1 thread, spread_flash_attn_off: flash "
                        "attention off (scripts/qwen3vl_reference.py)", "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in MODELS.items():
            path = pathlib.Path(tmp) / f"{name}.gguf"
            write_qwen3vl_gguf(path, **kw)
            ref = run(args.probe, path, RUNS["recorded"])
            entry = {"writer": kw, "sha256": sha256(path), "prompts": PROMPTS, "logits": ref}
            for run_name, env in RUNS.items():
                if run_name != "recorded":
                    entry[f"spread_{run_name}"] = spread(ref, run(args.probe, path, env))
            result["models"][name] = entry
            print(f"{name}: spread threads {entry['spread_threads']:.2e}, "
                  f"flash attention off {entry['spread_flash_attn_off']:.2e}")
    args.out.write_text(json.dumps(result, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
