"""The NEON matmul_rows kernels (csrc/kernels/matmul_rows_neon.cpp) against ggml's one-row vec_dot,
bit for bit, cross-built for aarch64 and run under qemu (scripts/neon_check.sh); and the whole core
cross-built with them wired in (matmul_rows_arm.cpp), a tiny model's batched rows against one token
at a time and against ggml's (scripts/neon_e2e.sh)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tools_or_skip() -> Path:
    """The ggml source, or a skip where the cross tools or the source are missing."""
    missing = [t for t in ("aarch64-linux-gnu-g++", "qemu-aarch64") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (Debian: g++-aarch64-linux-gnu qemu-user)")
    src = Path(os.environ.get("GGML_SRC", ROOT / "vendor" / "ggml" / "src"))
    if not (src / "CMakeLists.txt").is_file():
        pytest.skip(f"no ggml source at {src} (vendor/ggml/fetch.py fetches it; or set GGML_SRC)")
    return src


@pytest.mark.slow
def test_neon_rows_match_ggml_vec_dot(tmp_path):
    src = _tools_or_skip()
    run = subprocess.run(
        [str(ROOT / "scripts" / "neon_check.sh"), str(tmp_path)],
        env={**os.environ, "GGML_SRC": str(src)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "0 mismatches" in run.stdout


@pytest.mark.slow
def test_neon_rows_end_to_end_batch_invariant(tmp_path):
    # the whole core for aarch64 (ggml too: a few minutes on two cores), three tiny models (Q8_0,
    # Q4_1, Q4_K with Q6_K), 1-16 rows: batched == one token at a time, deterministic ours == ggml
    src = _tools_or_skip()
    if shutil.which("ninja") is None:
        pytest.skip("needs ninja")
    run = subprocess.run(
        [str(ROOT / "scripts" / "neon_e2e.sh"), str(tmp_path)],
        env={**os.environ, "GGML_SRC": str(src), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-4000:]
    assert run.stdout.count(": 0 failures") == 3, run.stdout[-6000:]
    assert "neon_e2e: all passed" in run.stdout
