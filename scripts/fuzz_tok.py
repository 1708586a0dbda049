"""Tokenizer side of scripts/fuzz.py: structured random inputs (text of many scripts, invalid
UTF-8, special-token fragments, long runs; token id lists with out-of-range ids) and the calls
that take them. A case is a plain dict, so that a finding can be saved as JSON and replayed.
"""
from __future__ import annotations

import base64
import random

SPECIAL = (b"<|im_start|>", b"<|im_end|>", b"<|endoftext|>", b"<start_of_turn>", b"<end_of_turn>", b"<bos>",
           b"<eos>", b"<s>", b"</s>", b"<unk>", b"<pad>", b"<mask>", b"<|", b"|>", b"<|im_", b"start_of_turn>",
           b"<start_of", b"_turn>", b"<", b">", b"[INST]", b"<0x0A>", b"<0xFF>", b"\xe2\x96\x81", b"<|extra_3|>",
           b"user\n", b"model\n", b"assistant")
CLASSES = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    " \t\n\r\x0b\x0c\xa0\u1680\u2003\u2028\u2029\u3000",
    "éàüßñçøåÉÀÜ",
    "αβγδεζηθжщюяЖЩ",
    "中文字漢語日本語の",
    "ひらがなカタカナ",
    "한국어조선말",
    "مرحبا بالعالم",
    "שלום",
    "हिन्दी भाषा",
    "ภาษาไทย",
    "😀👍🏽👨‍👩‍👧‍👦🇫🇷❤️🙂🤖",
    "\u0301\u0308\u20dd\u0327",
    "\u200b\u200c\u200d\u2060\ufeff",
    "\x00\x01\x1b\x7f",
    "\u202e\u200f\u202a",
    "\U0010ffff\U000e0001\ufffd\ufffe",
)
INVALID_UTF8 = (b"\xff", b"\xfe", b"\xc0\x80", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                b"\xf4\x90\x80\x80", b"\xf0\x9f", b"\x80", b"\xc3", b"\xe2\x82", b"\xf8\x88\x80\x80\x80")
OPS = ("tokenize", "tokenize", "tokenize", "roundtrip", "detokenize", "piece", "stream", "attr")


def _piece(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.3:
        cls = rng.choice(CLASSES)
        return "".join(rng.choice(cls) for _ in range(rng.randrange(1, 40))).encode("utf-8", "surrogatepass")
    if r < 0.45:
        return rng.choice(SPECIAL)
    if r < 0.55:
        return rng.choice(INVALID_UTF8)
    if r < 0.65:
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 32)))
    if r < 0.8:                   # a long run of one unit: the linear-time paths
        unit = rng.choice((b" ", b"a", b"\n", b"0", b"  \n", "😀".encode(), b"\xff", b"<|", b"ab", "é".encode(),
                           b"\t", b".", rng.choice(SPECIAL)))
        n = rng.choice((10, 100, 1000, 4000)) if rng.random() < 0.97 else rng.choice((20000, 60000))
        return unit * n
    words = []                    # words of mixed scripts
    for _ in range(rng.randrange(1, 12)):
        cls = rng.choice(CLASSES[:14])
        words.append("".join(rng.choice(cls) for _ in range(rng.randrange(1, 12))))
    return " ".join(words).encode()


def text(rng: random.Random) -> bytes:
    n = rng.choice((0, 1, 1, 2, 3, 5, 8, 20))
    return b"".join(_piece(rng) for _ in range(n))


# Text that every tokenizer here gives back byte for byte (tried on 5,000 samples: control bytes,
# U+2581 and invalid UTF-8 do not come back as they went in, by design, as in llama.cpp).
_PLAIN = CLASSES[:3] + (" \n",) + CLASSES[4:14]


def plain_text(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randrange(0, 8)):
        cls = rng.choice(_PLAIN)
        part = "".join(rng.choice(cls) for _ in range(rng.randrange(1, 30)))
        parts.append(part * (rng.choice((1, 1, 1, 50, 500))))
    return "".join(parts).encode()


def ids(rng: random.Random, n_vocab: int) -> list[int]:
    edge = (0, 1, 2, n_vocab - 1, n_vocab, n_vocab + 1, -1, -2, -2**31, 2**31 - 1)
    out = []
    for _ in range(rng.choice((0, 1, 2, 5, 16, 64))):
        r = rng.random()
        out.append(rng.choice(edge) if r < 0.1 else rng.randrange(min(n_vocab, 300)) if r < 0.4
                   else rng.randrange(n_vocab))
    return out


def make_case(rng: random.Random, names: list[str], n_vocab: dict[str, int]) -> dict:
    name = rng.choice(names)
    op = rng.choice(OPS)
    case = {"kind": "tokenizer", "model": name, "op": op, "add_special": rng.random() < 0.5,
            "parse_special": rng.random() < 0.5, "render_special": rng.random() < 0.5}
    if op in ("tokenize", "roundtrip"):
        data = plain_text(rng) if op == "roundtrip" else text(rng)
        case["text_b64"] = base64.b64encode(data).decode()
    else:
        case["ids"] = ids(rng, n_vocab[name])
    return case


class Violation(Exception):
    """A result that breaks an invariant of the tokenizer (reported like an unexpected exception)."""


def run_case(case: dict, tok) -> None:
    """Runs one case on tokenizer `tok`; PyllamaspecError is the caller's to accept."""
    op = case["op"]
    n_vocab = tok.vocab_info.n_tokens
    if op in ("tokenize", "roundtrip"):
        data = base64.b64decode(case["text_b64"])
        if op == "roundtrip":   # plain text, nothing added: the bytes must come back
            arr = tok.tokenize_array(data, add_special=False, parse_special=False)
        else:
            arr = tok.tokenize_array(data, case["add_special"], case["parse_special"])
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n_vocab):
            raise Violation(f"tokenize returned an id outside [0, {n_vocab})")
        back = tok.detokenize_bytes(arr, render_special=case["render_special"])
        if op == "roundtrip" and back != data and not _space_prefix_only(tok, data, back):
            raise Violation(f"round trip changed the text: {data[:60]!r} -> {back[:60]!r}")
    elif op == "detokenize":
        tok.detokenize_bytes(case["ids"], render_special=case["render_special"])
    elif op == "piece":
        for t in case["ids"][:8]:
            _accepting(lambda: tok.token_to_piece(t, case["render_special"]))
    elif op == "stream":
        with tok.detokenizer(render_special=case["render_special"]) as d:
            for t in case["ids"]:
                _accepting(lambda: d.push(t))
            d.flush()
    elif op == "attr":
        for t in case["ids"][:8]:
            _accepting(lambda: (tok.token_attr(t), tok.token_score(t), tok.is_eog(t)))


def _space_prefix_only(tok, data: bytes, back: bytes) -> bool:
    # SentencePiece models that add a leading space get it dropped on the way back
    return tok.vocab_info.add_space_prefix and back == b" " + data


def _accepting(f) -> None:
    import pyllamaspec
    try:
        f()
    except pyllamaspec.PyllamaspecError:
        pass
