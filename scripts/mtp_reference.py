"""Writes llama.cpp's MTP (NextN) draft logits for seeded tiny random qwen35 models with one MTP
block (tests/models_qwen35.py, n_nextn=1) to tests/data/reference/qwen35_mtp_llamacpp.json;
tests/speculation/test_mtp.py regenerates the same models bit for bit (sha256 recorded) and compares its
chained draft steps. Not run in CI: it needs a llama.cpp build (b11434: its MTP context type and
the h_nextn outputs of src/llama-ext.h).

    L=/path/to/llama.cpp B=/path/to/llama.cpp/build
    g++ -O2 -std=c++17 scripts/llamacpp_mtp.cpp -I $L/include -I $L/ggml/include -I $L/src \\
        $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \\
        -fopenmp -lpthread -ldl -o /tmp/probe_mtp
    PYLLAMASPEC_LIBRARY=... python scripts/mtp_reference.py /tmp/probe_mtp [OUT.json]
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from models_qwen35 import write_qwen35_gguf  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "qwen35_mtp_llamacpp.json"
STEPS = 4

# a: the default tiny shape; b: last trunk layer linear, an explicit recurrent_layers array,
# one k head broadcast over two v heads, GQA 2:1.
MODELS = {
    "a": dict(seed=5, n_nextn=1),
    "b": dict(seed=12, n_nextn=1, n_layer=3, n_k_heads=1, n_v_heads=2, recurrent_layers=[True, False, True],
              d_state=8, n_head=2, n_head_kv=1, head_dim=32, n_rot=16, rope_sections=[3, 3, 2, 0], rope_base=1000.0),
}


def prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 64, 2).tolist(), rng.integers(2, 64, 20).tolist()]


def main() -> None:
    probe = sys.argv[1]
    dest = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    out = {"generator": f"scripts/mtp_reference.py (llama.cpp, CPU, scripts/llamacpp_mtp.cpp, {STEPS} steps)",
           "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in MODELS.items():
            path = pathlib.Path(tmp) / f"{name}.gguf"
            write_qwen35_gguf(path, **kwargs)
            ps = prompts(kwargs["seed"])
            text = "".join(" ".join(map(str, p)) + "\n" for p in ps)
            res = subprocess.run([probe, str(path), str(STEPS)], input=text, capture_output=True, text=True, check=True)
            tokens: list[list[int]] = [[] for _ in ps]
            logits: list[list[list[float]]] = [[] for _ in ps]
            for line in res.stdout.splitlines():
                f = line.split()
                tokens[int(f[0])].append(int(f[2]))
                logits[int(f[0])].append([float(x) for x in f[3:]])
            out["models"][name] = {"kwargs": kwargs, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                   "prompts": ps, "step_tokens": tokens, "logits": logits}
    dest.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {dest} ({dest.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
