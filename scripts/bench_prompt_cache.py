"""Time to first token of an agent's long prompt, cold vs resumed from the prompt cache (issue 43).

    python scripts/bench_prompt_cache.py [-m MODEL.gguf ...] [-n TOKENS] [-t THREADS] [--rounds R]

One slot (n_seq_max=1), as an agent meets it on a busy server: request A (a TOKENS-token system
prompt and tool list, then a question), request B (another conversation) takes the slot, then A's
prefix with a new question. Cold: A's first token on a fresh model. Cached: the third request's,
with `cache_ram` (llama-server's --cache-ram) keeping what B pushed out; off: the same with
cache_ram=0. Prints a Markdown table of medians over R rounds (each round a fresh model), and the
tokens each evaluated. Default models: the offline SmolLM2-135M-Instruct and Gemma 3 270M.
"""
from __future__ import annotations

import argparse
import statistics
import time

import pyllamaspec
from pyllamaspec.files.offline import real_model_path

UNIT = ("You are an agent with tools for a logistics company. Tools: track(order_id), refund(order_id, "
        "amount), escalate(reason). Follow the policies carefully and cite them. ")


def ttft(model: pyllamaspec.Model, prompt: str) -> tuple[float, int]:
    """(seconds to the first token, prompt tokens evaluated)."""
    t = time.perf_counter()
    r = pyllamaspec.generate(prompt, model, max_tokens=1, temperature=0)
    return time.perf_counter() - t, len(r.prompt_tokens) - r.stats.n_reused


def one_round(path: str, n_tokens: int, threads: int, cache_ram: int) -> tuple[tuple, tuple, int]:
    with pyllamaspec.Model(path, n_ctx=n_tokens + 1024, n_threads=threads, n_seq_max=1, cache_ram=cache_ram) as m:
        system = m.detokenize(m.tokenize(UNIT * (n_tokens // 20))[:n_tokens])
        cold = ttft(m, system + "\nUser: what is the first step?\nAssistant:")
        ttft(m, "A different conversation about cooking pasta, at some length. " * 40)
        again = ttft(m, system + "\nUser: and the second step?\nAssistant:")
        n_prompt = len(m.tokenize(system))
    return cold, again, n_prompt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", action="append", help="GGUF file(s) (default: SmolLM2 and Gemma 3)")
    ap.add_argument("-n", "--tokens", type=int, default=4000, help="system prompt tokens (4000)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    paths = a.model or [str(real_model_path("smollm2")), str(real_model_path("gemma3"))]
    print("| model | prompt tokens | cold TTFT | evaluated | cached TTFT | evaluated | cache off TTFT | evaluated |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        cold, cached, off = [], [], []
        for _ in range(a.rounds):            # alternated: cache on, cache off
            c, w, n = one_round(path, a.tokens, a.threads, 8192)
            cold.append(c), cached.append(w)
            off.append(one_round(path, a.tokens, a.threads, 0)[1])
        med = lambda xs: (statistics.median(x[0] for x in xs), xs[-1][1])   # noqa: E731
        row = [med(cold), med(cached), med(off)]
        print(f"| {path.rsplit('/', 1)[-1]} | {n} | " + " | ".join(f"{t:.3f} s | {k}" for t, k in row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
