"""The honest demo (issue 27): the cost model recovers from a cold first measurement of the draft,
and --compare times plain and speculative decoding alternately after a warm-up."""
from __future__ import annotations

import subprocess
import sys

import pytest

from pyllamaspec.frontends.cli import compare
from pyllamaspec.speculation.cost_model import DraftPolicy
from pyllamaspec.speculation.decoder import Stats

# The cold demo: the target ~30 ms for one token, ~+1.5 ms per token of a batch; the
# first draft measured at ~700 ms/token (a cold mmap's page faults), its true pace 5 ms.
C_TARGET = {n: 0.030 + 0.0015 * (n - 1) for n in range(1, 18)}


def _cold_policy() -> DraftPolicy:
    p = DraftPolicy(16)
    assert p.choose(16) == DraftPolicy.START_K             # the first round measures the draft
    p.observe_draft(0.706 * 4, 4)
    p.observe_round(4, 4)
    p.c_target = dict(C_TARGET)
    return p


def test_cold_first_draft_measurement_is_measured_again_at_once():
    """Issue 27: the draft measured at 706 ms/token on its first, page-faulting evaluation, and
    plain decoding was chosen for all 124 rounds that followed (a probe at that cost waits
    ~35 s of plain rounds). A draft slower per token than the target's whole token is an outlier
    to re-measure: the very next round drafts again, and its true pace is believed."""
    p = _cold_policy()
    assert p.best_k(16, alpha=p.alpha_upper) == 0          # judged on that cost, plain would win
    k = p.choose(16)
    assert k == DraftPolicy.START_K
    p.observe_draft(0.005 * k, k)
    p.observe_round(k, k)
    assert p.c_draft == pytest.approx(0.005) and p.choose(16) > 0


def test_a_draft_that_is_really_slow_is_believed_after_confident_measurements():
    """Negative control: a draft that keeps measuring slower than the target gets CONFIDENT
    measurements, then plain decoding for good (no probes), as before."""
    p = _cold_policy()
    picks = []
    for _ in range(300):
        k = p.choose(16)
        picks.append(k)
        if k:
            p.observe_draft(0.706 * k, k)
            p.observe_round(k, k)
    assert sum(1 for k in picks if k) == DraftPolicy.CONFIDENT - 1     # two re-measurements, no more
    assert all(k == 0 for k in picks[DraftPolicy.CONFIDENT:])


def test_comparison_alternates_and_takes_medians():
    calls = []

    class FakeRun:
        sampling = type("S", (), {"seed": 7})()

        def __call__(self, drafted, max_tokens, seed):
            calls.append((drafted, max_tokens))
            s = Stats(n_generated=max_tokens, t_generate=max_tokens / (60.0 if drafted else 30.0))
            s.rounds, s.accepted = 10, 20
            return s

    shown = Stats(n_generated=32, t_generate=32 / 50.0)
    c = compare.alternate(FakeRun(), shown, 3)
    assert calls == [(False, 32), (True, 32), (False, 32), (True, 32), (False, 32)]
    assert c.spec == pytest.approx([50.0, 60.0, 60.0]) and c.plain == pytest.approx([30.0] * 3)
    assert c.ratio == pytest.approx(2.0)


def test_demo_flow_with_compare(smollm2_path):
    """The CLI with --compare on a real pair: a warm-up, the shown run, then the alternated
    timings and their ratio (the numbers themselves are the machine's, not checked here)."""
    from pyllamaspec.files.convert import ensure_variant
    draft = ensure_variant(smollm2_path, "q4_0")
    p = subprocess.run([sys.executable, "-m", "pyllamaspec.cli", "-m", str(smollm2_path), "-md", str(draft),
                        "-no-cnv", "-p", "The capital of France is", "-n", "12", "--temp", "0", "-t", "1",
                        "-c", "256", "--compare", "--compare-runs", "2"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "warming up" in p.stderr and "alternated after a warm-up (2 runs each" in p.stderr
    rows = [line for line in p.stderr.splitlines() if "t/s:" in line]
    assert len(rows) == 2 and all(len(r.split("median")[0].split(":")[1].split()) == 2 for r in rows)
    # a ratio only where some speculative run drafted (else both kinds decoded plainly)
    assert ("speculative / plain: " in p.stderr) != ("drafted nothing in any run" in p.stderr)


def test_no_speed_up_reported_when_nothing_was_drafted():
    """Issue 46, item 6: two plain runs' ratio is noise, not a result."""
    import io
    c = compare.Comparison(plain=[30.0, 31.0], spec=[33.0, 32.0], tokens_per_round=[1.0, 1.0], drafted=[0, 0])
    compare.report(c, 16, file=(out := io.StringIO()))
    assert "speculative / plain" not in out.getvalue() and "did not pay on this machine" in out.getvalue()
    c.drafted = [0, 5]
    compare.report(c, 16, file=(out := io.StringIO()))
    assert "speculative / plain: 1." in out.getvalue()
