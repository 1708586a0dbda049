"""llama.cpp's side of `python -m pyllamaspec.bench --llama-cpp PYTHON`.

Run by another interpreter (one with llama-cpp-python installed, kept out of pyllamaspec's own
environment); imports nothing from pyllamaspec. It times llama.cpp's low-level decode loop the
way llama-bench does: ppN = N tokens in one llama_decode on an empty cache (logits for the last),
tgN = N single-token decodes. Prints one JSON object: {"pp": [t/s per run], "tg": [...]}.

    python llamacpp_probe.py MODEL THREADS N_PROMPT N_GEN REPS
    python llamacpp_probe.py --spec TARGET DRAFT THREADS N_GEN N_DRAFT P_MIN PROMPT_IDS

--spec replays the loop of llama.cpp's examples/speculative-simple (common_speculative_gen_draft
and common_sampler_sample_and_accept_n, greedy) on the low-level API: the draft proposes its
top token while that token's probability among the draft's top 10 is >= P_MIN, up to N_DRAFT;
the target evaluates [last, drafts] in one llama_decode and keeps the prefix equal to its
argmax. It also decodes the same prompt plainly with the target. Both are timed as
speculative-simple times them (from after the target's prompt) and printed as one JSON object:
{"plain_tps", "spec_tps", "drafted", "accepted", "rounds", "tokens"}. Argmax and the top-10
softmax are taken with numpy, faster than llama.cpp's samplers on a 262k vocabulary, so this
loop is if anything quicker than the real example.
"""
import json
import random
import sys
import time

import llama_cpp as lc

_quiet = None


def _load(path: str, threads: int, n_ctx: int, n_batch: int):
    mp = lc.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = lc.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise SystemExit(f"llama.cpp cannot load {path}")
    cp = lc.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = cp.n_ubatch = n_batch
    cp.n_threads = cp.n_threads_batch = threads
    return model, lc.llama_init_from_model(model, cp)


class _Batch:
    """llama_batch for one sequence: decode(tokens, pos0, logits=all|last)."""

    def __init__(self, ctx, cap: int):
        self.ctx, self.b = ctx, lc.llama_batch_init(cap, 0, 1)

    def decode(self, tokens, pos0: int, all_logits: bool) -> None:
        b = self.b
        b.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_logits or i == len(tokens) - 1
        if lc.llama_decode(self.ctx, b) != 0:
            raise SystemExit("llama_decode failed")

    def free(self) -> None:
        lc.llama_batch_free(self.b)


def _top10_prob(lg, m: float) -> float:
    """The top token's probability after top-k 10 (the draft sampler's chain). Logits more than
    16 below the top add under 1e-6 each, so only the close ones are ranked (fast on 262k)."""
    import numpy as np
    close = lg[lg > m - 16.0]
    if len(close) > 10:
        close = np.partition(close, -10)[-10:]
    return 1.0 / float(np.exp(close - m).sum())


def spec_main(argv: list[str]) -> None:
    import numpy as np
    tpath, dpath = argv[0], argv[1]
    threads, n_gen, n_draft = int(argv[2]), int(argv[3]), int(argv[4])
    p_min = float(argv[5])
    prompt = [int(t) for t in argv[6].split(",")]
    n_ctx = len(prompt) + n_gen + n_draft + 64
    tmodel, tctx = _load(tpath, threads, n_ctx, 512)
    dmodel, dctx = _load(dpath, threads, n_ctx, 512)
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(tmodel))
    tb, db = _Batch(tctx, 512), _Batch(dctx, 512)

    def logits(ctx, i):
        return np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(n_vocab,))

    def plain() -> tuple[float, list[int]]:
        lc.llama_memory_clear(lc.llama_get_memory(tctx), True)
        tb.decode(prompt[:-1], 0, False)
        t0 = time.perf_counter()
        out, last, n_past = [], prompt[-1], len(prompt) - 1
        while len(out) < n_gen:
            tb.decode([last], n_past, False)
            n_past += 1
            last = int(np.argmax(logits(tctx, 0)))
            out.append(last)
        return n_gen / (time.perf_counter() - t0), out

    def speculative() -> tuple[float, list[int], int, int, int]:
        lc.llama_memory_clear(lc.llama_get_memory(tctx), True)
        lc.llama_memory_clear(lc.llama_get_memory(dctx), True)
        tb.decode(prompt[:-1], 0, False)
        t0 = time.perf_counter()
        seq, dft = list(prompt), []          # dft: the tokens in the draft's cache
        out, drafted, accepted, rounds = [], 0, 0, 0
        while len(out) < n_gen:
            # common_speculative_gen_draft: bring the draft level with seq[:-1], then draft
            keep = 0
            while keep < min(len(dft), len(seq) - 1) and dft[keep] == seq[keep]:
                keep += 1
            lc.llama_memory_seq_rm(lc.llama_get_memory(dctx), 0, keep, -1)
            del dft[keep:]
            if len(seq) - 1 > keep:
                db.decode(seq[keep:-1], keep, False)
                dft += seq[keep:-1]
            db.decode([seq[-1]], len(dft), False)
            dft.append(seq[-1])
            draft = []
            while True:
                lg = logits(dctx, 0)
                best = int(np.argmax(lg))
                if _top10_prob(lg, float(lg[best])) < p_min:
                    break
                draft.append(best)
                if len(draft) >= n_draft:
                    break
                db.decode([best], len(dft), False)
                dft.append(best)
            # the target verifies [last, drafts] in one decode; greedy acceptance
            n_past = len(seq) - 1
            tb.decode([seq[-1]] + draft, n_past, True)
            new = []
            for i in range(len(draft) + 1):
                t = int(np.argmax(logits(tctx, i)))
                new.append(t)
                if i == len(draft) or draft[i] != t:
                    break
            lc.llama_memory_seq_rm(lc.llama_get_memory(tctx), 0, n_past + len(new), -1)
            seq += new
            out += new
            drafted += len(draft)
            accepted += len(new) - 1
            rounds += 1
        return len(out) / (time.perf_counter() - t0), out[:n_gen], drafted, accepted, rounds

    plain()                                   # warm-up
    ptps, ptoks = plain()
    stps, stoks, drafted, accepted, rounds = speculative()
    tb.free()
    db.free()
    print(json.dumps(dict(plain_tps=ptps, spec_tps=stps, drafted=drafted, accepted=accepted, rounds=rounds,
                          plain_tokens=ptoks, tokens=stoks)))


def main() -> None:
    lc.llama_backend_init()
    global _quiet                       # the callback must outlive the call (ctypes)
    _quiet = lc.llama_log_callback(lambda level, text, data: None)
    lc.llama_log_set(_quiet, None)
    if sys.argv[1] == "--spec":
        return spec_main(sys.argv[2:])
    path, threads, n_prompt, n_gen, reps = sys.argv[1], *map(int, sys.argv[2:6])
    model, ctx = _load(path, threads, max(512, n_prompt + n_gen + 8), max(512, n_prompt))
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    mem = lc.llama_get_memory(ctx)
    batch = _Batch(ctx, max(512, n_prompt))
    rng = random.Random(0)

    out = {"pp": [], "tg": []}
    for r in range(reps + 1):                     # the first run warms up
        if n_prompt:
            toks = [rng.randrange(n_vocab) for _ in range(n_prompt)]
            lc.llama_memory_clear(mem, True)
            t0 = time.perf_counter()
            batch.decode(toks, 0, False)
            lc.llama_get_logits_ith(ctx, n_prompt - 1)
            lc.llama_synchronize(ctx)
            if r:
                out["pp"].append(n_prompt / (time.perf_counter() - t0))
        if n_gen:
            toks = [rng.randrange(n_vocab) for _ in range(n_gen)]
            lc.llama_memory_clear(mem, True)
            t0 = time.perf_counter()
            for i, t in enumerate(toks):
                batch.decode([t], i, False)
                lc.llama_get_logits_ith(ctx, 0)
            lc.llama_synchronize(ctx)
            if r:
                out["tg"].append(n_gen / (time.perf_counter() - t0))
    batch.free()
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
