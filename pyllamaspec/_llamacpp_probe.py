"""llama.cpp's side of `python -m pyllamaspec.bench --llama-cpp PYTHON`.

Run by another interpreter (one with llama-cpp-python installed, kept out of pyllamaspec's own
environment); imports nothing from pyllamaspec. It times llama.cpp's low-level decode loop the
way llama-bench does: ppN = N tokens in one llama_decode on an empty cache (logits for the last),
tgN = N single-token decodes. Prints one JSON object: {"pp": [t/s per run], "tg": [...]}.

    python _llamacpp_probe.py MODEL THREADS N_PROMPT N_GEN REPS
"""
import json
import random
import sys
import time

import llama_cpp as lc

_quiet = None


def main() -> None:
    path, threads, n_prompt, n_gen, reps = sys.argv[1], *map(int, sys.argv[2:6])
    lc.llama_backend_init()
    global _quiet                       # the callback must outlive the call (ctypes)
    _quiet = lc.llama_log_callback(lambda level, text, data: None)
    lc.llama_log_set(_quiet, None)
    mp = lc.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = lc.llama_model_load_from_file(path.encode(), mp)
    cp = lc.llama_context_default_params()
    cp.n_ctx = max(512, n_prompt + n_gen + 8)
    cp.n_batch = cp.n_ubatch = max(512, n_prompt)
    cp.n_threads = cp.n_threads_batch = threads
    ctx = lc.llama_init_from_model(model, cp)
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    mem = lc.llama_get_memory(ctx)
    batch = lc.llama_batch_init(cp.n_batch, 0, 1)
    rng = random.Random(0)

    def decode(tokens, pos0):
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(tokens) - 1
        if lc.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        lc.llama_get_logits_ith(ctx, len(tokens) - 1)

    out = {"pp": [], "tg": []}
    for r in range(reps + 1):                     # the first run warms up
        if n_prompt:
            toks = [rng.randrange(n_vocab) for _ in range(n_prompt)]
            lc.llama_memory_clear(mem, True)
            t0 = time.perf_counter()
            decode(toks, 0)
            lc.llama_synchronize(ctx)
            if r:
                out["pp"].append(n_prompt / (time.perf_counter() - t0))
        if n_gen:
            toks = [rng.randrange(n_vocab) for _ in range(n_gen)]
            lc.llama_memory_clear(mem, True)
            t0 = time.perf_counter()
            for i, t in enumerate(toks):
                decode([t], i)
            lc.llama_synchronize(ctx)
            if r:
                out["tg"].append(n_gen / (time.perf_counter() - t0))
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
