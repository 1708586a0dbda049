"""python -m pyllamaspec.bench ... --plot FILE.png (issue 27): the verification cost curve, the
cost model's choice and tokens/s by draft length, plain against speculative."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

from pyllamaspec.bench import plot  # noqa: E402
from pyllamaspec.speculation.cost_model import DraftPolicy  # noqa: E402


def _policy() -> DraftPolicy:
    p = DraftPolicy(8, prior_alpha=0.8, prior_weight=1e9)
    p.c_target = {n: 0.010 + 0.0005 * (n - 1) for n in (1, 2, 5, 9)}
    p.c_draft = 0.002
    return p


def test_expectations_follow_the_cost_model():
    m = plot.PairMeasure("t + d", curve=[(n, 10 + 0.5 * (n - 1)) for n in range(1, 10)], plain=100.0,
                         fixed={1: 120.0, 2: 130.0, 4: 140.0, 8: 120.0}, adaptive=138.0)
    pol = _policy()
    plot._expectations(m, pol, 8)
    assert m.chosen == pol.best_k(8, alpha=pol.alpha_upper) > 0
    assert m.expected[0] == pytest.approx(100.0)
    assert m.chosen == max(m.expected, key=m.expected.get)           # acceptance pinned: bound = mean
    assert m.c_draft_ms == pytest.approx(2.0) and m.model_curve[0] == (1, pytest.approx(10.0))


def test_draw_writes_a_png(tmp_path):
    m = plot.PairMeasure("t + d", curve=[(n, 10 + 0.5 * (n - 1)) for n in range(1, 10)], plain=100.0,
                         fixed={1: 120.0, 2: 130.0, 4: 140.0, 8: 120.0}, adaptive=138.0)
    plot._expectations(m, _policy(), 8)
    out = tmp_path / "pair.png"
    plot.draw(m, str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_plot_needs_a_draft_model(smollm2_path, tmp_path):
    p = subprocess.run([sys.executable, "-m", "pyllamaspec.bench", "-m", str(smollm2_path), "--plot",
                        str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "needs a draft model" in p.stderr


@pytest.mark.slow
def test_plot_measures_a_real_pair(smollm2_path, tmp_path):
    from pyllamaspec.files.convert import ensure_variant
    draft = ensure_variant(smollm2_path, "q4_0")
    out = tmp_path / "pair.png"
    p = subprocess.run([sys.executable, "-m", "pyllamaspec.bench", "-m", str(smollm2_path), "-md", str(draft),
                        "-t", "1", "-n", "8", "--rounds", "1", "--draft-max", "4", "--plot", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and "fixed k=1:" in p.stdout and "k=4:" in p.stdout
