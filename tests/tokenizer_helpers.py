"""What the tokenizer tests (tests/engine/test_tokenizer*.py) share: the real models' tokenizers as
module fixtures and their tokenizer.ggml.* fields read with the gguf package, a writer of
tokenizer-only GGUF files, a text corpus, and the independent oracles: Hugging Face `tokenizers`
for BPE under llama.cpp's pre-tokenizer expressions, the `regex` module for the pre-tokenizers
themselves, and a Python re-implementation of the SentencePiece-style merges (Gemma's)."""
from __future__ import annotations

import functools
import heapq
import pathlib
import sysconfig

import pytest
from hypothesis import HealthCheck, settings

from pyllamaspec.engine.vocab import Tokenizer

SPACE_MARK = "\u2581"

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- fixtures, tokenizer-only GGUF files, a corpus ----------------------------------------------------

@pytest.fixture(scope="module")
def smollm(smollm2_path):
    with Tokenizer(smollm2_path) as t:
        yield t


@pytest.fixture(scope="module")
def gemma(gemma3_path):
    with Tokenizer(gemma3_path) as t:
        yield t


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def tok(request):
    return request.getfixturevalue({"smollm2": "smollm", "gemma3": "gemma"}[request.param]), request.param


@functools.cache
def read_gguf_tokenizer(path) -> dict:
    """The tokenizer.ggml.* fields of a GGUF file, read with the gguf package (not the core).
    Cached (Gemma's 262k tokens take the reader seconds); the dict is shared: do not modify it."""
    import gguf
    r = gguf.GGUFReader(str(path))
    out = {}
    for key, f in r.fields.items():
        if not key.startswith("tokenizer.ggml.") and key not in ("general.architecture",):
            continue
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                out[key] = [bytes(f.parts[i]) for i in f.data]
            else:
                out[key] = [f.parts[i][0].item() for i in f.data]
        elif f.types[0] == gguf.GGUFValueType.STRING:
            out[key] = bytes(f.parts[-1]).decode()
        else:
            out[key] = f.parts[-1][0].item()
    return out


@pytest.fixture(scope="module")
def smollm_fields(smollm2_path):
    return read_gguf_tokenizer(smollm2_path)


@pytest.fixture(scope="module")
def gemma_fields(gemma3_path):
    return read_gguf_tokenizer(gemma3_path)


def write_tokenizer_gguf(path, *, model: str, tokens: list, types: list | None = None, scores: list | None = None,
                         merges: list | None = None, pre: str | None = None, bos: int | None = None,
                         eos: int | None = None, unk: int | None = None, add_bos: bool | None = None,
                         add_space_prefix: bool | None = None, name: str = "tokenizer-test"):
    """A GGUF file with tokenizer metadata only (no tensors), for Tokenizer()."""
    import gguf
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(name)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list([t if isinstance(t, (bytes, str)) else bytes(t) for t in tokens])
    if types is not None:
        w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if unk is not None:
        w.add_unk_token_id(unk)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def corpus_documents(limit_bytes: int = 700_000) -> list[str]:
    """A few hundred KB of text found on every machine: CPython's documentation topics
    (pydoc_data) and some standard library sources."""
    from pydoc_data.topics import topics
    docs = [topics[k] for k in sorted(topics)]
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    for name in ["argparse.py", "inspect.py", "typing.py", "textwrap.py", "difflib.py", "calendar.py"]:
        p = stdlib / name
        if p.is_file():
            docs.append(p.read_text(encoding="utf-8", errors="replace"))
    out, total = [], 0
    for d in docs:
        if total >= limit_bytes:
            break
        out.append(d)
        total += len(d.encode())
    return out


# ---- oracle: Hugging Face tokenizers on the same vocabulary, merges and pre-tokenizer -------------------

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
CONTR = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA3_RE = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# tokenizer.ggml.pre -> the expressions llama.cpp applies in turn (from its llama-vocab.cpp)
PRE_EXPRESSIONS = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2_RE, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt-2": [GPT2_RE],
    "smollm": [r"\p{N}", GPT2_RE],
    "starcoder": [r"\p{N}", GPT2_RE],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2_RE, r"[0-9][0-9][0-9]"],
    "llama-bpe": [LLAMA3_RE],
    "dbrx": [LLAMA3_RE],
    "qwen2": [QWEN2_RE],
    "stablelm2": [QWEN2_RE],
    "minicpm5": [r"\p{N}{1,3}", CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "seed-coder": [CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "ufakzeka": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "bailingmoe": [r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"],
    "laguna": [r"[^\n]+|[\n]+", QWEN2_RE],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"],
    "poro-chat": [r" ?[^(\s|.,!?…。，、।۔،)]+"],
    "viking": [r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
}


def hf_bpe_tokenizer(fields: dict, pre: str):
    """A Hugging Face tokenizer from a GGUF's vocabulary and merges and the pre-tokenizer
    expressions of `pre` (each an isolating split, then GPT-2's byte-level mapping)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Regex, decoders, models, pre_tokenizers
    vocab = {}
    for i, t in enumerate(fields["tokenizer.ggml.tokens"]):
        vocab.setdefault(t.decode("utf-8"), i)
    merges = []
    for m in fields["tokenizer.ggml.merges"]:
        s = m.decode("utf-8")
        k = s.find(" ", 1)
        merges.append((s[:k], s[k + 1:]))
    kwargs = {"ignore_merges": True} if pre in ("llama-bpe", "llama3", "minicpm5") else {}
    bpe = models.BPE(vocab=vocab, merges=merges, **kwargs)
    tk = tokenizers.Tokenizer(bpe)
    splits = [pre_tokenizers.Split(Regex(e), behavior="isolated") for e in PRE_EXPRESSIONS[pre]]
    tk.pre_tokenizer = pre_tokenizers.Sequence(splits + [pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                      use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    return tk


def first_difference(a: list[int], b: list[int], t) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"at token {i}: ours {a[i:i+8]} ({t.detokenize(a[i:i+8])!r}) vs oracle {b[i:i+8]}"
    return f"lengths {len(a)} vs {len(b)}"


# ---- oracle: the pre-tokenizers against the regex module -------------------------------------------------

def regex_split(text: str, exprs: list[str]) -> list[str]:
    """llama.cpp's unicode_regex_split semantics with a real regex engine: each expression splits
    every piece into its matches and the text between them."""
    regex = pytest.importorskip("regex")
    pieces = [text] if text else []
    for e in exprs:
        pat = regex.compile(e)
        out = []
        for p in pieces:
            pos = 0
            for m in pat.finditer(p):
                if m.start() > pos:
                    out.append(p[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(p):
                out.append(p[pos:])
        pieces = out
    return pieces


# ---- oracle: SentencePiece-style merges re-implemented in Python ------------------------------------------

class PySpm:
    """llama.cpp's SPM tokenization written again, plainly, in Python (user-defined tokens split
    off longest first, then score-ordered merges of UTF-8 characters and byte fallback)."""

    def __init__(self, fields: dict, user_defined: list[int]):
        toks = fields["tokenizer.ggml.tokens"]
        self.scores = fields["tokenizer.ggml.scores"]
        self.ids: dict[bytes, int] = {}
        for i, t in enumerate(toks):
            self.ids.setdefault(t, i)
        self.user = sorted(((toks[i], i) for i in user_defined), key=lambda p: (-len(p[0]), p[1]))
        self.add_space_prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))

    def byte_token(self, b: int) -> int:
        return self.ids[b"<0x%02X>" % b]

    def merge(self, text: bytes) -> list[int]:
        syms, off = [], 0
        while off < len(text):
            n = min([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4][text[off] >> 4], len(text) - off)
            syms.append([off, n])
            off += n
        nxt = list(range(1, len(syms))) + [-1]
        prv = list(range(-1, len(syms) - 1))
        heap = []

        def add(left, right):
            if left < 0 or right < 0:
                return
            s = text[syms[left][0]: syms[left][0] + syms[left][1] + syms[right][1]]
            if s in self.ids:
                heapq.heappush(heap, (-self.scores[self.ids[s]], left, right, len(s)))

        for i in range(1, len(syms)):
            add(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if syms[left][1] == 0 or syms[right][1] == 0 or syms[left][1] + syms[right][1] != size:
                continue
            syms[left][1] += syms[right][1]
            syms[right][1] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            add(prv[left], left)
            add(left, nxt[left])
        out, i = [], 0 if syms else -1
        while i != -1:
            s = text[syms[i][0]: syms[i][0] + syms[i][1]]
            out += [self.ids[s]] if s in self.ids else [self.byte_token(b) for b in s]
            i = nxt[i]
        return out

    def tokenize(self, text: bytes) -> list[int]:
        frags: list = [text] if text else []
        for t, i in self.user:
            new = []
            for f in frags:
                if isinstance(f, int):
                    new.append(f)
                    continue
                parts = f.split(t)
                for k, p in enumerate(parts):
                    if k:
                        new.append(i)
                    if p:
                        new.append(p)
            frags = new
        out, prev_special = [], True
        for f in frags:
            if isinstance(f, int):
                out.append(f)
                prev_special = True
            else:
                s = (b" " if self.add_space_prefix and prev_special else b"") + f
                out += self.merge(s.replace(b" ", SPACE_MARK.encode()))
                prev_special = False
        return out
