"""Writes llama.cpp's (b11434) handling of images by Pixtral / Mistral Small 3.x projectors
(``pixtral``) to tests/data/reference/vision_pixtral.json: for seeded tiny projectors
(tests/models_vision_pixtral.py write_pixtral_mmproj: patch 4; ``ms31`` with Mistral Small 3.1's
2 x 2 patch merger, ``pixtral`` without, as the original Pixtral 12B) over a tiny random
``mistral3`` text model (write_tiny_mistral3_text: [IMG], [IMG_BREAK], [IMG_END] single tokens),
the size libmtmd fed the encoder and the sha256 of its float32 pixels (ours must equal them to the
bit), the image rows ([IMG_BREAK] rows included), the prompt's chunks ([IMG_END] after the image),
the logits after the prompt and greedy steps. Images (models_vision.draw_test_image, saved as
PNG): ``wide`` 100x60 -> 104x64 (ms31: 13 x 8 rows and 7 breaks), ``tall_rgba`` 30x70 -> 32x72
(alpha dropped), ``small`` 20x12 (ms31: under the type's 8 tokens, scaled up to 32x24). Each case runs as
scripts/vision_reference.py's do (2 threads, flash attention auto; 1 thread; flash attention off):
the largest differences are the case's "spread". Not run in CI: it needs the probe
(scripts/llamacpp_mtmd.cpp, compiled as its header says).

    python scripts/vision_reference_pixtral.py --probe /tmp/probe_mtmd_qwen [--out OUT.json]

Fixture: as vision_qwen2vl.json's (scripts/vision_reference_qwen2vl.py), without positions (one
position a row). cases[i]: text_model, projector, image, prompt_before, prompt_after, n_gen;
chunks; grid; preproc_size; preproc_sha256; ours_preproc_max_abs; embd; logits; n_past; gen;
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

from models_vision_pixtral import (PIXTRAL_MEAN, PIXTRAL_STD, write_pixtral_mmproj,  # noqa: E402
                                   write_tiny_mistral3_text)
from pyllamaspec.vision.image import for_projector, load_image, preprocess  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "vision_pixtral.json"

IMAGES = {"wide": (100, 60, "RGB"), "tall_rgba": (30, 70, "RGBA"), "small": (20, 12, "RGB")}
PROJECTORS = {"ms31": dict(n_embd_text=32, seed=1), "pixtral": dict(n_embd_text=32, seed=2, merge=1)}
TEXT_MODELS = {"tiny_mistral3": dict(n_vocab=272, n_embd=32, seed=3)}
CASES = [dict(text_model="tiny_mistral3", projector=proj, image=name, prompt_before="look: ",
              prompt_after=" what is it?", n_gen=4) for proj in PROJECTORS for name in IMAGES]


def write_files(tmp: pathlib.Path) -> tuple[dict, dict, dict, dict]:
    images, image_paths = write_images(tmp, IMAGES)
    projectors, proj_paths = write_projectors(tmp, PROJECTORS, write_pixtral_mmproj)
    texts, text_paths = {}, {}
    for name, kw in TEXT_MODELS.items():
        text_paths[name] = tmp / f"{name}.gguf"
        write_tiny_mistral3_text(text_paths[name], **kw)
        texts[name] = {"kwargs": kw, "writer": "models_vision_pixtral.write_tiny_mistral3_text",
                       "sha256": sha256(text_paths[name].read_bytes())}
    return images, projectors, texts, {"images": image_paths, "projectors": proj_paths, "text_models": text_paths}


def our_preproc(image: pathlib.Path, proj_kwargs: dict) -> np.ndarray:
    """Our preprocess of the same PNG with the writer's defaults (image 64, patch 4, merge 2)."""
    p = for_projector("pixtral", proj_kwargs.get("image_size", 64), proj_kwargs.get("patch_size", 4),
                      proj_kwargs.get("merge", 2), proj_kwargs.get("mean", PIXTRAL_MEAN),
                      proj_kwargs.get("std", PIXTRAL_STD))
    return preprocess(load_image(image), p)


def record(case: dict, runs: dict, image: pathlib.Path) -> dict:
    r = runs["recorded"]
    (_, (nx, ny, mrope)), = r["grids"].items()   # one image a case
    ours = our_preproc(image, PROJECTORS[case["projector"]])
    same_shape = ours.shape == (3, r["preproc_size"][1], r["preproc_size"][0])
    rec = dict(case)
    rec.update({"chunks": r["chunks"], "grid": {"nx": nx, "ny": ny, "mrope": mrope},
                "preproc_size": list(r["preproc_size"]),
                "preproc_sha256": sha256(np.asarray(r["preproc"], "<f4").tobytes()),
                "ours_preproc_max_abs": float(np.abs(ours.ravel() - r["preproc"]).max()) if same_shape else None,
                "embd": [f32(row) for row in r["embd"]], "logits": logits_record(r["logits"]), "n_past": r["n_past"],
                "gen": gen_record(r["gen"]),
                "spread": {name: spread(r, runs[name]) for name in RUNS if name != "recorded"}})
    return rec


def main() -> None:
    record_fixture(__doc__, "vision_reference_pixtral.py", OUT, write_files, CASES, record)


if __name__ == "__main__":
    main()
