"""Adds llama.cpp's greedy steps to the chat fixture (tests/data/reference/chat_shared_*.jsonl): for
each conversation's prompt ids, the top-5 raw logits of every greedy step (`gen`: {"id", "top"}, as
gen_shared_* has them), so that tests/frontends/test_chat.py compares answers token by token up to the first
near tie, where another CPU's kernels may legitimately choose the other token.

The answers (`content`) were made by llama-server b11434 on an AVX2 machine; the steps come from
scripts/llamacpp_logits.cpp's `gen` mode built against the same llama.cpp with ggml's AVX2 kernels
(GGML_NATIVE=OFF), which gives exactly those answers: the script refuses to write steps whose text
is not the recorded `content`. Not run in CI.

    python scripts/chat_reference.py /path/to/avx2/logits-probe [FIXTURE.jsonl]
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "reference" / "chat_shared_smollm2-135m-q4_1.jsonl"
N_GEN = 32       # the fixture's max_tokens


def greedy_steps(probe: str, model: pathlib.Path, prompts: list[list[int]]) -> list[list[dict]]:
    text = "".join(" ".join(map(str, p)) + "\n" for p in prompts)
    env = dict(os.environ, PROBE_THREADS="2")     # the fixture's llama-server ran with 2 threads
    out = subprocess.run([probe, str(model), "0", "gen", str(N_GEN)], input=text, capture_output=True,
                         text=True, check=True, env=env).stdout
    steps: list[list[dict]] = [[] for _ in prompts]
    for line in out.splitlines():
        f = line.split()
        if f[1] == "g":
            top = [[int(a), float(b)] for a, b in (x.split(":") for x in f[3:])]
            steps[int(f[0])].append({"id": top[0][0], "top": top})
    return steps


def main() -> None:
    probe = sys.argv[1]
    path = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else FIXTURE
    sys.path[:0] = [str(ROOT)]
    from pyllamaspec import Model
    from pyllamaspec.files.offline import real_model_path
    model = real_model_path("smollm2")
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = greedy_steps(probe, model, [c["prompt_ids"] for c in cases])
    with Model(model, n_ctx=64) as m:
        for case, gen in zip(cases, steps):
            text = m.detokenize([s["id"] for s in gen if not m.is_eog(s["id"])])
            if text != case["content"]:
                sys.exit(f"the probe's answer {text!r} is not the fixture's {case['content']!r}: another build?")
            case["gen"] = gen
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    print(f"wrote {path}: greedy steps for {len(cases)} conversations")


if __name__ == "__main__":
    main()
