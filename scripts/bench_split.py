"""Load time and peak RSS of a model whole and split into shards (issue 13), in one process.

    python scripts/bench_split.py -m MODEL.gguf [--shards 2 3] [-r 7] [--no-mmap] [--json]

The shards are written next to nothing the caller owns (a temporary folder) with
scripts/gguf_split.py, the way llama-gguf-split writes them. Each round loads every variant in turn
(whole, then each split) and evaluates one token; after a warm-up round (every file in the page
cache) the medians of -r rounds are printed. Load time is Model(...) to return (file parsing,
mappings, prefetch of the mapped weights, repacking, the context); peak RSS is the process's high
water mark over that load and the first eval, reset before each load (/proc/self/clear_refs), so
one process measures every variant.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from gguf_split import split_gguf  # noqa: E402

from pyllamaspec import Model  # noqa: E402


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")            # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def measure(path: str, **kw) -> dict:
    base = _status_kib("VmRSS")
    if not _reset_peak():
        raise RuntimeError("cannot reset the peak RSS (/proc/self/clear_refs)")
    t0 = time.perf_counter()
    with Model(path, n_ctx=256, **kw) as m:
        t_load = time.perf_counter() - t0
        m.eval([1], logits="last")
        peak = _status_kib("VmHWM")
        resident = _status_kib("VmRSS")
    return {"load_s": t_load, "peak_mib": peak / 1024, "peak_over_base_mib": (peak - base) / 1024,
            "resident_mib": resident / 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--shards", type=int, nargs="+", default=[2, 3])
    ap.add_argument("-r", "--repetitions", type=int, default=7)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--no-mmap", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    kw = dict(use_mmap=not a.no_mmap, n_threads=a.threads)
    with tempfile.TemporaryDirectory(prefix="bench-split-") as tmp:
        variants = {"whole": a.model}
        for n in a.shards:
            variants[f"{n} shards"] = str(split_gguf(a.model, pathlib.Path(tmp) / f"s{n}" / "m", n_shards=n)[0])
        runs: dict[str, list[dict]] = {k: [] for k in variants}
        for r in range(a.repetitions + 1):
            for name, path in variants.items():
                row = measure(path, **kw)
                if r:                                  # round 0 warms the page cache
                    runs[name].append(row)
    out = {name: {k: statistics.median(x[k] for x in rows) for k in rows[0]} for name, rows in runs.items()}
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{pathlib.Path(a.model).name}, {'read' if a.no_mmap else 'mmap'}, medians of {a.repetitions} loads")
    print(f"{'variant':>10} {'load ms':>9} {'peak RSS MiB':>13} {'peak - before':>14} {'resident MiB':>13}")
    for name, v in out.items():
        print(f"{name:>10} {v['load_s'] * 1e3:9.1f} {v['peak_mib']:13.1f} {v['peak_over_base_mib']:14.1f} "
              f"{v['resident_mib']:13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
