"""Convert / re-quantize GGUF files (offline), e.g. to build speculative-decoding pairs.

    python -m pyllamaspec.files.convert IN.gguf OUT.gguf --type {f32,f16,q8_0,q4_0,q4_1} [--keep-embeddings]

Every metadata key/value is copied with its exact GGUF value type (strings as raw bytes, ints of
each width, floats, bools, arrays, including empty and nested ones) and in its original order;
only ``general.file_type`` is set for the new type. Tensors keep their names, shapes and order:

* 1-D tensors (norms, biases) are stored as F32, as llama.cpp does; integer tensors are copied;
* tensors of two or more dimensions are dequantized and re-quantized to the target type
  (copied byte for byte when they are already of that type);
* a tensor whose row length is not a multiple of the target's block size stays as stored, or
  becomes F16 if it is stored as a float type (F32/F16/BF16);
* ``token_embd.weight`` is re-quantized too unless ``keep_embeddings`` is set;
* a tensor of a type the ``gguf`` package cannot dequantize is copied as stored;
* values the target cannot hold (beyond the f16 range, or block scales beyond it) are an error.

The ``gguf`` package (``pip install gguf``) is an optional dependency, imported on use. The output
is written to a ``.partial`` file next to it, then renamed into place.

``ensure_variant(src, qtype)`` keeps converted copies in the model cache
(``$PYLLAMASPEC_CACHE/models`` or ``~/.cache/pyllamaspec/models``) as ``<stem>.<qtype>.gguf``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .progress import Progress

__all__ = ["QTYPES", "FILE_TYPES", "ConvertError", "ConvertStats", "convert", "convert_with_stats",
           "ensure_variant", "model_cache_dir", "main"]

#: target types accepted by ``--type``
QTYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1")
#: llama_ftype value written to general.file_type for each target type
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7}

_FLOAT_SOURCES = ("F32", "F16", "BF16")
_INT_TYPES = ("I8", "I16", "I32", "I64")
_EMBD = "token_embd.weight"
_FILE_TYPE_KEY = "general.file_type"
_ALIGN_KEY = "general.alignment"


class ConvertError(ValueError):
    """The input cannot be converted (not a GGUF file, unreadable, unknown target type...)."""


def _gguf():
    try:
        import gguf
        import gguf.quants  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "pyllamaspec.convert needs the optional 'gguf' package; install it with: pip install gguf"
        ) from e
    return gguf


def _norm_qtype(qtype: str) -> str:
    q = str(qtype).strip().lower()
    if q not in QTYPES:
        raise ConvertError(f"unknown target type {qtype!r}; choose one of {', '.join(QTYPES)}")
    return q


# ---------------------------------------------------------------------------------------------
# metadata: decode the reader's flat parts into typed values, and pack them back exactly
# ---------------------------------------------------------------------------------------------

@dataclass
class _Array:
    """A GGUF array value: element type and items (bytes for strings, a numpy array for
    numbers and bools, a list of _Array for nested arrays)."""
    itype: Any  # gguf.GGUFValueType
    items: Any

    def __len__(self) -> int:  # GGUFWriter only needs len() / truthiness on values
        return len(self.items)


def _decode_value(gguf, parts: list, i: int, vtype) -> tuple[Any, int]:
    """Decode one value of type ``vtype`` starting at ``parts[i]``; return (value, next index)."""
    T = gguf.GGUFValueType
    if vtype == T.STRING:
        return parts[i + 1].tobytes(), i + 2
    if vtype == T.ARRAY:
        itype = T(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        if itype == T.STRING:
            items = [parts[i + 2 * k + 1].tobytes() for k in range(n)]
            i += 2 * n
        elif itype == T.ARRAY:
            items = []
            for _ in range(n):
                v, i = _decode_value(gguf, parts, i, itype)
                items.append(v)
        else:
            np_type = gguf.GGUFReader.gguf_scalar_to_np[itype]
            items = (np.concatenate(parts[i:i + n]).astype(np_type) if n
                     else np.zeros(0, dtype=np_type))
            i += n
        return _Array(itype, items), i
    # scalar: a one-element numpy array
    return parts[i][0].item(), i + 1


def _read_metadata(gguf, reader) -> list[tuple[str, Any, Any]]:
    """[(key, GGUFValueType, value)] in file order, without the reader's GGUF.* pseudo-fields."""
    out = []
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") and f.offset < 24:
            continue  # GGUF.version / tensor_count / kv_count, synthesized by the reader
        vtype = gguf.GGUFValueType(int(f.parts[2][0]))
        value, end = _decode_value(gguf, f.parts, 3, vtype)
        if end != len(f.parts):
            raise ConvertError(f"could not decode metadata key {key!r}")
        out.append((key, vtype, value))
    return out


_WRITER_CLASS = None


def _writer_class(gguf):
    """GGUFWriter that packs _Array values itself: GGUFWriter refuses empty arrays, and for nested
    arrays it guesses the inner element type (ints become INT32) instead of keeping it."""
    global _WRITER_CLASS
    if _WRITER_CLASS is not None:
        return _WRITER_CLASS
    T = gguf.GGUFValueType

    class _Writer(gguf.GGUFWriter):
        def _pack_val(self, val, vtype, add_vtype, sub_type=None):  # noqa: D401
            if not isinstance(val, _Array):
                return super()._pack_val(val, vtype, add_vtype, sub_type=sub_type)
            out = bytearray()
            if add_vtype:
                out += self._pack("I", T.ARRAY)
            out += self._pack("I", val.itype)
            out += self._pack("Q", len(val.items))
            if val.itype == T.STRING:
                for s in val.items:
                    out += self._pack("Q", len(s))
                    out += s
            elif val.itype == T.ARRAY:
                for item in val.items:
                    out += self._pack_val(item, T.ARRAY, add_vtype=False)
            else:
                order = "<" if self.endianess == gguf.GGUFEndian.LITTLE else ">"
                np_type = np.dtype(gguf.GGUFReader.gguf_scalar_to_np[val.itype])
                out += np.asarray(val.items, dtype=np_type).astype(
                    np_type.newbyteorder(order), copy=False).tobytes()
            return bytes(out)

    _WRITER_CLASS = _Writer
    return _Writer


# ---------------------------------------------------------------------------------------------
# tensors
# ---------------------------------------------------------------------------------------------

@dataclass
class _Plan:
    name: str
    np_shape: tuple[int, ...]
    src_type: Any
    out_type: Any
    nbytes: int
    action: str  # "copy" (bytes as stored) | "convert"
    produce: Callable[[], np.ndarray]


def _out_nbytes(gguf, qt, n_elements: int, ne0: int) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qt]
    return (n_elements // ne0) * (ne0 // block) * size


_F16_MAX = 65504.0
# the largest |x| a type can hold is 65504 times this: F16 values, the f16 block scale d = amax/127
# (Q8_0) or amax/8 (Q4_0), the f16 block minimum (Q4_1); F32 has no limit here
_SCALE_FACTOR = {"F32": 0, "F16": 1, "Q8_0": 127, "Q4_0": 8, "Q4_1": 1}
_DEQUANTIZABLE: dict[int, bool] = {}


def _can_dequantize(gguf, qt) -> bool:
    """Whether gguf.quants can dequantize ``qt`` (tried on one zero block)."""
    if int(qt) not in _DEQUANTIZABLE:
        ok = qt.name not in _INT_TYPES
        if ok:
            try:
                _, size = gguf.GGML_QUANT_SIZES[qt]
                gguf.quants.dequantize(np.zeros((1, size), dtype=np.uint8), qt)
            except (NotImplementedError, KeyError, ValueError):
                ok = False
        _DEQUANTIZABLE[int(qt)] = ok
    return _DEQUANTIZABLE[int(qt)]


def _plan_tensor(gguf, t, target, keep_embeddings: bool) -> _Plan:
    Q = gguf.GGMLQuantizationType
    src = Q(int(t.tensor_type))
    dims = [int(d) for d in t.shape]
    np_shape = tuple(reversed(dims))
    ne0 = dims[0] if dims else 1
    n_el = int(t.n_elements)
    dequantizable = _can_dequantize(gguf, src)

    def copy_plan() -> _Plan:
        return _Plan(t.name, np_shape, src, src, int(t.n_bytes), "copy", lambda: np.asarray(t.data))

    if not dequantizable:  # integer tensors, or a type gguf.quants cannot decode
        return copy_plan()
    if keep_embeddings and t.name == _EMBD:
        return copy_plan()
    if len(dims) <= 1:
        out = Q.F32
    elif ne0 % gguf.GGML_QUANT_SIZES[target][0] == 0:
        out = target
    elif src.name in _FLOAT_SOURCES:
        out = Q.F16
    else:
        return copy_plan()
    if out == src:
        return copy_plan()

    def produce() -> np.ndarray:
        x = gguf.quants.dequantize(np.asarray(t.data), src)
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(np_shape)
        limit = _F16_MAX * _SCALE_FACTOR.get(out.name, 1)
        if limit and x.size and np.abs(x).max() > limit:  # the f16 value / block scale would be inf
            raise ConvertError(f"tensor {t.name} has values too large for {out.name} "
                               f"(|x| > {limit:g}); convert to f32 instead")
        return gguf.quants.quantize(x, out)

    return _Plan(t.name, np_shape, src, out, _out_nbytes(gguf, out, n_el, ne0), "convert", produce)


# ---------------------------------------------------------------------------------------------
# conversion
# ---------------------------------------------------------------------------------------------

@dataclass
class ConvertStats:
    src: Path
    dst: Path
    qtype: str
    n_tensors: int = 0
    n_converted: int = 0  # re-encoded to the target type
    n_copied: int = 0  # multi-dimensional tensors copied as stored (already the target type...)
    n_f32: int = 0  # 1-D tensors, stored as F32
    n_fallback: int = 0  # rows do not fit the target's blocks: re-encoded as F16
    in_bytes: int = 0
    out_bytes: int = 0
    seconds: float = 0.0
    out_types: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        types = ", ".join(f"{k} x{v}" for k, v in sorted(self.out_types.items(), key=lambda kv: -kv[1]))
        return (f"{self.src.name} -> {self.dst.name} ({self.qtype}): {self.n_converted}/{self.n_tensors} "
                f"tensors converted, {self.n_copied} copied, {self.n_fallback} F16 fallback, "
                f"{self.n_f32} 1-D F32 [{types}]; "
                f"{self.in_bytes / 1e6:.1f} MB -> {self.out_bytes / 1e6:.1f} MB in {self.seconds:.1f} s")


def _open_reader(gguf, src: Path):
    if not src.exists():
        raise FileNotFoundError(f"input file not found: {src}")
    if not src.is_file():
        raise ConvertError(f"input is not a regular file: {src}")
    with open(src, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ConvertError(f"{src} is not a GGUF file (magic {magic!r}, expected b'GGUF')")
    try:
        reader = gguf.GGUFReader(src)
    except Exception as e:  # the reader raises ValueError/KeyError/IndexError... on damaged files
        raise ConvertError(f"cannot read GGUF file {src}: {type(e).__name__}: {e}") from e
    if reader.endianess != gguf.GGUFEndian.LITTLE:
        raise ConvertError(f"{src} is a big-endian GGUF file; only little-endian files are supported")
    return reader


def convert_with_stats(src: str | os.PathLike, dst: str | os.PathLike, qtype: str,
                       keep_embeddings: bool = False) -> ConvertStats:
    """``convert`` that also returns what it did (counts, sizes, time)."""
    t0 = time.perf_counter()
    gguf = _gguf()
    q = _norm_qtype(qtype)
    target = gguf.GGMLQuantizationType[q.upper()]
    src, dst = Path(src), Path(dst)
    reader = _open_reader(gguf, src)
    if dst.exists() and dst.resolve() == src.resolve():
        raise ConvertError("output must be a different file than the input")

    meta = _read_metadata(gguf, reader)
    plans = [_plan_tensor(gguf, t, target, keep_embeddings) for t in reader.tensors]
    stats = ConvertStats(src=src, dst=dst, qtype=q, n_tensors=len(plans), in_bytes=src.stat().st_size)
    for p in plans:
        stats.out_types[p.out_type.name] = stats.out_types.get(p.out_type.name, 0) + 1
        if len(p.np_shape) <= 1:
            stats.n_f32 += 1
        elif p.action == "copy":
            stats.n_copied += 1
        elif p.out_type == target:
            stats.n_converted += 1
        else:
            stats.n_fallback += 1

    T = gguf.GGUFValueType
    int_types = {T.UINT8, T.INT8, T.UINT16, T.INT16, T.UINT32, T.INT32, T.UINT64, T.INT64}
    arch = next((v for k, _, v in meta if k == "general.architecture" and isinstance(v, bytes)), b"")

    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f"{dst.name}.", suffix=".partial", dir=dst.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    writer = None
    try:
        writer = _writer_class(gguf)(tmp, arch.decode("utf-8", "replace"))
        # The constructor already added general.architecture; drop it and re-add every key in
        # the input's order and with its stored type, so nothing is written twice.
        writer.kv_data[0].clear()
        have_ftype = False
        for key, vtype, value in meta:
            if key == _FILE_TYPE_KEY:
                have_ftype = True
                vtype = vtype if vtype in int_types else T.UINT32
                value = FILE_TYPES[q]
            elif key == _ALIGN_KEY:
                writer.data_alignment = int(value)
            writer.add_key_value(key, value, vtype)
        if not have_ftype:
            writer.add_key_value(_FILE_TYPE_KEY, FILE_TYPES[q], T.UINT32)
        np_dtype = {gguf.GGMLQuantizationType.F32: np.float32, gguf.GGMLQuantizationType.F16: np.float16}
        for p in plans:
            # the element shape with a dtype other than uint8 is taken as is (no byte-shape maths)
            writer.add_tensor_info(p.name, p.np_shape, np.dtype(np_dtype.get(p.out_type, np.float32)),
                                   p.nbytes, raw_dtype=p.out_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        with Progress(f"converting {src.name} to {q}", sum(p.nbytes for p in plans)) as bar:
            for p in plans:  # one tensor in memory at a time
                data = p.produce()
                if data.nbytes != p.nbytes:
                    raise ConvertError(f"tensor {p.name}: produced {data.nbytes} bytes, expected {p.nbytes}")
                writer.write_tensor_data(data)
                bar.update(p.nbytes)
        writer.close()
        writer = None
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, dst)
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    stats.out_bytes = dst.stat().st_size
    stats.seconds = time.perf_counter() - t0
    return stats


def convert(src: str | os.PathLike, dst: str | os.PathLike, qtype: str,
            keep_embeddings: bool = False) -> Path:
    """Write ``dst``: the GGUF ``src`` with its weights re-encoded as ``qtype``
    (f32, f16, q8_0, q4_0 or q4_1). Returns ``Path(dst)``.

    Raises FileNotFoundError for a missing input, ConvertError for a non-GGUF / unreadable input or
    an unknown type, ImportError when the ``gguf`` package is missing.
    """
    return convert_with_stats(src, dst, qtype, keep_embeddings=keep_embeddings).dst


def model_cache_dir() -> Path:
    """``$PYLLAMASPEC_CACHE/models``, or ``~/.cache/pyllamaspec/models``."""
    env = os.environ.get("PYLLAMASPEC_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "pyllamaspec"
    return root / "models"


def ensure_variant(src: str | os.PathLike, qtype: str) -> Path:
    """Path of ``<cache>/models/<stem>.<qtype>.gguf``, the ``qtype`` copy of ``src``; converted
    (atomically) when absent or older than ``src``, otherwise returned as is."""
    q = _norm_qtype(qtype)
    src = Path(src)
    if not src.is_file():
        raise FileNotFoundError(f"input file not found: {src}")
    dst = model_cache_dir() / f"{src.stem}.{q}.gguf"
    try:
        if dst.is_file() and dst.stat().st_mtime >= src.stat().st_mtime:
            return dst
    except OSError:
        pass
    return convert(src, dst, q)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyllamaspec.files.convert",
        description="Convert / re-quantize a GGUF model (metadata copied, weights re-encoded).")
    parser.add_argument("input", help="input .gguf file")
    parser.add_argument("output", help="output .gguf file (written atomically)")
    parser.add_argument("--type", dest="qtype", required=True, choices=QTYPES, type=str.lower,
                        help="target type of the weights")
    parser.add_argument("--keep-embeddings", action="store_true",
                        help="keep token_embd.weight as stored instead of re-encoding it")
    args = parser.parse_args(argv)
    try:
        stats = convert_with_stats(args.input, args.output, args.qtype,
                                   keep_embeddings=args.keep_embeddings)
    except (FileNotFoundError, ConvertError, ImportError) as e:
        parser.error(str(e))  # message on stderr, SystemExit(2)
    print(stats.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
