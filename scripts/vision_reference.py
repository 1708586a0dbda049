"""Writes llama.cpp's (b11434) handling of images by Gemma 3 projectors to
tests/data/reference/vision_gemma3.json: the preprocessed image libmtmd fed the encoder, the image
embeddings, the prompt's chunks, the last position's logits and greedy steps, for seeded tiny
projectors (tests/models_vision.py write_gemma3_mmproj) over the real Gemma 3 270M and over a tiny
random gemma3 text model (tests/models.py write_gguf with models_vision.image_marker_kv). The
images are drawn by models_vision.draw_test_image and saved as PNG (lossless: the test redraws the
pixels and checks their sha256). Each case runs three times: the recorded run (2 threads, flash
attention auto: on, on the CPU), with 1 thread, and with flash attention off (other kernels: the
encoder's K and V stay F32): the largest differences are the case's "spread". Not run in CI: it
needs a llama.cpp build.

    L=/path/to/llama.cpp B=/path/to/build   (static: BUILD_SHARED_LIBS=OFF)
    g++ -O2 -std=c++17 scripts/llamacpp_mtmd.cpp -I $L/include -I $L/ggml/include -I $L/tools/mtmd \\
        $B/tools/mtmd/libmtmd.a $B/vendor/hash/libvendor-hash.a $B/src/libllama.a \\
        $B/ggml/src/libggml.a $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a \\
        -fopenmp -lpthread -ldl -o /tmp/probe_mtmd
    (GCC 12 on a CPU with AMX: compile ggml-cpu/amx/mmq.cpp with -include csrc/compat/gcc_amx_tilecfg.h,
    as this project's build does, or llama.cpp's AMX products fault: SIGILL)
    python scripts/vision_reference.py --probe /tmp/probe_mtmd [--out OUT.json]
    python scripts/vision_reference.py --probe /tmp/probe_mtmd --add-machine NAME   (another CPU's spread)

Fixture: {"generator", "llama_cpp", "runs" (the probe's environment per run), "images",
"projectors", "text_models", "cases"}.
images[name]: width, height, mode (draw_test_image's), rgb_sha256 (of the drawn array's bytes).
projectors[name] / text_models[name]: the writer's kwargs and the file's sha256 (the real model:
"real": "gemma3", models.real_model_path's file). cases[i]: text_model, projector, image,
prompt_before, prompt_after (the prompt is before + "<__media__>" + after, add_special and
parse_special), n_gen; chunks ([{"type": "text", "ids"} | {"type": "image", "n_tokens", "n_pos",
"non_causal"}]); preproc (float32 (3, n, n) planar RGB, flattened); ours_preproc_max_abs (our
pyllamaspec.vision.image.preprocess against it); embd (n_tokens rows of n_embd_text); logits (the
last prompt position: the full row, or for the real model's 262144 entries {"top": 64 [id, logit]
at full precision, "f16_zlib_b64": the row as little-endian float16, zlib, base64}); n_past; gen
(n_gen greedy steps {"id", "eog", "top": 5 [id, logit]}, each after the previous was decoded);
spread ({"threads": ..., "flash_attn_off": ...}, each {"preproc", "embd", "logits": max abs
differences from the recorded run, "gen_same": whether it chose the same tokens}; --add-machine
NAME adds spread[NAME]: the recorded settings on another CPU, "machines"[NAME] naming it; the real
model's logits there against the recorded F16 row). Floats are float32 values in their shortest form.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import zlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from models import real_model_path, write_gguf  # noqa: E402
from models_vision import draw_test_image, image_marker_kv, write_gemma3_mmproj  # noqa: E402

from pyllamaspec.vision.image import Preprocess, load_image, preprocess  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "vision_gemma3.json"
RUNS = {"recorded": {"PROBE_THREADS": "2"}, "threads": {"PROBE_THREADS": "1"},
        "flash_attn_off": {"PROBE_THREADS": "2", "PROBE_FLASH_ATTN": "off"}}

# wide: padded top and bottom (48x40 -> 32x27); square: exactly image_size (a plain copy);
# tall_rgba: alpha dropped, padded left and right (30x50 -> 20x32);
# small_grey: grey, upscaled (20x12 -> 32x20)
IMAGES = {"wide": (48, 40, "RGB"), "square": (32, 32, "RGB"), "tall_rgba": (30, 50, "RGBA"),
          "small_grey": (20, 12, "L")}
PROJECTORS = {"p640": dict(n_embd_text=640, seed=1), "p32": dict(n_embd_text=32, seed=2)}
TEXT_MODELS = {"gemma3-270m": None,
               "tiny": dict(arch="gemma3", n_vocab=272, seed=3)}  # + extra_kv=image_marker_kv(n_vocab)
GEMMA_BEFORE = "<start_of_turn>user\n"
GEMMA_AFTER = "What is in this picture?<end_of_turn>\n<start_of_turn>model\n"
CASES = [dict(text_model="gemma3-270m", projector="p640", image="wide", prompt_before=GEMMA_BEFORE,
              prompt_after=GEMMA_AFTER, n_gen=8)]
CASES += [dict(text_model="tiny", projector="p32", image=name, prompt_before="look: ", prompt_after=" what is it?",
               n_gen=4) for name in IMAGES]
REAL_TOP = 64


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def f32(values) -> list[float]:
    """float32 values as the shortest decimals that read back to them."""
    return [float(str(v)) for v in np.asarray(values, np.float32).ravel()]


def write_images(tmp: pathlib.Path, specs: dict) -> tuple[dict, dict]:
    """Each (width, height, mode) of specs drawn (draw_test_image) and saved as tmp/NAME.png:
    the fixture's records of them and their paths."""
    from PIL import Image

    images, image_paths = {}, {}
    for name, (w, h, mode) in specs.items():
        arr = draw_test_image(w, h, mode)
        image_paths[name] = tmp / f"{name}.png"
        Image.fromarray(arr, mode).save(image_paths[name])
        images[name] = {"width": w, "height": h, "mode": mode, "rgb_sha256": sha256(arr.tobytes())}
    return images, image_paths


def write_projectors(tmp: pathlib.Path, specs: dict, writer) -> tuple[dict, dict]:
    """Each projector of specs (name -> the writer's kwargs) written by writer: (fixture records, paths)."""
    projectors, proj_paths = {}, {}
    for name, kw in specs.items():
        proj_paths[name] = tmp / f"{name}.gguf"
        writer(proj_paths[name], **kw)
        projectors[name] = {"kwargs": kw, "sha256": sha256(proj_paths[name].read_bytes())}
    return projectors, proj_paths


def write_files(tmp: pathlib.Path) -> tuple[dict, dict, dict, dict]:
    images, image_paths = write_images(tmp, IMAGES)
    projectors, proj_paths = write_projectors(tmp, PROJECTORS, write_gemma3_mmproj)
    texts, text_paths = {}, {}
    for name, kw in TEXT_MODELS.items():
        if kw is None:
            text_paths[name] = real_model_path("gemma3")
            texts[name] = {"real": "gemma3", "sha256": sha256(text_paths[name].read_bytes())}
            continue
        text_paths[name] = tmp / f"{name}.gguf"
        write_gguf(text_paths[name], extra_kv=image_marker_kv(kw["n_vocab"]), **kw)
        texts[name] = {"kwargs": kw, "extra_kv": "models_vision.image_marker_kv(n_vocab)",
                       "sha256": sha256(text_paths[name].read_bytes())}
    paths = {"images": image_paths, "projectors": proj_paths, "text_models": text_paths}
    return images, projectors, texts, paths


def run_probe(probe: str, text: pathlib.Path, proj: pathlib.Path, image: pathlib.Path, case: dict,
              run_env: dict) -> dict:
    env = dict(os.environ, **run_env)
    res = subprocess.run([probe, str(text), str(proj), str(image), case["prompt_before"], case["prompt_after"],
                          str(case["n_gen"])], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise SystemExit(f"probe failed ({res.returncode}): {res.stderr[-2000:]}")
    out: dict = {"chunks": [], "embd": [], "gen": [], "grids": {}, "positions": {}}
    for line in res.stdout.splitlines():
        f = line.split()
        if f[0] == "grid":      # image chunk -> (nx, ny, M-RoPE)
            out["grids"][int(f[1])] = (int(f[2]), int(f[3]), bool(int(f[4])))
        elif f[0] == "pos":     # image chunk -> its tokens' positions, one per section
            out["positions"].setdefault(int(f[1]), []).append([int(x) for x in f[3:]])
        elif f[0] == "chunk" and f[2] == "text":
            out["chunks"].append({"type": "text", "ids": [int(x) for x in f[4:]]})
        elif f[0] == "chunk":
            out["chunks"].append({"type": "image", "n_tokens": int(f[3]), "n_pos": int(f[4]),
                                  "non_causal": bool(int(f[5]))})
        elif f[0] == "preproc":
            out["preproc_size"] = (int(f[1]), int(f[2]))
            out["preproc"] = np.array(f[3:], np.float32)
        elif f[0] == "embd":
            out["embd"].append(np.array(f[2:], np.float32))
        elif f[0] == "logits":
            out["logits"] = np.array(f[2:], np.float32)
        elif f[0] == "n_past":
            out["n_past"] = int(f[1])
        elif f[0] == "gen":
            top = [(int(p.split(":")[0]), np.float32(p.split(":")[1])) for p in f[4:]]
            out["gen"].append({"id": int(f[2]), "eog": bool(int(f[3])), "top": top})
    out["embd"] = np.stack(out["embd"])
    return out


def logits_record(row: np.ndarray) -> object:
    if row.size <= 4096:
        return f32(row)
    top = np.argsort(-row, kind="stable")[:REAL_TOP]
    packed = zlib.compress(row.astype("<f2").tobytes(), 9)
    return {"top": [[int(i), f32([row[i]])[0]] for i in top], "f16_zlib_b64": base64.b64encode(packed).decode()}


def spread(a: dict, b: dict) -> dict:
    return {"preproc": float(np.abs(a["preproc"] - b["preproc"]).max()),
            "embd": float(np.abs(a["embd"] - b["embd"]).max()),
            "logits": float(np.abs(a["logits"] - b["logits"]).max()),
            "gen_same": [g["id"] for g in a["gen"]] == [g["id"] for g in b["gen"]]}


def our_preproc_diff(image: pathlib.Path, proj_kwargs: dict, theirs: np.ndarray) -> float:
    """Our preprocess of the same PNG, against llama.cpp's; gemma3: bilinear, pad ceil, black."""
    kw = {"image_size": 32, "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    kw.update({k: tuple(v) if isinstance(v, list) else v for k, v in proj_kwargs.items() if k in kw})
    ours = preprocess(load_image(image), Preprocess(**kw))
    return float(np.abs(ours.ravel() - theirs).max())


def recorded_run(c: dict) -> dict:
    """A case's recorded run as spread() reads it (the real model's logits: its F16 row)."""
    lg = c["logits"]
    if isinstance(lg, dict):
        lg = np.frombuffer(zlib.decompress(base64.b64decode(lg["f16_zlib_b64"])), "<f2").astype(np.float32)
    return {"preproc": np.array(c["preproc"], np.float32), "embd": np.array(c["embd"], np.float32),
            "logits": np.asarray(lg, np.float32), "gen": c["gen"]}


def cpu_name() -> str:
    """The machine's processor and the SIMD extensions that choose ggml's CPU kernels."""
    info = pathlib.Path("/proc/cpuinfo").read_text() if pathlib.Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    simd = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_int8") if f in flags]
    return f"{model} ({', '.join(simd) or 'no x86 SIMD flags'})"


def add_machine(probe: str, out_path: pathlib.Path, name: str) -> None:
    """llama.cpp's own results on this machine (the recorded run's settings) against the recorded
    ones, stored as each case's spread[name]: how far llama.cpp moves between CPUs (another
    instruction set picks other kernels: AMX tiles, native F16 attention). The recorded data stay."""
    out = json.loads(out_path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        images, projectors, texts, paths = write_files(pathlib.Path(tmp))
        if (images, projectors, texts) != (out["images"], out["projectors"], out["text_models"]):
            raise SystemExit("the files this script writes are not the fixture's (another writer or model)")
        for c in out["cases"]:
            files = (paths["text_models"][c["text_model"]], paths["projectors"][c["projector"]],
                     paths["images"][c["image"]])
            here = run_probe(probe, *files, c, RUNS["recorded"])
            c["spread"][name] = spread(recorded_run(c), here)
            print(f"{c['text_model']} + {c['image']}: {name} {c['spread'][name]}")
    out.setdefault("machines", {})[name] = cpu_name()
    out_path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {out_path} ({out_path.stat().st_size} bytes)")


def gen_record(gen: list) -> list:
    """The probe's greedy steps as a fixture keeps them: id, eog, the top 5 [id, logit] as F32."""
    return [{"id": g["id"], "eog": g["eog"], "top": [[i, f32([v])[0]] for i, v in g["top"]]} for g in gen]


def record_fixture(doc: str, script: str, default_out: pathlib.Path, write_files, cases: list, record,
                   env_for=lambda case: {}) -> None:
    """The main of a fixture recorder (vision_reference_qwen.py and its kin): --probe / --out, each
    case through the probe in every run of RUNS (env_for(case): the case's extra environment),
    record(case, runs, image) its record; the fixture written as compact JSON. --add-machine NAME
    keeps the fixture and adds llama.cpp's distance on this machine (or this probe's build: say
    an AVX2 one) from the recorded run as each case's spread[NAME] (machine_spread)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--probe", required=True, help="scripts/llamacpp_mtmd.cpp, compiled")
    ap.add_argument("--out", type=pathlib.Path, default=default_out)
    ap.add_argument("--add-machine", metavar="NAME",
                    help="keep the fixture; add llama.cpp's spread on this machine as each case's spread[NAME]")
    ap.add_argument("--note", default="", help="with --add-machine: what the probe's build is (say, AVX2 only)")
    args = ap.parse_args()
    if args.add_machine:
        add_machine_records(args.probe, args.out, args.add_machine, args.note, write_files, cases, record, env_for)
        return
    out = {"generator": f"scripts/{script} (llama.cpp b11434, CPU, scripts/llamacpp_mtmd.cpp)",
           "llama_cpp": "b11434", "runs": RUNS, "machine": cpu_name()}
    with tempfile.TemporaryDirectory() as tmp:
        out["images"], out["projectors"], out["text_models"], paths = write_files(pathlib.Path(tmp))
        out["cases"] = []
        for case in cases:
            files = _case_files(paths, case)
            runs = {name: run_probe(args.probe, *files, case, dict(env, **env_for(case))) for name, env in RUNS.items()}
            rec = record(case, runs, files[2])
            out["cases"].append(rec)
            print(f"{case['projector']} {case['image']}: -> {rec['preproc_size']}, grid {rec.get('grid')}, "
                  f"rows {len(rec['embd'])} x {len(rec['embd'][0])}, n_past {rec['n_past']}, "
                  f"gen {[g['id'] for g in rec['gen']]}, ours-preproc {rec['ours_preproc_max_abs']}, "
                  f"spread {rec['spread']}")
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


def _case_files(paths: dict, case: dict) -> tuple:
    return (paths["text_models"][case["text_model"]], paths["projectors"][case["projector"]],
            paths["images"][case["image"]])


def machine_spread(old: dict, new: dict) -> dict:
    """How far a case's record on another machine is from the recorded one, in spread's keys: the
    largest differences of the preprocessed image (where the record keeps it; else 0.0 if its
    sha256 is the same, else the case is refused), the rows and the logits, and gen_same."""
    if "preproc" in old:
        pre = float(np.abs(np.asarray(old["preproc"], np.float64) - np.asarray(new["preproc"], np.float64)).max())
    elif old.get("preproc_sha256") == new.get("preproc_sha256"):
        pre = 0.0
    else:
        raise SystemExit("the preprocessed image differs and the fixture keeps only its sha256")
    dist = {k: float(np.abs(np.asarray(old[k], np.float64) - np.asarray(new[k], np.float64)).max())
            for k in ("embd", "logits")}
    return {"preproc": pre, **dist, "gen_same": [g["id"] for g in old["gen"]] == [g["id"] for g in new["gen"]]}


def add_machine_records(probe: str, out_path: pathlib.Path, name: str, note: str, write_files, cases: list,
                        record, env_for) -> None:
    """record_fixture's --add-machine: each case once, in the recorded run's settings, recorded as
    the fixture records it and compared with the recorded case (the recorded data stay)."""
    out = json.loads(out_path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        images, projectors, texts, paths = write_files(pathlib.Path(tmp))
        as_stored = json.loads(json.dumps([images, projectors, texts]))    # tuples as the JSON's lists
        if as_stored != [out["images"], out["projectors"], out["text_models"]]:
            raise SystemExit("the files this script writes are not the fixture's (another writer or model)")
        for case, old in zip(cases, out["cases"], strict=True):
            files = _case_files(paths, case)
            here = run_probe(probe, *files, case, dict(RUNS["recorded"], **env_for(case)))
            new = record(case, {run: here for run in RUNS}, files[2])
            old["spread"][name] = machine_spread(old, new)
            print(f"{case['projector']} {case['image']}: {name} {old['spread'][name]}")
    out.setdefault("machines", {})[name] = cpu_name() + (f"; {note}" if note else "")
    out_path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {out_path} ({out_path.stat().st_size} bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", required=True, help="scripts/llamacpp_mtmd.cpp, compiled")
    ap.add_argument("--out", type=pathlib.Path, default=OUT)
    ap.add_argument("--add-machine", metavar="NAME",
                    help="keep the fixture; add llama.cpp's spread on this machine as each case's spread[NAME]")
    args = ap.parse_args()
    if args.add_machine:
        add_machine(args.probe, args.out, args.add_machine)
        return
    out = {"generator": "scripts/vision_reference.py (llama.cpp b11434, CPU, scripts/llamacpp_mtmd.cpp)",
           "llama_cpp": "b11434", "runs": RUNS}
    with tempfile.TemporaryDirectory() as tmp:
        out["images"], out["projectors"], out["text_models"], paths = write_files(pathlib.Path(tmp))
        out["cases"] = []
        for case in CASES:
            files = (paths["text_models"][case["text_model"]], paths["projectors"][case["projector"]],
                     paths["images"][case["image"]])
            runs = {name: run_probe(args.probe, *files, case, env) for name, env in RUNS.items()}
            r = runs["recorded"]
            rec = dict(case)
            rec.update({"chunks": r["chunks"], "preproc_size": list(r["preproc_size"]), "preproc": f32(r["preproc"]),
                        "ours_preproc_max_abs": our_preproc_diff(files[2], PROJECTORS[case["projector"]], r["preproc"]),
                        "embd": [f32(row) for row in r["embd"]], "logits": logits_record(r["logits"]),
                        "n_past": r["n_past"],
                        "gen": gen_record(r["gen"]),
                        "spread": {name: spread(r, runs[name]) for name in RUNS if name != "recorded"}})
            out["cases"].append(rec)
            sizes = [c.get("n_tokens", len(c.get("ids", []))) for c in r["chunks"]]
            print(f"{case['text_model']} + {case['projector']} + {case['image']}: chunks {sizes}, "
                  f"gen {[g['id'] for g in r['gen']]}, ours-preproc {rec['ours_preproc_max_abs']}, "
                  f"spread {rec['spread']}")
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
