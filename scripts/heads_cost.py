"""What an EAGLE-3 and a DFlash head cost against their target, at realistic layer sizes (random
weights), and the draft length our cost model picks from it for a range of acceptance rates.

Real acceptance needs trained heads (none is reachable offline here), so it is a parameter:
with real weights, run the benchmark on the pair instead, e.g.

    python -m pyllamaspec.bench -m Llama-3.1-8B-Instruct-Q4_K_M.gguf -md EAGLE3-LLaMA3.1-8B.gguf -n 256 --rounds 5
    python -m pyllamaspec.bench -m Qwen3-8B-Q4_K_M.gguf -md Qwen3-8B-DFlash.gguf -n 256 --rounds 5

The models: a 1B-class llama target (n_embd 2048, 16 layers, 32 q / 8 kv heads, n_ff 8192, a
32000-token vocabulary, Q8_0), an EAGLE-3 head for it (one layer as wide, its own 32000-row
head, F16, reading layers 2, 8, 13) and a DFlash head (5 layers as wide, F16, block 16, reading
layers 1, 4, 7, 10, 13, the target's embeddings and output head). Written once to --dir.
Timings: medians of --rounds alternating rounds, after 64 tokens of context:
* the target's eval of n tokens, alone and with each head attached (the head then processes
  every batch's features, the price of no extra target eval);
* an EAGLE-3 chained step; a DFlash block of n masks (one pass, whatever it keeps).

    python scripts/heads_cost.py [-t 1] [--rounds 7] [--dir ~/.cache/pyllamaspec/heads-bench]
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import models_parts as parts  # noqa: E402
from models import gpt2_byte_tokens  # noqa: E402

from pyllamaspec import Model  # noqa: E402
from pyllamaspec.engine.head import DraftHead  # noqa: E402
from pyllamaspec.speculation.cost_model import DraftPolicy  # noqa: E402

E, L, H, KV, FF, V = 2048, 16, 32, 8, 8192, 32000
HD = E // H
NS = (1, 2, 4, 8, 16)


def rnd(rng, *shape):
    return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[-1])).astype(np.float32)


def layer(rng, p: str, dt: str, n_in: int = E) -> list:
    return [(p + "attn_norm.weight", np.ones(E, np.float32), "F32"),
            (p + "attn_q.weight", rnd(rng, H * HD, n_in), dt), (p + "attn_k.weight", rnd(rng, KV * HD, n_in), dt),
            (p + "attn_v.weight", rnd(rng, KV * HD, n_in), dt), (p + "attn_output.weight", rnd(rng, E, H * HD), dt),
            (p + "ffn_norm.weight", np.ones(E, np.float32), "F32"),
            (p + "ffn_gate.weight", rnd(rng, FF, E), dt), (p + "ffn_up.weight", rnd(rng, FF, E), dt),
            (p + "ffn_down.weight", rnd(rng, E, FF), dt)]


def keys(gguf, a: str, n_layer: int) -> dict:
    kv = parts.general_kv(gguf, f"bench-{a}", 7)
    kv.update(parts.hparams_kv(a, n_ctx_train=4096, n_embd=E, n_layer=n_layer, n_ff=FF, n_head=H, n_head_kv=KV,
                               eps=1e-5, rope_base=500000.0, head_dim=HD))
    tokens, merges = gpt2_byte_tokens(V)
    kv.update(parts.vocab_kv(a, V, tokens, merges))
    return kv


def write_models(d: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    import gguf
    t, e, f = d / "target-1b-q8_0.gguf", d / "eagle3-f16.gguf", d / "dflash-f16.gguf"
    rng = np.random.default_rng(0)
    if not t.exists():
        ts = [("token_embd.weight", rng.standard_normal((V, E), dtype=np.float32), "Q8_0"),
              ("output_norm.weight", np.ones(E, np.float32), "F32"), ("output.weight", rnd(rng, V, E), "Q8_0")]
        for i in range(L):
            ts += layer(rng, f"blk.{i}.", "Q8_0")
        parts.write_file(gguf, t, "llama", keys(gguf, "llama", L), ts)
    if not e.exists():
        ts = [("fc.weight", rnd(rng, E, 3 * E), "F16"), ("output_norm.weight", np.ones(E, np.float32), "F32"),
              ("output.weight", rnd(rng, V, E), "F16"), ("blk.0.attn_norm_2.weight", np.ones(E, np.float32), "F32")]
        ts += layer(rng, "blk.0.", "F16", n_in=2 * E)
        kv = keys(gguf, "eagle3", 1)
        kv.update({"eagle3.target_layers": [2, 8, 13], "eagle3.target_hidden_size": E})
        parts.write_file(gguf, e, "eagle3", kv, ts)
    if not f.exists():
        ids = [1, 4, 7, 10, 13]
        ts = [("fc.weight", rnd(rng, E, len(ids) * E), "F16"), ("enc.output_norm.weight", np.ones(E, np.float32), "F32"),
              ("output_norm.weight", np.ones(E, np.float32), "F32")]
        for i in range(5):
            ts += layer(rng, f"blk.{i}.", "F16")
            ts += [(f"blk.{i}.attn_q_norm.weight", np.ones(HD, np.float32), "F32"),
                   (f"blk.{i}.attn_k_norm.weight", np.ones(HD, np.float32), "F32")]
        kv = keys(gguf, "dflash", 5)
        kv.update({"dflash.target_layers": ids, "dflash.block_size": 16, "tokenizer.ggml.mask_token_id": V - 1})
        parts.write_file(gguf, f, "dflash", kv, ts)
    return t, e, f


# a Gemma-4-like target (window layers 5 in 6, head sizes 256 / 512, a quarter of the full
# layers' dims rotated, tied head, soft-capping) and a 4-layer assistant 512 wide for it
G_PATTERN = (True,) * 5 + (False,) + (True,) * 5 + (False,)
G_HD = {True: 256, False: 512}
G_KV = {True: 4, False: 2}
G_H, G_AE, G_AFF = 8, 512, 2048


def g4_layer(rng, p: str, swa: bool, n_embd: int, n_ff: int, dt: str, q_only: bool = False) -> list:
    hd = G_HD[swa]
    t = [(p + "attn_norm.weight", np.ones(n_embd, np.float32), "F32"), (p + "attn_q.weight", rnd(rng, G_H * hd, n_embd), dt)]
    if not q_only:
        t += [(p + "attn_k.weight", rnd(rng, G_KV[swa] * hd, n_embd), dt),
              (p + "attn_v.weight", rnd(rng, G_KV[swa] * hd, n_embd), dt),
              (p + "attn_k_norm.weight", np.ones(hd, np.float32), "F32")]
    t += [(p + "attn_output.weight", rnd(rng, n_embd, G_H * hd), dt), (p + "attn_q_norm.weight", np.ones(hd, np.float32), "F32")]
    t += [(p + n, np.ones(n_embd, np.float32), "F32") for n in ("post_attention_norm.weight", "ffn_norm.weight", "post_ffw_norm.weight")]
    t += [(p + "ffn_gate.weight", rnd(rng, n_ff, n_embd), dt), (p + "ffn_up.weight", rnd(rng, n_ff, n_embd), dt),
          (p + "ffn_down.weight", rnd(rng, n_embd, n_ff), dt), (p + "layer_output_scale.weight", np.ones(1, np.float32), "F32")]
    return t


def g4_keys(gguf, a: str, n_embd: int, n_ff: int, pattern: tuple) -> dict:
    kv = parts.general_kv(gguf, f"bench-{a}", 7)
    kv.update(parts.hparams_kv(a, n_ctx_train=4096, n_embd=n_embd, n_layer=len(pattern), n_ff=n_ff, n_head=G_H,
                               n_head_kv=[G_KV[s] for s in pattern], eps=1e-6, rope_base=1e6, head_dim=G_HD[False]))
    kv.update({f"{a}.attention.key_length_swa": G_HD[True], f"{a}.attention.value_length_swa": G_HD[True],
               f"{a}.rope.dimension_count": G_HD[False], f"{a}.rope.dimension_count_swa": G_HD[True],
               f"{a}.rope.freq_base_swa": 10000.0, f"{a}.attention.sliding_window": 512,
               f"{a}.attention.sliding_window_pattern": list(pattern), f"{a}.final_logit_softcapping": 30.0})
    tokens, merges = gpt2_byte_tokens(V)
    kv.update(parts.vocab_kv(a, V, tokens, merges))
    return kv


def write_gemma4(d: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    import gguf
    t, a = d / "gemma4-1b-q8_0.gguf", d / "gemma4-assistant-f16.gguf"
    rng = np.random.default_rng(2)
    freqs = np.array([1.0] * (G_HD[False] // 8) + [1e30] * (G_HD[False] // 2 - G_HD[False] // 8), np.float32)
    if not t.exists():
        ts = [("token_embd.weight", rng.standard_normal((V, E), dtype=np.float32), "Q8_0"),
              ("output_norm.weight", np.ones(E, np.float32), "F32"), ("rope_freqs.weight", freqs, "F32")]
        for i, swa in enumerate(G_PATTERN):
            ts += g4_layer(rng, f"blk.{i}.", swa, E, FF, "Q8_0")
        parts.write_file(gguf, t, "gemma4", g4_keys(gguf, "gemma4", E, FF, G_PATTERN), ts)
    if not a.exists():
        pattern = (True, True, True, False)
        ts = [("token_embd.weight", rng.standard_normal((V, G_AE), dtype=np.float32), "F16"),
              ("output_norm.weight", np.ones(G_AE, np.float32), "F32"), ("rope_freqs.weight", freqs, "F32"),
              ("nextn.pre_projection.weight", rnd(rng, G_AE, 2 * E), "F16"),
              ("nextn.post_projection.weight", rnd(rng, E, G_AE), "F16")]
        for i, swa in enumerate(pattern):
            ts += g4_layer(rng, f"blk.{i}.", swa, G_AE, G_AFF, "F16", q_only=True)
        kv = g4_keys(gguf, "gemma4-assistant", G_AE, G_AFF, pattern)
        kv.update({"gemma4-assistant.embedding_length_out": E, "gemma4-assistant.nextn_predict_layers": len(pattern)})
        parts.write_file(gguf, a, "gemma4-assistant", kv, ts)
    return t, a


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(m: Model, head: DraftHead | None, ctx: list[int]) -> dict:
    """One round: seconds of the target's eval of n tokens after ctx (m holds ctx), and the
    head's draft costs."""
    out: dict = {}
    for n in NS:
        m.truncate(len(ctx))
        out[("target", n)] = timed(lambda: m.eval(ctx[:n], logits="all"))
    m.truncate(len(ctx))
    if head is not None and head.kind in ("eagle3", "gemma4-assistant"):
        out[("step", 1)] = statistics.median(timed(lambda s=s: m.head_draft(5 + s, s)) for s in range(4))
    elif head is not None:
        for n in (1, 3, 7, 15):
            out[("block", n)] = timed(lambda: m.head_block(5, n))
    return out


def picks(costs: dict, head: str) -> list[str]:
    """What the cost model picks from the measured costs, by acceptance rate."""
    rows = []
    for alpha in (0.5, 0.6, 0.7, 0.8, 0.9):
        pol = DraftPolicy(15)
        pol.c_target = {n: costs[("target", n)] for n in NS}
        pol.per_round = head == "dflash"
        pol.c_draft = costs[("step", 1)] if head == "eagle3" else costs[("block", 15)]
        k = pol.best_k(15, alpha=alpha)
        gain = pol.expected_tokens(alpha, k) / (pol.draft_cost(k) + pol.target_cost(k + 1)) * pol.target_cost(1)
        rows.append(f"a={alpha:.1f}: k={k:2d} ({gain:.2f}x plain)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--dir", default=str(pathlib.Path.home() / ".cache" / "pyllamaspec" / "heads-bench"))
    a = ap.parse_args()
    d = pathlib.Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    t, e, f = write_models(d)
    g, ga = write_gemma4(d)
    ctx = [int(x) for x in np.random.default_rng(1).integers(2, V, 64)]
    kw = dict(n_ctx=512, n_threads=a.threads)
    with Model(t, **kw) as m0, Model(t, **kw) as m1, Model(t, **kw) as m2, Model(g, **kw) as m3, \
            Model(g, **kw) as m4, DraftHead(e) as eh, DraftHead(f) as fh, DraftHead(ga) as ah:
        setups = [("none", m0, None), ("eagle3", m1, eh), ("dflash", m2, fh), ("gemma4", m3, None),
                  ("assistant", m4, ah)]
        for _, m, h in setups:                  # one target each (the file's pages shared), ctx cached
            m.attach_head(h)
            m.eval(ctx, logits="none")
        res: dict = {name: [] for name, _, _ in setups}
        for r in range(a.rounds):               # they alternate, the first one rotating
            for name, m, h in setups[r % len(setups):] + setups[:r % len(setups)]:
                res[name].append(measure(m, h, ctx))
    med = {name: {k: statistics.median(x[k] for x in runs) for k in runs[0]} for name, runs in res.items()}
    ms = lambda s: f"{1e3 * s:7.1f}"  # noqa: E731
    print(f"target: 1B-class llama (n_embd {E}, {L} layers, n_ff {FF}, vocab {V}, Q8_0), {a.threads} threads, "
          f"medians of {a.rounds} alternating rounds, ms")
    print("eval of n tokens:        " + " ".join(f"n={n:<5d}" for n in NS))
    for name in ("none", "eagle3", "dflash"):
        print(f"  target{'+' + name if name != 'none' else '':14s}" + " ".join(ms(med[name][('target', n)]) for n in NS))
    print(f"EAGLE-3 chained step: {ms(med['eagle3'][('step', 1)])} ms per drafted token "
          f"({med['eagle3'][('step', 1)] / med['none'][('target', 1)]:.2f} of a 1-token target eval)")
    print("DFlash block of n masks (one pass): " + ", ".join(
        f"n={n}: {ms(med['dflash'][('block', n)]).strip()}" for n in (1, 3, 7, 15))
        + f" ms ({med['dflash'][('block', 15)] / med['none'][('target', 1)]:.2f} of a 1-token target eval for 15)")
    print(f"gemma4-like target (n_embd {E}, {len(G_PATTERN)} layers, window 5 in 6, head sizes 256/512, n_ff {FF}, "
          f"Q8_0), eval of n tokens, ms:")
    for name, label in (("gemma4", "gemma4"), ("assistant", "gemma4+assistant")):
        print(f"  {label:20s}" + " ".join(ms(med[name][('target', n)]) for n in NS))
    print(f"Gemma 4 assistant (4 layers, {G_AE} wide, F16) chained step: {ms(med['assistant'][('step', 1)])} ms per "
          f"drafted token ({med['assistant'][('step', 1)] / med['gemma4'][('target', 1)]:.2f} of a 1-token target eval)")
    for name in ("eagle3", "dflash", "assistant"):
        costs = {**med[name]}
        print(f"cost model, {name}: " + "; ".join(picks(costs, "dflash" if name == "dflash" else "eagle3")))


if __name__ == "__main__":
    main()
