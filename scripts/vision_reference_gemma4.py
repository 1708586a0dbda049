"""Writes llama.cpp's (b11434) handling of images by Gemma 4's projector (``gemma4v``) to
tests/data/reference/vision_gemma4v.json: the dyn-size resized image libmtmd fed the encoder, the
image rows, the prompt's chunks (Gemma 4's markers, non-causal), the last position's logits and
greedy steps, for a seeded tiny projector (tests/models_vision_gemma4.py write_gemma4v_mmproj,
with Gemma4ClippableLinear clamps) over a tiny random gemma4 text model with per-layer inputs
(write_tiny_gemma4_text: an image's rows read token 0's per-layer embedding). Images of several
sizes and modes so that the resize rounds, scales down, scales up and copies; the token limits
per case through the probe's PROBE_IMAGE_MIN_TOKENS / _MAX_TOKENS (one case with the type's own,
70 .. 1120). Each case runs as scripts/vision_reference.py's do (recorded: 2 threads, flash
attention auto; 1 thread; flash attention off): the largest differences are its "spread". Not run
in CI: it needs a llama.cpp build; the probe is scripts/llamacpp_mtmd.cpp, compiled as
scripts/vision_reference.py says.

    python scripts/vision_reference_gemma4.py --probe /tmp/probe_mtmd [--out OUT.json]

Fixture: as vision_qwen3vl.json's (scripts/vision_reference_qwen.py), less the M-RoPE positions.
preproc is what the probe reads as the encoder's "inp_raw" after the graph ran: gemma4v's first
node (2x - 1) runs in place on it, so it is mtmd's x / 255 (mean 0, std 1) taken to [-1, 1];
ours_preproc_max_abs compares 2 * ours - 1 with it.
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vision_reference import gen_record, record_fixture  # noqa: E402
from vision_reference import (ROOT, RUNS, f32, logits_record, sha256, spread,  # noqa: E402
                              write_images, write_projectors)
from vision_reference_qwen import token_env  # noqa: E402

from models_vision_gemma4 import write_gemma4v_mmproj, write_tiny_gemma4_text  # noqa: E402
from pyllamaspec.vision.image import for_projector, load_image, preprocess  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "vision_gemma4v.json"

# Patch 2 pooled 3 x 3: edges are multiples of 6, a token is 36 pixels; limits 8 .. 32 tokens keep
# the area within 288 .. 1152 pixels. wide: over the max (48x40 -> 8x7 tokens, scaled down);
# tall_rgba: alpha dropped, rounded; small_grey: under the min, scaled up; exact: already
# multiples within the limits (a plain copy); default: the type's own limits (70 .. 1120 tokens:
# scaled up to 80 tokens, 720 patches)
IMAGES = {"wide": (48, 40, "RGB"), "tall_rgba": (18, 34, "RGBA"), "small_grey": (12, 8, "L"),
          "exact": (36, 24, "RGB"), "default": (40, 30, "RGB")}
PROJECTORS = {"g64": dict(n_embd_text=64, seed=1)}
TEXT_MODELS = {"tiny_gemma4": dict(n_vocab=272, n_embd=64, seed=3, tied=False)}
LIMITS = (8, 32)
CASES = [dict(text_model="tiny_gemma4", projector="g64", image=name, prompt_before="look: ",
              prompt_after=" what is it?", n_gen=6,
              image_min_tokens=None if name == "default" else LIMITS[0],
              image_max_tokens=None if name == "default" else LIMITS[1]) for name in IMAGES]
WRITER_DEFAULTS = dict(image_size=24, patch_size=2, scale_factor=3, mean=(0.0,) * 3, std=(1.0,) * 3)


def write_files(tmp: pathlib.Path) -> tuple[dict, dict, dict, dict]:
    images, image_paths = write_images(tmp, IMAGES)
    projectors, proj_paths = write_projectors(tmp, PROJECTORS, write_gemma4v_mmproj)
    texts, text_paths = {}, {}
    for name, kw in TEXT_MODELS.items():
        text_paths[name] = tmp / f"{name}.gguf"
        write_tiny_gemma4_text(text_paths[name], **kw)
        texts[name] = {"kwargs": kw, "writer": "models_vision_gemma4.write_tiny_gemma4_text",
                       "sha256": sha256(text_paths[name].read_bytes())}
    return images, projectors, texts, {"images": image_paths, "projectors": proj_paths, "text_models": text_paths}


def our_preproc(image: pathlib.Path, case: dict, proj_kwargs: dict) -> np.ndarray:
    kw = dict(WRITER_DEFAULTS, **proj_kwargs)
    p = for_projector("gemma4v", kw["image_size"], kw["patch_size"], kw["scale_factor"], kw["mean"], kw["std"],
                      min_tokens=case["image_min_tokens"], max_tokens=case["image_max_tokens"])
    return preprocess(load_image(image), p)


def record(case: dict, runs: dict, image: pathlib.Path) -> dict:
    r = runs["recorded"]
    ours = our_preproc(image, case, PROJECTORS[case["projector"]])
    same_shape = ours.shape == (3, r["preproc_size"][1], r["preproc_size"][0])
    rec = dict(case)
    rec.update({"chunks": r["chunks"], "preproc_size": list(r["preproc_size"]), "preproc": f32(r["preproc"]),
                "ours_preproc_max_abs": float(np.abs((2 * ours - 1).ravel() - r["preproc"]).max()) if same_shape else None,
                "embd": [f32(row) for row in r["embd"]], "logits": logits_record(r["logits"]), "n_past": r["n_past"],
                "gen": gen_record(r["gen"]),
                "spread": {name: spread(r, runs[name]) for name in RUNS if name != "recorded"}})
    return rec


def main() -> None:
    record_fixture(__doc__, "vision_reference_gemma4.py", OUT, write_files, CASES, record, token_env)


if __name__ == "__main__":
    main()
