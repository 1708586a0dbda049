"""The core's token-tree acceptance (psl_sampler_verify_tree, csrc/engine/sampling_tree.cpp) on
hand-made rows of a small vocabulary, no model.

Exact distribution: for a tree with three siblings at the root and a second level, the law of
every outcome (the accepted path, the next token) under recursive rejection sampling is computed
here in float64 from the sampler's own adjusted rows, and the core's frequencies over many seeded
calls must fit it (chi-square); the same test rejects the core's counts against the laws of two
wrong rules (q not renormalized without the siblings tried; no residual update), and the rule
computed here is lossless where those are not (siblings drawn without replacement from q give
the first token the target's law). Greedy: the argmax walk. Penalties: each node's row is
penalized by the history and the path to it, and the history is given back. Bad trees raise.
"""
from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np
import pytest

import pyllamaspec
from pyllamaspec.engine._native import ffi, lib
from pyllamaspec.engine.sampling import Sampler, SamplingParams
from test_speculative import chi2_pvalue

V = 6
OFF = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
PEN = dict(repeat_penalty=1.6, frequency_penalty=0.4, presence_penalty=0.3, penalty_last_n=8)
HISTORY = [1, 4, 4]
# node: 0 1 2 at the root (drawn from one q), 3 4 under node 0 (one q), 5 under node 1
TOKENS = np.array([2, 5, 1, 4, 2, 0], np.int32)
PARENTS = np.array([-1, -1, -1, 0, 0, 1], np.int32)
N_CALLS = 40000


def _kids(parents) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents):
        kids[int(p) + 1].append(i)
    return kids


def _path_to(parents, node) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = int(parents[node])
    return out[::-1]


def _rows(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Target logits (n+1 rows) and draft rows (n; siblings share their parent's)."""
    rng = np.random.default_rng(seed)
    logits = np.log(rng.dirichlet(np.full(V, 0.8), len(TOKENS) + 1)).astype(np.float32)
    q = np.zeros((len(TOKENS), V), np.float32)
    for group in _kids(PARENTS):
        if group:
            q[group] = rng.dirichlet(np.full(V, 0.8))
    for i, t in enumerate(TOKENS):      # every drafted token possible under its q
        q[i, t] = max(q[i, t], 0.15)
    for group in _kids(PARENTS):
        if group:
            q[group] = q[group[0]] / q[group[0]].sum()
    return logits, q


def _target_probs(params: dict, logits: np.ndarray) -> np.ndarray:
    """Each node's adjusted row as the sampler computes it, penalized by HISTORY and the path."""
    s = Sampler(V, SamplingParams(**params))
    out = np.zeros((len(logits), V))
    for v in range(-1, len(TOKENS)):
        s.reset(HISTORY + [int(TOKENS[i]) for i in _path_to(PARENTS, v)])
        out[v + 1] = s.probs(logits[v + 1]).astype(np.float64)
    return out / out.sum(axis=1, keepdims=True)


def outcome_law(P: np.ndarray, Q: np.ndarray, rule: str = "exact", tokens=TOKENS, parents=PARENTS
                ) -> dict[tuple, float]:
    """The probability of each (path, next token) under recursive rejection sampling, or under
    a wrong rule: "no_renorm" (q_{i+1} = q_i) or "no_residual" (p_{i+1} = p_i)."""
    kids, law = _kids(parents), defaultdict(float)

    def walk(node: int, path: tuple, mass: float) -> None:
        p = P[node + 1].copy()
        group = kids[node + 1]
        reach = 1.0                       # all the siblings before this one rejected
        q = Q[group[0]].astype(np.float64) / Q[group[0]].sum() if group else None
        for c in group:
            x = tokens[c]
            a = min(1.0, p[x] / q[x]) if q[x] > 0 else 0.0
            walk(c, path + (c,), mass * reach * a)
            reach *= 1.0 - a
            if rule != "no_residual":
                r = np.maximum(p - q, 0.0)
                p = r / r.sum() if r.sum() > 0 else p
            if rule != "no_renorm":
                q = q.copy()
                q[x] = 0.0
                q /= q.sum()
        for y in range(V):
            law[(path, y)] += mass * reach * p[y]
    walk(-1, (), 1.0)
    return dict(law)


def _fit(counts: Counter, law: dict) -> float:
    keys = sorted(set(law) | set(counts))
    return chi2_pvalue(np.array([counts[k] for k in keys]), np.array([law.get(k, 0.0) for k in keys]))[0]


def _core_counts(params: dict, logits: np.ndarray, q: np.ndarray, n: int) -> Counter:
    s = Sampler(V, SamplingParams(**params))
    s.reset(HISTORY)
    counts: Counter = Counter()
    for seed in range(n):
        lib.psl_sampler_set_seed(s._s, seed)
        path, nxt = s.verify_tree(logits, TOKENS, PARENTS, q)
        counts[(tuple(path), nxt)] += 1
    assert s.history_len == len(HISTORY)
    return counts


@pytest.mark.parametrize("penalized", [False, True], ids=["plain", "penalized"])
def test_outcomes_follow_the_rule_exactly_and_wrong_rules_are_rejected(penalized):
    params = {**OFF, **(PEN if penalized else {})}
    logits, q = _rows(2)
    P = _target_probs(params, logits)
    counts = _core_counts(params, logits, q, N_CALLS)
    law = outcome_law(P, Q=q)
    assert abs(sum(law.values()) - 1) < 1e-12
    pv = _fit(counts, law)
    deep = sum(c for (path, _), c in counts.items() if len(path) == 2) / N_CALLS
    later = sum(c for (path, _), c in counts.items() if path and path[0] > 0) / N_CALLS
    wrong = {rule: _fit(counts, outcome_law(P, q, rule)) for rule in ("no_renorm", "no_residual")}
    print(f"p-value {pv:.3f}; wrong rules {wrong}; depth 2 in {deep:.2f}, a later sibling in {later:.2f}")
    assert deep > 0.2 and later > 0.3         # the rows exercise the whole rule
    assert pv > 1e-3
    assert all(v < 1e-6 for v in wrong.values())


def _first_token_law(p: np.ndarray, q: np.ndarray, m: int, rule: str) -> np.ndarray:
    """The first token's law for m root siblings drawn from q without replacement (every
    ordered draw enumerated), accepted by `rule` against p, over a one-level tree."""
    out = np.zeros(V)
    for draw in itertools.permutations(range(V), m):
        w, left = 1.0, 1.0
        for x in draw:
            w *= q[x] / left
            left -= q[x]
        P, Q = np.vstack([p] * (m + 1)), np.tile(q, (m, 1))
        for (path, y), pr in outcome_law(P, Q, rule, np.array(draw), np.full(m, -1)).items():
            out[draw[path[0]] if path else y] += w * pr
    return out


def test_the_rule_is_lossless_and_the_wrong_ones_are_not():
    """What makes the chi-square's law the right one to fit: the target's law comes out."""
    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    assert np.abs(_first_token_law(p, q, 3, "exact") - p).max() < 1e-12
    for rule in ("no_renorm", "no_residual"):
        assert np.abs(_first_token_law(p, q, 3, rule) - p).max() > 1e-2


def _argmax_walk(logits: np.ndarray, history: list[int], params: dict) -> tuple[list[int], int]:
    """Greedy by the one-row API: the child equal to the penalized argmax, else that argmax."""
    s = Sampler(V, SamplingParams(**params))
    kids, node, path = _kids(PARENTS), -1, []
    while True:
        s.reset(history + [int(TOKENS[i]) for i in path])
        y = s.sample(logits[node + 1])[0]
        nxt = next((c for c in kids[node + 1] if TOKENS[c] == y), None)
        if nxt is None:
            return path, y
        path.append(nxt)
        node = nxt


def _steered_logits() -> np.ndarray:
    """Rows whose argmax walk goes 1 -> 5 when the path is not penalized, 0 -> 3 when it is."""
    x = np.zeros((len(TOKENS) + 1, V), np.float32)
    x[0, 5] = 3.0                         # the root: token 5 (node 1)
    x[2, 0], x[2, 5] = 2.0, 2.2           # node 1 (token 5): 5 again unless penalized, else 0 (node 5)
    x[6, 3], x[6, 0] = 1.0, 1.1           # node 5 (token 0): 0 again unless penalized, else 3
    return x


@pytest.mark.parametrize("penalized", [False, True], ids=["plain", "penalized"])
def test_greedy_follows_the_argmax_walk_and_penalties_count_the_path(penalized):
    params = {**OFF, "temperature": 0.0, **(PEN if penalized else {})}
    history = [2, 2]
    logits = _steered_logits()
    s = Sampler(V, SamplingParams(**params))
    s.reset(history)
    got = s.verify_tree(logits, TOKENS, PARENTS, None)
    assert s.history_len == len(history)
    assert got == _argmax_walk(logits, history, params)
    assert got == (([1, 5], 3) if penalized else ([1], 5))
    rng = np.random.default_rng(1)
    for _ in range(50):                   # random rows: the walk, whatever depth it reaches
        r = rng.normal(size=(len(TOKENS) + 1, V)).astype(np.float32)
        assert s.verify_tree(r, TOKENS, PARENTS, None) == _argmax_walk(r, history, params)
    assert s.history_len == len(history)


def test_a_deterministic_drafter_draws_from_p_and_follows_that_child():
    """q NULL: y ~ p at each node; the law of the outcomes is p's along the tree."""
    logits, _ = _rows(5)
    P = _target_probs(OFF, logits)
    kids, law = _kids(PARENTS), defaultdict(float)

    def walk(node, path, mass):
        for y in range(V):
            c = next((c for c in kids[node + 1] if TOKENS[c] == y), None)
            if c is None:
                law[(path, y)] += mass * P[node + 1, y]
            else:
                walk(c, path + (c,), mass * P[node + 1, y])
    walk(-1, (), 1.0)
    counts = _core_counts(OFF, logits, None, 20000)
    assert _fit(counts, dict(law)) > 1e-3


def test_the_samplers_seed_decides():
    logits, q = _rows(3)
    a, b = Sampler(V, SamplingParams(**OFF, seed=11)), Sampler(V, SamplingParams(**OFF, seed=11))
    runs_a = [a.verify_tree(logits, TOKENS, PARENTS, q) for _ in range(30)]
    assert runs_a == [b.verify_tree(logits, TOKENS, PARENTS, q) for _ in range(30)]
    assert len(set(map(str, runs_a))) > 3


def test_bad_trees_raise_and_leave_the_history():
    logits, q = _rows(3)
    s = Sampler(V, SamplingParams(**OFF, **PEN))
    s.reset(HISTORY)
    bad = [(TOKENS, np.array([-1, -1, -1, 3, 0, 1], np.int32), pyllamaspec.InvalidArgumentError, "parent"),
           (TOKENS, np.array([0, -1, -1, 0, 0, 1], np.int32), pyllamaspec.InvalidArgumentError, "parent"),
           (TOKENS, np.array([-1, -1, -1, 0, 0, -2], np.int32), pyllamaspec.InvalidArgumentError, "parent"),
           (np.array([2, 5, 1, 4, 6, 0], np.int32), PARENTS, pyllamaspec.TokenOutOfRangeError, "token 6"),
           (np.array([2, 5, -1, 4, 2, 0], np.int32), PARENTS, pyllamaspec.TokenOutOfRangeError, "token -1"),
           (TOKENS, PARENTS[:5], pyllamaspec.InvalidArgumentError, "parents"),
           (TOKENS.astype(np.int64), PARENTS, pyllamaspec.InvalidArgumentError, "tokens")]
    for tokens, parents, err, match in bad:
        with pytest.raises(err, match=match):
            s.verify_tree(logits, tokens, parents, q)
    with pytest.raises(pyllamaspec.InvalidArgumentError):      # too few target rows
        s.verify_tree(logits[:3], TOKENS, PARENTS, q)
    with pytest.raises(pyllamaspec.InvalidArgumentError, match="mass"):
        s.verify_tree(logits, TOKENS, PARENTS, np.zeros_like(q))
    assert s.history_len == len(HISTORY)
    assert s.verify_tree(logits[:1], TOKENS[:0], PARENTS[:0], None)[0] == []     # no node: a plain draw


def test_core_refuses_null_pointers_and_a_negative_size():
    s = Sampler(V, SamplingParams(**OFF))
    logits = np.zeros((2, V), np.float32)
    row = ffi.from_buffer("float[]", logits)
    t, par = np.array([1], np.int32), np.array([-1], np.int32)
    tb, pb = ffi.from_buffer("int32_t[]", t), ffi.from_buffer("int32_t[]", par)
    path, n_path, nxt = ffi.new("int32_t[1]"), ffi.new("int32_t *"), ffi.new("int32_t *")
    E = lib.PSL_ERR_INVALID_ARGUMENT
    assert lib.psl_sampler_verify_tree(ffi.NULL, row, tb, pb, ffi.NULL, 1, path, n_path, nxt) == E
    assert lib.psl_sampler_verify_tree(s._s, ffi.NULL, tb, pb, ffi.NULL, 1, path, n_path, nxt) == E
    assert lib.psl_sampler_verify_tree(s._s, row, ffi.NULL, pb, ffi.NULL, 1, path, n_path, nxt) == E
    assert lib.psl_sampler_verify_tree(s._s, row, tb, ffi.NULL, ffi.NULL, 1, path, n_path, nxt) == E
    assert lib.psl_sampler_verify_tree(s._s, row, tb, pb, ffi.NULL, 1, ffi.NULL, n_path, nxt) == E
    assert lib.psl_sampler_verify_tree(s._s, row, tb, pb, ffi.NULL, 1, path, ffi.NULL, nxt) == E
    assert lib.psl_sampler_verify_tree(s._s, row, tb, pb, ffi.NULL, 1, path, n_path, ffi.NULL) == E
    assert lib.psl_sampler_verify_tree(s._s, row, tb, pb, ffi.NULL, -1, path, n_path, nxt) == E
    assert "n = -1" in ffi.string(lib.psl_last_error()).decode()
    assert lib.psl_sampler_verify_tree(s._s, row, tb, pb, ffi.NULL, 1, path, n_path, nxt) == lib.PSL_OK
