"""scripts/fuzz.py: a short run finds nothing and says what it ran; and it does find a crash, a
hang and an unexpected exception when a case is made to misbehave (a fuzzer that cannot fail
proves nothing)."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import REPO

FUZZ = REPO / "scripts" / "fuzz.py"


def fuzz(*args: str, timeout: float = 600) -> tuple[int, str, dict]:
    proc = subprocess.run([sys.executable, str(FUZZ), "--progress", "1000", *args], capture_output=True, text=True,
                          timeout=timeout)
    m = re.search(r"^summary: (.*)$", proc.stdout, re.M)
    assert m, f"no summary line (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    counts = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", m.group(1))}
    return proc.returncode, proc.stdout + proc.stderr, counts


def test_short_run_is_clean(tmp_path):
    rc, out, c = fuzz("--kind", "both", "--cases", "300", "--seed", "7", "--save", str(tmp_path))
    assert rc == 0, out[-3000:]
    assert c["cases"] == 300 and c["cases_per_s"] > 0
    assert c["crashes"] == c["hangs"] == c["reports"] == c["unexpected"] == 0
    # both kinds ran, and some mutated files still load: the cases reach past the header
    assert re.search(r"gguf: 150 cases \(ok [1-9]", out) and "tokenizer: 150 cases" in out
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_client_grammars_schemas_and_templates_stay_bounded(tmp_path):
    """Issue 48, item 7: GBNF text, JSON schemas and chat templates as a client or a GGUF brings
    them (seeded by the issue's hostile cases), each compile / mask / accept / render within 2 s
    and 512 MiB of peak RSS (scripts/fuzz_grammar.py, fuzz_template.py), refused or done."""
    rc, out, c = fuzz("--kind", "grammar", "--cases", "300", "--seed", "7", "--jobs", "2", "--save", str(tmp_path))
    assert rc == 0 and c["crashes"] == c["hangs"] == c["unexpected"] == 0, out[-3000:]
    assert re.search(r"grammar: 300 cases \(ok [1-9]\d*, refused [1-9]", out), out[-500:]
    rc, out, c = fuzz("--kind", "template", "--cases", "300", "--seed", "7", "--jobs", "2", "--save", str(tmp_path))
    assert rc == 0 and c["crashes"] == c["hangs"] == c["unexpected"] == 0, out[-3000:]
    assert re.search(r"template: 300 cases \(ok [1-9]\d*, refused [1-9]", out), out[-500:]


def test_detects_a_crash_and_pins_it(tmp_path):
    rc, out, c = fuzz("--kind", "tokenizer", "--cases", "10", "--batch", "5", "--self-test", "crash",
                      "--save", str(tmp_path))
    assert rc == 1
    assert c["crashes"] == 1 and c["cases"] == 10, out[-2000:]
    assert "FINDING (crashes) tokenizer case 3: killed by SIGABRT (alone in a fresh child)" in out
    saved = json.loads((tmp_path / "tokenizer-s1-3-crashes.json").read_text())
    assert saved["case"]["kind"] == "tokenizer" and "--case 3" in saved["replay"]


@pytest.mark.slow   # waits out the hang timeout
def test_detects_a_hang():
    rc, out, c = fuzz("--kind", "tokenizer", "--cases", "6", "--timeout", "1", "--self-test", "hang")
    assert rc == 1
    assert c["hangs"] == 1 and c["crashes"] == 0 and c["cases"] == 6, out[-2000:]


def test_detects_an_unexpected_exception():
    rc, out, c = fuzz("--kind", "gguf", "--cases", "6", "--self-test", "exception")
    assert rc == 1
    assert c["unexpected"] == 1 and c["cases"] == 6, out[-2000:]
    assert "ValueError: self-test" in out


def test_case_and_replay_run_the_same_input(tmp_path):
    """--case reruns one case by number; --replay runs a saved GGUF (as a Model and a Tokenizer)."""
    rc, out, c = fuzz("--kind", "gguf", "--case", "5")
    assert rc == 0 and c["cases"] == 1, out[-2000:]
    import models
    path = tmp_path / "m.gguf"
    models.write_llama_gguf(path)
    rc, out, c = fuzz("--replay", str(path))
    assert rc == 0 and c["cases"] == 2, out[-2000:]
    assert "gguf: 2 cases (ok 2)" in out


@pytest.fixture(scope="module")
def fuzz_gguf():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import fuzz_gguf
    finally:
        sys.path.pop(0)
    return fuzz_gguf


@pytest.fixture(scope="module")
def seeds_dir(fuzz_gguf, tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    fuzz_gguf.synthetic_seeds(d)
    return d


def test_gguf_mutations_are_deterministic(fuzz_gguf, seeds_dir):
    """The same seed and case number give the same file (findings are reproducible by number)."""
    import random
    seeds = [fuzz_gguf.parse(p.read_bytes(), name=p.name) for p in sorted(seeds_dir.glob("*.gguf"))]
    a = [fuzz_gguf.make_case(random.Random(f"1/gguf/{i}"), seeds) for i in range(30)]
    fuzz_gguf._SERIALIZED.clear()
    b = [fuzz_gguf.make_case(random.Random(f"1/gguf/{i}"), seeds) for i in range(30)]
    assert a == b
    assert len({data for data, _, _ in a}) > 25


@pytest.mark.parametrize("seed_index", range(5))
def test_seeds_round_trip(fuzz_gguf, seeds_dir, seed_index):
    """The fuzzer's GGUF writer gives back the seed file byte for byte: its mutations start from
    the real structure."""
    raw = (seeds_dir / f"synth{seed_index}.gguf").read_bytes()
    assert bytes(fuzz_gguf.serialize(fuzz_gguf.parse(raw)).out) == raw
