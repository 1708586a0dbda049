"""python -m pyllamaspec.bench --curve (bench/curve.py, issue 47): our cost of n tokens in one call
beside llama-bench's ppN (a stand-in here: tests/bench/fake_llama_bench.py) and the roofline."""
from __future__ import annotations

import json
import pathlib
import sys

import pytest

from pyllamaspec.bench import curve
from pyllamaspec.bench import main as bench_main

HERE = pathlib.Path(__file__).parent


def test_roofline_reads_then_computes():
    r = curve.Roofline(weight_bytes=10**9, n_params=10**9, gbs=10.0, gflops=100.0)
    assert r.ms(1) == pytest.approx(100.0)      # reading 1 GB at 10 GB/s outweighs 2 GFLOP at 100 GFLOP/s
    assert r.ms(5) == pytest.approx(100.0)      # 10 GFLOP: the two meet
    assert r.ms(10) == pytest.approx(200.0)     # then the arithmetic


def test_curve_beside_llama_bench(smollm2_path, tmp_path, monkeypatch, capsys):
    exe = tmp_path / "llama-bench"
    exe.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(HERE / 'fake_llama_bench.py')!r}, "
                   f"run_name='__main__')\n")
    exe.chmod(0o755)
    log = tmp_path / "bench.log"
    monkeypatch.setenv("FAKE_LLAMA_BENCH_LOG", str(log))
    png = tmp_path / "curve.png"
    plot = ["--plot", str(png)] if _has_matplotlib() else []
    assert bench_main.main(["-m", str(smollm2_path), "--curve", "-t", "2", "--rounds", "2",
                            "--llama-bench", str(exe), "--json", *plot]) == 0
    got = json.loads(capsys.readouterr().out)[str(smollm2_path)]
    ns = list(range(1, 17))
    assert sorted(map(int, got["ours"])) == ns and all(v > 0 for v in got["ours"].values())
    assert {int(n): v for n, v in got["llama_bench"].items()} == {n: float(n) for n in ns}
    roof = [got["roofline"][str(n)] for n in ns]
    assert roof == sorted(roof) and roof[0] > 0 and got["gbs"] > 0 and got["gflops"] > 0
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 2                                   # one llama-bench run a round
    a = runs[0]
    assert a[a.index("-p") + 1] == ",".join(map(str, ns)) and a[a.index("-d") + 1] == str(curve.CONTEXT)
    assert a[a.index("-n") + 1] == "0" and a[a.index("-t") + 1] == "2"
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def test_curve_table(capsys):
    c = curve.Curves(ours={1: 10.0, 2: 12.0}, llama_bench={1: 8.0, 2: 16.0}, roofline={1: 5.0, 2: 5.0},
                     gbs=20.0, gflops=100.0)
    curve.print_curves("m.gguf", c)
    out = capsys.readouterr().out
    # the last column: ours over llama-bench's one token
    assert "| 2 | 12.0 | 1.20x | 16.0 | 2.00x | 5.0 | 1.00x | 1.50x |" in out
    curve.print_curves("m.gguf", curve.Curves(ours={1: 10.0, 2: 12.0}, roofline={1: 5.0, 2: 5.0}))
    assert "| 2 | 12.0 | 1.20x | 5.0 | 1.00x |" in capsys.readouterr().out
