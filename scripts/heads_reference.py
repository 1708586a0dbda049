"""Writes llama.cpp's EAGLE-3, DFlash and Gemma 4 assistant draft logits for seeded tiny random
target + head pairs (tests/models.py, tests/models_gemma4.py, tests/models_heads.py) to
tests/data/reference/heads_llamacpp.json; tests/speculation/test_heads.py
regenerates the same files bit for bit (sha256 recorded) and compares its draft steps / blocks.
Each prompt also records the draft tokens llama.cpp's own driver proposes (common_speculative_draft,
greedy): the logits are computed by scripts/llamacpp_heads.cpp following that driver's conventions,
and their greedy chain must give those tokens (checked here).

With a second probe built against llama.cpp's AVX2-only CPU variant, the largest difference
between the two builds' logits (relative to the largest logit) is recorded as "spread": what the
tests' tolerance is set from. Not run in CI: it needs llama.cpp builds (b11434).

    L=/path/to/llama.cpp B=/path/to/build   # native; A=/path/to/build-avx2 (GGML_NATIVE=OFF, AVX2 on, AVX-512 off)
    g++ -O2 -std=c++17 scripts/llamacpp_heads.cpp -I $L/include -I $L/ggml/include -I $L/src -I $L/common \\
        -I $L/vendor $B/common/libllama-common.a $B/common/libllama-common-base.a $B/src/libllama.a \\
        $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl \\
        -o /tmp/probe_heads
    (the same with $A's src/ and ggml/src/ libraries -> /tmp/probe_heads_avx2; llama.cpp's common library
     holds no kernels, the native build's serves)
    PYLLAMASPEC_LIBRARY=... python scripts/heads_reference.py /tmp/probe_heads /tmp/probe_heads_avx2
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
from models import write_gguf  # noqa: E402
from models_gemma4 import write_gemma4_gguf  # noqa: E402
from models_heads import write_dflash_gguf, write_eagle3_gguf, write_gemma4_assistant_gguf  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "heads_llamacpp.json"

# target (models.write_gguf) and head kwargs, and the draft steps (DFlash: the block's masks).
# eagle3 a: the target's embeddings, its own head; b: a narrower head over a wider target, its own
# embeddings, a reduced vocabulary (d2t), norm_before_fc and norm_before_residual; c: a qwen3
# target whose output head it borrows. dflash a: its own head, non-causal; b: shared K/V, post
# norms, GeGLU, causal, a reduced vocabulary; c: the target's head, a block of 4 over a qwen3 target.
MODELS = {
    "eagle3_a": dict(target=dict(n_embd=32, n_layer=4, seed=3),
                     head=dict(kind="eagle3", seed=4), steps=4),
    "eagle3_b": dict(target=dict(n_embd=48, n_layer=5, n_head=4, n_head_kv=2, seed=7),
                     head=dict(kind="eagle3", n_embd=32, n_embd_target=48, target_layers=(1, 2, 4), own_embd=True,
                               n_draft_vocab=40, norm_before_fc=True, norm_before_residual=True, seed=8), steps=4),
    "eagle3_c": dict(target=dict(arch="qwen3", n_embd=32, n_layer=4, seed=9),
                     head=dict(kind="eagle3", own_output=False, target_layers=(0, 1, 3), seed=10), steps=4),
    "dflash_a": dict(target=dict(n_embd=32, n_layer=4, seed=3),
                     head=dict(kind="dflash", seed=5), steps=7),
    "dflash_b": dict(target=dict(n_embd=32, n_layer=4, seed=11),
                     head=dict(kind="dflash", n_layer=1, target_layers=(0, 2, 3), shared_kv=True, post_norms=True,
                               gelu=True, causal=True, n_draft_vocab=48, block_size=6, seed=12), steps=5),
    "dflash_c": dict(target=dict(arch="qwen3", n_embd=32, n_layer=4, seed=13),
                     head=dict(kind="dflash", own_output=False, target_layers=(2,), block_size=5, seed=14), steps=4),
    # Gemma 4 assistants over tiny gemma4 targets (tests/models_gemma4.py): a: window and full
    # layers; b: three layers over a target whose last two layers share earlier caches
    "assistant_a": dict(target=dict(arch="gemma4", seed=15), head=dict(kind="gemma4-assistant", seed=16), steps=4),
    "assistant_b": dict(target=dict(arch="gemma4", shared_kv_layers=2, k_eq_v=True, seed=17),
                        head=dict(kind="gemma4-assistant", swa_pattern=(True, False, True), n_ff=40, seed=18), steps=4),
}
WRITERS = {"eagle3": write_eagle3_gguf, "dflash": write_dflash_gguf, "gemma4-assistant": write_gemma4_assistant_gguf}


def write_pair(spec: dict, folder: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    t, h = folder / f"{name}_target.gguf", folder / f"{name}_head.gguf"
    target = dict(spec["target"])
    if target.get("arch") == "gemma4":
        del target["arch"]
        write_gemma4_gguf(t, **target)
    else:
        write_gguf(t, n_vocab=64, **target)
    kw = dict(spec["head"])
    WRITERS[kw.pop("kind")](h, **kw)
    return t, h


def prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(2, 63, 3).tolist(), rng.integers(2, 63, 24).tolist()]


def run(probe: str, t: pathlib.Path, h: pathlib.Path, steps: int, ps: list[list[int]]) -> tuple[list, list]:
    text = "".join(" ".join(map(str, p)) + "\n" for p in ps)
    out = subprocess.run([probe, str(t), str(h), str(steps)], input=text, capture_output=True, text=True, check=True)
    logits: list[list[list[float]]] = [[] for _ in ps]
    tokens: list[list[int]] = [[] for _ in ps]
    for line in out.stdout.splitlines():
        f = line.split()
        if f[0] == "L":
            logits[int(f[1])].append([float(x) for x in f[3:]])
        elif f[0] == "T":
            tokens[int(f[1])] = [int(x) for x in f[2:]]
    return logits, tokens


def greedy_chain(logits: list[list[float]]) -> list[int]:
    return [int(np.argmax(row)) for row in logits]


def main() -> None:
    probe, probe_b = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
    out = {"generator": "scripts/heads_reference.py (llama.cpp b11434, CPU, scripts/llamacpp_heads.cpp)", "models": {}}
    spread = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, spec) in enumerate(MODELS.items()):
            t, h = write_pair(spec, pathlib.Path(tmp), name)
            ps = prompts(100 + i)
            logits, tokens = run(probe, t, h, spec["steps"], ps)
            for lg, tk in zip(logits, tokens):
                if greedy_chain(lg) != tk:
                    raise SystemExit(f"{name}: the probe's greedy chain {greedy_chain(lg)} is not llama.cpp's draft {tk}")
            if probe_b:
                other, _ = run(probe_b, t, h, spec["steps"], ps)
                for a, b in zip(logits, other):
                    a, b = np.asarray(a), np.asarray(b)
                    live = np.isfinite(a)          # a reduced vocabulary leaves -inf outside it
                    if not np.array_equal(live, np.isfinite(b)):
                        raise SystemExit(f"{name}: the two builds disagree on which logits are finite")
                    d = float(np.abs(a[live] - b[live]).max() / np.abs(a[live]).max())
                    print(f"{name}: spread {d:.3g}")
                    spread = max(spread, d)
            out["models"][name] = {"target": spec["target"], "head": spec["head"], "steps": spec["steps"],
                                   "sha256": [hashlib.sha256(p.read_bytes()).hexdigest() for p in (t, h)],
                                   "prompts": ps, "logits": logits, "draft_tokens": tokens}
    if probe_b:
        out["spread"] = spread
        out["spread_note"] = "max |native - AVX2-only| / max |logit| over every step of every model"
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes); spread {spread:.3g}")


if __name__ == "__main__":
    main()
