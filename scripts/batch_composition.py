"""How much a token's logits depend on the evaluation it is part of (why -np 4, or a longer
verify batch, may answer a greedy request otherwise than -np 1 on some models: Gemma 3's CPU
kernels, as in llama.cpp, which uses the same ggml kernels).

Each question of server_load.py is rendered as a chat prompt and evaluated; then one token is
evaluated alone, and again as the first of n tokens (n = 1..17: a verify batch of n - 1 drafts,
or a round of several slots), and as one of 4 sequences' tokens in one batch (a -np 4 round).
Prints the largest difference of its logits from the token alone, by n, and whether the argmax
changed, with the weights repacked (the default) and not (-nr).

Measured on this project's AVX-512 build machine, Gemma 3 270M Q4_K_M: 0 below a size, then up
to 0.88 logits from 4 tokens on with repacked weights, 0.81 from 8 tokens on without (the
matmul kernels switch there); SmolLM2 Q4_1: 0 at every size.

    python scripts/batch_composition.py --real gemma3        (or -m MODEL.gguf [--chat-template NAME])
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import server_load  # noqa: E402

from pyllamaspec import Model  # noqa: E402

TOKEN = 5                      # the token evaluated after each prompt (any id: the logits are compared)


def by_size(m: Model, prompts: list[list[int]], n_max: int) -> dict[int, tuple[float, int]]:
    """n: (largest |logits alone - logits as the first of n tokens|, argmax changes)."""
    out = {}
    for n in range(1, n_max + 1):
        worst, flips = 0.0, 0
        for p in prompts:
            m.truncate(0)
            m.eval(p, logits="none")
            alone = m.eval([TOKEN], logits="all")[0].copy()
            m.truncate(len(p))
            first = m.eval([TOKEN] + list(range(10, 10 + n - 1)), logits="all")[0]
            worst = max(worst, float(np.abs(alone - first).max()))
            flips += int(alone.argmax()) != int(first.argmax())
        out[n] = (worst, flips)
    return out


def with_others(m: Model, prompts: list[list[int]], n_seq: int) -> tuple[float, int]:
    """The same for a token evaluated in one batch with n_seq - 1 other sequences' tokens."""
    worst, flips = 0.0, 0
    for i in range(len(prompts)):
        group = [prompts[(i + j) % len(prompts)] for j in range(n_seq)]
        seqs = [m.lease() for _ in group]
        try:
            for s, p in zip(seqs, group):
                s.clear()
                s.eval(p, logits="none")
            alone = seqs[0].eval([TOKEN], logits="all")[0].copy()
            seqs[0].truncate(len(group[0]))
            together = m.decode([(s, [TOKEN], "all") for s in seqs])[0][0]
            worst = max(worst, float(np.abs(alone - together).max()))
            flips += int(alone.argmax()) != int(together.argmax())
        finally:
            for s in seqs:
                s.release()
    return worst, flips


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("--real", help="smollm2 or gemma3 (the offline real models)")
    ap.add_argument("--chat-template")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--n-max", type=int, default=17)
    a = ap.parse_args()
    path, tmpl = a.model, a.chat_template
    if a.real:
        path, _, tmpl = server_load._real_pairs(a.real)[0]
    prompts = server_load.prompt_ids(path, tmpl)
    print(f"{os.path.basename(path)}: largest logit difference from the token evaluated alone "
          f"(argmax changes of {len(prompts)} prompts)")
    for repack in (True, False):
        with Model(path, n_ctx=2048, n_threads=a.threads, n_seq_max=5, use_repack=repack) as m:
            sizes = by_size(m, prompts, a.n_max)
            w4, f4 = with_others(m, prompts, 4)
        row = "  ".join(f"{n}: {w:.3g}" + (f" ({f})" if f else "") for n, (w, f) in sizes.items())
        print(f"{'repacked' if repack else '-nr':<9} first of n tokens  {row}")
        print(f"{'':<9} with 3 other sequences' tokens: {w4:.3g}" + (f" ({f4})" if f4 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
