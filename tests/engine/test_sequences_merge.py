"""Sequences (issue 23) with what the other issues brought (the i23 merge): issue 24's
architectures take several sequences, each with the logits it gets alone; a draft head (issue
25) follows its target's sequence 0 only and is refused, by name, beside other sequences (core,
generate([...]), the server's -np); a grammar (issue 26) is per generation: prompts decoded
together under one schema each keep their own grammar state.

Tolerance of the mixed-batch comparison: none. Every batch here holds several tokens, so each
sequence's rows take the same kernels mixed as alone (test_sequences.py's docstring), and a
sequence's cells ascend with its positions: measured bit-identical on all five architectures. The
negative control (one sequence's tokens visible to the other) moves the rows by 2.3 to 18 here.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from models import write_gguf, write_llama_gguf
from models_gemma4 import write_gemma4_gguf
from models_glm4moe import write_glm4moe_gguf
from models_heads import write_eagle3_gguf
from models_mistral3 import write_mistral3_gguf
from models_mla import write_deepseek2_gguf
from models_qwen35 import write_qwen35_gguf
from pyllamaspec import Model
from pyllamaspec.engine.head import DraftHead
from pyllamaspec.errors import InvalidArgumentError, PyllamaspecError
from pyllamaspec.generation.generate import generate
from test_server import MODEL_FLAGS, Server

ATOL = 0.0           # see the module's docstring
WRITERS = {
    "gemma4": lambda p: write_gemma4_gguf(p, shared_kv_layers=2, seed=3),
    "deepseek2": lambda p: write_deepseek2_gguf(p, seed=3),
    "glm4moe": lambda p: write_glm4moe_gguf(p, seed=3),
    "mistral3": lambda p: write_mistral3_gguf(p, temperature_scale=0.1, seed=3),
    "qwen35moe": lambda p: write_qwen35_gguf(p, n_expert=4, seed=3),
}


WRITERS_MTP = {"glm4moe": lambda p: write_glm4moe_gguf(p, n_nextn=1, seed=4),
               "deepseek2": lambda p: write_deepseek2_gguf(p, n_nextn=1, seed=4)}


def _toks(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 64, n).astype(np.int32)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("seqs_merge")
    out = {}
    for name, write in WRITERS.items():
        out[name] = d / f"{name}.gguf"
        write(out[name])
    return out


def _open(path, **kw):
    return Model(path, **{"n_ctx": 128, "n_threads": 1, "type_k": "f32", "type_v": "f32", **kw})


@pytest.mark.parametrize("arch", list(WRITERS))
def test_new_architectures_mix_sequences(paths, arch):
    """Two sequences fed in interleaved batches (the second one's prompt spans two batches): each
    one's rows equal its evaluation alone; a control with both in one sequence is far off."""
    p = paths[arch]
    a, b = _toks(9, 1), _toks(10, 2)
    kw = {"n_seq_max": 2} if arch == "qwen35moe" else {}       # a hybrid's default is one sequence
    with _open(p) as m:
        ref_a = m.eval(a[:4]).copy(), m.eval(a[4:]).copy()
        m.clear()
        ref_b = m.eval(b[:6]).copy(), m.eval(b[6:]).copy()
        m.clear()
        m.eval(a)
        control = m.eval(b[:6]).copy()               # b after a's tokens, in one sequence
    with _open(p, **kw) as m:
        s0, s1 = m.sequence(0), m.sequence(1)
        r1 = m.decode([(s1, b[:6], "all"), (s0, a[:4], "all")])
        r2 = m.decode([(s0, a[4:], "all"), (s1, b[6:], "all")])
        got_a, got_b = np.concatenate([r1[1], r2[0]]), np.concatenate([r1[0], r2[1]])
    np.testing.assert_allclose(got_a, np.concatenate(ref_a), atol=ATOL, rtol=0)
    np.testing.assert_allclose(got_b, np.concatenate(ref_b), atol=ATOL, rtol=0)
    assert np.abs(control - ref_b[0]).max() > 0.5


@pytest.mark.parametrize("arch", ["glm4moe", "deepseek2"])
def test_mtp_of_kv_only_models_per_sequence(tmp_path, arch):
    """issue 24's NextN blocks (a KV-only target) draft per sequence: two sequences decoded in one
    call, and a third copied from the second, draft what each does alone (bit for bit; the MTP
    block reads the hidden row before each graph's first token, so a graph holds one sequence).
    Control: sequence 0's state drafting the second one's token is far off."""
    p = tmp_path / f"{arch}.gguf"
    WRITERS_MTP[arch](p)
    a, b = _toks(7, 1), _toks(9, 2)

    def drafts(s, t) -> list[np.ndarray]:
        r0 = s.mtp_draft(int(t[-1]), 0).copy()
        return [r0, s.mtp_draft(int(np.argmax(r0)), 1).copy()]
    ref = {}
    for key, t in (("a", a), ("b", b)):
        with _open(p) as m:
            m.enable_mtp()
            m.eval(t[:-1])
            ref[key] = drafts(m.sequence(0), t)
    with _open(p) as m:
        m.enable_mtp()
        s0, s1 = m.sequence(0), m.sequence(1)
        m.decode([(s0, a[:-1], "none"), (s1, b[:-1], "none")])
        with m.lease(a[:-1].tolist()) as l0, m.lease(b[:-1].tolist()) as l1, m.lease(b[:-1].tolist()) as s2:
            assert (l0, l1) == (s0, s1) and s2.id == 2 and s2.cached_tokens == b[:-1].tolist()   # b's copied
            got = {"b": drafts(s1, b), "a": drafts(s0, a), "c": drafts(s2, b)}
        control = s0.mtp_draft(int(b[-1]), 0).copy()
    for k, want in (("a", ref["a"]), ("b", ref["b"]), ("c", ref["b"])):
        for g, r in zip(got[k], want):
            np.testing.assert_array_equal(g, r)
    assert np.abs(control - ref["b"][0]).max() > 0.5


@pytest.fixture(scope="module")
def head_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("head_seq")
    t, h = d / "t.gguf", d / "h.gguf"
    write_gguf(t, n_vocab=64, n_embd=32, n_layer=4, seed=3)
    write_eagle3_gguf(h, n_vocab=64, n_embd=32, n_embd_target=32, target_layers=(0, 1, 3))
    return t, h


def test_draft_head_holds_sequence_zero_only(head_pair):
    """The core refuses another sequence beside a head (PSL_ERR_UNSUPPORTED naming it); the
    Model leases sequence 0 only while the head is attached; generate([...]) with the head
    refuses to decode prompts together, and runs them one at a time (n_parallel=1) as alone."""
    t, h = head_pair
    with _open(t) as m, DraftHead(h) as head:
        m.attach_head(head)
        with pytest.raises(PyllamaspecError, match="eagle3.*sequence 1"):
            m.decode([(m.sequence(1), [1, 2, 3], "last")])
        assert m.sequence(1).n_past == 0
        with m.lease([1, 2]) as s:
            assert s.id == 0
            assert m.lease(wait=False) is None
        prompts = [[1, 7, 3, 9], [5, 5, 2, 8, 1]]
        with pytest.raises(InvalidArgumentError, match="n_parallel=1"):
            generate(prompts, m, head, temperature=0, max_tokens=8)
        alone = [generate(p, m, head, temperature=0, max_tokens=8, cache_prompt=False).tokens for p in prompts]
        one_by_one = generate(prompts, m, head, temperature=0, max_tokens=8, n_parallel=1, cache_prompt=False)
        assert [r.tokens for r in one_by_one] == alone
        m.attach_head(None)
        assert m.lease([1, 2], wait=False) is not None    # all sequences again once detached


def test_one_drafter_object_for_several_generations_is_refused(head_pair):
    """A Drafter object carries one generation's state: generations decoded together each need
    their own (the scheduler refuses to share one), one at a time it is fine."""
    from pyllamaspec.engine.sampling import SamplingParams
    from pyllamaspec.generation.together import generate_together
    from pyllamaspec.speculation.decoder import DraftParams
    from pyllamaspec.speculation.drafters import NgramDrafter
    t, _ = head_pair
    dp = DraftParams()
    sp = [SamplingParams(temperature=0)] * 2
    with _open(t) as m:
        shared = NgramDrafter(dp)
        with pytest.raises(InvalidArgumentError, match="one object for every prompt"):
            generate_together([[1, 2, 3], [4, 5, 6]], m, shared, sp, dp, max_tokens=4, stop=[])
        got = generate_together([[1, 2, 3], [4, 5, 6]], m, shared, sp, dp, max_tokens=4, stop=[], n_parallel=1)
        assert [len(r["tokens"]) for r in got] == [4, 4]


def test_server_refuses_slots_beside_a_draft_head(head_pair, capsys):
    """-np 2 with a draft head: refused at start, naming the head and -np 1."""
    from pyllamaspec.frontends.server.main import main
    t, h = head_pair
    assert main(["-m", str(t), "-md", str(h), "-np", "2", "-c", "128", "--port", "1"]) == 1
    assert "-np 2: a draft head (eagle3)" in capsys.readouterr().err


def test_grammar_per_generation(tmp_path):
    """Prompts decoded together under one grammar each keep a grammar state of their own: every
    answer equals its own call's (greedy), with n-gram drafts and with a draft model."""
    t, d = tmp_path / "t.gguf", tmp_path / "d.gguf"
    write_llama_gguf(t, n_vocab=64, n_embd=32, n_layer=2, seed=11)
    write_llama_gguf(d, n_vocab=64, n_embd=32, n_layer=1, seed=11)
    grammar = 'root ::= [b-m]+ " " [n-z] [b-z]*'          # the tiny vocabulary's letters (models.py)
    prompts = [[1, 2, 3], [9, 8, 7, 6], [4, 4, 4, 4, 4]]
    with _open(t, n_seq_max=4) as m, _open(d, n_seq_max=4) as dm:
        for draft in ("ngram", dm):
            alone = [generate(p, m, draft, grammar=grammar, temperature=0, max_tokens=12,
                              cache_prompt=False).text for p in prompts]
            together = [r.text for r in generate(prompts, m, draft, grammar=grammar, temperature=0,
                                                 max_tokens=12, cache_prompt=False)]
            assert together == alone
            assert all(re.fullmatch(r"[b-m]+( [n-z][b-z]*)?", s) for s in alone), alone


def test_server_slots_keep_their_grammars(smollm2_path):
    """Two slots decoding at once under different grammars: each answer follows its own grammar
    and equals the answer it gets alone (greedy)."""
    bodies = [{"prompt": "Is the sky blue? Answer:", "grammar": 'root ::= " " ("yes" | "no") "."', "n_predict": 8},
              {"prompt": "Count to five:", "grammar": 'root ::= " " [0-9] (", " [0-9])*', "n_predict": 12}]
    s = Server(["-m", str(smollm2_path), "-a", "smol", "-np", "2", "--lookup", *MODEL_FLAGS])
    try:
        alone = [s.post("/completion", {**b, "temperature": 0})[1]["content"] for b in bodies]
        with ThreadPoolExecutor(2) as ex:
            got = list(ex.map(lambda b: s.post("/completion", {**b, "temperature": 0})[1]["content"], bodies * 2))
    finally:
        s.stop()
    assert re.fullmatch(r" (yes|no)\.", alone[0]) and re.fullmatch(r" [0-9](, [0-9])*,? ?", alone[1]), alone   # (cut by n_predict)
    assert got == alone * 2
