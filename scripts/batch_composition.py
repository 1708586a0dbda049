"""How much a sequence's logits depend on the batch it is evaluated in (why -np 4 may answer a
greedy request differently from -np 1 on some models: Gemma 3's CPU kernels, as in llama.cpp).

Each question of server_load.py is rendered as a chat prompt, its prompt evaluated, then its
next token evaluated alone (one token: what -np 1 does) and in one batch with the other
questions' next tokens (4 sequences, one token each: a -np 4 round); prints the largest
difference of the logits (absolute, and relative to the row's range) and whether the argmax
changed. --no-repack: the weights left unrepacked (one matmul kernel for every batch size: the
control; measured on an AVX-512 machine, Gemma 3 270M Q4_K_M differed by up to 0.72 logits with
the repacked weights, whose 4-row kernel is not the 1-row one, and by 0 without).

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("--real", help="smollm2 or gemma3 (the offline real models)")
    ap.add_argument("--chat-template")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--no-repack", action="store_true", help="use_repack=False (the control)")
    a = ap.parse_args()
    path, tmpl = a.model, a.chat_template
    if a.real:
        path, _, tmpl = server_load._real_pairs(a.real)[0]
    prompts = server_load.prompt_ids(path, tmpl)
    worst, changed = 0.0, 0
    with Model(path, n_ctx=2048, n_threads=a.threads, n_seq_max=a.batch + 1, use_repack=not a.no_repack) as m:
        for i, ids in enumerate(prompts):
            group = [prompts[(i + j) % len(prompts)] for j in range(a.batch)]
            seqs = [m.lease() for _ in group]
            for s, p in zip(seqs, group):
                s.clear()
                s.eval(p[:-1], logits="none")
            alone = seqs[0].eval(group[0][-1:], logits="all").copy()
            seqs[0].truncate(len(group[0]) - 1)
            rows = m.decode([(s, g[-1:], "all") for s, g in zip(seqs, group)])
            together = rows[0]
            d = float(np.abs(alone - together).max())
            span = float(alone.max() - alone.min())
            flip = int(alone.argmax()) != int(together.argmax())
            worst, changed = max(worst, d / span), changed + flip
            print(f"{server_load.QUESTIONS[i]!r:<22} max |alone - in a batch of {a.batch}| {d:.3g} "
                  f"({d / span:.2e} of the row's range){', argmax differs' if flip else ''}")
            for s in seqs:
                s.release()
    print(f"{os.path.basename(path)}: worst relative difference {worst:.2e}; argmax changed in {changed}/{len(prompts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
