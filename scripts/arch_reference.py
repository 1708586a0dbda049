"""llama.cpp's logits on the tiny seeded models of issue 24's architectures, as test fixtures,
with the spread of llama.cpp's own logits between two CPU builds.

For each architecture named (default: all of MODELS) it writes each model with its tiny-model
writer (a pure function of the arguments), runs llama.cpp b11434 on the prompts through
scripts/llamacpp_logits.cpp (`all` mode: every logit; F16 KV cache, context 512, one batch per
prompt) built against two CPU variants of the same source: the reference build (the machine's
native one: AVX-512 here) and an AVX2-only build. It stores, per model, the writer's arguments,
the file's sha256, the prompts, the reference logits and the measured spread (max over rows of
max |a - b| / max |a|) in tests/data/reference/<arch>_llamacpp.json; for a model with NextN
layers also llama.cpp's chained MTP draft steps (scripts/llamacpp_mtp.cpp, 4 steps, both builds)
and for every model the bytes per token of its F16 KV cache (scripts/llamacpp_kv_bytes.cpp).
The tests derive their tolerance from the spread (tests/arch_checks.py). Not run in CI.

    L=llama.cpp sources b11434; for B in build-native build-i24-avx2 (GGML_NATIVE=OFF GGML_AVX2=ON),
    for P in llamacpp_logits llamacpp_mtp llamacpp_kv_bytes:
    g++ -O1 -std=c++17 scripts/$P.cpp -I $L/include -I $L/ggml/include -I $L/src -o /tmp/$P-$B \\
        $B/src/libllama.a $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \\
        -ldl -lm -fopenmp -lpthread
    PYLLAMASPEC_LIBRARY=... python scripts/arch_reference.py --probes /tmp/llamacpp_logits-build-native \\
        /tmp/llamacpp_logits-build-i24-avx2 --mtp /tmp/llamacpp_mtp-build-native /tmp/llamacpp_mtp-build-i24-avx2 \\
        --kv-bytes /tmp/llamacpp_kv_bytes-build-native [ARCH ...]

--spread NAME LOGITS_PROBE [MTP_PROBE] adds llama.cpp's spread against one more build to the
fixtures as they are (the reference logits untouched; each model regenerated bit for bit) as
`spread_NAME`: the generic build (GGML_NATIVE=OFF, every x86 feature off) was measured this way:

    python scripts/arch_reference.py --spread generic /tmp/llamacpp_logits-build-i22-generic \
        /tmp/llamacpp_mtp-build-i22-generic
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import models_gemma4  # noqa: E402
import models_glm4moe  # noqa: E402
import models_mistral3  # noqa: E402
import models_mla  # noqa: E402
import models_qwen35  # noqa: E402

PROMPTS = [
    [0, 5, 9, 13, 2, 44, 31, 7, 8, 19, 3, 60],
    [0, 17, 17, 17, 40, 41, 42, 43, 1, 2, 3, 4, 5, 6, 7, 8, 50, 33, 21, 10],
]
# MTP: the target holds all but the last token; 4 chained draft steps from it
MTP_PROMPTS = [[37, 12], [55, 9, 29, 3, 61, 18, 7, 44, 20, 33, 5, 48, 11, 26, 60, 2, 39, 14, 51, 8]]
MTP_STEPS = 4

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
    "qwen35moe": (models_qwen35.write_qwen35_gguf, {
        # Qwen3.6-35B-A3B-like: 3 linear + 1 gated attention layer, experts + gated shared expert
        "a": dict(seed=21, n_expert=4),
        # last layer linear, one k head for two v heads, 3 of 8 experts; the file's
        # expert_weights_scale, which llama.cpp does not read for qwen35moe (nor do we)
        "b": dict(seed=22, n_expert=8, n_expert_used=3, n_layer=3, n_k_heads=1, n_v_heads=2,
                  recurrent_layers=[True, False, True], d_state=8, n_head=2, n_head_kv=1, head_dim=32, n_rot=16,
                  rope_sections=[3, 3, 2, 0], rope_base=1000.0, extra_kv={"qwen35moe.expert_weights_scale": 2.5}),
        "mtp": dict(seed=23, n_expert=4, n_nextn=1),
        # two k heads for four v heads (v head h reads k head h mod 2), Q8_0
        "c": dict(seed=24, n_expert=4, n_k_heads=2, n_v_heads=4, d_state=8, dtype="Q8_0", n_embd=64, n_ff=64,
                  head_dim=32, n_ff_shexp=64),
    }),
    "deepseek2": (models_mla.write_deepseek2_gguf, {
        # V3-like: q low rank, sigmoid routing with selection bias in 4 groups (2 kept), scale 2.5,
        # YaRN x4 with the log multiplier, one dense leading layer, a NextN block
        "v3": dict(seed=34, n_nextn=1),
        # V2-like: softmax routing, no bias, no groups, no YaRN, weights neither renormalized nor scaled
        "v2": dict(seed=32, groups=None, yarn=None, gating=1, probs_bias=False, weights_scale=None,
                   weights_norm=False),
        # V2-Lite-like: 26 layers (llama.cpp's "lite": one q matrix), no gating key (softmax), YaRN x2
        "lite": dict(seed=33, n_layer=26, q_lora_rank=0, groups=None, gating=None, probs_bias=False,
                     yarn=(2.0, 64, 0.0707)),
        # quantized; no NextN block here: llama.cpp's own MTP drafts on Q8_0 move by 6% between its
        # AVX-512 and AVX2 builds (a tolerance that loose would test nothing)
        "q8_0": dict(seed=35, dtype="Q8_0"),
    }),
    "glm4moe": (models_glm4moe.write_glm4moe_gguf, {
        # GLM-4.5-Air-like: q/k/v biases, half-head rope, sigmoid routing with bias, a NextN block
        "air": dict(seed=54, n_nextn=1),
        # GLM-4.5-355B-like: q/k norms, no biases, full rope, weights neither renormalized nor scaled
        "qknorm": dict(seed=52, qk_norm=True, qkv_bias=False, weights_scale=None, weights_norm=False, n_rot=32),
        # M-RoPE sections (GLM-4.5V's text path)
        "mrope": dict(seed=53, rope_sections=(4, 2, 2, 0)),
        "q8_0": dict(seed=55, dtype="Q8_0"),
    }),
    "mistral3": (models_mistral3.write_mistral3_gguf, {
        "plain": dict(seed=61),
        # Ministral-3-like: YaRN with its beta and log-multiplier keys, attention temperature, biases
        "yarn-temp": dict(seed=62, bias=True, temperature_scale=0.5,
                          yarn=dict(factor=4.0, original_context_length=8, beta_fast=16.0, beta_slow=2.0,
                                    log_multiplier=1.0)),
        "q8_0": dict(seed=63, dtype="Q8_0", rope_freqs=False, yarn=dict(factor=8.0, original_context_length=16)),
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


def run_mtp(probe: str, path: pathlib.Path) -> tuple[list[list[int]], list[list[list[float]]]]:
    text = "".join(" ".join(map(str, p)) + "\n" for p in MTP_PROMPTS)
    out = subprocess.run([probe, str(path), str(MTP_STEPS)], input=text, capture_output=True, text=True, check=True)
    tokens: list[list[int]] = [[] for _ in MTP_PROMPTS]
    logits: list[list[list[float]]] = [[] for _ in MTP_PROMPTS]
    for line in out.stdout.splitlines():
        f = line.split()
        tokens[int(f[0])].append(int(f[2]))
        logits[int(f[0])].append([float(v) for v in f[3:]])
    return tokens, logits


def reference(args, path: pathlib.Path, kw: dict) -> dict:
    ref = run_llamacpp(args.probes[0], path)
    entry = {"writer": kw, "sha256": sha256(path), "prompts": PROMPTS, "logits": ref,
             "spread_avx2": spread(ref, run_llamacpp(args.probes[1], path))}
    if args.kv_bytes:
        entry["kv_bytes_per_token"] = int(subprocess.run([args.kv_bytes, str(path)], capture_output=True, text=True,
                                                         check=True).stdout)
    if kw.get("n_nextn") and args.mtp:
        toks, logits = run_mtp(args.mtp[0], path)
        entry["mtp"] = {"prompts": MTP_PROMPTS, "step_tokens": toks, "logits": logits,
                        "spread_avx2": spread(logits, run_mtp(args.mtp[1], path)[1])}
    return entry


def add_spread(name: str, probe: str, mtp_probe: str | None, archs: list[str]) -> None:
    """spread_<name>: the fixtures' reference logits against one more build of llama.cpp."""
    for arch in archs:
        writer, _ = MODELS[arch]
        dest = ROOT / f"tests/data/reference/{arch}_llamacpp.json"
        fixture = json.loads(dest.read_text())
        with tempfile.TemporaryDirectory() as tmp:
            for model, entry in fixture["models"].items():
                path = pathlib.Path(tmp) / f"{model}.gguf"
                writer(path, **entry["writer"])
                if sha256(path) != entry["sha256"]:
                    raise SystemExit(f"{arch}/{model}: the writer no longer gives the fixture's file")
                entry[f"spread_{name}"] = spread(entry["logits"], run_llamacpp(probe, path))
                if "mtp" in entry and mtp_probe:
                    entry["mtp"][f"spread_{name}"] = spread(entry["mtp"]["logits"], run_mtp(mtp_probe, path)[1])
                print(f"{arch}/{model}: llama.cpp reference vs {name} spread {entry[f'spread_{name}']:.3e}"
                      + (f", MTP {entry['mtp'].get(f'spread_{name}', float('nan')):.3e}" if "mtp" in entry else ""))
        fixture["source"] += f"; spread_{name} added by --spread"
        dest.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spread", nargs="+", metavar="NAME PROBE [MTP_PROBE]",
                    help="add llama.cpp's spread against another build to the fixtures as they are")
    ap.add_argument("--probes", nargs=2, help="llamacpp_logits: reference build, AVX2 build")
    ap.add_argument("--mtp", nargs=2, help="llamacpp_mtp: reference build, AVX2 build")
    ap.add_argument("--kv-bytes", help="llamacpp_kv_bytes")
    ap.add_argument("archs", nargs="*")
    args = ap.parse_args()
    if args.spread:
        if len(args.spread) not in (2, 3):
            ap.error("--spread NAME LOGITS_PROBE [MTP_PROBE]")
        add_spread(args.spread[0], args.spread[1], args.spread[2] if len(args.spread) == 3 else None,
                   args.archs or list(MODELS))
        return
    if not args.probes:
        ap.error("--probes is required")
    for arch in args.archs or list(MODELS):
        writer, models = MODELS[arch]
        result = {"source": "llama.cpp b11434 (ggml 0.26), CPU, scripts/llamacpp_logits.cpp `all`, context 512, "
                            "F16 KV cache, one batch per prompt; reference build native (AVX-512), spread against "
                            "an AVX2-only build (scripts/arch_reference.py)", "models": {}}
        with tempfile.TemporaryDirectory() as tmp:
            for name, kw in models.items():
                path = pathlib.Path(tmp) / f"{name}.gguf"
                writer(path, **kw)
                entry = result["models"][name] = reference(args, path, kw)
                print(f"{arch}/{name}: llama.cpp AVX-512 vs AVX2 spread {entry['spread_avx2']:.3e}"
                      + (f", MTP {entry['mtp']['spread_avx2']:.3e}" if "mtp" in entry else "")
                      + (f", KV {entry['kv_bytes_per_token']} B/token" if "kv_bytes_per_token" in entry else ""))
        dest = ROOT / f"tests/data/reference/{arch}_llamacpp.json"
        dest.write_text(json.dumps(result, separators=(",", ":")) + "\n")
        print(f"wrote {dest} ({dest.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
