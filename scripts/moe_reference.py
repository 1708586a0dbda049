"""llama.cpp's logits on tiny seeded mixture-of-experts models, as test fixtures.

Writes each model of MODELS with tests/models_moe.py (a pure function of its arguments), runs
llama.cpp on the prompts through scripts/llamacpp_logits.cpp (`all` mode: every logit) and
stores, per model, the writer's arguments, the file's sha256, the prompts and the logits in
tests/data/reference/moe_llamacpp.json. tests/archs/test_moe.py regenerates each file, checks the
sha256 (so the fixture speaks of that very file) and compares our logits. Not run in CI.

    g++ -O1 -std=c++17 scripts/llamacpp_logits.cpp -I $LCPP/include -I $LCPP/ggml/include \\
        -o /tmp/lcpp_logits $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a \\
        $B/ggml/src/libggml-base.a -ldl -lm -fopenmp -lpthread
    python scripts/moe_reference.py /tmp/lcpp_logits [OUT.json]

(LCPP: llama.cpp sources b11434, B: its CPU build, ggml 0.26; llama.cpp's defaults: F16 KV
cache, flash attention auto.)
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import models_moe

# name -> writer arguments; window 4 < the prompts' lengths, so gpt-oss's windowed layers matter
MODELS = {
    "qwen3moe": dict(arch="qwen3moe", seed=11),
    "qwen2moe": dict(arch="qwen2moe", seed=12),
    # quantized experts: the CPU backend repacks them for mul_mat_id
    "qwen3moe-q8_0": dict(arch="qwen3moe", seed=14, dtype="Q8_0"),
    "gpt-oss": dict(arch="gpt-oss", seed=13, expert_dtype="MXFP4", sliding_window=4, yarn_factor=4.0,
                    yarn_orig_ctx=64),
}
PROMPTS = [
    [0, 5, 9, 13, 2, 44, 31, 7, 8, 19, 3, 60],
    [0, 17, 17, 17, 40, 41, 42, 43, 1, 2, 3, 4, 5, 6, 7, 8, 50, 33, 21, 10],
]


def run_llamacpp(probe: str, path: pathlib.Path) -> list[list[list[float]]]:
    text = "".join(" ".join(map(str, p)) + "\n" for p in PROMPTS)
    out = subprocess.run([probe, str(path), "0", "all"], input=text, capture_output=True, text=True, check=True)
    logits: list[list[list[float]]] = [[] for _ in PROMPTS]
    for line in out.stdout.splitlines():
        f = line.split()
        logits[int(f[0])].append([float(v) for v in f[2:]])
    return logits


def main() -> None:
    probe = sys.argv[1]
    dest = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "tests/data/reference/moe_llamacpp.json"
    result = {"source": "llama.cpp b11434 (ggml 0.26), CPU, scripts/llamacpp_logits.cpp `all`, "
                        "context 512, F16 KV cache, one batch per prompt", "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in MODELS.items():
            path = pathlib.Path(tmp) / f"{name}.gguf"
            models_moe.write_moe_gguf(path, **kw)
            result["models"][name] = {"writer": kw, "sha256": models_moe.sha256(path), "prompts": PROMPTS,
                                      "logits": run_llamacpp(probe, path)}
    dest.write_text(json.dumps(result, separators=(",", ":")) + "\n")
    print(f"wrote {dest} ({dest.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
