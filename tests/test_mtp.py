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
from pyllamaspec.frontends.generate import generate
from pyllamaspec.engine.sampling import SamplingParams
from pyllamaspec.speculation.decoder import Decoder
from test_speculative import chi2_pvalue, exact_marginals, sample_first_two

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


REF = pathlib.Path(__file__).parent / "data" / "reference" / "qwen35_mtp_llamacpp.json"


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
    from pyllamaspec.frontends.cli import args as cli_args
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
    from pyllamaspec.frontends.generate import _mtp_if_same
    with _open(files[0]) as m, _open(files[1]) as p:
        assert _mtp_if_same(str(files[0]), m, None) == "mtp"
        assert _mtp_if_same(str(files[0]), m, "draft-simple") == str(files[0])      # asked otherwise
        assert _mtp_if_same(str(files[1]), p, None) == str(files[1])               # no MTP layers
        plain = generate(PROMPT, m, temperature=0, max_tokens=12, cache_prompt=False)
        spec = generate(PROMPT, m, str(files[0]), temperature=0, max_tokens=12, cache_prompt=False)
    assert spec.tokens == plain.tokens and spec.stats.drafted > 0
