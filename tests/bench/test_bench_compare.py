"""python -m pyllamaspec.bench ... --llama-bench BIN: the comparison runs both engines alike
(flash attention, and the load mode: --mmap, --no-mmap or each its default)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from models import write_llama_gguf

# a stand-in llama-bench: records its arguments, answers as the real one does with -o json
FAKE = """#!{python}
import json, sys
open({log!r}, "a").write(json.dumps(sys.argv[1:]) + "\\n")
a = sys.argv[1:]
p, n, r = int(a[a.index("-p") + 1]), int(a[a.index("-n") + 1]), int(a[a.index("-r") + 1])
rows = [{{"n_prompt": p, "n_gen": 0, "samples_ts": [100.0] * r}}] if p else []
rows += [{{"n_prompt": 0, "n_gen": n, "samples_ts": [50.0] * r}}] if n else []
print(json.dumps(rows))
"""


@pytest.mark.parametrize("flag,mode", [(None, "auto"), ("--mmap", "mmap"), ("--no-mmap", "none")])
def test_llama_bench_gets_the_same_load_mode(tmp_path, flag, mode):
    model = tmp_path / "tiny.gguf"
    write_llama_gguf(model)
    log = tmp_path / "argv.jsonl"
    fake = tmp_path / "llama-bench"
    fake.write_text(FAKE.format(python=sys.executable, log=str(log)))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    cmd = [sys.executable, "-m", "pyllamaspec.bench", "-m", str(model), "-t", "1", "-p", "4", "-n", "4", "-r", "1",
           "--rounds", "1", "--llama-bench", str(fake), "--json"] + ([flag] if flag else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-3000:]
    [argv] = [json.loads(line) for line in log.read_text().splitlines()]
    assert argv[argv.index("-lm") + 1] == mode
    assert argv[argv.index("-fa") + 1] == "1"
    rows = json.loads(p.stdout[p.stdout.index("["):])
    assert {r["test"] for r in rows} >= {"pp4", "tg4"}, rows
