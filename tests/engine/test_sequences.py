"""Several sequences in one context (issue 23; llama.cpp's seq_id): a batch that mixes the tokens
of several sequences gives each the logits it gets alone, per-sequence truncation and prefix
copies, tokens shared by several sequences (a token tree's nodes), the hybrid qwen35's
recurrent state and its MTP rows per sequence, sliding windows, and the checks on bad batches.

Exactness: a sequence's cells keep the order of its positions, so its attention reads them as
a one-sequence cache does. Its rows in a mixed batch are then bit-identical to its rows alone
where ggml's kernels do not depend on the batch's size: quantized weights on the CPU (Q4_1 here),
and a hybrid, whose graphs hold one sequence each. F32 weights take another matmul path for a
1-token batch than for several: measured at most 8.3e-7 here (test_core's batched ==
sequential allows 1e-5 for the same reason), against O(0.1) for a mask that lets one sequence
see another's tokens (the negative control below).
"""
from __future__ import annotations

import numpy as np
import pytest

import models
from models_qwen35 import write_qwen35_gguf
from pyllamaspec import Model
from pyllamaspec.errors import (ContextFullError, InvalidArgumentError, TokenOutOfRangeError,
                                UnsupportedModelError)


def _toks(n: int, seed: int, n_vocab: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_vocab, n).astype(np.int32)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("seqs")
    out = {}
    for name, kw in {"llama": dict(dtype="F32"), "q41": dict(dtype="Q4_1", n_embd=64, n_ff=96),
                     "gemma3": dict(arch="gemma3", head_dim=16, sliding_window=4)}.items():
        models.write_llama_gguf(d / f"{name}.gguf", **kw)
        out[name] = d / f"{name}.gguf"
    write_qwen35_gguf(d / "qwen35.gguf", n_nextn=1, n_vocab=64, n_embd=32, n_layer=4, seed=5)
    out["qwen35"] = d / "qwen35.gguf"
    return out


def _same(got, want, arch: str) -> None:
    np.testing.assert_allclose(got, want, atol=ATOL[arch], rtol=0)


def _open(path, **kw):
    kw = {"n_ctx": 128, "n_threads": 1, "type_k": "f32", "type_v": "f32", **kw}
    return Model(path, **kw)


def _alone(path, tokens, cuts=(), **kw) -> np.ndarray:
    """The logits of tokens evaluated alone in a fresh model, in chunks ending at cuts (a
    hybrid's recurrent state sums in another order when chunked otherwise)."""
    with _open(path, **kw) as m:
        bounds = [0, *cuts, len(tokens)]
        return np.concatenate([m.eval(tokens[i:j]).copy() for i, j in zip(bounds, bounds[1:]) if j > i])


ARCHS = ["llama", "q41", "gemma3", "qwen35"]
ATOL = {"llama": 1e-5, "q41": 0.0, "gemma3": 1e-5, "qwen35": 0.0}   # see the module's docstring


@pytest.mark.parametrize("arch", ARCHS)
def test_mixed_batches_equal_each_sequence_alone(paths, arch):
    """Three sequences fed in interleaved batches of uneven sizes: every row equals the
    sequence's own evaluation alone (bit for bit)."""
    p = paths[arch]
    seqs = [_toks(13, 1), _toks(9, 2), _toks(11, 3)]
    kw = {"n_seq_max": 3} if arch == "qwen35" else {}
    ends = [(5, 2, 4), (6, 6, 8), (13, 9, 11)]    # per step: where each sequence's slice ends
    ref = [_alone(p, t, [e[i] for e in ends[:2]]) for i, t in enumerate(seqs)]
    with _open(p, **kw) as m:
        s = [m.sequence(i) for i in range(3)]
        got, prev = [[], [], []], [0, 0, 0]
        for step in range(3):
            parts = []
            for i in (2, 0, 1) if step % 2 else (0, 1, 2):
                if ends[step][i] > prev[i]:
                    parts.append((s[i], seqs[i][prev[i]:ends[step][i]], "all"))
                    prev[i] = ends[step][i]
            for (sq, _, _), rows in zip(parts, m.decode(parts)):
                got[sq.id].append(rows.copy())
        for i in range(3):
            assert prev[i] == len(seqs[i])
            _same(np.concatenate(got[i]), ref[i], arch)
            assert s[i].cached_tokens == seqs[i].tolist() and s[i].n_past == len(seqs[i])


def test_negative_control_one_sequence_sees_the_other(paths):
    """The same tokens in one sequence (the other's tokens visible) are far from alone: what the
    exact comparisons above would catch."""
    p = paths["llama"]
    a, b = _toks(6, 1), _toks(6, 2)
    ref = _alone(p, b)
    with _open(p) as m:
        m.eval(a)
        mixed = m.eval(b)
    assert np.abs(mixed - ref).max() > 0.05


@pytest.mark.parametrize("arch", ARCHS)
def test_truncate_one_sequence_keeps_the_others(paths, arch):
    p = paths[arch]
    a, b, a2 = _toks(12, 4), _toks(10, 5), _toks(5, 6)
    kw = {"n_seq_max": 2} if arch == "qwen35" else {}
    with _open(p, **kw) as m:
        s0, s1 = m.sequence(0), m.sequence(1)
        m.decode([(s0, a, "none"), (s1, b, "none")])
        used = m._context.n_cells_used()
        s0.truncate(7)
        assert (s0.n_past, s1.n_past) == (7, 10)
        if arch != "qwen35":
            assert m._context.n_cells_used() == used - 5
        r0, r1 = m.decode([(s0, a2, "all"), (s1, a2, "all")])
        _same(r0, _alone(p, np.concatenate([a[:7], a2]), [7])[7:], arch)
        _same(r1, _alone(p, np.concatenate([b, a2]), [10])[10:], arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_prefix_copy(paths, arch):
    """copy(src, dst, n): dst continues src's first n tokens, src is untouched; the cells are
    shared (a KV-only model takes no new ones)."""
    p = paths[arch]
    a, q = _toks(14, 7), _toks(6, 8)
    kw = {"n_seq_max": 3} if arch == "qwen35" else {}
    with _open(p, **kw) as m:
        s0, s1, s2 = (m.sequence(i) for i in range(3))
        s0.eval(a, logits="none")
        used = m._context.n_cells_used()
        for n, dst in ((9, s1), (14, s2)):
            m._context.seq_copy(0, dst.id, n)
            dst._cache_ids = a[:n].tolist()
        if arch != "qwen35":
            assert m._context.n_cells_used() == used
        r1, r2, r0 = m.decode([(s1, q, "all"), (s2, q, "all"), (s0, q[:3], "all")])
        _same(r1, _alone(p, np.concatenate([a[:9], q]), [9])[9:], arch)
        _same(r2, _alone(p, np.concatenate([a, q]), [14])[14:], arch)
        _same(r0, _alone(p, np.concatenate([a, q[:3]]), [14])[14:], arch)


def test_qwen35_copy_beyond_the_ring_replays(paths):
    """A hybrid's copy from further back than its snapshot ring reaches is rebuilt by a replay
    before dst's next eval: still exact."""
    p = paths["qwen35"]
    a, q = _toks(40, 9), _toks(4, 10)
    with _open(p, n_seq_max=2) as m:
        m.eval(a, logits="none")
        m._context.seq_copy(0, 1, 12)          # 28 back: beyond the ring of 17
        s1 = m.sequence(1)
        s1._cache_ids = a[:12].tolist()
        r = s1.eval(q)
        np.testing.assert_array_equal(r, _alone(p, np.concatenate([a[:12], q]), [12])[12:])
        np.testing.assert_array_equal(m.eval(q), _alone(p, np.concatenate([a, q]), [40])[40:])


@pytest.mark.parametrize("arch", ["llama", "q41", "gemma3"])
def test_token_tree_shared_nodes_and_per_sequence_truncation(paths, arch):
    """A token tree over a prompt P: root x on branches 1 and 2, y1 then z1 on branch 1, y2 on
    branch 2, all in one batch (x stored once, in both). Each branch's rows equal its path
    evaluated alone; keeping the path x, y1 (truncating branch 1 after it, dropping branch 2)
    and continuing equals a fresh evaluation of P, x, y1, w."""
    p = paths[arch]
    P, (x, y1, z1, y2, w) = _toks(7, 11), _toks(5, 12).tolist()
    with _open(p) as m:
        s0, s1, s2 = (m.sequence(i) for i in range(3))
        s0.eval(P, logits="none")
        for s in (s1, s2):
            m._context.seq_copy(0, s.id, len(P))
            s._cache_ids = P.tolist()
        used = m._context.n_cells_used()
        rows = m.decode_batch([x, y1, y2, z1], [[s1, s2], s1, s2, s1])
        assert m._context.n_cells_used() == used + 4               # x stored once
        path1 = _alone(p, np.concatenate([P, [x, y1, z1]]), [7])[7:]
        path2 = _alone(p, np.concatenate([P, [x, y2]]), [7])[7:]
        _same(rows[[0, 1, 3]], path1, arch)
        _same(rows[[0, 2]], path2, arch)
        assert s1.cached_tokens == P.tolist() + [x, y1, z1] and s2.cached_tokens == P.tolist() + [x, y2]
        s1.truncate(len(P) + 2)                                     # keep x, y1
        s2.truncate(len(P))                                         # drop branch 2
        assert m._context.n_cells_used() == used + 2                # y2 and z1 freed; x still held
        _same(s1.eval([w]), _alone(p, np.concatenate([P, [x, y1, w]]), [7, 9])[-1:], arch)


def test_tree_positions_and_logits_flags(paths):
    """Only flagged rows come back, in order; a shared token must continue every sequence it
    joins at the same position."""
    p = paths["q41"]
    with _open(p) as m:
        s0, s1 = m.sequence(0), m.sequence(1)
        rows = m.decode_batch([5, 6, 7, 8], [s0, s1, s0, s1], logits=[False, True, True, False])
        assert rows.shape == (2, 64)
        np.testing.assert_array_equal(rows[0], _alone(p, [6])[0])
        np.testing.assert_array_equal(rows[1], _alone(p, [5, 7], [1])[1])
        s0.eval([9])
        with pytest.raises(InvalidArgumentError, match="continues at 2"):   # s0 is at 3, s1 at 2
            m.decode_batch([4], [[s0, s1]])
        assert (s0.n_past, s1.n_past) == (3, 2)


def test_bad_batches_leave_every_sequence_as_it_was(paths):
    p = paths["llama"]
    with _open(p, n_ctx=64) as m:
        s0, s1 = m.sequence(0), m.sequence(1)
        m.decode([(s0, _toks(20, 1), "none"), (s1, _toks(20, 2), "none")])
        with pytest.raises(InvalidArgumentError, match="twice"):
            m.decode_batch([1], [[s0, s0]])
        with pytest.raises(TokenOutOfRangeError):
            m.decode([(s0, [1, 2], "all"), (s1, [3, 99], "all")])
        with pytest.raises(ContextFullError):            # 40 + 30 cells > 64
            m.decode([(s0, _toks(15, 3), "all"), (s1, _toks(15, 4), "all")])
        with pytest.raises(ContextFullError):            # one sequence past n_ctx
            s1.eval(_toks(45, 5))
        with pytest.raises(TokenOutOfRangeError, match="sequence id 300"):
            m._context.seq_truncate(300, 0)
        with pytest.raises(InvalidArgumentError):
            m.sequence(256)
        assert (s0.n_past, s1.n_past, m._context.n_cells_used()) == (20, 20, 40)


def test_hybrid_refuses_shared_tokens_and_counts_its_sequences(paths):
    with _open(paths["qwen35"]) as m:
        assert m.n_seq_max == 1                           # the default: a ring per sequence costs memory
        with pytest.raises(InvalidArgumentError):
            m.sequence(1)
    with _open(paths["qwen35"], n_seq_max=2) as m:
        with pytest.raises(UnsupportedModelError, match="recurrent"):
            m.decode_batch([1], [[m.sequence(0), m.sequence(1)]])
    with _open(paths["llama"]) as m:
        assert m.n_seq_max == 256


def test_mtp_rows_per_sequence(paths):
    """Each sequence drafts from its own hidden rows: seq 1's chained MTP steps after its own
    tokens equal a fresh model's, while seq 0 holds other tokens (and keeps its own)."""
    p = paths["qwen35"]
    a, b = _toks(9, 13), _toks(6, 14)
    with _open(p) as ref:
        ref.enable_mtp()
        ref.eval(b, logits="none")       # as in the mixed batch below: each sequence in one graph
        want = [ref.mtp_draft(int(t), k).copy() for k, t in enumerate([3, 5, 8])]
        ref.clear()
        ref.eval(a, logits="none")
        want0 = ref.mtp_draft(3, 0).copy()
    with _open(p, n_seq_max=2) as m:
        m.enable_mtp()
        s1 = m.sequence(1)
        m.decode([(m.sequence(0), a, "none"), (s1, b, "none")])
        got = [s1.mtp_draft(int(t), k).copy() for k, t in enumerate([3, 5, 8])]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(m.mtp_draft(3, 0), want0)
        with pytest.raises(InvalidArgumentError, match="must follow"):
            s1.mtp_draft(5, 1)                            # seq 0's step 0 came between


@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_a_sequence_at_the_caches_top_keeps_its_cells_in_order(paths, kv):
    """A sequence whose next cell has no free cell above its last one (another sequence took the
    pages below first, then let most of them go) would take a lower cell, and its attention,
    which ggml sums over cells in their order, would read its new token first: seen in
    test_parallel (a cancelled generation's cells left below, a greedy text that parted from
    one at a time's at token 167). The cache then moves its cells down, in order
    (KvCache::compact): the rows are bit for bit those of a cache of its own, and the other
    sequence's too. That the wrap happens here is the compaction counted."""
    p = paths["q41"]
    kw = dict(n_ctx=512, type_k=kv, type_v=kv)
    x_toks, b_toks, steps = _toks(448, 1), _toks(64, 2), _toks(8, 3)

    def one_at_a_time(seq) -> np.ndarray:
        return np.stack([seq.eval([int(t)])[0].copy() for t in steps])

    with _open(p, **kw) as m:
        b_alone = m.eval(b_toks, "last").copy(), one_at_a_time(m.sequence(0))
        m.sequence(0).clear()
        m.eval(x_toks, "none")
        m.sequence(0).truncate(100)
        x_alone = one_at_a_time(m.sequence(0))
    with _open(p, n_seq_max=2, **kw) as m:
        x, b = m.sequence(0), m.sequence(1)
        x.eval(x_toks, "none")                              # cells 0 .. 447
        got = b.eval(b_toks, "last").copy()                 # its page: 448 .. 511, the top
        x.truncate(100)                                     # 100 .. 447 free, all below b's
        assert m.perf()["n_compactions"] == 0
        got_steps = one_at_a_time(b)                        # position 64: no cell above 511
        assert m.perf()["n_compactions"] == 1
        np.testing.assert_array_equal(got, b_alone[0])
        np.testing.assert_array_equal(got_steps, b_alone[1])
        np.testing.assert_array_equal(one_at_a_time(x), x_alone)


def test_a_compaction_half_way_through_a_batch_moves_the_cells_it_took(paths):
    """The batch's first tokens took cells above a hole (a new sequence, at a free page), then
    a token of a sequence at the cache's top compacts it: the cells taken so far move too, and
    their rows are written where their sequence now holds them (else they would read the old
    rows left in those cells)."""
    p = paths["q41"]
    x_toks, b_toks, y_toks = _toks(448, 1), _toks(64, 2), _toks(2, 4)
    with _open(p, n_ctx=512, type_k="f16", type_v="f16") as m:
        y_alone = m.eval(y_toks).copy()
        m.sequence(0).clear()
        m.eval(b_toks, "none")
        b_alone = m.eval([7])[0].copy()
    with _open(p, n_ctx=512, n_seq_max=3, type_k="f16", type_v="f16") as m:
        x, b, y = m.sequence(0), m.sequence(1), m.sequence(2)
        x.eval(x_toks, "none")
        b.eval(b_toks, "none")
        x.truncate(100)
        rows = m.decode_batch([*y_toks.tolist(), 7], [y, y, b])  # y: cells 128, 129; then b wraps
        assert m.perf()["n_compactions"] == 1
        np.testing.assert_array_equal(rows[:2], y_alone)
        np.testing.assert_array_equal(rows[2], b_alone)
