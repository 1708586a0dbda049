"""Writes llama.cpp's (b11434) handling of images by a Qwen3-VL projector with deepstack mergers
to tests/data/reference/vision_qwen3vl_deepstack.json: a seeded tiny ``qwen3vl_merger``
(tests/models_vision_qwen.py write_qwen3vl_mmproj with deepstack_layers: each marked ViT layer's
output through its own merger, concatenated after the main merger's row, so a row is
n_embd_text * (1 + n_deepstack) wide) over a tiny random ``qwen3vl`` text model whose
n_deepstack_layers matches (tests/models_qwen3vl.py write_qwen3vl_gguf, the image markers of
models_vision_qwen.qwen_image_marker_kv): llama.cpp splits each row into the embedding and the
slices it adds after its first layers. Recorded as scripts/vision_reference_qwen.py records
vision_qwen3vl.json (same probe, same runs: 2 threads, flash attention auto; 1 thread; flash
attention off, the largest differences the case's "spread"), in the same format (its docstring).
Not run in CI: it needs a llama.cpp build and the probe scripts/llamacpp_mtmd.cpp.

    python scripts/vision_reference_qwen3vl.py --probe /tmp/probe_mtmd [--out OUT.json]
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vision_reference import gen_record, record_fixture  # noqa: E402
from vision_reference import ROOT, RUNS, f32, logits_record, sha256, spread  # noqa: E402
from vision_reference import write_images, write_projectors  # noqa: E402
from vision_reference_qwen import our_preproc, token_env  # noqa: E402

from models_vision_qwen import QWEN3VL_TEXT_WRITER, write_qwen3vl_mmproj, write_tiny_qwen3vl_text  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "vision_qwen3vl_deepstack.json"

# wide: scaled down to 32x28 (8 x 7 rows); exact: a plain copy (4 x 6); limits 16 .. 64 rows
IMAGES = {"wide": (48, 40, "RGB"), "exact": (16, 24, "RGB")}
# deepstack after ViT layers 0 and 2 of 3 (not 1: the slices follow layer order, not all layers)
PROJECTORS = {"ds32": dict(n_embd_text=32, seed=5, n_layer=3, deepstack_layers=(0, 2))}
TEXT_MODELS = {"tiny_qwen3vl": dict(n_vocab=272, n_embd=32, seed=75, n_deepstack=2)}   # + the markers
LIMITS = (16, 64)
CASES = [dict(text_model="tiny_qwen3vl", projector="ds32", image=name, prompt_before="look: ",
              prompt_after=" what is it?", n_gen=6, image_min_tokens=LIMITS[0], image_max_tokens=LIMITS[1])
         for name in IMAGES]


def write_files(tmp: pathlib.Path) -> tuple[dict, dict, dict, dict]:
    images, image_paths = write_images(tmp, IMAGES)
    projectors, proj_paths = write_projectors(tmp, PROJECTORS, write_qwen3vl_mmproj)
    texts, text_paths = {}, {}
    for name, kw in TEXT_MODELS.items():
        text_paths[name] = tmp / f"{name}.gguf"
        write_tiny_qwen3vl_text(text_paths[name], **kw)
        texts[name] = {"kwargs": kw, "writer": QWEN3VL_TEXT_WRITER,
                       "extra_kv": "models_vision_qwen.qwen_image_marker_kv(n_vocab)",
                       "sha256": sha256(text_paths[name].read_bytes())}
    return images, projectors, texts, {"images": image_paths, "projectors": proj_paths, "text_models": text_paths}


def record(case: dict, runs: dict, image: pathlib.Path) -> dict:
    r = runs["recorded"]
    (i_img, (nx, ny, mrope)), = r["grids"].items()   # one image a case
    ours = our_preproc(image, case, PROJECTORS[case["projector"]])
    rec = dict(case)
    rec.update({"chunks": r["chunks"], "grid": {"nx": nx, "ny": ny, "mrope": mrope},
                "positions": r["positions"][i_img], "preproc_size": list(r["preproc_size"]),
                "preproc": f32(r["preproc"]), "ours_preproc_max_abs": float(np.abs(ours.ravel() - r["preproc"]).max()),
                "embd": [f32(row) for row in r["embd"]], "logits": logits_record(r["logits"]), "n_past": r["n_past"],
                "gen": gen_record(r["gen"]),
                "spread": {name: spread(r, runs[name]) for name in RUNS if name != "recorded"}})
    return rec


def main() -> None:
    record_fixture(__doc__, "vision_reference_qwen3vl.py", OUT, write_files, CASES, record, token_env)


if __name__ == "__main__":
    main()
