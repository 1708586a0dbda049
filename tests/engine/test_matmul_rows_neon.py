"""The NEON matmul_rows kernels (csrc/kernels/matmul_rows_neon.cpp) against ggml's one-row vec_dot,
bit for bit, cross-built for aarch64 and run under qemu (scripts/neon_check.sh)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_neon_rows_match_ggml_vec_dot(tmp_path):
    missing = [t for t in ("aarch64-linux-gnu-g++", "qemu-aarch64") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (Debian: g++-aarch64-linux-gnu qemu-user)")
    src = Path(os.environ.get("GGML_SRC", ROOT / "vendor" / "ggml" / "src"))
    if not (src / "CMakeLists.txt").is_file():
        pytest.skip(f"no ggml source at {src} (vendor/ggml/fetch.py fetches it; or set GGML_SRC)")
    run = subprocess.run(
        [str(ROOT / "scripts" / "neon_check.sh"), str(tmp_path)],
        env={**os.environ, "GGML_SRC": str(src)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "0 mismatches" in run.stdout
