"""GGUF side of scripts/fuzz.py: a parsed GGUF header that can be mutated field by field or entry
by entry and written back, the seed files, and the mutations.

A seed is parsed once into a Doc (version, key/values, tensor infos, data). A case copies it,
applies a few mutations chosen by a random.Random, and serialises it; the serialiser records
where every numeric field landed, so field mutations (boundary values written over a length, a
count, a type, a dimension) happen on the bytes after structural ones (entries duplicated,
removed, retyped, vocabularies damaged).
"""
from __future__ import annotations

import copy
import dataclasses
import pathlib
import random
import struct

# GGUF value types and their struct formats; 8 = string, 9 = array.
STRING, ARRAY = 8, 9
SCALAR_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}
N_GGUF_TYPES = 13
N_GGML_TYPES = 43           # ggml 0.26's GGML_TYPE_COUNT
REMOVED_GGML_TYPES = (4, 5, 31, 32, 33, 36, 37, 38)


@dataclasses.dataclass
class KV:
    key: bytes
    type: int
    value: object           # int/float, bytes (string), or (element type, list) for an array


@dataclasses.dataclass
class TensorInfo:
    name: bytes
    dims: list
    type: int
    offset: int


@dataclasses.dataclass
class Doc:
    version: int
    kvs: list
    tensors: list
    data: bytes             # the data section (from the aligned data offset on)
    target: str = "model"   # what a case loads it with: "model", "tokenizer" or "projector"
    name: str = ""


# ---- parsing -------------------------------------------------------------------------------------

class _Buf:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def string(self) -> bytes:
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s


def _value(b: _Buf, t: int):
    if t == STRING:
        return b.string()
    if t == ARRAY:
        et, n = b.take("I"), b.take("Q")
        if et == STRING:
            return et, [b.string() for _ in range(n)]
        fmt = SCALAR_FMT[et]
        vals = list(struct.unpack_from(f"<{n}{fmt}", b.data, b.pos))
        b.pos += n * struct.calcsize(fmt)
        return et, vals
    return b.take(SCALAR_FMT[t])


def parse(data: bytes, name: str = "") -> Doc:
    """The Doc of a valid GGUF file's bytes (the data section may be cut short)."""
    b = _Buf(data)
    if data[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    b.pos = 4
    version, n_tensors, n_kv = b.take("I"), b.take("Q"), b.take("Q")
    kvs = []
    for _ in range(n_kv):
        key, t = b.string(), b.take("I")
        kvs.append(KV(key, t, _value(b, t)))
    tensors = []
    for _ in range(n_tensors):
        tname = b.string()
        n_dims = b.take("I")
        dims = [b.take("Q") for _ in range(n_dims)]
        tensors.append(TensorInfo(tname, dims, b.take("I"), b.take("Q")))
    align = _alignment(kvs)
    start = (b.pos + align - 1) // align * align if tensors else b.pos
    return Doc(version, kvs, tensors, bytes(data[start:]), name=name)


def _alignment(kvs) -> int:
    for kv in kvs:
        if kv.key == b"general.alignment" and kv.type == 4 and kv.value and not kv.value & (kv.value - 1):
            return kv.value
    return 32


# ---- writing -------------------------------------------------------------------------------------

class Writer:
    """Bytes plus the position, width and role of every numeric field written."""

    def __init__(self):
        self.out = bytearray()
        self.fields: list[tuple[int, int, str]] = []

    def num(self, fmt: str, v, role: str) -> None:
        size = struct.calcsize("<" + fmt)
        self.fields.append((len(self.out), size, role))
        if fmt in "fd":
            self.out += struct.pack("<" + fmt, v)
        else:   # any integer, wrapped to the field's width: mutations write out-of-range values
            self.out += (int(v) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    def string(self, s: bytes, role: str) -> None:
        self.num("Q", len(s), role)
        self.out += s


def _write_value(w: Writer, t: int, v) -> None:
    if t == STRING:
        w.string(v if isinstance(v, bytes) else b"", "str_len")
    elif t == ARRAY and isinstance(v, tuple):
        et, vals = v
        w.num("I", et, "arr_type")
        w.num("Q", len(vals), "arr_len")
        for x in vals[:64]:            # the first elements' fields are mutation targets
            _write_element(w, et, x)
        if len(vals) > 64:             # the rest in bulk, without a field record each
            tail = Writer()
            for x in vals[64:]:
                _write_element(tail, et, x)
            w.out += tail.out
    elif t in SCALAR_FMT:
        w.num(SCALAR_FMT[t], v if isinstance(v, (int, float)) else 0, "scalar")
    # an invalid type id: no value bytes (the reader must stop at the type)


def _write_element(w: Writer, et: int, x) -> None:
    if et == STRING:
        w.string(x if isinstance(x, bytes) else str(x).encode(), "str_len")
    elif et in SCALAR_FMT:
        fmt = SCALAR_FMT[et]
        w.num(fmt, x if isinstance(x, (int, float)) and (fmt in "fd" or isinstance(x, int)) else 0, "element")


def serialize(doc: Doc) -> Writer:
    w = Writer()
    w.out += b"GGUF"
    w.num("I", doc.version, "version")
    w.num("Q", len(doc.tensors), "n_tensors")
    w.num("Q", len(doc.kvs), "n_kv")
    for kv in doc.kvs:
        w.string(kv.key, "key_len")
        w.num("I", kv.type, "kv_type")
        _write_value(w, kv.type, kv.value)
    for t in doc.tensors:
        w.string(t.name, "name_len")
        w.num("I", len(t.dims), "n_dims")
        for d in t.dims:
            w.num("Q", d, "dim")
        w.num("I", t.type, "ggml_type")
        w.num("Q", t.offset, "offset")
    if doc.tensors:
        align = _alignment(doc.kvs)
        w.out += bytes(-len(w.out) % align)
    w.out += doc.data
    return w


# ---- seeds ---------------------------------------------------------------------------------------

SYNTHETIC = (   # write_gguf arguments: unquantized and quantized, each architecture's layout
    dict(dtype="F32"),
    dict(dtype="Q4_0", n_embd=64, n_ff=96),
    dict(dtype="Q8_0", n_embd=64, n_ff=96, arch="qwen2"),
    dict(dtype="Q4_1", n_embd=64, n_ff=96, arch="qwen3", n_head=2, n_head_kv=1),
    dict(dtype="F16", arch="gemma3", n_head=2, n_head_kv=1, head_dim=16),
)
_VOCAB_KEYS = (b"tokenizer.ggml.tokens", b"tokenizer.ggml.scores", b"tokenizer.ggml.token_type")
VOCAB_CUT = 3000


def synthetic_seeds(directory: pathlib.Path) -> list[Doc]:
    import models    # tests/models.py
    docs = []
    for i, cfg in enumerate(SYNTHETIC):
        path = directory / f"synth{i}.gguf"
        models.write_gguf(path, **cfg)
        docs.append(parse(path.read_bytes(), name=f"synth{i}-{cfg.get('arch', 'llama')}-{cfg['dtype']}"))
    import models_vision    # a vision projector (mmproj), loaded and run as one
    path = directory / "mmproj.gguf"
    models_vision.write_gemma3_mmproj(path, n_embd_text=32, n_layer=1)
    doc = parse(path.read_bytes(), name="mmproj-gemma3")
    doc.target = "projector"
    docs.append(doc)
    return docs


def real_seeds(path: pathlib.Path, name: str) -> list[Doc]:
    """Two seeds from a real model: its key/values with the vocabulary cut to VOCAB_CUT tokens and
    no tensors (loaded as a Tokenizer: the vocabulary loader sees real metadata), and the same
    with its tensor infos and a little data (loaded as a Model: refused as truncated, after the
    tensor table of a real quantized model went through the parser)."""
    with open(path, "rb") as f:
        head = f.read(64 << 20)
    doc = parse(head)
    for kv in doc.kvs:
        if kv.key in _VOCAB_KEYS and kv.type == ARRAY:
            kv.value = (kv.value[0], kv.value[1][:VOCAB_CUT])
        elif kv.key == b"tokenizer.ggml.merges" and kv.type == ARRAY:
            kv.value = (kv.value[0], _merges_within(doc, kv.value[1]))
    vocab = Doc(doc.version, doc.kvs, [], b"", target="tokenizer", name=f"{name}-vocab")
    header = Doc(doc.version, copy.deepcopy(doc.kvs), doc.tensors, doc.data[:4096], target="model",
                 name=f"{name}-header")
    return [vocab, header]


def _merges_within(doc: Doc, merges: list) -> list:
    tokens = next(set(kv.value[1]) for kv in doc.kvs if kv.key == b"tokenizer.ggml.tokens")
    keep = []
    for m in merges:
        parts = m.split(b" ")
        if len(parts) == 2 and parts[0] in tokens and parts[1] in tokens and parts[0] + parts[1] in tokens:
            keep.append(m)
    return keep


# ---- mutations -----------------------------------------------------------------------------------

BOUNDARY = (0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 31, 32, 42, 43, 63, 64, 255, 256, 2**15, 2**16 - 1, 2**16,
            2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -1, -2)


def _boundary(rng: random.Random, role: str, old: int) -> int:
    r = rng.random()
    if role in ("kv_type", "arr_type") and r < 0.5:
        return rng.randrange(-3, N_GGUF_TYPES + 4)
    if role == "ggml_type" and r < 0.5:
        return rng.choice(REMOVED_GGML_TYPES) if rng.random() < 0.3 else rng.randrange(-3, N_GGML_TYPES + 4)
    if r < 0.6:
        return rng.choice(BOUNDARY)
    if r < 0.8:
        return old + rng.choice((-1, 1, -2, 2, 8, -8, 32, 1024))
    return rng.getrandbits(rng.choice((8, 16, 32, 64)))


def mutate_fields(rng: random.Random, w: Writer, data: bytearray, n: int) -> None:
    """n numeric fields overwritten with boundary or random values."""
    for _ in range(n):
        pos, size, role = rng.choice(w.fields)
        if role in ("element", "scalar") and rng.random() < 0.5 and size in (4, 8):
            v = rng.choice((float("nan"), float("inf"), -float("inf"), 1e38, -0.0, 1e-45))
            data[pos:pos + size] = struct.pack("<f" if size == 4 else "<d", v)
            continue
        old = int.from_bytes(data[pos:pos + size], "little")
        data[pos:pos + size] = (_boundary(rng, role, old) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def mutate_bytes(rng: random.Random, data: bytearray, header_end: int) -> bytearray:
    r = rng.random()
    if r < 0.35:                      # flip bytes in the header
        for _ in range(rng.choice((1, 2, 4, 16))):
            i = rng.randrange(4, max(5, header_end))
            data[i] ^= 1 << rng.randrange(8) if rng.random() < 0.5 else rng.randrange(1, 256)
        return data
    if r < 0.6:                       # truncate anywhere
        return data[:rng.randrange(0, len(data) + 1)]
    if r < 0.8:                       # insert or delete a few bytes in the header
        i = rng.randrange(4, max(5, header_end))
        if rng.random() < 0.5:
            return data[:i] + bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 9))) + data[i:]
        return data[:i] + data[i + rng.randrange(1, 9):]
    i = rng.randrange(0, max(1, header_end))   # overwrite a run with one byte value
    data[i:i + rng.randrange(1, 64)] = bytes([rng.choice((0, 0xff, 0x7f, 0x80))]) * rng.randrange(1, 64)
    return data


_TOKENIZER_MODELS = (b"gpt2", b"llama", b"bert", b"t5", b"rwkv", b"none", b"plamo2", b"", b"\xff\xfe")
_PRES = (b"default", b"llama-bpe", b"llama3", b"smollm", b"qwen2", b"gpt-2", b"deepseek-llm", b"", b"x" * 300)
_SPECIAL_KEYS = tuple(b"tokenizer.ggml." + k for k in (b"bos_token_id", b"eos_token_id", b"unknown_token_id",
                                                          b"padding_token_id", b"eot_token_id", b"eom_token_id",
                                                          b"seperator_token_id"))


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(n))


def _scalar_for(rng: random.Random, t: int):
    if SCALAR_FMT.get(t) in ("f", "d"):
        return rng.choice((0.0, -1.0, 1e-6, 1e30, float("nan"), float("inf"), 10000.0))
    bits = 8 * struct.calcsize(SCALAR_FMT.get(t, "B"))
    v = rng.choice(BOUNDARY) & ((1 << bits) - 1)
    if SCALAR_FMT.get(t, "B").islower() and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _value_for(rng: random.Random, t: int, n: int = 8):
    if t == STRING:
        return _random_bytes(rng, rng.choice((0, 1, 5, 64, 300)))
    if t == ARRAY:
        et = rng.randrange(N_GGUF_TYPES)
        return et, [_value_for(rng, et) if et not in (ARRAY,) else 0 for _ in range(rng.randrange(n))]
    return _scalar_for(rng, t)


def _mutate_array(rng: random.Random, kv: KV) -> str:
    et, vals = kv.value
    vals = list(vals)
    r = rng.random()
    if r < 0.2 and vals:
        vals = vals[:rng.randrange(len(vals))]
        what = "cut"
    elif r < 0.3:
        vals = vals + vals[:rng.randrange(1, 64)]
        what = "extend"
    elif r < 0.45:                                  # the elements reinterpreted as another type
        et = rng.randrange(N_GGUF_TYPES + 2)
        vals = [_value_for(rng, et) if et in SCALAR_FMT or et == STRING else 0 for _ in vals]
        what = "element type"
    else:                                           # a few elements damaged
        for _ in range(rng.choice((1, 3, 10))):
            if not vals:
                break
            i = rng.randrange(len(vals))
            if et == STRING:
                vals[i] = rng.choice((b"", _random_bytes(rng, rng.randrange(1, 40)), vals[rng.randrange(len(vals))],
                                      b"\x00" * 3, vals[i] * rng.randrange(2, 100), b"a b c", b" ", b"<|"))
            else:
                vals[i] = _scalar_for(rng, et)
        what = "elements"
    kv.value = (et, vals)
    return f"array {kv.key.decode(errors='replace')}: {what}"


def _mutate_kv(rng: random.Random, doc: Doc) -> str:
    if not doc.kvs:
        doc.kvs.append(KV(b"general.architecture", STRING, b"llama"))
        return "kv added"
    i = rng.randrange(len(doc.kvs))
    kv = doc.kvs[i]
    name = kv.key.decode(errors="replace")
    r = rng.random()
    if r < 0.1:
        del doc.kvs[i]
        return f"kv {name} removed"
    if r < 0.18:
        doc.kvs.insert(rng.randrange(len(doc.kvs) + 1), copy.deepcopy(kv))
        return f"kv {name} duplicated"
    if r < 0.3:
        kv.type = rng.randrange(N_GGUF_TYPES + 3)
        kv.value = _value_for(rng, kv.type)
        return f"kv {name} retyped {kv.type}"
    if r < 0.38:
        kv.key = rng.choice((b"", kv.key + b"\xff", kv.key * 10, _random_bytes(rng, 8)))
        return f"kv {name} key changed"
    if kv.type == ARRAY and isinstance(kv.value, tuple):
        return _mutate_array(rng, kv)
    kv.value = _value_for(rng, kv.type)
    return f"kv {name} value"


def _mutate_vocab(rng: random.Random, doc: Doc) -> str:
    """Damage aimed at the tokenizer loader: its model, pre-tokenizer and special ids."""
    r = rng.random()
    if r < 0.3:
        key, val = b"tokenizer.ggml.model", rng.choice(_TOKENIZER_MODELS)
    elif r < 0.5:
        key, val = b"tokenizer.ggml.pre", rng.choice(_PRES)
    else:
        key = rng.choice(_SPECIAL_KEYS)
        val = rng.choice((-1, 0, 1, 2, 2**31 - 1, VOCAB_CUT - 1, VOCAB_CUT, 63, 64, 65, 262143, 2**32 - 1))
    for kv in doc.kvs:
        if kv.key == key:
            kv.type, kv.value = (STRING, val) if isinstance(val, bytes) else (4, val & 0xffffffff)
            break
    else:
        doc.kvs.append(KV(key, STRING, val) if isinstance(val, bytes) else KV(key, 4, val & 0xffffffff))
    return f"vocab {key.decode()}={val!r}"


def _mutate_tensor(rng: random.Random, doc: Doc) -> str:
    if not doc.tensors:
        return _mutate_kv(rng, doc)
    i = rng.randrange(len(doc.tensors))
    t = doc.tensors[i]
    name = t.name.decode(errors="replace")
    r = rng.random()
    if r < 0.1:
        del doc.tensors[i]
        return f"tensor {name} removed"
    if r < 0.18:
        doc.tensors.insert(rng.randrange(len(doc.tensors) + 1), copy.deepcopy(t))
        return f"tensor {name} duplicated"
    if r < 0.4:
        t.type = rng.choice(REMOVED_GGML_TYPES) if rng.random() < 0.3 else rng.randrange(-2, N_GGML_TYPES + 3)
        return f"tensor {name} type {t.type}"
    if r < 0.55:
        t.dims = [rng.choice(BOUNDARY) for _ in range(rng.choice((0, 1, 2, 3, 4, 5, 9)))]
        return f"tensor {name} dims {t.dims}"
    if r < 0.75 and t.dims:
        d = rng.randrange(len(t.dims))
        t.dims[d] = _boundary(rng, "dim", t.dims[d])
        return f"tensor {name} dim {d}={t.dims[d]}"
    if r < 0.9:
        t.offset = _boundary(rng, "offset", t.offset)
        return f"tensor {name} offset {t.offset}"
    t.name = rng.choice((b"", b"x" * 64, b"x" * 63, t.name + b"\x00", _random_bytes(rng, 10)))
    return f"tensor {name} renamed"


def mutate_doc(rng: random.Random, doc: Doc) -> str:
    r = rng.random()
    if r < 0.4:
        return _mutate_kv(rng, doc)
    if r < 0.6:
        return _mutate_vocab(rng, doc)
    if r < 0.95:
        return _mutate_tensor(rng, doc)
    doc.version = rng.choice((0, 1, 2, 4, 0x03000000, 2**32 - 1))
    return f"version {doc.version}"


_SERIALIZED: dict[int, Writer] = {}


def make_case(rng: random.Random, seeds: list) -> tuple[bytes, str, str]:
    """(file bytes, target, what was done) for one case."""
    seed = rng.choice(seeds)
    what = [seed.name]
    doc = seed
    if rng.random() < 0.6:
        doc = copy.deepcopy(seed)
        for _ in range(rng.choice((1, 1, 2, 3))):
            what.append(mutate_doc(rng, doc))
        w = serialize(doc)
    else:   # the seed as it is, serialised once
        if id(seed) not in _SERIALIZED:
            _SERIALIZED[id(seed)] = serialize(seed)
        w = copy.copy(_SERIALIZED[id(seed)])
        w.out = bytearray(w.out)
    data = w.out
    header_end = len(data) - len(doc.data)
    if rng.random() < 0.5 or len(what) == 1:
        n = rng.choice((1, 1, 2, 4))
        mutate_fields(rng, w, data, n)
        what.append(f"{n} fields")
    if rng.random() < 0.2:
        data = mutate_bytes(rng, data, header_end)
        what.append("bytes")
    return bytes(data), doc.target, "; ".join(what)
