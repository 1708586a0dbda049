"""Tokenization time grows near-linearly with the input, whatever its shape (one very long word,
runs of one character, runs of spaces or newlines or digits, text with no pre-tokenizer split
point), so that one request cannot tie a server up; and the long-input paths of the core (the
bucketed merge queue past a few hundred symbols, the special-token fallback search) give the same
ids as the plain algorithms (Python re-implementations and Hugging Face `tokenizers`)."""
from __future__ import annotations

import heapq
import random
import statistics
import time

import pytest
from tokenizer_helpers import (
    PRE_EXPRESSIONS,
    PySpm,
    corpus_documents,
    first_difference,
    hf_bpe_tokenizer,
    read_gguf_tokenizer,
    regex_split,
    write_tokenizer_gguf,
)

from pyllamaspec.engine.vocab import TokenAttr, Tokenizer, pretokenize

N = 200_000          # the small size; the large one is 8 N
MAX_RATIO = 20       # linear: 8, n log n: ~9.5; quadratic: 64


def pathological(kind: str, n: int) -> str:
    """About n bytes of one shape of input."""
    if kind == "letter-run":
        return "a" * n
    if kind == "letter-run-spaced":            # 'aaa…' with a space every 100k
        return " ".join(["a" * 99_999] * (n // 100_000 + 1))[:n]
    if kind == "two-byte-run":
        return "é" * (n // 2)
    if kind == "three-byte-run":
        return "日" * (n // 3)
    if kind == "digits":
        return "7" * n
    if kind == "newlines":
        return "\n" * n
    if kind == "spaces":
        return " " * n
    if kind == "punctuation":
        return "!" * n
    if kind == "random-letters":               # one long word with many different merges
        rng = random.Random(n)
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    raise ValueError(kind)


KINDS = ["letter-run", "letter-run-spaced", "two-byte-run", "three-byte-run", "digits", "newlines", "spaces",
         "punctuation", "random-letters"]


@pytest.fixture(scope="module")
def toks(smollm2_path, gemma3_path):
    with Tokenizer(smollm2_path) as s, Tokenizer(gemma3_path) as g:
        yield {"smollm2": s, "gemma3": g}


def median_time(f, repeat: int):
    """The median CPU time of `repeat` calls of f, and what the last one returned: the thread's
    own time, which a busy machine does not inflate as it does wall time (the work is in this
    thread: the tokenizers are single-threaded C under it)."""
    ts, r = [], None
    for _ in range(repeat):
        t0 = time.thread_time()
        r = f()
        ts.append(time.thread_time() - t0)
    return statistics.median(ts), r


# ---- time against size -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_time_grows_linearly(toks, name, kind):
    """8x the input must cost well under 64x (quadratic) the time; medians against a noisy machine."""
    t = toks[name]
    small, big = pathological(kind, N), pathological(kind, 8 * N)
    t_small, ids_small = median_time(lambda: t.tokenize_array(small, add_special=False), 5)
    t_big, ids_big = median_time(lambda: t.tokenize_array(big, add_special=False), 3)
    assert t_big / t_small < MAX_RATIO, f"{name} {kind}: {t_small:.4f}s for {len(small)} chars, {t_big:.4f}s for 8x"
    # the results are those of a smaller input, scaled: same text back, about 8x the tokens
    assert t.detokenize_bytes(ids_small) == small.encode()
    assert t.detokenize_bytes(ids_big) == big.encode()
    assert 7.5 <= len(ids_big) / len(ids_small) <= 8.5
    if kind == "letter-run-spaced":
        # a space before letters starts a word (BPE) and a segment (Gemma): the pieces between
        # the spaces tokenize on their own to the same ids
        pieces = big.replace(" ", "\0 ").split("\0")
        assert ids_big.tolist() == [i for p in pieces for i in t.tokenize(p, add_special=False)]


@pytest.mark.parametrize("pre", sorted(PRE_EXPRESSIONS))
def test_pre_tokenizer_time_grows_linearly(pre):
    """Every pre-tokenizer on runs of each character class, 8x the size: well under 64x the time
    (a bounded repetition like [0-9]{3} once rescanned the whole run at each match)."""
    n = 20_000
    for ch in ["7", "a", " ", "\n", "!", " \n", "é", "日"]:
        small, big = ch * (n // len(ch)), ch * (8 * n // len(ch))
        t_small, _ = median_time(lambda s=small: pretokenize(pre, s), 5)
        t_big, _ = median_time(lambda s=big: pretokenize(pre, s), 3)
        # (a floor under the small time: a millisecond is mostly call overhead and noise)
        assert t_big / max(t_small, 1e-3) < MAX_RATIO, f"{pre} {ch!r}: {t_small:.5f}s, then {t_big:.5f}s for 8x"


@pytest.mark.parametrize("pre", sorted(PRE_EXPRESSIONS))
def test_pre_tokenizer_long_runs_match_regex(pre):
    rng = random.Random(3)
    texts = [ch * 3001 for ch in ["7", "a", " ", "\n", "!", "é"]]
    texts += ["".join(rng.choice("77a \n!") for _ in range(3000)), "1234567" * 400 + " x" + "98" * 700]
    for text in texts:
        assert [w.decode() for w in pretokenize(pre, text)] == regex_split(text, PRE_EXPRESSIONS[pre]), text[:20]


# ---- long inputs: the same ids as the plain algorithms ------------------------------------------------------

def long_inputs() -> dict[str, str]:
    rng = random.Random(11)
    doc = "".join(corpus_documents(100_000))
    out = {k: pathological(k, 12_000) for k in KINDS if k != "letter-run-spaced"}
    out.update({
        "letter-run-odd": "a" * 12_345,
        "ab-run": "ab" * 5_000,
        "random-ab": "".join(rng.choice("ab") for _ in range(12_000)),
        "random-ab-space": "".join(rng.choice(["a", "b", " ", "ab"]) for _ in range(8_000)),
        "no-spaces": "".join(doc.split())[:20_000],       # real text as one long word
        "lowercase-run": "".join(c for c in doc.lower() if c.isalpha())[:20_000],
        "whitespace-mix": "".join(rng.choice([" ", "  ", "\n", "\t", " \n", "\n\n", "x"]) for _ in range(6_000)),
        "emoji-run": "🤖" * 3_000,
    })
    return out


def test_long_inputs_match_hf_tokenizers_smollm2(toks, smollm2_path):
    hf = hf_bpe_tokenizer(read_gguf_tokenizer(smollm2_path), "smollm")
    t = toks["smollm2"]
    for kind, text in long_inputs().items():
        ours = t.tokenize(text, add_special=False)
        theirs = hf.encode(text, add_special_tokens=False).ids
        assert ours == theirs, f"{kind}: " + first_difference(ours, theirs, t)


def test_long_inputs_match_python_spm_gemma3(toks, gemma3_path):
    t = toks["gemma3"]
    fields = read_gguf_tokenizer(gemma3_path)
    types = fields["tokenizer.ggml.token_type"]
    user = [i for i, ty in enumerate(types) if ty == 4 and t.token_attr(i) == TokenAttr.USER_DEFINED]
    ref = PySpm(fields, user)
    for kind, text in long_inputs().items():
        ours = t.tokenize(text, add_special=False)
        theirs = ref.tokenize(text.encode())
        assert ours == theirs, f"{kind}: " + first_difference(ours, theirs, t)


# ---- synthetic vocabularies for the rarer paths of the merge queue -----------------------------------------

def py_bpe_word(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """BPE merges of one word, plainly: lowest rank first, then the leftmost pair."""
    syms: list[str | None] = list(word)
    nxt = list(range(1, len(syms))) + [-1]
    prv = list(range(-1, len(syms) - 1))
    heap: list = []

    def add(left: int) -> None:
        if left >= 0 and nxt[left] >= 0:
            pair = (syms[left], syms[nxt[left]])
            if pair in ranks:
                heapq.heappush(heap, (ranks[pair], left, pair))

    for i in range(len(syms) - 1):
        add(i)
    while heap:
        _, left, pair = heapq.heappop(heap)
        right = nxt[left]
        if right < 0 or (syms[left], syms[right]) != pair:
            continue
        syms[left] = pair[0] + pair[1]
        syms[right] = None
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        add(prv[left])
        add(left)
    return [s for s in syms if s is not None]


def test_bpe_merges_out_of_order(tmp_path):
    """Merges listed in random order (a merge may rank before the merges that make its parts),
    on words long enough for the bucketed queue: ids as the plain algorithm gives them."""
    from models import _gpt2_byte_to_unicode
    rng = random.Random(5)
    singles = [_gpt2_byte_to_unicode()[b] for b in range(256)]
    have, merges = ["a", "b", "c"], []
    while len(merges) < 80:
        x, y = rng.choice(have), rng.choice(have)
        if len(x + y) <= 7 and (x, y) not in merges:
            merges.append((x, y))
            if x + y not in have:
                have.append(x + y)
    rng.shuffle(merges)
    tokens = singles + [s for s in dict.fromkeys(x + y for x, y in merges) if s not in singles]
    path = write_tokenizer_gguf(tmp_path / "shuffled.gguf", model="gpt2", pre="gpt-2", tokens=[s.encode() for s in tokens],
                                types=[1] * len(tokens), merges=[f"{x} {y}".encode() for x, y in merges])
    ranks = {m: r for r, m in enumerate(merges)}
    index = {s: i for i, s in enumerate(tokens)}
    with Tokenizer(path) as t:
        for n in [10, 600, 5000, 20_000]:
            for alphabet in ["abc", "ab", "a", "aab"]:
                word = "".join(rng.choice(alphabet) for _ in range(n))
                assert t.tokenize(word, add_special=False) == [index[s] for s in py_bpe_word(word, ranks)]


def test_spm_equal_scores(tmp_path):
    """Many tokens of one score: merges of one rank make new pairs of the same rank behind the read
    position of their bucket (the queue's late heap). Ids as the Python re-implementation gives."""
    rng = random.Random(9)
    normal = sorted({"".join(rng.choice("ab") for _ in range(k)) for k in range(1, 7) for _ in range(40)})
    toks = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)] + [s.encode() for s in normal]
    types = [2, 3, 3] + [6] * 256 + [1] * len(normal)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [float(rng.choice([-1, -2, -3])) for _ in normal]
    path = write_tokenizer_gguf(tmp_path / "ties.gguf", model="llama", tokens=toks, types=types, scores=scores, bos=1,
                                eos=2, unk=0, add_space_prefix=False)
    ref = PySpm({"tokenizer.ggml.tokens": toks, "tokenizer.ggml.scores": scores,
                 "tokenizer.ggml.add_space_prefix": False}, [])
    with Tokenizer(path) as t:
        for n in [10, 700, 6000, 30_000]:
            for alphabet in ["ab", "aab", "abb", "a"]:
                text = "".join(rng.choice(alphabet) for _ in range(n))
                assert t.tokenize(text, add_special=False) == ref.tokenize(text.encode())
