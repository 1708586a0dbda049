"""Writes llama.cpp's logits for seeded tiny random qwen35 models (tests/models.py's
write_qwen35_gguf) to tests/data/reference/qwen35_tiny_llamacpp.json; tests/archs/test_qwen35.py
regenerates the same models bit for bit (the file's sha256 is recorded) and compares.
Not run in CI: it needs a llama.cpp build.

    L=/path/to/llama.cpp B=/path/to/llama.cpp/build
    g++ -O2 -std=c++17 scripts/llamacpp_logits.cpp -I $L/include -I $L/ggml/include \\
        $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \\
        -fopenmp -lpthread -ldl -o /tmp/probe
    PYLLAMASPEC_LIBRARY=... python scripts/qwen35_reference.py /tmp/probe [OUT.json]   (tests/models.py imports the package)
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

OUT = ROOT / "tests" / "data" / "reference" / "qwen35_tiny_llamacpp.json"

# A: last layer full attention, as many k as v heads, full_attention_interval.
# B: last layer linear, v heads broadcast over one k head, an explicit recurrent_layers array.
MODELS = {
    "a": dict(seed=11),
    "b": dict(seed=12, n_layer=3, n_k_heads=1, n_v_heads=2, recurrent_layers=[True, False, True], d_state=8,
              n_head=2, n_head_kv=1, head_dim=32, n_rot=16, rope_sections=[3, 3, 2, 0], rope_base=1000.0),
}


def prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 64, 12).tolist(), rng.integers(2, 64, 40).tolist()]


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    probe = sys.argv[1]
    dest = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    out = {"generator": "scripts/qwen35_reference.py (llama.cpp, CPU, scripts/llamacpp_logits.cpp all)", "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in MODELS.items():
            path = pathlib.Path(tmp) / f"{name}.gguf"
            write_qwen35_gguf(path, **kwargs)
            ps = prompts(kwargs["seed"])
            text = "".join(" ".join(map(str, p)) + "\n" for p in ps)
            res = subprocess.run([probe, str(path), "0", "all"], input=text, capture_output=True, text=True, check=True)
            rows: list[list[list[float]]] = [[] for _ in ps]
            for line in res.stdout.splitlines():
                f = line.split()
                rows[int(f[0])].append([float(x) for x in f[2:]])
            out["models"][name] = {"kwargs": kwargs, "sha256": sha256(path), "prompts": ps, "logits": rows}
    dest.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {dest} ({dest.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
