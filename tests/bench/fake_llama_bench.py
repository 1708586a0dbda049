#!/usr/bin/env python3
"""A stand-in for llama.cpp's llama-bench (tests/bench/test_curve.py): for `-p N1,N2,... -n 0 -o json`
prints one row per N whose samples take N ms (one ms a token), and appends its command line to
$FAKE_LLAMA_BENCH_LOG."""
import json
import os
import sys

argv = sys.argv[1:]
if os.environ.get("FAKE_LLAMA_BENCH_LOG"):
    with open(os.environ["FAKE_LLAMA_BENCH_LOG"], "a") as f:
        f.write(json.dumps(argv) + "\n")
reps = int(argv[argv.index("-r") + 1])
ns = [int(n) for n in argv[argv.index("-p") + 1].split(",")]
print(json.dumps([{"n_prompt": n, "n_gen": 0, "n_depth": int(argv[argv.index("-d") + 1]),
                   "samples_ns": [n * 1_000_000] * reps} for n in ns]))
