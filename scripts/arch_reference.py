"""llama.cpp's logits on the tiny seeded models of issue 24's architectures, as test fixtures,
with the spread of llama.cpp's own logits between two CPU builds.

For each architecture named (default: all of MODELS) it writes each model with its tiny-model
writer (a pure function of the arguments), runs llama.cpp b11434 on the prompts through
scripts/llamacpp_logits.cpp (`all` mode: every logit; F16 KV cache, context 512, one batch per
prompt) built against two CPU variants of the same source: the reference build (the machine's
native one: AVX-512 here) and an AVX2-only build. It stores, per model, the writer's arguments,
the file's sha256, the prompts, the reference logits and the measured spread (max over rows of
max |a - b| / max |a|) in tests/data/reference/<arch>_llamacpp.json. The tests derive their
tolerance from that spread (tests/test_<arch>.py). Not run in CI.

    L=llama.cpp sources b11434; for B in build-native build-i24-avx2 (GGML_NATIVE=OFF GGML_AVX2=ON):
    g++ -O1 -std=c++17 scripts/llamacpp_logits.cpp -I $L/include -I $L/ggml/include -o /tmp/probe-$B \\
        $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \\
        -ldl -lm -fopenmp -lpthread
    PYLLAMASPEC_LIBRARY=... python scripts/arch_reference.py /tmp/probe-native /tmp/probe-avx2 [ARCH ...]
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import models_gemma4  # noqa: E402

PROMPTS = [
    [0, 5, 9, 13, 2, 44, 31, 7, 8, 19, 3, 60],
    [0, 17, 17, 17, 40, 41, 42, 43, 1, 2, 3, 4, 5, 6, 7, 8, 50, 33, 21, 10],
]

# arch -> (writer, {model name: writer arguments}); windows of 4 < the prompts' lengths
MODELS = {
    "gemma4": (models_gemma4.write_gemma4_gguf, {
        # E2B/E4B-like: per-layer inputs, the last two layers sharing caches, double-wide MLP there
        "e2b": dict(seed=2, n_embd_per_layer=8, shared_kv_layers=2, n_ff=[48, 48, 48, 48, 96, 96]),
        # 26B-A4B-like: experts beside the dense FFN, k as v on full layers, untied head
        "moe": dict(seed=3, n_expert=4, k_eq_v=True, tied=False),
        # quantized (Q8_0), every feature at once, the file's softcap key left out (llama.cpp: 30)
        "q8_0": dict(seed=4, dtype="Q8_0", n_embd_per_layer=8, shared_kv_layers=2, n_expert=4, n_ff=64,
                     softcap=None),
    }),
}


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_llamacpp(probe: str, path: pathlib.Path) -> list[list[list[float]]]:
    text = "".join(" ".join(map(str, p)) + "\n" for p in PROMPTS)
    out = subprocess.run([probe, str(path), "0", "all"], input=text, capture_output=True, text=True, check=True)
    logits: list[list[list[float]]] = [[] for _ in PROMPTS]
    for line in out.stdout.splitlines():
        f = line.split()
        logits[int(f[0])].append([float(v) for v in f[2:]])
    return logits


def spread(a: list, b: list) -> float:
    worst = 0.0
    for pa, pb in zip(a, b):
        for ra, rb in zip(pa, pb):
            worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)) / max(abs(x) for x in ra))
    return worst


def main() -> None:
    probe, probe_avx2 = sys.argv[1], sys.argv[2]
    archs = sys.argv[3:] or list(MODELS)
    for arch in archs:
        writer, models = MODELS[arch]
        result = {"source": "llama.cpp b11434 (ggml 0.26), CPU, scripts/llamacpp_logits.cpp `all`, context 512, "
                            "F16 KV cache, one batch per prompt; reference build native (AVX-512), spread against "
                            "an AVX2-only build (scripts/arch_reference.py)", "models": {}}
        with tempfile.TemporaryDirectory() as tmp:
            for name, kw in models.items():
                path = pathlib.Path(tmp) / f"{name}.gguf"
                writer(path, **kw)
                ref = run_llamacpp(probe, path)
                s = spread(ref, run_llamacpp(probe_avx2, path))
                result["models"][name] = {"writer": kw, "sha256": sha256(path), "prompts": PROMPTS, "logits": ref,
                                          "spread_avx2": s}
                print(f"{arch}/{name}: llama.cpp AVX-512 vs AVX2 spread {s:.3e}")
        dest = ROOT / f"tests/data/reference/{arch}_llamacpp.json"
        dest.write_text(json.dumps(result, separators=(",", ":")) + "\n")
        print(f"wrote {dest} ({dest.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
