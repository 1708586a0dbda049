"""The checks every architecture of issue 24 passes (tests/arch_checks.py), one table entry per
architecture, on seeded tiny models written by its writer (tests/models_*.py):

* logits (and, with a NextN block, chained MTP drafts) against llama.cpp b11434's
  (tests/data/reference/<arch>_llamacpp.json, made by scripts/arch_reference.py on the very
  files regenerated here), within 3x llama.cpp's own spread between its AVX-512 and AVX2 builds;
* against the architecture's float64 oracle (tests/oracle*.py), and the oracle with one
  convention broken lands far outside every tolerance (a formula error cannot hide in them);
* batched == token by token, rollback at every split point, speculative greedy == plain greedy
  (a model draft, and the target's MTP block where it has one).

What only one architecture has (malformed files, MLA's replay, the qwen35moe cost curve) stays in
its own file: test_gemma4.py, test_glm4moe.py, test_deepseek2.py, test_qwen35moe.py."""
from __future__ import annotations

import copy
import pathlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import arch_checks as ac
import oracle
from models_gemma4 import write_gemma4_gguf
from models_glm4moe import write_glm4moe_gguf
from models_mistral3 import write_mistral3_gguf
from models_mla import write_deepseek2_gguf
from models_qwen35 import write_qwen35_gguf
from oracle_gemma4 import Gemma4Oracle
from oracle_mla import MlaOracle
from oracle_qwen35 import Qwen35Oracle

TOKS = np.random.default_rng(1).integers(0, 64, 14).astype(np.int32)
PROMPT = [1, 7, 3, 9, 12, 40]


@dataclass(frozen=True)
class Broken:
    """The oracle of synthetic model `synth` with `attr` set to `value` (and `also`, what that
    change implies): far from our logits."""
    attr: str
    value: object
    synth: str
    also: dict = field(default_factory=dict)

    def __str__(self) -> str:                  # the test id
        return f"{self.attr}={self.value}"


@dataclass(frozen=True)
class Speculative:
    """Target: synthetic model `synth` (with `target` changed); draft: the same with `draft`
    changed, so that it agrees part of the time and rounds accept every number of tokens."""
    synth: str
    draft: dict
    target: dict = field(default_factory=dict)
    prompt: tuple = tuple(PROMPT)


@dataclass(frozen=True)
class Arch:
    name: str                                  # the GGUF architecture and its fixture's name
    writer: Callable[..., None]
    oracle: Callable[[pathlib.Path], object]
    synth: dict[str, dict]                     # F32 models for the oracle and consistency checks
    oracle_tol: float
    broken: tuple[Broken, ...]
    speculative: Speculative
    batched_tol: float = 1e-5
    batched: tuple[str, ...] | None = None     # the synthetic models batched (None: all)
    rollback: tuple[tuple[str, int | None], ...] | None = None   # (model, recurrent ring) (None: all, default ring)
    mtp: str | None = None                     # the model (fixture and synthetic) with a NextN block
    kv_bytes: Callable[[dict], int] | None = None   # the cache's bytes per token, from the writer's arguments

    def batched_models(self) -> tuple[str, ...]:
        return self.batched if self.batched is not None else tuple(self.synth)

    def rollback_cases(self) -> tuple[tuple[str, int | None], ...]:
        return self.rollback if self.rollback is not None else tuple((n, None) for n in self.synth)


def _mla_kv_bytes(kw: dict) -> int:
    """MLA: (kv_lora_rank + n_rot) F16 values per token and layer, no V."""
    return kw.get("n_layer", 3) * (kw.get("kv_lora_rank", 32) + kw.get("n_rot", 16)) * 2


ARCHS = {a.name: a for a in [
    Arch("gemma4", write_gemma4_gguf, Gemma4Oracle,
         synth={"e2b": dict(seed=7, n_embd_per_layer=8, shared_kv_layers=2, n_ff=[48, 48, 48, 48, 96, 96]),
                "moe": dict(seed=8, n_expert=4, k_eq_v=True, tied=False)},
         # float32 against float64, and ggml's FP16 GELU table (which the oracle models) turns
         # rounding differences of its inputs into steps of one FP16 ulp: measured <= 2.8e-4
         oracle_tol=1e-3,
         # the FP16 GELU table again: a batch and a single row round an input to different
         # entries now and then (measured <= 3e-4)
         batched_tol=2e-3,
         broken=(Broken("v_norm", False, "e2b"), Broken("router_scale", False, "moe"),
                 Broken("shared_kv", None, "e2b"), Broken("embd_scale", False, "e2b"),
                 Broken("softcap", 0.0, "e2b")),
         # the draft is the target with another window rope base: the caches roll back into
         # windows and shared layers. (Untied: a tiny random model with a tied head repeats its
         # last token.)
         speculative=Speculative("e2b", target={"tied": False}, draft={"rope_base_swa": 100.0},
                                 prompt=(0, 5, 9, 13, 2, 44))),
    Arch("mistral3", write_mistral3_gguf, oracle.Oracle,
         synth={"yarn-temp": dict(seed=91, bias=True, temperature_scale=0.5,
                                  yarn=dict(factor=4.0, original_context_length=4, beta_fast=16.0, beta_slow=2.0,
                                            log_multiplier=1.0)),
                "plain": dict(seed=92)},
         oracle_tol=1e-5,   # float32 against float64: measured <= 4e-7
         # the attention temperature (a floor of 4 positions: it grows along the prompt), YaRN
         # and the rope's pairing
         broken=(Broken("attn_temp", 0.0, "yarn-temp"), Broken("yarn", None, "yarn-temp", {"freq_scale": 1.0}),
                 Broken("rope_neox", True, "yarn-temp")),
         speculative=Speculative("plain", draft={"rope_base": 100.0})),
    Arch("glm4moe", write_glm4moe_gguf, oracle.Oracle,
         synth={"air": dict(seed=81, n_nextn=1),
                "qknorm": dict(seed=82, qk_norm=True, qkv_bias=False, weights_scale=None, weights_norm=False,
                               n_rot=32)},
         oracle_tol=1e-5,   # float32 against float64: measured <= 5e-7
         broken=tuple(Broken(a, v, "air") for a, v in [("probs_bias", False), ("moe_gating", "softmax"),
                                                       ("moe_norm", False), ("rope_neox", False),
                                                       ("moe_scale", 0.0)]),
         speculative=Speculative("qknorm", draft={"rope_base": 100.0}),
         mtp="air"),
    Arch("deepseek2", write_deepseek2_gguf, MlaOracle,
         synth={"v3": dict(seed=71, n_nextn=1),
                "v2": dict(seed=72, groups=None, yarn=None, gating=1, probs_bias=False, weights_scale=None,
                           weights_norm=False)},
         oracle_tol=1e-5,   # float32 against float64: measured <= 4e-7
         # the selection bias, group-limited routing, YaRN's log multiplier (the attention scale)
         # and YaRN itself
         broken=tuple(Broken(a, v, "v3") for a, v in [("use_bias", False), ("use_groups", False),
                                                      ("yarn_log_mul", 0.0), ("yarn", False)]),
         speculative=Speculative("v2", draft={"rope_base": 50.0}),
         mtp="v3", kv_bytes=_mla_kv_bytes),
    Arch("qwen35moe", write_qwen35_gguf, Qwen35Oracle,
         synth={"moe": dict(seed=41, n_expert=4),
                # two k heads for four v heads: which k head a v head reads matters
                "kv": dict(seed=42, n_expert=8, n_expert_used=3, n_k_heads=2, n_v_heads=4, d_state=8),
                "mtp": dict(seed=43, n_expert=4, n_nextn=1)},
         oracle_tol=1e-5,   # float32 against float64: measured <= 1.9e-6
         # renormalized routing, the shared expert's gate, which k head a v head reads and the
         # attention's output gate each move the logits by > 0.3 relative
         broken=(Broken("moe_norm", False, "moe"), Broken("shared_gate", False, "moe"),
                 Broken("head_map", "div", "kv"), Broken("gate_attn", False, "moe")),
         speculative=Speculative("moe", draft={"rope_base": 100.0}),
         batched=("moe", "kv"),
         # from the ring of recurrent states, and (a ring of 2) by replaying the kept tokens
         rollback=(("kv", None), ("kv", 2)),
         mtp="mtp"),
]}
REFS = {name: ac.fixture(name) for name in ARCHS}


def _params(pairs) -> list:
    """(arch, rest...) tuples as parameters with ids such as gemma4-e2b."""
    return [pytest.param(a, *rest, id="-".join([a.name, *(str(r) for r in rest if r is not None)]))
            for a, *rest in pairs]


def _cached(tmp_path_factory, make: Callable[[Arch, pathlib.Path], dict]) -> Callable[[Arch], dict]:
    """An architecture's files, written once per module on first use (name -> path)."""
    made: dict[str, dict] = {}

    def get(arch: Arch) -> dict:
        if arch.name not in made:
            made[arch.name] = make(arch, tmp_path_factory.mktemp(arch.name))
        return made[arch.name]
    return get


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory):
    """The fixture's models, regenerated bit for bit."""
    return _cached(tmp_path_factory, lambda a, d: ac.regenerate_all(a.writer, REFS[a.name], d))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return _cached(tmp_path_factory, lambda a, d: ac.write_all(a.writer, a.synth, d))


@pytest.mark.parametrize("arch,name", _params((a, n) for a in ARCHS.values() for n in REFS[a.name]))
def test_matches_llamacpp(ref_files, arch, name):
    r = ac.compare_with_llamacpp(ref_files(arch)[name], REFS[arch.name][name])
    print(f"{arch.name}/{name} vs llama.cpp: max relative logit difference {r['rel']:.2e} "
          f"(tolerance {r['tol']:.1e}), argmax agreement {r['agree']}/{r['n']}")


@pytest.mark.parametrize("arch", _params((a,) for a in ARCHS.values() if a.mtp))
def test_mtp_matches_llamacpp(ref_files, arch):
    r = ac.compare_mtp_with_llamacpp(ref_files(arch)[arch.mtp], REFS[arch.name][arch.mtp])
    print(f"{arch.name} MTP vs llama.cpp: max relative difference {r['rel']:.2e} (tolerance {r['tol']:.1e}), "
          f"argmax {r['agree']}/{r['n']}")


@pytest.mark.parametrize("arch,name", _params((a, n) for a in ARCHS.values() if a.kv_bytes for n in REFS[a.name]))
def test_kv_cache_bytes_per_token_as_llamacpp(ref_files, arch, name):
    spec = REFS[arch.name][name]
    ours = ac.kv_bytes_per_token(ref_files(arch)[name])
    print(f"{arch.name}/{name}: KV cache {ours:.0f} B/token (llama.cpp {spec['kv_bytes_per_token']})")
    assert ours == spec["kv_bytes_per_token"]
    assert ours == arch.kv_bytes(spec["writer"])


@pytest.mark.parametrize("arch,name", _params((a, n) for a in ARCHS.values() for n in a.synth))
def test_matches_oracle(synth, arch, name):
    path = synth(arch)[name]
    want = arch.oracle(path).logits(TOKS)
    with ac.f32_model(path) as m:
        assert m.info.arch == arch.name
        got = m.eval(TOKS)
    assert ac.rel_diff(got, want) < arch.oracle_tol
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("arch,broken", _params((a, b) for a in ARCHS.values() for b in a.broken))
def test_broken_conventions_are_far(synth, arch, broken):
    """Each convention moves the logits far outside the tolerances (the oracle's and the largest
    llama.cpp tolerance of the fixture)."""
    path = synth(arch)[broken.synth]
    with ac.f32_model(path) as m:
        got = m.eval(TOKS)
    wrong = copy.copy(arch.oracle(path))   # shares the weights
    for attr, value in {broken.attr: broken.value, **broken.also}.items():
        setattr(wrong, attr, value)
    far = ac.rel_diff(got, wrong.logits(TOKS))
    print(f"{arch.name} with {broken.attr}={broken.value}: {far:.2e}")
    ac.assert_far(far, REFS[arch.name])


@pytest.mark.parametrize("arch,name", _params((a, n) for a in ARCHS.values() for n in a.batched_models()))
def test_batched_equals_sequential(synth, arch, name):
    assert ac.batched_vs_sequential(synth(arch)[name], TOKS) < arch.batched_tol


@pytest.mark.parametrize("arch,name,ring", [pytest.param(a, n, r, id=f"{a.name}-{n}" + (f"-ring{r}" if r else ""))
                                            for a in ARCHS.values() for n, r in a.rollback_cases()])
def test_rollback_at_every_split(synth, monkeypatch, arch, name, ring):
    if ring:
        monkeypatch.setenv("PYLLAMASPEC_RS_SNAPSHOTS", str(ring))
    assert ac.rollback_every_split(synth(arch)[name]) < 1e-5


@pytest.mark.parametrize("arch", _params((a,) for a in ARCHS.values()))
def test_speculative_greedy_equals_plain(synth, tmp_path, arch):
    s = arch.speculative
    target_kw = {**arch.synth[s.synth], **s.target}
    target = synth(arch)[s.synth]
    if s.target:
        target = tmp_path / "target.gguf"
        arch.writer(target, **target_kw)
    near = tmp_path / "near.gguf"
    arch.writer(near, **{**target_kw, **s.draft})
    rates = ac.speculative_greedy(target, near, list(s.prompt))
    print(f"{arch.name} speculative greedy: acceptance {rates}")
    assert 0.0 < min(rates) and max(rates) < 1.0


@pytest.mark.parametrize("arch", _params((a,) for a in ARCHS.values() if a.mtp))
def test_mtp_greedy_equals_plain(synth, arch):
    rates = ac.mtp_greedy_equals_plain(synth(arch)[arch.mtp], PROMPT)
    print(f"{arch.name} MTP greedy: acceptance {rates}")
