"""Writes llama.cpp's (b11434) handling of images by Qwen3-VL / Qwen3.5 projectors
(``qwen3vl_merger``) to tests/data/reference/vision_qwen3vl.json: the smart-resized image libmtmd
fed the encoder and its size, the image rows, the prompt's chunks, the image's token grid and every
image token's M-RoPE positions, the last position's logits and greedy steps, for a seeded tiny
projector (tests/models_vision_qwen.py write_qwen3vl_mmproj) over a tiny random qwen35 text model
(write_tiny_qwen_text: IMROPE, so mtmd uses M-RoPE positions). Images of several sizes and modes
(models_vision.draw_test_image, saved as PNG) so that the smart resize rounds, scales down (over
image_max_tokens), scales up (under image_min_tokens) and pads differently; the token limits are
set per case through mtmd's image_min_tokens / image_max_tokens (the probe's
PROBE_IMAGE_MIN_TOKENS / _MAX_TOKENS), small so the fixture stays small. Each case runs as
scripts/vision_reference.py's do (recorded: 2 threads, flash attention auto; 1 thread; flash
attention off): the largest differences are the case's "spread". Not run in CI: it needs a
llama.cpp build; the probe is scripts/llamacpp_mtmd.cpp, compiled as scripts/vision_reference.py
says.

    python scripts/vision_reference_qwen.py --probe /tmp/probe_mtmd [--out OUT.json]

Fixture: {"generator", "llama_cpp", "runs", "machine" (the recording CPU: cpu_name), "images", "projectors", "text_models", "cases"}, as
vision_gemma3.json's (images[name]: width, height, mode, rgb_sha256; projectors[name] /
text_models[name]: the writer's kwargs and the file's sha256). cases[i]: text_model, projector,
image, prompt_before, prompt_after (the prompt is before + "<__media__>" + after, add_special and
parse_special), n_gen, image_min_tokens / image_max_tokens (null: the type's, 8 and 4096); chunks
([{"type": "text", "ids"} | {"type": "image", "n_tokens", "n_pos", "non_causal"}]); grid ({"nx",
"ny", "mrope"}: mtmd_image_tokens_get_nx / _ny, mtmd_decode_use_mrope); positions (per image token,
the 4 M-RoPE sections llama_decode got, read in mtmd_helper_decode_image_chunk's post-decode
callback); preproc_size ([nx, ny] of the encoder's input); preproc (float32 (3, ny, nx) planar RGB,
flattened); ours_preproc_max_abs (pyllamaspec.vision.image.preprocess with for_projector against
it); embd (n_tokens rows of n_embd_text); logits (the full row after the prompt); n_past; gen (n_gen
greedy steps {"id", "eog", "top": 5 [id, logit]}); spread ({"threads", "flash_attn_off"}: each
{"preproc", "embd", "logits", "gen_same"}, as vision_gemma3.json's). Floats are float32 values in
their shortest form.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vision_reference import gen_record, record_fixture  # noqa: E402
from vision_reference import (ROOT, RUNS, f32, logits_record, sha256, spread,  # noqa: E402
                              write_images, write_projectors)

from models_vision import write_qwen3vl_mmproj, write_tiny_qwen_text  # noqa: E402
from pyllamaspec.vision.image import for_projector, load_image, preprocess  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "vision_qwen3vl.json"

# With patch 2 and 2 x 2 merging, edges are multiples of 4 and a token is 16 pixels; with limits
# 16 .. 64 tokens the area is kept within 256 .. 1024 pixels:
# wide: over the max (48x40 -> 32x28, one black row at the bottom); big: far over (100x60 ->
# 40x24, a wide bicubic support); tall_rgba: alpha dropped, edges 4.5 and 8.5 patches (C's round
# takes them up: 20x36; Python's round would not); thin: padded on the right (10x30 -> 11x32 in
# 12x32); small_grey: grey, under the min (12x8 -> 20x16, padded top and bottom); exact: already
# multiples within the limits (a plain copy); tiny: under the type's own min of 8 tokens (8x6 -> 16x12)
IMAGES = {"wide": (48, 40, "RGB"), "big": (100, 60, "RGB"), "tall_rgba": (18, 34, "RGBA"),
          "thin": (10, 30, "RGB"), "small_grey": (12, 8, "L"), "exact": (16, 24, "RGB"), "tiny": (8, 6, "RGB")}
PROJECTORS = {"q32": dict(n_embd_text=32, seed=1)}
TEXT_MODELS = {"tiny_qwen35": dict(n_vocab=272, n_embd=32, seed=3)}
LIMITS = (16, 64)
CASES = [dict(text_model="tiny_qwen35", projector="q32", image=name, prompt_before="look: ",
              prompt_after=" what is it?", n_gen=4,
              image_min_tokens=None if name == "tiny" else LIMITS[0],
              image_max_tokens=None if name == "tiny" else LIMITS[1]) for name in IMAGES]


def write_files(tmp: pathlib.Path) -> tuple[dict, dict, dict, dict]:
    images, image_paths = write_images(tmp, IMAGES)
    projectors, proj_paths = write_projectors(tmp, PROJECTORS, write_qwen3vl_mmproj)
    texts, text_paths = {}, {}
    for name, kw in TEXT_MODELS.items():
        text_paths[name] = tmp / f"{name}.gguf"
        write_tiny_qwen_text(text_paths[name], **kw)
        texts[name] = {"kwargs": kw, "writer": "models_vision_qwen.write_tiny_qwen_text",
                       "sha256": sha256(text_paths[name].read_bytes())}
    return images, projectors, texts, {"images": image_paths, "projectors": proj_paths, "text_models": text_paths}


def token_env(case: dict) -> dict:
    env = {}
    if case["image_min_tokens"] is not None:
        env["PROBE_IMAGE_MIN_TOKENS"] = str(case["image_min_tokens"])
    if case["image_max_tokens"] is not None:
        env["PROBE_IMAGE_MAX_TOKENS"] = str(case["image_max_tokens"])
    return env


def our_preproc(image: pathlib.Path, case: dict, proj_kwargs: dict) -> np.ndarray:
    """Our preprocess of the same PNG, with the writer's defaults (image_size 16, patch 2, merge 2,
    mean = std = 0.5) unless the projector's kwargs say otherwise."""
    kw = dict(dict(image_size=16, patch_size=2, merge=2, mean=(0.5,) * 3, std=(0.5,) * 3), **proj_kwargs)
    p = for_projector("qwen3vl_merger", kw["image_size"], kw["patch_size"], kw["merge"], kw["mean"], kw["std"],
                      min_tokens=case["image_min_tokens"], max_tokens=case["image_max_tokens"])
    return preprocess(load_image(image), p)


def record(case: dict, runs: dict, image: pathlib.Path) -> dict:
    r = runs["recorded"]
    (i_img, (nx, ny, mrope)), = r["grids"].items()   # one image a case
    ours = our_preproc(image, case, PROJECTORS[case["projector"]])
    same_shape = ours.shape == (3, r["preproc_size"][1], r["preproc_size"][0])
    rec = dict(case)
    rec.update({"chunks": r["chunks"], "grid": {"nx": nx, "ny": ny, "mrope": mrope},
                "positions": r["positions"][i_img], "preproc_size": list(r["preproc_size"]),
                "preproc": f32(r["preproc"]),
                "ours_preproc_max_abs": float(np.abs(ours.ravel() - r["preproc"]).max()) if same_shape else None,
                "embd": [f32(row) for row in r["embd"]], "logits": logits_record(r["logits"]), "n_past": r["n_past"],
                "gen": gen_record(r["gen"]),
                "spread": {name: spread(r, runs[name]) for name in RUNS if name != "recorded"}})
    return rec


def main() -> None:
    record_fixture(__doc__, "vision_reference_qwen.py", OUT, write_files, CASES, record, token_env)


if __name__ == "__main__":
    main()
