"""The CPU path an evaluation takes (issue 22): which ggml kernels multiply each weight type
(Model.kernels, so a fidelity difference between machines can be traced to a path), and how many
threads run while other processes keep the cores busy (as many as cores are free: a busy machine
slows an eval in proportion, not 60x; scripts/bench_contention.py measures the speeds)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import pyllamaspec
from pyllamaspec import Model


def test_kernel_record_names_each_weight_type(smollm2_path, gemma3_path):
    info = pyllamaspec.system_info()
    # ggml offers its AMX buffer first where it was compiled in and the CPU has AMX (Sapphire
    # Rapids and later): q4_0/q4_1/q8_0 and K-quant matrices go there, before any repacking
    amx = "AMX_INT8 = 1" in info
    with Model(smollm2_path, n_ctx=64) as m:
        lines = m.kernels.splitlines()
    # SmolLM2 Q4_1: the layers' q4_1 matrices (llamafile has no q4_1 kernel: vec_dot for batches
    # too, ours for 1-16 rows where it has a kernel: x86 with AVX2) and the tied q8_0 embedding
    # that is also the output head
    ours = all(f"{isa} = 1" in info for isa in ("AVX2", "FMA", "F16C"))
    q4_1 = ("q4_1 x210 AMX: AMX tiles" if amx else
            "1-16 rows: ours (kernels/matmul_rows" if ours else "vec_dot q4_1 x q8_1; batched: vec_dot")
    assert any(line.startswith("q4_1 x210 ") and q4_1 in line for line in lines), lines
    assert any(line.startswith("q8_0 x1 ") for line in lines), lines
    with Model(gemma3_path, n_ctx=64) as m:
        rec = m.kernels
    if amx:
        assert "q4_K x27 AMX: AMX tiles" in rec, rec
    elif ours and "REPACK = 1" in info:   # repacked for prompts, a plain copy for ours (1-16 rows)
        assert "q4_K x27 CPU_REPACK: 1-16 rows: ours (kernels/matmul_rows, on a plain copy" in rec, rec
    elif "REPACK = 1" in info and ("AVX2 = 1" in info or "NEON = 1" in info):
        assert "q4_K x27 CPU_REPACK: repacked" in rec, rec      # Q4_K repacks where ggml has the kernel
    with Model(gemma3_path, n_ctx=64, use_repack=False) as m:
        assert "REPACK" not in m.kernels and "AMX" not in m.kernels and "q4_K x27 " in m.kernels


def test_system_info_names_the_kernel_variant():
    info = pyllamaspec.system_info()
    assert any(f"CPU kernels {v} |" in info for v in ("native", "portable", "avx2", "avx512", "generic")), info


class Busy:
    """n processes spinning while in the with-block."""

    def __init__(self, n: int):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def _threads_under_load(path, n: int, seconds: float = 1.5) -> int:
    """The threads of the last eval after `seconds` of one-token evals with n busy processes."""
    with Model(path, n_ctx=256, n_threads=n) as m, Busy(n):
        m.eval([1, 2, 3])
        # more than two of the budget's 250 ms windows, and evals in at least three of them: on a
        # machine busy beyond the test's own load one eval can outlast the whole time, and the
        # budget is read at an eval's start (its first window spans the time since the last eval)
        end, n_evals = time.monotonic() + seconds, 0
        while time.monotonic() < end or n_evals < 4:
            m.eval([4], logits="last")
            n_evals += 1
            if m.n_past > 200:
                m.truncate(3)
        return m.perf()["n_threads_last"]


LINUX_2_TO_16 = pytest.mark.skipif(not sys.platform.startswith("linux") or not 2 <= (os.cpu_count() or 1) <= 16,
                                   reason="the thread budget reads Linux's /proc/stat; 2 to 16 cores (a busy process each)")


@pytest.mark.cpu_only
@LINUX_2_TO_16
def test_threads_capped_while_other_processes_use_the_cores(smollm2_path):
    """A busy process per core and an eval asking for a thread per core: the eval's share is half
    the machine, so it drops threads (on 2 cores: to one)."""
    n = os.cpu_count()
    got = _threads_under_load(smollm2_path, n)
    assert got < n and (n > 2 or got == 1), got


@pytest.mark.slow
@pytest.mark.cpu_only
@LINUX_2_TO_16
def test_thread_cap_off(smollm2_path):
    """PYLLAMASPEC_THREAD_CAP=0 (read once per process): the threads asked for, load or not."""
    code = ("import os, sys; sys.path.insert(0, os.environ['TESTS']); import test_cpu_path as t; "
            f"print(t._threads_under_load({str(smollm2_path)!r}, os.cpu_count(), 1.0))")
    env = dict(os.environ, PYLLAMASPEC_THREAD_CAP="0", TESTS=os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == os.cpu_count()


_TEAMS = """
import os, sys, threading
from pyllamaspec import Model

def n_os_threads():
    return len(os.listdir("/proc/self/task"))

with Model(sys.argv[1], n_ctx=256, n_threads=2) as m:
    m.eval([1, 2, 3], logits="none")          # on the thread that loaded it
    base = n_os_threads()
    evaluated, done = threading.Barrier(3), threading.Event()

    def run():
        m.eval([4], logits="last")
        evaluated.wait()
        done.wait()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    evaluated.wait()                          # both have evaluated and are alive
    print(n_os_threads() - base)
    done.set()
    for t in threads:
        t.join()
"""


@pytest.mark.cpu_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the process's threads in /proc")
def test_evaluations_on_other_threads_share_one_openmp_team(smollm2_path):
    """ggml's CPU graphs run as OpenMP parallel regions; libgomp gives each thread that opens one a
    team of its own, and once all teams' threads outnumber the cores every barrier sleeps in the
    kernel after 100 spins (decoding from the server's worker thread ran 1.8x slower than from
    the loading thread). Evaluations from two more threads add those two threads and no team
    (host/compute_thread.h); each thread opening its own region would add a worker per team."""
    env = dict(os.environ, PYLLAMASPEC_THREAD_CAP="0")      # 2 threads whatever the machine's load
    out = subprocess.run([sys.executable, "-c", _TEAMS, str(smollm2_path)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == 2, out.stdout
