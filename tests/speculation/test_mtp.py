"""MTP drafting (draft_model="mtp", --spec-type draft-mtp) on seeded tiny qwen35 models with a
NextN block: the trunk is unchanged by it, its chained steps match llama.cpp's draft-mtp logits
(tests/data/reference/qwen35_mtp_llamacpp.json, scripts/mtp_reference.py), its first step
matches a numpy oracle, its cache rolls
back with the target's, greedy output is the plain output, sampled output keeps the target's
distribution (with the negative control), and a model without MTP layers is refused clearly."""
from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest
import tolerances

from models_qwen35 import write_qwen35_gguf
from oracle import load_matrix
from pyllamaspec import Model
from pyllamaspec.errors import InvalidArgumentError, UnsupportedModelError
from pyllamaspec.generation.generate import generate
from pyllamaspec.engine.sampling import SamplingParams
from pyllamaspec.speculation.decoder import Decoder
from test_speculative import chi2_pvalue, exact_marginals, sample_first_two
from test_tree import _sample_first_two     # a sampled tree round: the drafter given (here "mtp")

SPEC = dict(n_vocab=64, n_embd=32, n_layer=4, seed=5)
PROMPT = [1, 7, 3, 9, 12, 40]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp")
    write_qwen35_gguf(d / "mtp.gguf", n_nextn=1, **SPEC)
    write_qwen35_gguf(d / "plain.gguf", **SPEC)    # the same trunk (the draws come first)
    return d / "mtp.gguf", d / "plain.gguf"


def _open(path, **kw):
    return Model(path, n_ctx=128, n_threads=1, type_k="f32", type_v="f32", **kw)


def test_trunk_unchanged_by_mtp(files):
    with _open(files[0]) as m, _open(files[1]) as p:
        assert (m.n_mtp_layers, p.n_mtp_layers) == (1, 0)
        ref = p.eval(PROMPT, logits="all").copy()
        m.enable_mtp()                  # the eval now also fills the MTP cache
        np.testing.assert_array_equal(m.eval(PROMPT, logits="all"), ref)


REF = pathlib.Path(__file__).parents[1] / "data" / "reference" / "qwen35_mtp_llamacpp.json"


@pytest.mark.parametrize("name", ["a", "b"])
def test_matches_llamacpp(tmp_path, name):
    spec = json.loads(REF.read_text())["models"][name]
    p = tmp_path / f"{name}.gguf"
    write_qwen35_gguf(p, **spec["kwargs"])
    assert hashlib.sha256(p.read_bytes()).hexdigest() == spec["sha256"], "the model is not regenerated bit for bit"
    # llama.cpp's own spread across CPUs (F16 KV rounding: up to 2.7e-4), x2 (tests/tolerances.py)
    tol = tolerances.MTP[name].tol()
    with Model(p, n_ctx=128, n_threads=1) as m:     # f16 KV, as llama.cpp's default
        m.enable_mtp()
        for prompt, toks, rows in zip(spec["prompts"], spec["step_tokens"], spec["logits"]):
            m.clear()
            m.eval(prompt[:-1], logits="none")
            for step, (tok, ref) in enumerate(zip(toks, rows)):
                ref = np.asarray(ref, np.float32)
                got = m.mtp_draft(tok, step)
                assert np.abs(got - ref).max() < tol * np.abs(ref).max()
                assert got.argmax() == ref.argmax() or not tolerances.clear_margin(ref, tol)


def _rms(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def test_first_step_matches_oracle(files):
    """At position 0 the hidden state is zero and the attention sees only the token itself
    (softmax over one key: the output is its value, whatever q and rope), so the step is a
    short numpy computation from the file's weights."""
    import gguf
    r = gguf.GGUFReader(str(files[0]))
    w = {t.name: load_matrix(t).astype(np.float64) for t in r.tensors}
    b = "blk.4."
    tok, hd, n_head, n_kv = 11, 16, 4, 2
    e = w["token_embd.weight"][tok]
    y = w[b + "nextn.eh_proj.weight"] @ np.concatenate([_rms(e, w[b + "nextn.enorm.weight"]), np.zeros(32)])
    x = _rms(y, w[b + "attn_norm.weight"])
    qg = (w[b + "attn_q.weight"] @ x).reshape(n_head, 2, hd)     # per head: q, then its gate
    v = (w[b + "attn_v.weight"] @ x).reshape(n_kv, hd)
    attn = np.concatenate([v[h // (n_head // n_kv)] / (1 + np.exp(-qg[h, 1])) for h in range(n_head)])
    y = y + w[b + "attn_output.weight"] @ attn
    f = _rms(y, w[b + "post_attention_norm.weight"])
    g, u = w[b + "ffn_gate.weight"] @ f, w[b + "ffn_up.weight"] @ f
    y = y + w[b + "ffn_down.weight"] @ (g / (1 + np.exp(-g)) * u)
    ref = w["output.weight"] @ _rms(y, w[b + "nextn.shared_head_norm.weight"])
    with _open(files[0]) as m:
        m.enable_mtp()
        got = m.mtp_draft(tok, 0)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-4 * np.abs(ref).max())


def test_cache_rolls_back(files):
    """Drafting, verifying and truncating leave the MTP cache as a fresh evaluation of the kept
    tokens does: the chained steps then give the same logits."""
    with _open(files[0]) as m, _open(files[0]) as fresh:
        m.enable_mtp()
        fresh.enable_mtp()
        m.eval(PROMPT, logits="none")
        d0 = int(np.argmax(m.mtp_draft(5, 0)))
        m.mtp_draft(d0, 1)
        m.eval([5, d0, 33, 2], logits="all")
        m.truncate(len(PROMPT) + 1)          # keeps 5: d0 and the rest rejected
        fresh.eval(PROMPT + [5], logits="none")
        for step, t in enumerate([8, 21, 30]):
            np.testing.assert_array_equal(m.mtp_draft(t, step), fresh.mtp_draft(t, step))
        with pytest.raises(InvalidArgumentError, match="must follow step"):
            m.mtp_draft(8, 5)


def _steps(m, toks=(8, 21, 30)):
    return [m.mtp_draft(t, s).copy() for s, t in enumerate(toks)]


def test_enable_late_and_deep_rollback_replay(files, monkeypatch):
    """Enabling MTP on a filled cache replays it, and so does a truncation past the recurrent
    ring (2 snapshots here): both rebuild the MTP cache and hidden rows exactly."""
    monkeypatch.setenv("PYLLAMASPEC_RS_SNAPSHOTS", "2")
    long = PROMPT + [4, 50, 22, 17, 9, 31]
    with _open(files[0]) as m, _open(files[0]) as fresh:
        fresh.enable_mtp()
        fresh.eval(PROMPT, logits="none")
        ref = _steps(fresh)
        m.eval(PROMPT, logits="none")
        m.enable_mtp()                       # the 6 tokens cached so far have no MTP entries yet
        for a, b in zip(_steps(m), ref):
            np.testing.assert_array_equal(a, b)
        m.eval(long[len(PROMPT):], logits="none")
        m.truncate(len(PROMPT))              # 6 back: past the ring, a replay
        for a, b in zip(_steps(m), ref):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n_draft", [1, 4, 10])
def test_greedy_equals_plain(files, n_draft):
    with _open(files[0]) as m:
        plain = generate(PROMPT, m, temperature=0, max_tokens=40, cache_prompt=False)
        spec = generate(PROMPT, m, "mtp", temperature=0, max_tokens=40, n_draft=n_draft, adaptive=False,
                        p_min=0.0, cache_prompt=False)
    assert spec.tokens == plain.tokens
    assert spec.stats.drafted > 0
    print(f"MTP greedy n_draft={n_draft}: acceptance {spec.stats.acceptance_rate:.3f} "
          f"({spec.stats.accepted}/{spec.stats.drafted})")


@pytest.fixture(scope="module")
def target(files):
    with _open(files[0]) as m:
        yield m


def test_sampling_preserves_the_distribution(target):
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    p1, p2 = exact_marginals(target, sp)
    c1, c2, rate = sample_first_two(target, "mtp", sp, n=2000)
    pv1, pv2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"MTP drafts under sampling: acceptance {rate:.2f}; p-values {pv1:.3f}, {pv2:.3f}")
    assert 0.02 < rate < 0.98
    assert pv1 > 1e-3 and pv2 > 1e-3
    c1, c2, _ = sample_first_two(target, "mtp", sp, n=2000, accept_all=True)   # the negative control
    assert chi2_pvalue(c1, p1)[0] < 1e-6 and chi2_pvalue(c2, p2)[0] < 1e-6


def test_model_without_mtp_is_refused(files):
    with _open(files[1]) as p:
        with pytest.raises(UnsupportedModelError, match="no MTP"):
            generate(PROMPT, p, "mtp", temperature=0, max_tokens=4)
        with pytest.raises(InvalidArgumentError, match="not enabled"):
            p.mtp_draft(3, 0)
        with pytest.raises(InvalidArgumentError, match="'mtp'"):
            Decoder(p, "mtpp", SamplingParams(temperature=0))


def test_cli_spec_type_draft_mtp(files):
    from pyllamaspec.frontends.flags import args as cli_args
    from pyllamaspec.errors import PyllamaspecError
    a = cli_args.parse_args(cli_args.build_parser(), ["-m", "t", "--spec-type", "draft-mtp"])
    cli_args.resolve_spec_type(a)
    assert a.mtp and not a.lookup
    a = cli_args.parse_args(cli_args.build_parser(), ["-m", "t", "-md", "d", "--spec-type", "draft-mtp"])
    cli_args.resolve_spec_type(a)            # -md: a Gemma 4 assistant, checked when it loads
    assert a.mtp and a.model_draft == "d"
    with pytest.raises(InvalidArgumentError, match="draft-mtp drafts with the target's own MTP layers"):
        generate(PROMPT, str(files[1]), str(files[1]), spec_type="draft-mtp", temperature=0, max_tokens=2)


def test_own_file_as_draft_means_mtp(files):
    """llama.cpp detects draft-mtp from nextn tensors in the draft's file: the target's own file
    given as the draft drafts with its MTP layers (no second copy loaded), a plain file is a draft."""
    from pyllamaspec.generation.drafts import own_mtp
    with _open(files[0]) as m, _open(files[1]) as p:
        assert own_mtp(str(files[0]), m, None)
        assert not own_mtp(str(files[0]), m, "draft-simple")      # asked otherwise
        assert not own_mtp(str(files[1]), p, None)                # no MTP layers
        plain = generate(PROMPT, m, temperature=0, max_tokens=12, cache_prompt=False)
        spec = generate(PROMPT, m, str(files[0]), temperature=0, max_tokens=12, cache_prompt=False)
    assert spec.tokens == plain.tokens and spec.stats.drafted > 0


# ---- token trees from the MTP block (issue 28) -----------------------------------------------

def _agreeing(n_layer: int = 4, trunk: float = 0.5, mix: float = 0.3):
    """An edit (write_qwen35_gguf(edit=)) that makes the MTP block agree with its trunk part of
    the time: the trunk's layers scaled down (the target near a bigram model of its embeddings),
    the block near the identity on the token's embedding, its head norm the trunk's. A random
    block agrees with the target on ~1 token in 64, so no tree would ever keep a later sibling."""
    def edit(w):
        for name, a in w.items():
            if name.startswith("blk.") and not name.startswith(f"blk.{n_layer}.") \
                    and name.endswith(("attn_output.weight", "ssm_out.weight", "ffn_down.weight")):
                a *= trunk
        b = f"blk.{n_layer}."
        e = w[b + "nextn.eh_proj.weight"]
        e *= mix
        e[:, :e.shape[0]] += np.eye(e.shape[0])
        w[b + "nextn.enorm.weight"][:] = 1.0
        w[b + "nextn.shared_head_norm.weight"][:] = w["output_norm.weight"]
        w[b + "attn_output.weight"] *= mix
        w[b + "ffn_down.weight"] *= mix
    return edit


@pytest.fixture(scope="module")
def agreeing(tmp_path_factory):
    p = tmp_path_factory.mktemp("mtp_tree") / "agree.gguf"
    write_qwen35_gguf(p, n_nextn=1, edit=_agreeing(), **SPEC)
    # 16 sequences: the tree's branches are spare sequences of the target (speculation/tree/verify.py)
    with Model(p, n_ctx=256, n_seq_max=16, n_threads=1, type_k="f32", type_v="f32") as m:
        yield m


# batched and one-token MTP rows differ by float rounding only: 9.5e-7 at most measured (logits
# ~ 3), so 1e-5 relative to the row's largest; a node run from a wrong state differs by O(1)
ROW_TOL = 1e-5


def test_draft_nodes_match_the_chains_through_them(files):
    """A node's row is the chain's along its path: siblings run from the same state."""
    with _open(files[0], n_seq_max=2) as m:
        m.enable_mtp()
        m.eval(PROMPT, logits="none")
        s = m.sequence(0)
        m.mtp_draft(5, 0)                                  # node 0
        kids = s.mtp_draft_nodes([8, 21], [0, 0]).copy()   # nodes 1, 2: siblings
        deep = s.mtp_draft_nodes([30, 2, 4], [2, 1, 1]).copy()   # nodes 3, 4, 5
        for path, row in (([8], kids[0]), ([21], kids[1]), ([21, 30], deep[0]), ([8, 2], deep[1]), ([8, 4], deep[2])):
            m.mtp_draft(5, 0)
            for step, t in enumerate(path):
                ref = m.mtp_draft(t, step + 1)
            assert np.abs(row - ref).max() <= ROW_TOL * np.abs(ref).max(), path
        assert np.abs(kids[0] - kids[1]).max() > 0.1      # the siblings' rows do differ


def _chain_after(m, toks):
    return [m.mtp_draft(t, s).copy() for s, t in enumerate(toks)]


def test_a_tree_leaves_the_mtp_cache_as_a_chain_does(files):
    """The drafted nodes never enter the cache: after a tree draft, the round's eval of the
    accepted tokens and its truncation, the next drafts are bit for bit those after a chain
    draft (and after no draft at all), and every cell in use is the text's."""
    out = []
    for kind in ("tree", "chain", "none"):
        with _open(files[0], n_seq_max=2) as m:
            m.enable_mtp()
            m.eval(PROMPT, logits="none")
            if kind != "none":
                m.mtp_draft(5, 0)
            if kind == "tree":
                s = m.sequence(0)
                s.mtp_draft_nodes([8, 21, 3], [0, 0, 0])
                s.mtp_draft_nodes([30, 2], [1, 2])
                s.mtp_draft_nodes([9], [4])
                assert m._context.n_cells_used() == len(PROMPT) + 7
            elif kind == "chain":
                _chain_after(m, [5, 8, 30, 9])
            m.eval([5, 8, 33], logits="all")
            m.truncate(len(PROMPT) + 2)
            assert m._context.n_cells_used() == len(PROMPT) + 2
            out.append(_chain_after(m, [30, 2, 7]))
    for a, b, c in zip(*out):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_bad_node_calls_raise(files):
    with _open(files[0], n_seq_max=2) as m:
        m.enable_mtp()
        m.eval(PROMPT, logits="none")
        s = m.sequence(0)
        with pytest.raises(InvalidArgumentError, match="need a draft"):
            s.mtp_draft_nodes([8], [0])                   # no step 0 yet
        m.mtp_draft(5, 0)
        for parents, msg in (([1], "parent 1 is not a node the draft holds"), ([-1], "parent -1"),
                             ([0, 1], "parent 1 is not")):   # a parent in the same call is not held yet
            with pytest.raises(InvalidArgumentError, match=msg):
                s.mtp_draft_nodes([8] * len(parents), parents)
        s.mtp_draft_nodes([8, 21], [0, 0])
        with pytest.raises(InvalidArgumentError, match="must follow step"):
            m.mtp_draft(3, 1)                              # the last node (2) is at depth 1: step 2
        m.mtp_draft(3, 2)                                  # the child of node 2
        with pytest.raises(InvalidArgumentError, match="non-empty"):
            s.mtp_draft_nodes([], [])
        with pytest.raises(InvalidArgumentError, match="must be in"):
            m._context.seq_mtp_draft_nodes(0, np.zeros(0, np.int32), np.zeros(0, np.int32), np.empty(64, np.float32))
        from pyllamaspec.errors import PyllamaspecError
        with pytest.raises(PyllamaspecError, match="outside the vocabulary"):
            s.mtp_draft_nodes([64], [0])
        m.eval([5], logits="none")                         # the sequence changed: the draft is gone
        with pytest.raises(InvalidArgumentError, match="need a draft"):
            s.mtp_draft_nodes([8], [0])


TREE_PROMPTS = [PROMPT, [2, 5, 5, 5, 8], [3], [9, 8, 7, 6, 5, 4, 3, 2]]


def test_greedy_mtp_tree_equals_plain(agreeing):
    log = []
    for prompt in TREE_PROMPTS:
        plain = generate(prompt, agreeing, temperature=0, max_tokens=40, cache_prompt=False)
        for k, nodes in ((2, 0), (4, 0), (4, 12)):
            spec = generate(prompt, agreeing, "mtp", temperature=0, max_tokens=40, n_draft=k, adaptive=False,
                            p_min=0.0, tree=True, tree_nodes=nodes, cache_prompt=False)
            assert spec.tokens == plain.tokens, (prompt, k, nodes)
            st = spec.stats
            assert st.tree_rounds >= st.rounds - 1 > 0            # every round a tree (the last: room)
            # the shape of the last round (its depth cut by max_tokens), the full one before
            assert st.tree_shape.startswith("depth ") and "width 2 x 2 levels" in st.tree_shape
            assert max(n for n, _, _ in st.tree_log) == (nodes or 2 * k)
            assert st.tree_nodes == sum(n for n, _, _ in st.tree_log)
            log += st.tree_log
        auto = generate(prompt, agreeing, "mtp", temperature=0, max_tokens=40, tree=None, adaptive=True,
                        cache_prompt=False)
        assert auto.tokens == plain.tokens
    # a branch other than the first was accepted: the tree kept what a chain would have lost
    assert any(branch > 0 and depth > 0 for _, depth, branch in log), log


def test_sampled_mtp_tree_preserves_the_distribution(agreeing):
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    p1, p2 = exact_marginals(agreeing, sp, PROMPT)
    c1, c2, later = _sample_first_two(agreeing, "mtp", sp, n=3000, prompt=PROMPT)
    pv1, pv2 = chi2_pvalue(c1, p1)[0], chi2_pvalue(c2, p2)[0]
    print(f"MTP trees under sampling: a later sibling kept in {later:.2f} of runs; p-values {pv1:.3f}, {pv2:.3f}")
    assert later > 0.05                  # siblings past the first really were accepted
    assert pv1 > 1e-3 and pv2 > 1e-3
    c1, c2, _ = _sample_first_two(agreeing, "mtp", sp, n=3000, naive=True, prompt=PROMPT)    # the naive sibling rule fails
    pv_naive = chi2_pvalue(c1, p1)[0]
    print(f"naive sibling rule: p-value {pv_naive:.2e}")
    assert pv_naive < 1e-6


def test_the_cost_models_tree_is_drafted_by_the_mtp(agreeing, monkeypatch):
    """tree=None, adaptive: the shape is the cost model's (tree_policy.choose) and the MTP
    drafts it; its expansions are measured apart (TreeStats.c_expand, by MTP batch size). On
    this tiny CPU model the real cost model drafts nothing at all (a draft step costs about as
    much as the target's token), so its choices are pinned here: a draft of 3, a tree of 6."""
    from pyllamaspec.speculation import cost_model
    from pyllamaspec.speculation.tree import sampled as sampled_tree
    from pyllamaspec.speculation.tree.draft import TreeShape
    asked = []

    def choose(policy, stats, k, k_cap, width, levels, nodes):
        asked.append((k, width, levels))
        return TreeShape(k, 2 * k, width, levels, 2)
    monkeypatch.setattr(sampled_tree, "choose_tree", choose)
    monkeypatch.setattr(cost_model.DraftPolicy, "choose", lambda self, k_cap, pending=0: min(k_cap, 3))
    from pyllamaspec.speculation.decoder import DraftParams
    plain = generate(PROMPT, agreeing, temperature=0, max_tokens=30, cache_prompt=False)
    dec = Decoder(agreeing, "mtp", SamplingParams(temperature=0), DraftParams(n_draft=8, adaptive=True, tree=None))
    dec.prefill(PROMPT)
    out = []
    while len(out) < 30:
        out += [t for t, _ in dec.step()]
    assert out[:30] == plain.tokens
    assert asked and all(a == (3, 2, 2) for a in asked[:-1])
    assert dec.stats.tree_rounds > 0 and dec.stats.tree_shape.endswith("6 nodes, 2 per draft evaluation")
    assert set(dec.drafter.ranks.c_expand) <= {1, 2} and dec.drafter.ranks.c_expand
    dec.close()
