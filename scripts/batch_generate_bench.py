"""generate([...]) against one prompt at a time, in one run: the same prompts (greedy), the same
loaded models, rounds alternating which goes first; prints the medians of tokens/s, the
speed-up, and whether every output equals the one-at-a-time output.

    python scripts/batch_generate_bench.py -m T.gguf [-md D.gguf | -md ngram] -n 64 --prompts 4 --rounds 3 -t 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from pyllamaspec import Model, generate

PROMPTS = ["Write a short poem about the sea.", "Explain what a CPU does in two sentences.",
           "List three fruits and their colors.", "Tell me a fact about the moon.",
           "Describe a cat to someone who has never seen one.", "What is the capital of France? Why?",
           "Give two tips for learning to cook.", "Summarize the plot of a fairy tale you know."]


def _chat_ids(model: Model, question: str) -> list[int]:
    return model.apply_chat_template([{"role": "user", "content": question}], tokenize=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-md", "--model-draft", help="a draft model, or 'ngram' (default: none)")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx-size", type=int, default=4096)
    a = ap.parse_args()
    target = Model(a.model, n_ctx=a.ctx_size, n_threads=a.threads)
    draft = a.model_draft
    if draft and draft != "ngram":
        draft = Model(draft, n_ctx=a.ctx_size, n_threads=a.threads, tokenizer=False, prefetch=False)
    prompts = [_chat_ids(target, q) for q in (PROMPTS * 4)[:a.prompts]]
    kw = dict(max_tokens=a.max_tokens, temperature=0)
    generate(prompts[0], target, draft, max_tokens=8, temperature=0)          # warm
    times: dict[str, list[float]] = {"one at a time": [], "together": []}
    outs: dict[str, list] = {}
    n_tokens = 0
    for r in range(a.rounds):
        order = ["one at a time", "together"] if r % 2 == 0 else ["together", "one at a time"]
        for how in order:
            for m in (target, draft):
                if isinstance(m, Model):
                    m.clear()                                              # no prompt reuse between rounds
            t0 = time.perf_counter()
            if how == "together":
                res = generate(prompts, target, draft, **kw)
            else:
                res = [generate(p, target, draft, **kw) for p in prompts]
            dt = time.perf_counter() - t0
            n_tokens = sum(len(x.tokens) for x in res)
            times[how].append(n_tokens / dt)
            outs[how] = [x.tokens for x in res]
            extra = f", {statistics.mean(x.stats.mean_batch for x in res):.2f} sequences per evaluation" \
                if how == "together" else ""
            print(f"round {r + 1} {how}: {n_tokens} tokens in {dt:.2f} s = {n_tokens / dt:.1f} t/s{extra}",
                  file=sys.stderr)
    one, tog = (statistics.median(times[k]) for k in ("one at a time", "together"))
    same = outs["one at a time"] == outs["together"]
    print(f"{a.prompts} prompts x {a.max_tokens} tokens, draft {a.model_draft}: one at a time {one:.1f} t/s, "
          f"together {tog:.1f} t/s, speed-up {tog / one:.2f}x (medians of {a.rounds}); outputs identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
