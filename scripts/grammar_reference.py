#!/usr/bin/env python3
"""llama.cpp's allowed tokens under GBNF grammars, for tests/data/reference/grammar_masks_llamacpp.json
(tests/engine/test_grammar.py compares pyllamaspec's masks with it). Not part of CI.

For each grammar and each prefix (a text whose tokens the grammar accepts, tokenized by the
model: some prefixes end inside a UTF-8 character), scripts/llamacpp_grammar.cpp (build line in
its header) accepts the prefix in llama.cpp's grammar sampler and applies it to the whole
vocabulary. The fixture stores, per model and case, how many tokens are allowed, the sha256 of
the sorted allowed ids (int32 little-endian), and the ids themselves when fewer than 3000 are
allowed, or the forbidden ones when fewer than 3000 are forbidden.

  python scripts/grammar_reference.py /tmp/llamacpp_grammar
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "tests" / "data" / "reference" / "grammar_masks_llamacpp.json"
LIST_MAX = 3000

JSON_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
'''

# name -> (grammar, prefixes); grammars that use tokens by text are per model (TOKEN_GRAMMARS)
CASES: dict[str, tuple[str, list[str]]] = {
    "json": (JSON_GBNF, ["", "{", '{"na', '{"name": "Jo', '{"name": "Jo\\u00', '{"a": [1, 2', '{"a": 1}',
                         '{"a": -0.5e', '{"k": "日本語の']),
    "digits": ('root ::= [0-9]{1,3} "." [0-9]+', ["", "1", "123", "123.", "123.45"]),
    "words": ('root ::= ("café" | "naïve" | "日本語") " " [α-ω]+ "\\n"',
              ["", "caf", "na", "日", "日本", "日本語 ", "café αβ"]),
    "negated": ('root ::= [^a-z\\n]* "\\n" .', ["", "ABC", "ABC 123", "ABC\n"]),
    "escapes": ('root ::= "\\x41\\u00e9\\U0001F600" [\\t\\r\\n\\\\\\"\\]\\[\\-]* "end"',
                ["", "Aé", "Aé😀", "Aé😀\t\\"]),
    "repeat": ('root ::= ("ab"){2,4} "c"? ("x" | "yz"){0,2}', ["", "ab", "abab", "ababab", "ababc", "ababcx"]),
    "any": ('root ::= "<" .{0,5} ">"', ["", "<", "<ab", "<abcde"]),
    "empty-ok": ('root ::= "a"* | "b" "c"', ["", "a", "aaa", "b"]),
    "nested": ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]+ | "(" expr ")"',
               ["", "(", "((1", "(1+2)", "(1+2)*"[:-1]]),
    "comments": ('# a comment\nroot ::= item+  # trailing\nitem ::= (\n  "x" |\n  "y"\n) " "?\n', ["", "x", "x y"]),
    "cjk-range": ('root ::= [\\u4e00-\\u9fff]{1,8} "。"', ["", "日", "日本語", "日本語を"]),
    "emoji": ('root ::= ("😀" | "🎉" | [\\U0001F300-\\U0001F5FF])+', ["", "😀", "😀🎉"]),
    "bad-undefined": ('root ::= "a" missing', [""]),
    "bad-left-recursion": ('root ::= root "a" | "b"', [""]),
    "bad-syntax": ('root ::= "a" |\nfoo', [""]),
}

TOKEN_GRAMMARS = {
    "smollm2": ('root ::= "say " (<|im_start|> | "hi") "!" !<[2]> "."', ["", "say ", "say hi!", "say hi!x"]),
    "gemma3": ('root ::= "say " (<start_of_turn> | "hi") "!" !<[2]> "."', ["", "say ", "say hi!", "say hi!x"]),
}


def encode(allowed: list[int], n_vocab: int) -> dict:
    ids = np.array(sorted(allowed), np.int32)
    out = {"n_allowed": int(ids.size), "sha256": hashlib.sha256(ids.astype("<i4").tobytes()).hexdigest()}
    if ids.size < LIST_MAX:
        out["allowed"] = ids.tolist()
    elif n_vocab - ids.size < LIST_MAX:
        out["forbidden"] = np.setdiff1d(np.arange(n_vocab, dtype=np.int32), ids).tolist()
    return out


def prefixes_for(model, texts: list[str]) -> list[list[int]]:
    """Each text's tokens, and (for texts that end inside a character between tokens) the
    prefix cut after a token that leaves a character unfinished."""
    out = []
    for t in texts:
        ids = model.tokenize(t, add_special=False, parse_special=True)
        out.append(ids)
        for k in range(1, len(ids)):
            head = model.detokenize_bytes(ids[:k], render_special=True)
            try:
                head.decode("utf-8")
            except UnicodeDecodeError:
                if ids[:k] not in out:
                    out.append(ids[:k])
    return out


def main(probe: str) -> None:
    from pyllamaspec import Model
    from pyllamaspec.files.offline import real_model_path
    fixture = {"probe": "scripts/llamacpp_grammar.cpp (llama.cpp b11434)", "grammars": {}, "models": {}}
    for name in ("smollm2", "gemma3"):
        path = real_model_path(name)
        model = Model(path, n_ctx=64)
        n_vocab = model.vocab_info.n_tokens
        cases, inputs = [], []
        all_cases = dict(CASES, tokens=TOKEN_GRAMMARS[name])
        for cname, (grammar, texts) in all_cases.items():
            fixture["grammars"].setdefault(cname if cname != "tokens" else f"tokens-{name}", grammar)
            for ids in prefixes_for(model, texts):
                cases.append({"grammar": cname if cname != "tokens" else f"tokens-{name}", "prefix": ids})
                inputs.append({"grammar": grammar, "prefix": ids})
        res = json.loads(subprocess.run([probe, str(path)], input=json.dumps(inputs), capture_output=True,
                                        text=True, check=True).stdout)
        for c, r in zip(cases, res):
            c.update({"error": r["error"]} if "error" in r else encode(r["allowed"], n_vocab))
        fixture["models"][name] = {"file": path.name, "n_tokens": n_vocab, "cases": cases}
        print(f"{name}: {len(cases)} cases", file=sys.stderr)
        model.close()
    OUT.write_text(json.dumps(fixture, ensure_ascii=False, indent=0) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
