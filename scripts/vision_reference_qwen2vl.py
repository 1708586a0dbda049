"""Writes llama.cpp's (b11434) handling of images by Qwen2-VL / Qwen2.5-VL projectors
(``qwen2vl_merger``, ``qwen2.5vl_merger``) to tests/data/reference/vision_qwen2vl.json: for seeded
tiny projectors of both types (tests/models_vision_qwen.py write_qwen2vl_mmproj: patch 14, CLIP's
mean and std, 2.5's windows of 112 pixels = 4 x 4 rows) over a tiny random ``qwen2vl`` text model
(write_tiny_qwen2vl_text: M-RoPE, so mtmd places images 2-D), the smart-resized size libmtmd fed
the encoder and the sha256 of its float32 pixels (the pixels themselves are large at patch 14;
ours must equal them to the bit), the image rows, the prompt's chunks, the token grid and every
image token's M-RoPE positions, the logits after the prompt and greedy steps. Images (drawn by
models_vision.draw_test_image, saved as PNG): ``win`` 160x150 -> 168x140, 6 x 5 rows in four
windows of 4 x 4, 2 x 4, 4 x 1 and 2 x 1 (windows matter); ``tall_rgba`` 40x100 -> 56x140 (under
the type's 8 tokens: scaled up), 2 x 5 rows in two windows; ``small`` 60x50 -> 112x84, 4 x 3 rows
in one window (window attention changes nothing: the norm's negative control). Each case runs
as scripts/vision_reference.py's do (2 threads, flash attention auto; 1 thread; flash attention
off): the largest differences are the case's "spread". Not run in CI: it needs the probe
(scripts/llamacpp_mtmd.cpp, compiled as scripts/vision_reference.py says).

    python scripts/vision_reference_qwen2vl.py --probe /tmp/probe_mtmd [--out OUT.json]

Fixture: as vision_qwen3vl.json's (scripts/vision_reference_qwen.py), except that ``preproc`` is
``preproc_sha256`` (the float32 planar RGB's bytes) and there are no token limits (the type's 8 ..
4096). cases[i]: text_model, projector, image, prompt_before, prompt_after, n_gen; chunks; grid;
positions; preproc_size; preproc_sha256; ours_preproc_max_abs; embd; logits; n_past; gen;
spread ({"threads", "flash_attn_off"}: each {"preproc", "embd", "logits", "gen_same"}).
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vision_reference import gen_record, record_fixture  # noqa: E402
from vision_reference import (ROOT, RUNS, f32, logits_record, sha256, spread,  # noqa: E402
                              write_images, write_projectors)

from models_vision_qwen import write_qwen2vl_mmproj, write_tiny_qwen2vl_text  # noqa: E402
from pyllamaspec.vision.image import for_projector, load_image, preprocess  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "vision_qwen2vl.json"

IMAGES = {"win": (160, 150, "RGB"), "tall_rgba": (40, 100, "RGBA"), "small": (60, 50, "RGB")}
PROJECTORS = {"q2": dict(kind="qwen2vl", n_embd_text=32, seed=1), "q25": dict(kind="qwen25vl", n_embd_text=32, seed=2)}
TEXT_MODELS = {"tiny_qwen2vl": dict(n_vocab=272, n_embd=32, seed=3)}
TYPES = {"qwen2vl": "qwen2vl_merger", "qwen25vl": "qwen2.5vl_merger"}
CASES = [dict(text_model="tiny_qwen2vl", projector=proj, image=name, prompt_before="look: ",
              prompt_after=" what is it?", n_gen=4) for proj in PROJECTORS for name in IMAGES]


def write_files(tmp: pathlib.Path) -> tuple[dict, dict, dict, dict]:
    images, image_paths = write_images(tmp, IMAGES)
    projectors, proj_paths = write_projectors(tmp, PROJECTORS, write_qwen2vl_mmproj)
    texts, text_paths = {}, {}
    for name, kw in TEXT_MODELS.items():
        text_paths[name] = tmp / f"{name}.gguf"
        write_tiny_qwen2vl_text(text_paths[name], **kw)
        texts[name] = {"kwargs": kw, "writer": "models_vision_qwen.write_tiny_qwen2vl_text",
                       "sha256": sha256(text_paths[name].read_bytes())}
    return images, projectors, texts, {"images": image_paths, "projectors": proj_paths, "text_models": text_paths}


def our_preproc(image: pathlib.Path, proj_kwargs: dict) -> np.ndarray:
    """Our preprocess of the same PNG with the writer's defaults (patch 14, merge 2, CLIP's mean / std)."""
    from models_vision_qwen import CLIP_MEAN, CLIP_STD

    p = for_projector(TYPES[proj_kwargs["kind"]], proj_kwargs.get("image_size", 56), proj_kwargs.get("patch_size", 14),
                      2, proj_kwargs.get("mean", CLIP_MEAN), proj_kwargs.get("std", CLIP_STD))
    return preprocess(load_image(image), p)


def record(case: dict, runs: dict, image: pathlib.Path) -> dict:
    r = runs["recorded"]
    (i_img, (nx, ny, mrope)), = r["grids"].items()   # one image a case
    ours = our_preproc(image, PROJECTORS[case["projector"]])
    same_shape = ours.shape == (3, r["preproc_size"][1], r["preproc_size"][0])
    rec = dict(case)
    rec.update({"chunks": r["chunks"], "grid": {"nx": nx, "ny": ny, "mrope": mrope},
                "positions": r["positions"][i_img], "preproc_size": list(r["preproc_size"]),
                "preproc_sha256": sha256(np.asarray(r["preproc"], "<f4").tobytes()),
                "ours_preproc_max_abs": float(np.abs(ours.ravel() - r["preproc"]).max()) if same_shape else None,
                "embd": [f32(row) for row in r["embd"]], "logits": logits_record(r["logits"]), "n_past": r["n_past"],
                "gen": gen_record(r["gen"]),
                "spread": {name: spread(r, runs[name]) for name in RUNS if name != "recorded"}})
    return rec


def main() -> None:
    record_fixture(__doc__, "vision_reference_qwen2vl.py", OUT, write_files, CASES, record)


if __name__ == "__main__":
    main()
