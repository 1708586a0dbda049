"""Counts the reports in ASan/UBSan/LSan log files (written with log_path=DIR/asan, DIR/ubsan:
one file per process, named prefix.PID).

    python scripts/sanitizer_logs.py DIR [--tests-rc N]

prints the counts and the distinct report sites, and exits non-zero when there is any report (or
when N, the status of the test run that wrote them, is not 0). scripts/sanitize.sh and
scripts/fuzz.py use count() on each file.
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys

# A UBSan report is one line "file:line:col: runtime error: what"; an ASan report starts with
# "ERROR: AddressSanitizer"; a leak report is a block per leaked allocation.
_UBSAN = re.compile(r"^(?P<site>\S+?): runtime error: (?P<what>.*)$", re.M)
_ASAN = re.compile(r"ERROR: AddressSanitizer: (?P<what>[^\n]*)")
_LEAK = re.compile(r"^(?:Direct|Indirect) leak of .*?(?=^\n|\Z)", re.M | re.S)
# Leaks are counted only when our library allocated them (a frame of the core: its module when
# unsymbolized, its functions or sources when symbolized): CPython never frees its own objects at
# exit, and those are not ours to fix.
_OURS = re.compile(r"libpyllamaspec|\bpsl(?:_|::)|/csrc/")


class Counts:
    def __init__(self) -> None:
        self.asan = 0
        self.ubsan = 0
        self.leaks = 0
        self.sites: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        return self.asan + self.ubsan + self.leaks

    def add(self, text: str) -> None:
        for m in _UBSAN.finditer(text):
            self.ubsan += 1
            what = re.sub(r"-?\b\d+\b", "N", m.group("what"))    # one site, whatever the values
            self.sites[f"UBSan {m.group('site').rsplit('/', 1)[-1]}: {what}"] += 1
        for m in _ASAN.finditer(text):
            self.asan += 1
            self.sites[f"ASan: {m.group('what')[:120]}"] += 1
        for m in _LEAK.finditer(text):
            if _OURS.search(m.group(0)):
                self.leaks += 1
                self.sites["LSan: " + m.group(0).splitlines()[0][:120]] += 1

    def add_file(self, path: pathlib.Path) -> None:
        self.add(path.read_text(errors="replace"))

    def summary(self) -> str:
        return f"ASan reports: {self.asan}, UBSan reports: {self.ubsan}, leaks from the core: {self.leaks}"


def count(paths) -> Counts:
    c = Counts()
    for p in paths:
        c.add_file(pathlib.Path(p))
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", type=pathlib.Path)
    ap.add_argument("--tests-rc", type=int, default=0)
    ap.add_argument("--sites", type=int, default=20, help="how many distinct report sites to list")
    a = ap.parse_args()
    files = sorted(p for p in a.logs.glob("*") if p.is_file())
    c = count(files)
    print(f"sanitizer logs in {a.logs}: {len(files)} files")
    for site, n in c.sites.most_common(a.sites):
        print(f"  {n:6d}  {site}")
    print(c.summary())
    print("tests: " + ("passed" if a.tests_rc == 0 else f"FAILED (pytest exit status {a.tests_rc})"))
    return 1 if c.total or a.tests_rc else 0


if __name__ == "__main__":
    sys.exit(main())
