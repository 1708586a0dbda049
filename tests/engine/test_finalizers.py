"""A Model dropped without close() is freed by its finalizer, and no finalizer may wait on a lock
its own thread holds (issue 48): a garbage collection inside cffi's type parser (which holds
cffi's lock) ran Model.__del__ -> close -> psl_context_interrupt, whose first call resolved the
function under that same lock, and the process hung (3 of 3 runs before the fix)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

REPRO = textwrap.dedent("""
    import sys
    from pyllamaspec import Model, generate
    M = sys.argv[1]
    print(Model(M, n_ctx=512).n_ctx)          # dropped without close(): its finalizer frees it
    print(repr(generate("hi", Model(M, n_ctx=256), max_tokens=8).text))
""")


def test_dropped_model_then_generate_returns(smollm2_path):
    for _ in range(3):                        # the hang was deterministic: 3 of 3
        r = subprocess.run([sys.executable, "-c", REPRO, str(smollm2_path)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.splitlines()[0] == "512"


def test_every_core_function_is_resolved_at_import():
    """What the fix rests on: a resolved function is called without cffi's lock."""
    from pyllamaspec.engine._native import lib
    names = [n for n in dir(lib) if n.startswith("psl_")]
    assert len(names) > 50 and all(n in vars(lib) for n in names)
