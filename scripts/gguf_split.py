"""Split a GGUF file into shards the way llama.cpp's ``llama-gguf-split --split`` does.

    python scripts/gguf_split.py --split-max-tensors N IN.gguf OUT_PREFIX
    python scripts/gguf_split.py --shards N IN.gguf OUT_PREFIX

writes ``OUT_PREFIX-00001-of-0000K.gguf`` ... Layout (tools/gguf-split/gguf-split.cpp): every
metadata key/value of the input goes into the first shard, the tensors are divided among the
shards in file order (``--split-max-tensors`` per shard, or ``--shards`` shards of equal tensor
count), and every shard carries ``split.no`` (u16, 0-based), ``split.count`` (u16) and
``split.tensors.count`` (i32). A shard's data section is aligned to its own alignment: the input's
``general.alignment`` for the first shard (which copies that key), the GGUF default of 32 for the
others (which have no such key). Tensor bytes are copied as stored.

For tests, ``split_gguf`` also takes an explicit assignment of tensors to shards (``groups``, which
may repeat or leave out tensors) and per-shard key overrides, to make broken sets.
"""
from __future__ import annotations

import argparse
import pathlib
import struct
import sys
from typing import Mapping, Sequence

__all__ = ["shard_path", "split_gguf", "main"]

_DEFAULT_ALIGNMENT = 32
_KEYS = ("split.no", "split.count", "split.tensors.count")
_T_UINT16, _T_INT32, _T_UINT32 = 2, 5, 4
_FMT = {_T_UINT16: "<H", _T_INT32: "<i", _T_UINT32: "<I"}


def shard_path(prefix: str | pathlib.Path, no: int, count: int) -> pathlib.Path:
    """llama.cpp's name of shard ``no`` (0-based) of ``count`` (llama_split_path)."""
    return pathlib.Path(f"{prefix}-{no + 1:05d}-of-{count:05d}.gguf")


def _gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, vtype: int, value: int) -> bytes:
    return _gguf_string(key) + struct.pack("<I", vtype) + struct.pack(_FMT[vtype], value)


def _pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def split_gguf(src, out_prefix, *, n_shards: int | None = None, max_tensors: int | None = None,
               groups: Sequence[Sequence[str]] | None = None,
               overrides: Mapping[int, Mapping[str, int | None]] | None = None) -> list[pathlib.Path]:
    """Write the shards of ``src`` as ``out_prefix-0000k-of-0000N.gguf``; return their paths.

    Exactly one of ``n_shards`` (tensors divided evenly, in order), ``max_tensors`` (per shard, as
    ``--split-max-tensors``) or ``groups`` (tensor names per shard, for broken sets; an empty
    first group is ``--no-tensor-first-split``). ``overrides[k]`` replaces shard k's split.* values
    (0-based k; a value of None leaves the key out)."""
    import gguf

    src = pathlib.Path(src)
    r = gguf.GGUFReader(str(src))
    tensors = {t.name: t for t in r.tensors}
    names = list(tensors)
    if sum(x is not None for x in (n_shards, max_tensors, groups)) != 1:
        raise ValueError("give exactly one of n_shards, max_tensors, groups")
    if n_shards is not None:
        if not 1 <= n_shards <= len(names):
            raise ValueError(f"n_shards must be in [1, {len(names)}]")
        bounds = [len(names) * k // n_shards for k in range(n_shards + 1)]
        groups = [names[bounds[k]:bounds[k + 1]] for k in range(n_shards)]
    elif max_tensors is not None:
        if max_tensors < 1:
            raise ValueError("at least one tensor per shard")
        groups = [names[i:i + max_tensors] for i in range(0, len(names), max_tensors)]
    groups = [list(g) for g in groups]
    count = len(groups)

    # the input's key/values, raw, less any split.* keys of its own
    kv_raw, kv_align = [], _DEFAULT_ALIGNMENT
    for key, f in r.fields.items():
        if (key.startswith("GGUF.") and f.offset < 24) or key in _KEYS:
            continue
        kv_raw.append(b"".join(p.tobytes() for p in f.parts))
        if key == "general.alignment":
            kv_align = int(f.parts[-1][0])
    version = int(r.fields["GGUF.version"].parts[0][0])

    paths = []
    with open(src, "rb") as fin:
        for k, group in enumerate(groups):
            values = {"split.no": k, "split.count": count, "split.tensors.count": len(names)}
            values.update((overrides or {}).get(k, {}))
            kvs = (list(kv_raw) if k == 0 else [])
            # llama-gguf-split's order: it sets split.count last (a placeholder replaced at the end)
            for key, vtype in (("split.no", _T_UINT16), ("split.tensors.count", _T_INT32),
                               ("split.count", _T_UINT16)):
                if values[key] is not None:
                    kvs.append(_kv(key, vtype, values[key]))
            align = kv_align if k == 0 else _DEFAULT_ALIGNMENT
            infos, offset = [], 0
            for name in group:
                t = tensors[name]
                # the input's record less its offset (name, n_dims, dims, type), then ours
                infos.append(b"".join(p.tobytes() for p in t.field.parts[:-1]) + struct.pack("<Q", offset))
                offset = _pad(offset + int(t.n_bytes), align)
            head = b"GGUF" + struct.pack("<IQQ", version, len(group), len(kvs)) + b"".join(kvs) + b"".join(infos)
            path = shard_path(out_prefix, k, count)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as out:
                out.write(head + bytes(_pad(len(head), align) - len(head)))
                for name in group:
                    t = tensors[name]
                    fin.seek(int(t.data_offset))
                    data = fin.read(int(t.n_bytes))
                    out.write(data + bytes(_pad(len(data), align) - len(data)))
            paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--split-max-tensors", type=int, metavar="N", help="at most N tensors per shard")
    how.add_argument("--shards", type=int, metavar="N", help="N shards of equal tensor count")
    ap.add_argument("input")
    ap.add_argument("out_prefix")
    a = ap.parse_args(argv)
    for p in split_gguf(a.input, a.out_prefix, n_shards=a.shards, max_tensors=a.split_max_tensors):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
