"""Speculation with an image in the prompt: greedy tokens/s of plain decoding, n-gram lookup and a
draft model on the offline demo pair (Gemma 3 270M F16 target, its Q4_K_M draft), the prompt a
Gemma 3 chat turn holding an image through a tiny seeded Gemma 3 projector (tests/models_vision.py:
no real mmproj is reachable offline; the encoder's size does not change decoding), rounds
alternated, medians printed; each speculative answer checked against plain decoding's tokens.
Also times the encoder alone for a projector of Gemma 3's real widths (1152 wide, 16 heads, 4304 FFN,
896-pixel images, 14-pixel patches: 4096 patches, 256 rows) with --layers of its 27 layers.

    python scripts/vision_bench.py [--rounds 5] [--tokens 128] [--layers 2] [--threads 0]
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import models_vision as mv  # noqa: E402

import pyllamaspec  # noqa: E402
from pyllamaspec import Model  # noqa: E402
from pyllamaspec.files.offline import demo_pair  # noqa: E402
from pyllamaspec.vision import Projector  # noqa: E402

PROMPT = ("<start_of_turn>user\n<__media__>Describe the picture, then list the days of the week twice, "
          "one per line.<end_of_turn>\n<start_of_turn>model\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    from PIL import Image
    d = pathlib.Path(tempfile.mkdtemp())
    mv.write_gemma3_mmproj(d / "p640.gguf", n_embd_text=640, seed=1)
    Image.fromarray(mv.draw_test_image(48, 40)).save(d / "img.png")
    target, draft = demo_pair()
    kw = dict(n_ctx=1024, n_threads=a.threads or None)
    with Model(target, **kw) as t, Model(draft, **kw) as dm, Projector(d / "p640.gguf", a.threads) as p:
        runs = {"plain": None, "ngram": "ngram", "draft model": dm}
        tps: dict[str, list[float]] = {k: [] for k in runs}
        want = None
        for r in range(a.rounds + 1):                        # round 0 warms up
            for name, drafter in runs.items():
                res = pyllamaspec.generate(PROMPT, t, drafter, images=[d / "img.png"], mmproj=p, temperature=0,
                                           max_tokens=a.tokens, cache_prompt=False)
                want = res.tokens if want is None else want
                assert res.tokens == want, f"{name}: greedy tokens differ from plain decoding"
                if r:
                    tps[name].append(res.stats.generate_tps)
        n_prompt = len(res.prompt_tokens)
        print(f"prompt {n_prompt} tokens (16 image rows), {len(want)} generated; medians of {a.rounds} rounds:")
        base = statistics.median(tps["plain"])
        for name, v in tps.items():
            m = statistics.median(v)
            print(f"  {name:12s} {m:7.1f} t/s  ({m / base:.2f}x plain)")
    mv.write_gemma3_mmproj(d / "big.gguf", n_embd_text=640, seed=2, image_size=896, patch_size=14, n_embd=1152,
                           n_head=16, n_ff=4304, n_layer=a.layers, scale_factor=4, dtype="F16")
    with Projector(d / "big.gguf", a.threads) as p:
        p.encode(d / "img.png")
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            p.encode(d / "img.png")
            times.append(time.perf_counter() - t0)
        print(f"encoder, Gemma 3 widths, {a.layers} layers, F16: {statistics.median(times) * 1000:.0f} ms per image "
              f"(median of 3; a real file's 27 layers: about {27 / a.layers:.1f}x the layers' share)")
        print(f"projector file for llama-mtmd-cli timing: {d / 'big.gguf'}, image {d / 'img.png'}")


if __name__ == "__main__":
    main()
