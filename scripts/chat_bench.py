"""Prompt-evaluation time per turn of a 5-turn chat, with and without prefix reuse.

    python scripts/chat_bench.py [-m MODEL.gguf] [-t THREADS] [-n TOKENS] [--rounds R]

A reused Model evaluates only the part of each turn's prompt after what its cache holds (the
earlier turns); without reuse (cache_prompt=False) every turn evaluates the whole conversation.
Prints, per turn, the prompt length, tokens evaluated and the prompt time (medians of R rounds).
"""
from __future__ import annotations

import argparse
import statistics
import sys

import pyllamaspec
from pyllamaspec.files.offline import real_model_path

QUESTIONS = ["What is a cat?", "And a dog?", "Which of the two lives longer, and why?",
             "Name three famous dogs from films.", "Summarize our conversation in one sentence."]
SYSTEM = "You are a helpful assistant. Answer briefly."


def one_chat(model: pyllamaspec.Model, reuse: bool, n: int) -> list[tuple[int, int, float]]:
    """(prompt tokens, tokens evaluated, prompt seconds) per turn; the answers are greedy, so
    both runs see the same conversation."""
    model.clear()
    msgs = [{"role": "system", "content": SYSTEM}]
    out = []
    for q in QUESTIONS:
        msgs.append({"role": "user", "content": q})
        r = pyllamaspec.chat(msgs, model, max_tokens=n, temperature=0, cache_prompt=reuse)
        s = r.stats
        out.append((s.n_prompt, s.n_prompt - s.n_reused, s.t_prompt))
        msgs.append(r.message)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=None, help="a chat model (default: the offline SmolLM2-135M-Instruct)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--n-predict", type=int, default=48, help="tokens per answer")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    path = a.model or str(real_model_path("smollm2"))
    with pyllamaspec.Model(path, n_ctx=2048, n_threads=a.threads) as m:
        runs = {True: [], False: []}
        for i in range(a.rounds):
            for reuse in ((True, False) if i % 2 == 0 else (False, True)):     # alternate the order
                runs[reuse].append(one_chat(m, reuse, a.n_predict))
    print(f"{path}, {a.threads} threads, {a.n_predict} tokens per answer, medians of {a.rounds}")
    # the two conversations can part at a near tie (see docs/python-api.md: the prompt cache), hence both lengths
    print("turn | reuse: prompt, evaluated, ms | no reuse: prompt, evaluated, ms")
    for t in range(len(QUESTIONS)):
        med = {k: statistics.median(r[t][2] for r in v) * 1e3 for k, v in runs.items()}
        (p1, e1, _), (p0, e0, _) = runs[True][0][t], runs[False][0][t]
        print(f"{t + 1:4d} | {p1:6d} {e1:6d} {med[True]:8.1f} | {p0:6d} {e0:6d} {med[False]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
