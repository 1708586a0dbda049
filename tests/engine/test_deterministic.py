"""Deterministic numerics (Model(deterministic=True), --deterministic): a row's logits do not
depend on how many tokens or sequences share its evaluation, so greedy speculation equals plain
greedy decoding token for token, and sequences decoded together equal each alone. Checked on
Gemma 3 270M Q4_K_M, whose default CPU kernels do depend on the batch (its Q4_K / Q6_K products
change kernel at 8 rows on x86: ggml's tiled path; repacked ones at 4)."""
from __future__ import annotations

import platform
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pyllamaspec import InvalidArgumentError, Model, generate

pytestmark = pytest.mark.cpu_only          # the reference paths are the CPU backend's

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,",
           "The three primary colors are", "To make a cup of tea, first", "1, 2, 3, 4, 5,",
           "The best way to learn a language is", "Water boils at"]
GREEDY = dict(temperature=0, max_tokens=32)
X86 = platform.machine().lower() in ("x86_64", "amd64")


def batch_vs_alone(m: Model, ids: list[int], n: int) -> float:
    """max |logit| difference between the last n tokens evaluated in one batch and one at a time."""
    m.clear()
    m.eval(ids[:-n])
    together = m.eval(ids[-n:]).copy()
    m.clear()
    m.eval(ids[:-n])
    alone = np.concatenate([m.eval([t]) for t in ids[-n:]])
    return float(np.abs(together - alone).max())


def test_rows_do_not_depend_on_the_batch(gemma3_path, monkeypatch):
    with Model(gemma3_path, n_ctx=256, n_threads=2, deterministic=True) as m:
        assert m.deterministic
        k = m.kernels
        assert "REPACK" not in k and "AMX" not in k and "tiled" not in k and "sgemm" not in k, k
        assert "at every batch size" in k and k.startswith(("q", "f", "b", "i")) and "attention:" in k, k
        ids = m.tokenize("The quick brown fox jumps over the lazy dog, and then it runs into the forest to hide")
        assert len(ids) > 18
        for n in (2, 4, 8, 9, 17):
            assert batch_vs_alone(m, ids, n) == 0.0, n
    # Negative control: the same weights in the same layout (not repacked) on ggml's default
    # paths (PYLLAMASPEC_MATMUL_ROWS=ggml: not ours, which keep vec_dot's sums up to 16 rows): on
    # x86 its tiled K-quant products take 8 rows and more and sum otherwise (measured here: 0 up to
    # 7 rows, 1.95 from 8 on). Elsewhere (ARM) that path is not built.
    if X86:
        monkeypatch.setenv("PYLLAMASPEC_MATMUL_ROWS", "ggml")
        with Model(gemma3_path, n_ctx=256, n_threads=2, use_repack=False) as m:
            assert "8+ rows: tiled" in m.kernels, m.kernels
            assert batch_vs_alone(m, ids, 8) > 0.1


def test_experts_do_not_depend_on_the_batch(tmp_path):
    """Mixture-of-experts products (mul_mat_id) and F32 weights: a tiny seeded qwen3moe."""
    import models_moe
    path = tmp_path / "moe.gguf"
    models_moe.write_moe_gguf(path, arch="qwen3moe", seed=3)
    ids = np.random.default_rng(1).integers(0, 64, 24).tolist()
    with Model(path, n_ctx=64, n_threads=2, deterministic=True) as m:
        for n in (2, 5, 9, 17):
            assert batch_vs_alone(m, ids, n) == 0.0, n
    # negative control: ggml's default paths, llamafile's sgemm for batched F32 products, sum
    # otherwise than vec_dot (measured here: 5e-7 at 2-9 rows, 7e-4 at 17)
    with Model(path, n_ctx=64, n_threads=2) as m:
        if "llamafile sgemm" in m.kernels:
            assert max(batch_vs_alone(m, ids, n) for n in (2, 5, 9, 17)) > 0


def test_greedy_speculation_equals_plain(gemma3_path):
    """A draft that agrees with the target (the same file) makes every round verify 9 rows; the
    n-gram lookup drafts where the text repeats. Both give plain decoding's tokens."""
    with Model(gemma3_path, n_ctx=512, n_threads=2, deterministic=True) as target, \
            Model(gemma3_path, n_ctx=512, n_threads=2, tokenizer=False) as draft:
        for p in PROMPTS:
            plain = generate(p, target, None, **GREEDY).tokens
            spec = generate(p, target, draft, n_draft=8, adaptive=False, p_min=0.0, **GREEDY)
            assert spec.tokens == plain, p
            assert spec.stats.drafted >= 8 and spec.stats.accepted > 0
            assert generate(p, target, "ngram", **GREEDY).tokens == plain, p


def test_tree_rounds_equal_plain(gemma3_path):
    """A token tree verified in one evaluation (each branch a sequence of its own) gives plain
    decoding's tokens, as a chain does."""
    with Model(gemma3_path, n_ctx=1024, n_threads=2, deterministic=True) as target, \
            Model(gemma3_path, n_ctx=1024, n_threads=2, tokenizer=False) as draft:
        for p in PROMPTS[:4]:
            plain = generate(p, target, None, **GREEDY).tokens
            r = generate(p, target, draft, tree=True, n_draft=6, adaptive=False, p_min=0.0, **GREEDY)
            assert r.tokens == plain, p
            assert r.stats.tree_rounds > 0


def test_sequences_together_equal_alone(gemma3_path):
    """generate([...]) decodes the prompts' sequences in shared evaluations (the server's slots
    do the same): with a draft, four at a time, each equals its plain decoding alone."""
    with Model(gemma3_path, n_ctx=1024, n_threads=2, deterministic=True) as target, \
            Model(gemma3_path, n_ctx=1024, n_threads=2, tokenizer=False) as draft:
        alone = [generate(p, target, None, **GREEDY).tokens for p in PROMPTS]
        rs = generate(PROMPTS, target, draft, n_parallel=4, n_draft=4, adaptive=False, p_min=0.0, **GREEDY)
        assert [r.tokens for r in rs] == alone
        assert max(r.stats.mean_batch for r in rs) > 1.5          # rounds carried several sequences


def test_bad_value_is_refused(gemma3_path):
    with pytest.raises(InvalidArgumentError, match="deterministic must be True or False"):
        Model(gemma3_path, n_ctx=64, deterministic="yes")


@pytest.mark.slow
def test_server_slots_equal_one_slot(gemma3_path):
    """--deterministic: a -np 4 server under 8 concurrent clients answers as a -np 1 server, and
    /props says the choice."""
    pytest.importorskip("uvicorn")
    from test_server import Server
    flags = ["-m", str(gemma3_path), "-md", str(gemma3_path), "-c", "1024", "-t", "2", "--deterministic",
             "--draft-max", "4", "--no-adaptive", "--draft-p-min", "0"]

    def answers(np_: str) -> list[str]:
        s = Server([*flags, "-np", np_])
        try:
            props = s.get("/props")
            assert props["numerics"]["deterministic"] is True
            assert props["numerics"]["departs_from_llama_cpp"] == ["deterministic kernels (vec_dot at every batch size)"]
            with ThreadPoolExecutor(8) as ex:
                got = list(ex.map(lambda p: s.post("/completion", {"prompt": p, "n_predict": 24, "temperature": 0}),
                                  PROMPTS))
        finally:
            s.stop()
        assert all(code == 200 for code, _ in got), got
        assert all(body["content"] for _, body in got)
        return [body["content"] for _, body in got]

    assert answers("4") == answers("1")
