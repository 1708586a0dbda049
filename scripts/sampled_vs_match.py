"""With sampling, what verifying a draft token by min(1, p/q) (ours) accepts against what
llama.cpp's server accepts from a greedy draft checked only against the target's sampled token
(its draft-eagle3, draft-dflash, draft-mtp and n-gram drafts: the token is accepted when the
target samples it, with probability p(x)). Both are exact; they differ in how many drafted
tokens pass: per position, sum(min(p, q)) against p(argmax q), with p and q the target's and the
draft's distributions after the same sampling settings, on the same contexts (a text the target
wrote). Prints the means over the positions.

    python scripts/sampled_vs_match.py -m TARGET.gguf -md DRAFT.gguf [--temp 0.8] [-n 256]
    python scripts/sampled_vs_match.py            # the demo pair: Gemma 3 270M F16 + its Q4_K_M
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import pyllamaspec  # noqa: E402
from pyllamaspec.engine.sampling import Sampler, SamplingParams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    if not a.model:
        from pyllamaspec.files.convert import ensure_variant
        from pyllamaspec.files.offline import real_model_path
        a.model_draft = str(real_model_path("gemma3"))
        a.model = str(ensure_variant(real_model_path("gemma3"), "f16"))
    sp = SamplingParams(temperature=a.temp, seed=1)      # llama.cpp's top-k 40, top-p 0.95, min-p 0.05
    with pyllamaspec.Model(a.model, n_ctx=2048, n_threads=a.threads) as t, \
            pyllamaspec.Model(a.model_draft, n_ctx=2048, n_threads=a.threads) as d:
        ids = t.tokenize("The lighthouse keeper had not seen a storm like this one in thirty years.")
        text = ids + pyllamaspec.generate(ids, t, temperature=a.temp, seed=1, max_tokens=a.n).tokens
        seq = np.asarray(text[:-1], np.int32)
        t.clear()
        d.clear()
        lp, lq = t.eval(seq, logits="all"), d.eval(seq, logits="all")
        s = Sampler(t.n_vocab, sp)
        rows = range(len(ids) - 1, len(seq))
        ours, match = [], []
        for i in rows:
            p, q = s.probs(lp[i]).astype(np.float64), s.probs(lq[i]).astype(np.float64)
            ours.append(np.minimum(p, q).sum())
            match.append(p[int(np.argmax(q))])
    print(f"{pathlib.Path(a.model).name} + {pathlib.Path(a.model_draft).name}, temperature {a.temp}, "
          f"{len(ours)} positions of the target's own text:")
    print(f"accepted per drafted token: min(1, p/q) {np.mean(ours):.3f}; greedy draft matched against the "
          f"target's sample {np.mean(match):.3f}")
    # expected tokens per round for drafts of 4 at that per-token rate (independent positions)
    for name, r in (("min(1, p/q)", np.mean(ours)), ("match", np.mean(match))):
        print(f"  {name}: expected tokens per round with 4-token drafts {(1 - r ** 5) / (1 - r):.2f}")


if __name__ == "__main__":
    main()
