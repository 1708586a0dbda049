"""Benchmarks (``python -m pyllamaspec.bench``): llama-bench's ppN/tgN, the target's verify cost
curve, speculative against plain decoding, other engines timed in the same run (engines.py)."""
from .main import bench_pp, bench_speculative, bench_tg, cost_curve

__all__ = ["bench_pp", "bench_tg", "bench_speculative", "cost_curve"]
