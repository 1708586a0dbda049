"""python -m pyllamaspec.bench --prompts FILE.jsonl (issue 44, bench/spec_bench.py): Spec-Bench's
question format read, per-category tables from the tallies, a run on SmolLM2 with suffix drafting
beside a stand-in llama-server (tests/bench/fake_llama_server.py), and the errors."""
from __future__ import annotations

import json
import pathlib
import sys

import pytest

from pyllamaspec.bench import main as bench_main
from pyllamaspec.bench import spec_bench
from pyllamaspec.errors import InvalidArgumentError

HERE = pathlib.Path(__file__).parent
PROMPTS = HERE / "data" / "spec_bench_small.jsonl"


def test_load_prompts(tmp_path):
    qs = spec_bench.load_prompts(str(PROMPTS))
    assert [q.category for q in qs] == ["mt_bench", "mt_bench", "qa", "qa", "math_reasoning", "math_reasoning"]
    assert qs[0].question_id == 1 and len(qs[0].turns) == 2
    assert [q.question_id for q in spec_bench.load_prompts(str(PROMPTS), per_category=1)] == [1, 3, 5]
    # MT-Bench's categories are one task, and a subset is spread over the task, not its first questions
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps({"question_id": i, "category": c, "turns": ["x"]}) + "\n"
                            for i, c in enumerate(["writing"] * 4 + ["coding"] * 4 + ["qa"] * 3)))
    sub = spec_bench.load_prompts(str(many), per_category=2)
    assert [(q.question_id, q.category) for q in sub] == [(0, "mt_bench"), (4, "mt_bench"), (8, "qa"), (9, "qa")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1, "category": "qa", "turns": ["x"]}\n{"question_id": 2, "turns": ["y"]}\n')
    with pytest.raises(InvalidArgumentError, match="bad.jsonl:2"):
        spec_bench.load_prompts(str(bad))


def test_rows_from_tallies():
    qs = [spec_bench.Question(1, "a", ["x"]), spec_bench.Question(2, "b", ["y"])]
    run = spec_bench.Run(["plain", "ours", "llama-server"], ["llama-server"])
    T = spec_bench.Tally
    for r, slow in ((0, 1.0), (1, 2.0), (2, 1.0)):          # the median round, not the mean
        run.tallies[("plain", "a", r)] = T(100, 1.0 * slow)
        run.tallies[("ours", "a", r)] = T(100, 0.5 * slow, drafted=60, accepted=30, rounds=70)
        run.tallies[("llama-server", "a", r)] = T(100, 0.8 * slow, drafted=10, accepted=5)
        run.tallies[("plain", "b", r)] = T(50, 1.0)
        run.tallies[("ours", "b", r)] = T(50, 1.0, rounds=50)
        run.tallies[("llama-server", "b", r)] = T(50, 2.0)
    run.answers.update({("plain", 0): [[1]], ("ours", 0): [[1]], ("plain", 1): [[2]], ("ours", 1): [[3]]})
    a, b, total = spec_bench.rows(run, qs, 3)
    assert a["plain_tps"] == 100 and a["ours_tps"] == 200 and a["speedup"] == pytest.approx(2.0)
    assert a["best"] == "ours" and a["best_llama_server"] == "llama-server"
    assert a["ours_tokens_per_round"] == pytest.approx(100 / 70) and a["ours_acceptance"] == 0.5
    assert a["vs_llama_server"] == pytest.approx(200 / 125) and a["same_as_plain"] == 1
    assert b["speedup"] == 1.0 and b["same_as_plain"] == 0 and b["vs_llama_server"] == 2.0
    assert total["category"] == "all" and total["questions"] == 2
    assert total["ours_tps"] == pytest.approx(150 / 1.5) and total["plain_tps"] == pytest.approx(75)


def _fake_server(tmp_path) -> str:
    exe = tmp_path / "llama-server"
    exe.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(HERE / 'fake_llama_server.py')!r}, "
                   f"run_name='__main__')\n")
    exe.chmod(0o755)
    return str(exe)


def test_prompts_on_smollm2_beside_llama_server(smollm2_path, tmp_path, monkeypatch, capsys):
    log = tmp_path / "server.log"
    monkeypatch.setenv("FAKE_LLAMA_SERVER_LOG", str(log))
    png = tmp_path / "tasks.png"
    plot = ["--plot", str(png)] if _has_matplotlib() else []
    rc = bench_main.main(["-m", str(smollm2_path), "-t", "2", "--prompts", str(PROMPTS), "--spec-type", "suffix",
                          "--spec-type", "ngram-mod", "-n", "16", "--rounds", "1", "--json",
                          "--llama-server", _fake_server(tmp_path), "--llama-server-args", "--spec-type ngram-mod",
                          "--llama-server-args", "--spec-type ngram-simple --fake-ms 25", "--chat-template", "chatml",
                          *plot])
    assert rc == 0
    table = json.loads(capsys.readouterr().out)
    assert [r["category"] for r in table] == ["mt_bench", "qa", "math_reasoning", "all"]
    fast, slow = "llama-server --spec-type ngram-simple --fake-ms 25", "llama-server --spec-type ngram-mod"
    for r in table:
        assert r["plain_tps"] > 0 and r["suffix_tps"] > 0 and r["ngram-mod_tps"] > 0
        best = max(("suffix", "ngram-mod"), key=lambda e: r[f"{e}_tps"])
        assert r["best"] == best and r["speedup"] == pytest.approx(r[f"{best}_tps"] / r["plain_tps"])
        assert r["suffix_tokens_per_round"] >= 1.0
        assert r["suffix_same_as_plain"] == r["ngram-mod_same_as_plain"] == r["questions"]   # greedy: plain's
        assert r[slow + "_tps"] == pytest.approx(200.0)           # the stand-ins' 10 tokens in 50 ms, 25 ms
        assert r[fast + "_tps"] == pytest.approx(400.0) and r["best_llama_server"] == fast
        assert r["vs_llama_server"] == pytest.approx(r[f"{best}_tps"] / 400.0)
        assert r[slow + "_acceptance"] == 0.75
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    argvs = [e["argv"] for e in entries if "argv" in e]
    tmpl = ["--no-jinja", "--chat-template", "chatml"]            # the template's name, in llama.cpp's terms
    assert argvs[0][argvs[0].index("-m") + 1] == str(smollm2_path)
    assert argvs[0][-5:] == ["--spec-type", "ngram-mod"] + tmpl
    assert argvs[1][-7:] == ["--spec-type", "ngram-simple", "--fake-ms", "25"] + tmpl
    # the two-turn question: its second turn carries the first answer (3 messages); two servers each
    assert [e["messages"] for e in entries if "messages" in e] == [1, 3, 1, 3] + [1] * 10
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_suffix_engine_a_run(smollm2_path, capsys):
    rc = bench_main.main(["-m", str(smollm2_path), "--prompts", str(PROMPTS), "--spec-type", "suffix",
                          "--spec-type", "suffix,ngram-mod", "--json"])
    assert rc == 2 and "one suffix engine a run" in capsys.readouterr().err


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def test_llama_server_errors(smollm2_path, tmp_path, capsys):
    base = ["-m", str(smollm2_path), "--prompts", str(PROMPTS), "-n", "4", "--rounds", "1", "--json"]
    assert bench_main.main(base + ["--llama-server", str(tmp_path / "absent")]) == 2
    assert "not an executable file" in capsys.readouterr().err
    assert bench_main.main(base + ["--llama-server", _fake_server(tmp_path), "--llama-server-args=--fail"]) == 2
    assert "exited (3) before it was ready" in capsys.readouterr().err
