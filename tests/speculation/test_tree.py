"""Token trees (issue 28): a draft model's tree verified in one target evaluation.

Greedy: the output equals plain greedy decoding token for token, on every architecture that
speculates (llama, qwen3, gemma3, qwen3moe, the qwen35 hybrid; the real SmolLM2 pair), and
rounds really kept a branch other than the first. Sampled: recursive rejection sampling over
siblings drawn without replacement keeps the target's distribution (chi-square of the first two
tokens against the exact marginals, as test_speculative.py does for chains), and a naive rule
(each sibling tested on its own against the same p and q, no residual update) fails the same
test. Both caches hold exactly the text afterwards, and the spare sequences are given back.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import models
from conftest import load_reference
from models_moe import write_moe_gguf
from models_qwen35 import write_qwen35_gguf
from pyllamaspec import Model
from pyllamaspec.engine.sampling import Sampler, SamplingParams
from pyllamaspec.generation.generate import generate
from pyllamaspec.speculation.decoder import Decoder, DraftParams
from pyllamaspec.speculation.tree.draft import children
from test_speculative import PROMPT, chi2_pvalue, exact_marginals, plain_greedy_to_near_tie

PROMPTS = [[1, 7, 3, 9], [2, 5, 5, 5, 8], [3], [9, 8, 7, 6, 5, 4, 3, 2]]
F32 = dict(n_threads=1, type_k="f32", type_v="f32")


def _write(kind: str, path: pathlib.Path, draft: bool) -> None:
    """A target, or its draft: the same weights with fewer layers (agrees often, not always)."""
    n_layer = 1 if draft else 2
    if kind in ("qwen3moe", "qwen2moe", "gpt-oss"):
        write_moe_gguf(path, arch=kind, n_layer=n_layer, seed=5)
    else:
        models.write_gguf(path, arch=kind, n_vocab=64, n_embd=32, n_layer=n_layer, seed=11)


def _gen(target, draft, prompt, n=40, **kw):
    return generate(prompt, target, draft, max_tokens=n, temperature=0, p_min=0.0, adaptive=False, **kw)


def _check_identity(target: Model, draft: Model, prompts) -> list[tuple[int, int, int]]:
    log = []
    for prompt in prompts:
        plain = generate(prompt, target, max_tokens=40, temperature=0)
        for k, nodes in ((2, 0), (4, 12)):
            spec = _gen(target, draft, prompt, n_draft=k, tree=True, tree_nodes=nodes)
            assert spec.tokens == plain.tokens, f"n_draft={k}, nodes {nodes}, prompt {prompt}"
            # every round a tree (the last may have room for no draft: max_tokens)
            assert spec.stats.tree_rounds >= spec.stats.rounds - 1 > 0
            log += spec.stats.tree_log
    return log


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "qwen2moe", "gpt-oss"])
def test_greedy_tree_equals_plain(synth_dir, kind):
    t, d = synth_dir / f"tree_{kind}_t.gguf", synth_dir / f"tree_{kind}_d.gguf"
    _write(kind, t, False)
    _write(kind, d, True)
    with Model(t, n_ctx=256, **F32) as target, Model(d, n_ctx=256, **F32) as draft:
        log = _check_identity(target, draft, PROMPTS)
    # a branch other than the first was accepted: the tree kept what a chain would have lost
    assert any(branch > 0 and depth > 0 for _, depth, branch in log), log
    print(f"{kind}: {len(log)} tree rounds, mean depth accepted {np.mean([x[1] for x in log]):.2f}")


def _qwen35_models(tmp: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    ref = json.loads((pathlib.Path(__file__).parents[1] / "data" / "reference" / "qwen35_tiny_llamacpp.json").read_text())
    kw = ref["models"]["a"]["kwargs"]
    t, d = tmp / "qwen35_t.gguf", tmp / "qwen35_near.gguf"
    write_qwen35_gguf(t, **kw)
    write_qwen35_gguf(d, **{**kw, "rope_base": 100.0})     # agrees with the target part of the time
    return t, d


def test_greedy_tree_equals_plain_on_a_hybrid(synth_dir):
    """qwen35: one sequence per token, so every branch is laid out whole (tree/verify.py)."""
    t, d = _qwen35_models(synth_dir)
    with Model(t, n_ctx=256, n_seq_max=16, n_threads=1) as target, \
         Model(d, n_ctx=256, n_seq_max=16, n_threads=1) as draft:
        log = _check_identity(target, draft, PROMPTS[:3])
    assert any(branch > 0 and depth > 0 for _, depth, branch in log), log


def test_no_spare_sequence_verifies_the_first_branch(synth_dir):
    """A target with one sequence (a hybrid's default): the tree's first branch, as a chain."""
    t, d = _qwen35_models(synth_dir)
    with Model(t, n_ctx=256, n_threads=1) as target, Model(d, n_ctx=256, n_seq_max=16, n_threads=1) as draft:
        assert target.n_seq_max == 1
        plain = generate(PROMPTS[0], target, max_tokens=30, temperature=0)
        spec = _gen(target, draft, PROMPTS[0], 30, n_draft=4, tree=True)
        assert spec.tokens == plain.tokens
        assert spec.stats.tree_rounds == 0 and spec.stats.rounds > 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_hold_exactly_the_text_and_spares_go_back(synth_dir, temperature):
    t, d = synth_dir / "tree_c_t.gguf", synth_dir / "tree_c_d.gguf"
    _write("llama", t, False)
    _write("llama", d, True)
    with Model(t, n_ctx=256, **F32) as target, Model(d, n_ctx=256, **F32) as draft:
        dec = Decoder(target, draft, SamplingParams(temperature=temperature, seed=3),
                      DraftParams(n_draft=4, adaptive=False, p_min=0.0, tree=True, tree_nodes=10))
        dec.prefill(PROMPTS[3])
        for _ in range(12):
            dec.step()
            assert dec.tseq.cached_tokens == dec.seq[:-1]
            assert target.sequence(dec.tseq.id).n_past == len(dec.seq) - 1
            # every cell in use is the text's: the branches' nodes are gone
            assert target._context.n_cells_used() == len(dec.seq) - 1
            held = dec.drafter.draft_seq.cached_tokens
            assert held == dec.seq[:len(held)]
            assert draft._context.n_cells_used() == len(held)
        assert dec.stats.tree_rounds == 12
        leased = [s.id for s in target._pool.all() + draft._pool.all() if s.leased]
        assert len(leased) == 2                  # the generation's own two sequences only
        dec.close()


@pytest.mark.slow
def test_greedy_tree_identity_smollm2(smollm2_path):
    from pyllamaspec.files.convert import ensure_variant
    q4_0 = ensure_variant(smollm2_path, "q4_0")
    prompts = [r["text"] for r in load_reference("gen", "smollm2-135m-q4_1")]
    log = []
    with Model(smollm2_path, n_ctx=1024) as target, Model(q4_0, n_ctx=1024) as draft:
        for prompt in prompts:
            plain = generate(prompt, target, max_tokens=32, temperature=0)
            for k in (3, 6):
                spec = _gen(target, draft, prompt, 32, n_draft=k, tree=True)
                assert spec.tokens == plain.tokens, f"n_draft={k}, prompt {prompt!r}"
                log += spec.stats.tree_log
    assert any(branch > 0 and depth > 0 for _, depth, branch in log)


# ---- sampled trees: the distribution --------------------------------------------------------

@pytest.fixture(scope="module")
def pair(synth_dir):
    t, d = synth_dir / "tree_s_t.gguf", synth_dir / "tree_s_d.gguf"
    models.write_llama_gguf(t, n_vocab=64, n_embd=32, n_layer=2, seed=11)
    models.write_llama_gguf(d, n_vocab=64, n_embd=32, n_layer=1, seed=11)
    with Model(t, n_ctx=64, **F32) as target, Model(d, n_ctx=64, **F32) as draft:
        yield target, draft


def _naive_accept(sampler: Sampler, rng: np.random.Generator, p: np.ndarray, draft) -> tuple[list[int], int]:
    """The negative control, a walk in numpy: each sibling accepted with min(1, p/q) against the
    same p and q (no residual update, q not renormalized without the earlier siblings)."""
    kids, path, node = children(draft.parents), [], -1
    while True:
        pr = sampler.probs(p[node + 1]).astype(np.float64)
        pr /= pr.sum()
        group = kids[node + 1]
        if not group:
            return path, int(rng.choice(len(pr), p=pr))
        q = draft.q[group[0]].astype(np.float64)
        q /= q.sum()
        nxt = next((c for c in group if rng.random() * q[draft.tokens[c]] < pr[draft.tokens[c]]), None)
        if nxt is None:
            r = np.maximum(pr - q, 0.0)
            return path, int(rng.choice(len(pr), p=r / r.sum()))
        path.append(nxt)
        node = nxt


def _sample_first_two(target, draft, sp: SamplingParams, n: int, naive: bool = False, prompt=PROMPT):
    c1 = np.zeros(target.n_vocab, np.int64)
    c2 = np.zeros(target.n_vocab, np.int64)
    second_branch = 0
    for seed in range(n):
        dec = Decoder(target, draft, SamplingParams(**{**sp.__dict__, "seed": seed}),
                      DraftParams(n_draft=2, p_min=0.0, adaptive=False, tree=True, tree_width=4, tree_levels=2,
                                  tree_nodes=12))
        if naive:
            rng = np.random.default_rng(seed)
            dec.tree.accept = lambda p, d, s=dec.t_sampler, r=rng: _naive_accept(s, r, p, d)
        dec.prefill(prompt)
        out = []
        while len(out) < 2:
            out += [t for t, _ in dec.step()]
        assert dec.stats.tree_rounds > 0
        second_branch += any(b > 0 and dd > 0 for _, dd, b in dec.stats.tree_log)
        dec.close()
        c1[out[0]] += 1
        c2[out[1]] += 1
    return c1, c2, second_branch / n


SETTINGS = [dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
            dict(temperature=1.5, top_k=0, top_p=0.8, min_p=0.0)]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"T{s['temperature']}-p{s['top_p']}")
def test_sampled_tree_preserves_the_distribution(pair, setting):
    target, draft = pair
    sp = SamplingParams(**setting, seed=0)
    p1, p2 = exact_marginals(target, sp)
    c1, c2, later = _sample_first_two(target, draft, sp, n=3000)
    pv1, df1 = chi2_pvalue(c1, p1)
    pv2, df2 = chi2_pvalue(c2, p2)
    print(f"{setting}: a later sibling kept in {later:.2f} of runs; p-values {pv1:.3f} (df {df1}), {pv2:.3f} (df {df2})")
    assert later > 0.05                  # siblings past the first really were accepted
    assert pv1 > 1e-3 and pv2 > 1e-3


def test_naive_sibling_rule_is_rejected(pair):
    target, draft = pair
    sp = SamplingParams(**SETTINGS[0], seed=0)
    p1, p2 = exact_marginals(target, sp)
    c1, c2, _ = _sample_first_two(target, draft, sp, n=3000, naive=True)
    pv1, _ = chi2_pvalue(c1, p1)
    pv2, _ = chi2_pvalue(c2, p2)
    print(f"naive sibling rule: p-values {pv1:.2e}, {pv2:.2e}")
    assert pv1 < 1e-6


# ---- flags, stats, the cost model's choice --------------------------------------------------

def test_cli_spec_tree_flags(smollm2_path):
    import subprocess
    import sys
    from pyllamaspec.files.convert import ensure_variant
    draft = ensure_variant(smollm2_path, "q4_0")
    base = [sys.executable, "-m", "pyllamaspec.cli", "-m", str(smollm2_path), "-md", str(draft), "-no-cnv",
            "-p", "The capital of France is", "-n", "24", "--temp", "0", "--draft-max", "4", "-t", "2",
            "--no-adaptive", "--draft-p-min", "0"]
    outs = {}
    for flag in ("--spec-tree", "--no-spec-tree"):
        proc = subprocess.run(base + [flag, "--spec-tree-nodes", "10"][:1 if flag == "--no-spec-tree" else 3],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        outs[flag] = proc
    assert outs["--spec-tree"].stdout == outs["--no-spec-tree"].stdout     # greedy: the same text
    assert "trees     =" in outs["--spec-tree"].stderr and "10 nodes" in outs["--spec-tree"].stderr
    assert "trees     =" not in outs["--no-spec-tree"].stderr


def test_server_timings_say_the_tree(synth_dir):
    from pyllamaspec.frontends.server.openai_format import timings
    t, d = synth_dir / "tree_c_t.gguf", synth_dir / "tree_c_d.gguf"
    _write("llama", t, False)
    _write("llama", d, True)
    with Model(t, n_ctx=256, **F32) as target, Model(d, n_ctx=256, **F32) as draft:
        spec = _gen(target, draft, PROMPTS[0], n_draft=3, tree=True)
    tm = timings(spec.stats, True)
    assert tm["tree_rounds"] == spec.stats.tree_rounds > 0 and tm["tree_shape"].startswith("depth ")
    assert tm["tree_nodes"] == spec.stats.tree_nodes == sum(n for n, _, _ in spec.stats.tree_log)


def _policy(c_target: dict[int, float], alpha: float, c_draft: float):
    from pyllamaspec.speculation.cost_model import DraftPolicy
    pol = DraftPolicy(16)
    pol.c_target = dict(c_target)
    pol.c_draft = c_draft
    pol.acc, pol.rej = 1000 * alpha, 1000 * (1 - alpha)     # settled: the bound is the mean
    return pol


def _ranks(a1: float):
    from pyllamaspec.speculation.tree.policy import TreeStats
    return TreeStats([(1000 * a1, 1000 * (1 - a1))] * 4)


def test_cost_model_picks_a_tree_where_verification_is_flat_and_a_chain_where_it_is_not():
    from pyllamaspec.speculation.tree.policy import choose
    flat = {n: 0.010 + 0.00005 * n for n in (1, 2, 4, 8, 16, 32, 64)}      # a GPU: 64 rows ~ 1
    steep = {n: 0.010 * n for n in (1, 2, 4, 8, 16, 32, 64)}               # compute-bound: linear
    shape = choose(_policy(flat, 0.6, 0.001), _ranks(0.4), 4, 8, 2, 2, 0)
    assert shape is not None and shape.width == 2 and shape.nodes > shape.depth
    assert choose(_policy(steep, 0.6, 0.001), _ranks(0.4), 4, 8, 2, 2, 0) is None
    # a second choice that is never right: the tree buys nothing, the chain is kept
    assert choose(_policy(flat, 0.6, 0.001), _ranks(0.0), 4, 8, 2, 2, 0) is None


def test_rank_statistics_count_what_verification_walked():
    from pyllamaspec.speculation.tree.policy import TreeStats, observe_tree
    from pyllamaspec.speculation.tree.draft import children
    st = TreeStats()
    parents = np.array([-1, -1, 0, 0, 1, 1], np.int32)      # root: 0, 1; node 0: 2, 3; node 1: 4, 5
    observe_tree(st, children(parents), [1, 5])            # rank 1 won at the root, rank 1 at node 1
    assert st.counts[0][0] > TreeStats.PRIOR[0] * TreeStats.FORGET + 1.9
    acc, rej = st.counts[0]
    observe_tree(st, children(parents), [])                # rank 1 tried at the root, lost
    assert st.counts[0] == (acc * TreeStats.FORGET, rej * TreeStats.FORGET + 1) and len(st.counts) == 1


def test_tree_with_the_cost_model_logprobs_and_penalties(synth_dir):
    """adaptive: the cost model sizes the tree, output still plain greedy's; logprobs read off
    the accepted path's rows equal the chain's; under penalties the walk counts the path."""
    t, d = synth_dir / "tree_c_t.gguf", synth_dir / "tree_c_d.gguf"
    _write("llama", t, False)
    _write("llama", d, True)
    with Model(t, n_ctx=256, **F32) as target, Model(d, n_ctx=256, **F32) as draft:
        for prompt in PROMPTS[:2]:
            plain = generate(prompt, target, max_tokens=40, temperature=0)
            auto = generate(prompt, target, draft, max_tokens=40, temperature=0, tree=True, adaptive=True)
            assert auto.tokens == plain.tokens
            chain = _gen(target, draft, prompt, n_draft=4, tree=False, logprobs=3)
            tree = _gen(target, draft, prompt, n_draft=4, tree=True, logprobs=3)
            assert tree.tokens == chain.tokens and tree.stats.tree_rounds > 0
            for a, b in zip(chain.logprobs, tree.logprobs):
                assert a.token == b.token and abs(a.logprob - b.logprob) < 1e-4
            for pen in (dict(repeat_penalty=1.5, frequency_penalty=0.3, penalty_last_n=8),
                        dict(frequency_penalty=0.5, penalty_last_n=16)):
                p_plain = generate(prompt * 3, target, max_tokens=60, temperature=0, **pen)
                p_tree = _gen(target, draft, prompt * 3, 60, n_draft=4, tree=True, **pen)
                assert p_tree.tokens == p_plain.tokens and p_tree.stats.tree_rounds > 0


def test_expansions_are_measured_apart_from_the_chains_draft_cost(synth_dir):
    """A tree round's batched draft evaluations are not the chain's per-token cost: the policy
    sees the root's one-token evaluation only; the expansions go to TreeStats by node count."""
    t, d = synth_dir / "tree_c_t.gguf", synth_dir / "tree_c_d.gguf"
    _write("llama", t, False)
    _write("llama", d, True)
    with Model(t, n_ctx=256, **F32) as target, Model(d, n_ctx=256, **F32) as draft:
        dec = Decoder(target, draft, SamplingParams(temperature=0.0),
                      DraftParams(n_draft=4, adaptive=True, tree=True, tree_nodes=10))
        seen = []
        orig = dec.policy.observe_draft
        dec.policy.observe_draft = lambda s, n: (seen.append(n), orig(s, n))
        dec.prefill(PROMPTS[3])
        for _ in range(20):
            dec.step()
        assert dec.stats.tree_rounds > 0
        assert seen.count(1) >= dec.stats.tree_rounds     # one token per tree round
        assert set(dec.drafter.ranks.c_expand) <= {1, 2, 3, 4}
        dec.close()


def test_nodes_per_expansion_follow_the_measured_costs():
    from pyllamaspec.speculation.tree.draft import TreeShape
    from pyllamaspec.speculation.tree.policy import best_batch
    pol = _policy({1: 0.01, 9: 0.02}, 0.6, 0.01)
    cpu, gpu = _ranks(0.3), _ranks(0.3)
    cpu.c_expand = {1: 0.010, 2: 0.033, 4: 0.055}          # measured on 2 cores: Gemma 3 270M
    gpu.c_expand = {1: 0.010, 2: 0.0101, 4: 0.0102}
    shape = TreeShape(8, 16, 2, 2)
    assert best_batch(pol, cpu, shape).batch == 1
    assert best_batch(pol, gpu, shape).batch == 4


# ---- n-gram branching -----------------------------------------------------------------------

NGRAM_PROMPT = [5, 1, 2, 3, 5, 4, 6, 7, 5, 1, 2, 8, 5, 9, 2, 3, 5]   # 5 is followed by 1, 4, 1, 9


def test_ngram_tree_greedy_equals_plain(synth_dir):
    t = synth_dir / "tree_c_t.gguf"
    _write("llama", t, False)
    with Model(t, n_ctx=256, **F32) as target:
        log = []
        for prompt in (NGRAM_PROMPT, NGRAM_PROMPT * 3, PROMPTS[3] * 4):
            plain = generate(prompt, target, max_tokens=40, temperature=0)
            spec = _gen(target, "ngram", prompt, n_draft=4, tree=True, ngram=1)
            assert spec.tokens == plain.tokens
            log += spec.stats.tree_log
        print("n-gram tree rounds (nodes, depth, branch):", log)
        assert log and any(b > 0 and dd > 0 for _, dd, b in log), log


def test_ngram_tree_sampled_preserves_the_distribution(pair):
    """Point-mass drafts: the target draws its token and the branch holding it, if any, is
    followed (RRS with q one-hot); the first two tokens against the exact marginals."""
    target, _ = pair
    sp = SamplingParams(**SETTINGS[0], seed=0)
    p1, p2 = exact_marginals(target, sp, NGRAM_PROMPT)
    c1 = np.zeros(target.n_vocab, np.int64)
    c2 = np.zeros(target.n_vocab, np.int64)
    trees = 0
    for seed in range(3000):
        dec = Decoder(target, "ngram", SamplingParams(**{**sp.__dict__, "seed": seed}),
                      DraftParams(n_draft=2, adaptive=False, tree=True, tree_width=4, ngram=1))
        dec.prefill(NGRAM_PROMPT)
        out = []
        while len(out) < 2:
            out += [t for t, _ in dec.step()]
        trees += dec.stats.tree_rounds
        dec.close()
        c1[out[0]] += 1
        c2[out[1]] += 1
    pv1, _ = chi2_pvalue(c1, p1)
    pv2, _ = chi2_pvalue(c2, p2)
    print(f"n-gram trees: {trees} tree rounds; p-values {pv1:.3f}, {pv2:.3f}")
    assert trees >= 3000 and pv1 > 1e-3 and pv2 > 1e-3


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_too_few_spare_sequences(synth_dir, temperature):
    """3 sequences (the server's -np 3): 2 spares for a tree of up to 4 branches. Greedy: the
    tree cut to 2 branches (the chain's draft's and the next best), output plain greedy's;
    sampled: the chain's draft (which siblings stay may not depend on the draws)."""
    t, d = synth_dir / "tree_c_t.gguf", synth_dir / "tree_c_d.gguf"
    _write("llama", t, False)
    _write("llama", d, True)
    with Model(t, n_ctx=256, n_seq_max=3, **F32) as target, Model(d, n_ctx=256, **F32) as draft:
        for prompt in PROMPTS:
            kw = dict(max_tokens=40, temperature=temperature, seed=5, top_k=0, top_p=1.0, min_p=0.0)
            plain = generate(prompt, target, **kw)
            spec = generate(prompt, target, draft, n_draft=4, tree=True, tree_nodes=12, adaptive=False, p_min=0.0,
                            **kw)
            if temperature == 0:
                assert spec.tokens == plain.tokens
                assert spec.stats.tree_rounds > 0
                assert all(n <= 2 * 4 for n, _, _ in spec.stats.tree_log)     # 2 branches of depth <= 4
            else:
                assert spec.stats.tree_rounds == 0 and spec.stats.rounds > 0
            assert target._pool.all() and sum(s.leased for s in target._pool.all()) == 0


def test_a_hybrid_targets_tree_costs_its_branches_whole():
    from pyllamaspec.speculation.tree.draft import TreeShape
    from pyllamaspec.speculation.tree.policy import verify_rows
    pol = _policy({1: 0.01}, 0.6, 0.001)
    shape = TreeShape(4, 10, 2, 2)                  # 4 branches of depth 4
    assert verify_rows(pol, shape) == 11
    pol.tree_whole_branches = True
    assert verify_rows(pol, shape) == 4 * 5


def test_ngram_tree_under_penalties_equals_plain(synth_dir):
    """The verifier's walk counts the path in the penalties' history. Without that, 1 of these 4 prompts differs from
    plain greedy at each setting (checked when written)."""
    t = synth_dir / "tree_c_t.gguf"
    _write("llama", t, False)
    with Model(t, n_ctx=256, **F32) as target:
        for pen in (dict(repeat_penalty=1.5, frequency_penalty=0.3, penalty_last_n=8),
                    dict(frequency_penalty=0.5, penalty_last_n=16)):
            trees = 0
            for prompt in (NGRAM_PROMPT, NGRAM_PROMPT * 3, PROMPTS[0] * 4, PROMPTS[1] * 3):
                plain = generate(prompt, target, max_tokens=60, temperature=0, **pen)
                spec = _gen(target, "ngram", prompt, 60, n_draft=4, tree=True, ngram=1, **pen)
                assert spec.tokens == plain.tokens, (pen, prompt)
                trees += spec.stats.tree_rounds
            assert trees > 0


def _penalized_marginals(target: Model, sp: SamplingParams, prompt: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """exact_marginals with the penalties' history: the prompt, then the first token."""
    s = Sampler(target.n_vocab, sp)
    s.reset(prompt)
    target.clear()
    p1 = s.probs(target.eval(prompt, logits="last")[0]).astype(np.float64)
    p2 = np.zeros_like(p1)
    for x1 in np.nonzero(p1)[0]:
        target.truncate(len(prompt))
        s.reset(prompt + [int(x1)])
        p2 += p1[x1] * s.probs(target.eval([int(x1)], logits="last")[0])
    return p1 / p1.sum(), p2 / p2.sum()


def test_sampled_tree_under_penalties_preserves_the_distribution(pair):
    target, draft = pair
    prompt = [1, 7, 3, 9, 7, 7, 3]
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.8,
                        frequency_penalty=0.5, penalty_last_n=16, seed=0)
    p1, p2 = _penalized_marginals(target, sp, prompt)
    c1, c2, later = _sample_first_two(target, draft, sp, n=3000, prompt=prompt)
    pv1, _ = chi2_pvalue(c1, p1)
    pv2, _ = chi2_pvalue(c2, p2)
    print(f"penalized: a later sibling kept in {later:.2f} of runs; p-values {pv1:.3f}, {pv2:.3f}")
    assert later > 0.05 and pv1 > 1e-3 and pv2 > 1e-3


@pytest.mark.slow
def test_greedy_tree_gemma3_up_to_small_margins(gemma3_path):
    """Real Gemma 3: its batched and one-token evaluations differ slightly (as llama.cpp's do;
    test_speculative.py's chain test), so the tree's output equals plain greedy's up to the
    first step whose top-2 logit margin is below 0.5, the chain test's bound."""
    from pyllamaspec.files.convert import ensure_variant
    draft_path = ensure_variant(gemma3_path, "q8_0")
    prompts = [r["text"] for r in load_reference("gen", "gemma-3-270m-q4_k_m")]
    n_tok, log = 32, []
    with Model(gemma3_path, n_ctx=256) as target, Model(draft_path, n_ctx=256) as draft:
        for prompt in prompts:
            plain, safe = plain_greedy_to_near_tie(target, prompt, n_tok)
            for k in (2, 4):
                spec = _gen(target, draft, prompt, n_tok, n_draft=k, tree=True)
                assert spec.tokens[:safe] == plain[:safe], f"n_draft={k}, {prompt!r}"
                log += spec.stats.tree_log
    assert log


def test_cli_spec_tree_gives_a_hybrid_its_branches(synth_dir):
    """A hybrid target holds one sequence by default (a recurrent state ring each): --spec-tree
    asks for a tree's spare sequences too (flags.launch.sequences_for), so the CLI really verifies
    trees on it; without them every tree shrank to its first branch (0 tree rounds)."""
    import subprocess
    import sys
    t, d = _qwen35_models(synth_dir)
    base = [sys.executable, "-m", "pyllamaspec.cli", "-m", str(t), "-md", str(d), "-no-cnv", "-p", "a b c d",
            "-n", "24", "--temp", "0", "--draft-max", "4", "-t", "1", "--no-adaptive", "--draft-p-min", "0",
            "--ignore-eos"]
    runs = {flag: subprocess.run(base + [flag], capture_output=True, text=True, timeout=300)
            for flag in ("--spec-tree", "--no-spec-tree")}
    for proc in runs.values():
        assert proc.returncode == 0, proc.stderr
    assert runs["--spec-tree"].stdout == runs["--no-spec-tree"].stdout        # greedy: the same text
    line = next(x for x in runs["--spec-tree"].stderr.splitlines() if x.startswith("trees"))
    assert int(line.split("=")[1].split()[0]) > 0, line
