"""Writes the drafts llama.cpp's n-gram kinds propose on recorded token streams to
tests/data/reference/ngram_llamacpp.json; tests/speculation/test_ngram_kinds.py replays the same streams
through ours and compares every round's draft. The streams: SmolLM2-135M's greedy answer to a
code-rewrite request (made here with pyllamaspec, plain decoding; its ids are stored), and a
seeded synthetic text of repeated phrases (tests/ngram_streams.py). Each round is llama-server's:
a draft after the tokens in the cache and the last sampled one, the draft's prefix that matches
the stream accepted, accept() told how much. Not run in CI: it needs llama.cpp's common library
(b11434) and the offline SmolLM2.

    L=/path/to/llama.cpp B=/path/to/llama.cpp/build
    g++ -O2 -std=c++17 scripts/llamacpp_ngram.cpp -I $L/include -I $L/ggml/include -I $L/common -I $L/vendor \\
        $B/common/libllama-common.a $B/common/libllama-common-base.a $B/src/libllama.a $B/ggml/src/libggml.a \\
        $B/ggml/src/libggml-cpu.a $B/ggml/src/libggml-base.a -fopenmp -lpthread -ldl -o /tmp/probe_ngram
    PYLLAMASPEC_LIBRARY=... python scripts/ngram_reference.py /tmp/probe_ngram
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from ngram_streams import synthetic_stream, write_lookup_cache  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "ngram_llamacpp.json"
CODE = ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
        "    def add(self, other):\n        return Point(self.x + other.x, self.y + other.y)\n\n"
        "    def sub(self, other):\n        return Point(self.x - other.x, self.y - other.y)\n\n"
        "    def scale(self, k):\n        return Point(self.x * k, self.y * k)\n\n"
        "    def dot(self, other):\n        return self.x * other.x + self.y * other.y\n")
CODE_REQUEST = "Add a method mul to this class, and repeat the whole class:\n\n" + CODE
SMALL = {"simple.n": 3, "simple.m": 8, "mapk.n": 3, "mapk.m": 8, "k4v.n": 2, "k4v.m": 6, "k4v.hits": 2,
         "mod.match": 4, "mod.max": 16, "mod.min": 2}
# (types, probe parameters, streams); "lcs" names the static cache written from the stream seed's corpus
CONFIGS = [(t, {}, ("code", "synthetic")) for t in
           ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")]
CONFIGS += [(t, SMALL, ("code", "synthetic")) for t in
            ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")]
CONFIGS += [("ngram-cache", {"lcs": "static"}, ("synthetic",)),
            ("ngram-mod,ngram-simple", SMALL, ("code", "synthetic")),
            ("ngram-cache,ngram-map-k4v", SMALL, ("code", "synthetic")),
            ("ngram-mod,ngram-map-k", {}, ("code",))]


def code_stream() -> tuple[list[int], list[int]]:
    import pyllamaspec
    from pyllamaspec.files.offline import real_model_path
    with pyllamaspec.Model(real_model_path("smollm2"), n_ctx=2048) as m:
        ids = m.apply_chat_template([{"role": "user", "content": CODE_REQUEST}], tokenize=True)
        r = pyllamaspec.generate(ids, m, temperature=0, max_tokens=400)
    return list(ids), list(r.tokens)


def run(probe: str, types: str, params: dict, stream: tuple[list[int], list[int]], static: str) -> list:
    args = [probe, types] + [f"{k}={static if v == 'static' else v}" for k, v in params.items()]
    text = " ".join(map(str, stream[0])) + "\n" + " ".join(map(str, stream[1])) + "\n"
    out = subprocess.run(args, input=text, capture_output=True, text=True, check=True).stdout
    return [[int(x) for x in line.split()[1:]] for line in out.splitlines() if line.startswith("R ")]


def main() -> None:
    probe = sys.argv[1]
    streams = {"code": code_stream(), "synthetic": synthetic_stream(25)}
    corpus = sum(synthetic_stream(25, 0, 4000, order_seed=26), [])
    out = {"generator": "scripts/ngram_reference.py (llama.cpp b11434 common_speculative, scripts/llamacpp_ngram.cpp)",
           "streams": {k: {"prompt": p, "gen": g} for k, (p, g) in streams.items()},
           "static_corpus": "sum(synthetic_stream(25, 0, 4000, order_seed=26), [])", "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        static = str(pathlib.Path(tmp) / "static.bin")
        write_lookup_cache(pathlib.Path(static), corpus)
        for types, params, names in CONFIGS:
            for name in names:
                rounds = run(probe, types, params, streams[name], static)
                drafted = sum(len(r) - 2 for r in rounds)
                accepted = sum(r[1] for r in rounds)
                print(f"{types:28s} {str(params)[:40]:42s} {name:9s} rounds {len(rounds):3d} "
                      f"drafted {drafted:4d} accepted {accepted:4d}")
                out["runs"].append({"types": types, "params": params, "stream": name, "rounds": rounds})
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
