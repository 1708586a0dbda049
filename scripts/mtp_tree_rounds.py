"""Tokens per round of MTP drafts, chain vs token tree at the same depth, on the tiny seeded
qwen35 model whose MTP block agrees with its trunk part of the time (tests/speculation/test_mtp.py
_agreeing): greedy (4 prompts) and T = 1 (4 prompts x 5 seeds), 200 tokens each, the cost model
off, p_min 0. Counts, not timings. From the repository root (PYLLAMASPEC_LIBRARY set):
    PYTHONPATH=. python scripts/mtp_tree_rounds.py
"""
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from models_qwen35 import write_qwen35_gguf  # noqa: E402
from test_mtp import SPEC, TREE_PROMPTS, _agreeing  # noqa: E402

from pyllamaspec import Model  # noqa: E402
from pyllamaspec.generation.generate import generate  # noqa: E402


def tokens_per_round(m: Model, temp: float, k: int, tree: bool) -> float:
    gen = rounds = 0
    for prompt in TREE_PROMPTS:
        for seed in range(1 if temp == 0 else 5):
            r = generate(prompt, m, "mtp", temperature=temp, seed=seed, max_tokens=200, n_draft=k,
                         adaptive=False, p_min=0.0, tree=tree, cache_prompt=False)
            gen += r.stats.n_generated
            rounds += r.stats.rounds
    return gen / rounds


def main() -> None:
    p = pathlib.Path(tempfile.mkdtemp()) / "agree.gguf"
    write_qwen35_gguf(p, n_nextn=1, edit=_agreeing(), **SPEC)
    with Model(p, n_ctx=512, n_seq_max=16, n_threads=1, type_k="f32", type_v="f32") as m:
        for temp in (0.0, 1.0):
            for k in (2, 4, 6):
                chain, tree = tokens_per_round(m, temp, k, False), tokens_per_round(m, temp, k, True)
                print(f"T={temp} depth {k}: chain {chain:.3f} tok/round, tree (width 2 x 2 levels, {2 * k} nodes) "
                      f"{tree:.3f} tok/round: x{tree / chain:.3f}")


if __name__ == "__main__":
    main()
