"""Writes llama.cpp's embeddings of a few texts on the real models to
tests/data/reference/embeddings_llamacpp.json: llama-server (b11434) started with
`--embeddings --pooling mean|last`, asked through /v1/embeddings (normalized as it does: Euclidean),
as a user of llama-server would ask. tests/engine/test_embeddings.py compares Model.embed and the
server's /v1/embeddings with them. Not run in CI: it needs a llama.cpp build.

    python scripts/embeddings_reference.py /path/to/llama-server [-t 2]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pyllamaspec.files.offline import real_model_path  # noqa: E402

OUT = ROOT / "tests" / "data" / "reference" / "embeddings_llamacpp.json"
TEXTS = ["Hello, world!", "The capital of France is Paris.",
         "Speculative decoding drafts tokens with a small model and verifies them with a large one in one batch."]
POOLINGS = ("mean", "last")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _embeddings(server: str, model: pathlib.Path, pooling: str, threads: int) -> list[list[float]]:
    port = _port()
    proc = subprocess.Popen([server, "-m", str(model), "--embeddings", "--pooling", pooling, "-c", "512",
                             "-t", str(threads), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        body = json.dumps({"input": TEXTS}).encode()
        req = urllib.request.Request(url + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            data = json.loads(r.read())["data"]
        return [[round(x, 7) for x in d["embedding"]] for d in sorted(data, key=lambda d: d["index"])]
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("server", help="llama.cpp's llama-server binary")
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    out = {"generator": "scripts/embeddings_reference.py (llama-server b11434 --embeddings --pooling P, "
                        "/v1/embeddings, CPU)", "texts": TEXTS, "models": {}}
    for name in ("smollm2", "gemma3"):
        model = real_model_path(name)
        out["models"][name] = {"file": model.name,
                               **{p: _embeddings(a.server, model, p, a.threads) for p in POOLINGS}}
        print(f"{name}: {len(TEXTS)} texts x {len(POOLINGS)} poolings, n_embd "
              f"{len(out['models'][name]['mean'][0])}", file=sys.stderr)
    OUT.write_text(json.dumps(out) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
