"""The target on a ggml RPC server vs local, plain vs speculative, with a simulated network delay.

    python scripts/bench_rpc.py -m TARGET.gguf -md DRAFT.gguf [--delays 0 2 5 10] [-r 5] [-n 48]
    python scripts/bench_rpc.py -m TARGET.gguf -md DRAFT.gguf --faults 5    # fault-to-error times

One RPC server (python -m pyllamaspec.rpc_server) on a free loopback port; between it and the
client, a delaying TCP proxy (asyncio, in this process) holds every chunk `delay` ms in each
direction, so a round trip costs about 2x delay more, as a LAN or WAN would. The target's layers
all go to the server (tensor_split 1,0); the draft model stays local.

Per delay, medians of -r repetitions (after one warm-up), every configuration measured in
each repetition in turn:
- round latency: one target eval of 1 token (a plain decoding step) and of k+1 tokens (one
  speculative verification), local and on RPC;
- generation: tokens/s of generate() at temperature 0, plain and speculative, local and on RPC,
  and the speculative speed-up (spec tok/s / plain tok/s) on each.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyllamaspec import Model, generate, stream_generate  # noqa: E402
from pyllamaspec.engine import remote as rpc_mod  # noqa: E402

PROMPT = ("Write a short story about a lighthouse keeper who finds a message in a bottle. "
          "The keeper reads it and")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- delaying proxy -------------------------------------------------------------------------

class DelayProxy:
    """127.0.0.1:port → upstream, each chunk delivered `delay_ms` after it arrived (per
    direction, order kept). Runs an asyncio loop on a thread; set .delay_ms between runs."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream, self.delay_ms = upstream, 0.0
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_forever()

    async def _client(self, r_in: asyncio.StreamReader, w_in: asyncio.StreamWriter) -> None:
        r_up, w_up = await asyncio.open_connection(*self.upstream)
        for s in (w_in, w_up):
            s.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(self._pipe(r_in, w_up), self._pipe(r_up, w_in))

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        q: asyncio.Queue = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await q.get()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                w.write(data)
                await w.drain()
            w.close()

        task = asyncio.ensure_future(deliver())
        try:
            while data := await r.read(1 << 20):
                await q.put((time.monotonic() + self.delay_ms / 1000, data))
        except ConnectionError:
            pass
        await q.put((0, None))
        await task


# ---- measurements ---------------------------------------------------------------------------

def eval_ms(m: Model, ids: list[int], n: int) -> float:
    """ms of one eval of n tokens after the prompt (the cache rolled back after it)."""
    if m.n_past != len(ids):
        m.clear()
        m.eval(ids, logits="last")
    t0 = time.perf_counter()
    m.eval(ids[:n], logits="all")
    ms = (time.perf_counter() - t0) * 1000
    m.truncate(len(ids))
    return ms


def gen(target: Model, draft: Model | None, n: int, spec: dict) -> tuple[float, float]:
    """Generated tokens/s of one generate() and tokens gained per round."""
    for mod in (target, draft):
        if mod is not None:
            mod.clear()
    r = generate(PROMPT, target, draft, max_tokens=n, temperature=0, cache_prompt=False, **spec)
    return r.stats.n_generated / r.stats.t_generate, r.stats.mean_accepted if draft is not None else 1.0


def sample(target: Model, draft: Model, ids: list[int], a: argparse.Namespace) -> dict:
    """One repetition of every measurement on one configuration."""
    spec = {"n_draft": a.k, "adaptive": a.adaptive}
    out = {"step_1_ms": eval_ms(target, ids, 1), f"step_{a.k + 1}_ms": eval_ms(target, ids, a.k + 1)}
    out["plain_tps"], _ = gen(target, None, a.n_gen, {})
    out["spec_tps"], out["tokens_per_round"] = gen(target, draft, a.n_gen, spec)
    out["speedup"] = out["spec_tps"] / out["plain_tps"]
    return out


def run(a: argparse.Namespace, proxy: "DelayProxy") -> list[dict]:
    """Repetitions outermost, so that a change in the machine's load falls on every
    configuration alike; medians per configuration (the speed-up: the median of per-repetition
    ratios)."""
    kw = dict(n_ctx=512, n_threads=a.threads)
    configs = [("local", 0.0)] + [("rpc", d) for d in a.delays]
    samples: dict = {c: [] for c in configs}
    with Model(a.model_draft, tokenizer=False, prefetch=False, **kw) as draft, Model(a.model, **kw) as local, \
            Model(a.model, rpc=[f"127.0.0.1:{proxy.port}"], tensor_split=[1, 0], **kw) as remote:
        ids = local.tokenize(PROMPT)
        for _ in range(a.reps + 1):              # the first is a warm-up
            for where, d in configs:
                proxy.delay_ms = d
                samples[(where, d)].append(sample(local if where == "local" else remote, draft, ids, a))
    rows = []
    for (where, d), ss in samples.items():
        ss = ss[1:]
        rows.append(dict(where=where, delay_ms=d, **{k: statistics.median(s[k] for s in ss) for k in ss[0]}))
    return rows


def start_server(threads: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-m", "pyllamaspec.rpc_server", "--port", str(port), "-t", str(threads)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    for _ in range(200):
        try:
            rpc_mod.probe(f"127.0.0.1:{port}", 1.0)
            return p, port
        except rpc_mod.RpcError:
            time.sleep(0.1)
    p.kill()
    raise SystemExit("rpc_server did not start")


def faults(a: argparse.Namespace, reps: int) -> dict:
    """Seconds from a fault to the RpcError: a server killed (SIGKILL) mid-generation, and an
    unreachable one (a closed port); medians of reps."""
    import signal
    killed, unreachable = [], []
    for _ in range(reps):
        server, port = start_server(a.threads)
        try:
            with Model(a.model, rpc=[f"127.0.0.1:{port}"], tensor_split=[1, 0], n_ctx=256,
                       n_threads=a.threads) as m:
                t_kill = None
                try:
                    for i, _r in enumerate(stream_generate(PROMPT, m, max_tokens=64, temperature=0)):
                        if i == 2:
                            server.send_signal(signal.SIGKILL)
                            t_kill = time.perf_counter()
                except rpc_mod.RpcError:
                    killed.append(time.perf_counter() - t_kill)
        finally:
            server.kill()
            server.wait()
        t0 = time.perf_counter()
        try:
            Model(a.model, rpc=[f"127.0.0.1:{port}"])
        except rpc_mod.RpcError:
            unreachable.append(time.perf_counter() - t0)
    return {"killed_s": statistics.median(killed), "unreachable_s": statistics.median(unreachable), "n": reps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True, help="target GGUF")
    ap.add_argument("-md", "--model-draft", required=True, help="draft GGUF (stays local)")
    ap.add_argument("--delays", type=float, nargs="+", default=[0, 2, 5, 10], help="ms per direction")
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-n", "--n-gen", type=int, default=48)
    ap.add_argument("-k", type=int, default=4, help="draft length (fixed unless --adaptive; also the "
                                                    "verification latency row's k)")
    ap.add_argument("--adaptive", action="store_true", help="let the cost model pick draft lengths up to k")
    ap.add_argument("-t", "--threads", type=int, default=1,
                    help="threads of each of the server, the target and the draft (keep their sum <= cores: "
                         "ggml's CPU threads spin between graphs)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--faults", type=int, default=0, metavar="N",
                    help="instead: time from a killed / unreachable server to the RpcError, medians of N")
    a = ap.parse_args()

    if a.faults:
        print(json.dumps(faults(a, a.faults)))
        return 0
    server, port = start_server(a.threads)
    proxy = DelayProxy(("127.0.0.1", port))
    try:
        rows = run(a, proxy)
    finally:
        server.kill()
        server.wait()
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    k1 = f"step_{a.k + 1}_ms"
    print(f"target {os.path.basename(a.model)}, draft {os.path.basename(a.model_draft)} (local), "
          f"{a.threads} threads, medians of {a.reps}, {a.n_gen} tokens, "
          f"{'adaptive drafts up to' if a.adaptive else 'drafts of'} {a.k}")
    print(f"{'where':6} {'delay ms':>8} {'1-tok ms':>9} {a.k + 1:>2}-tok ms {'plain t/s':>10} {'spec t/s':>9} "
          f"{'tok/round':>9} {'speed-up':>8}")
    for r in rows:
        print(f"{r['where']:6} {r['delay_ms']:8.0f} {r['step_1_ms']:9.2f} {r[k1]:9.2f} {r['plain_tps']:10.1f} "
              f"{r['spec_tps']:9.1f} {r['tokens_per_round']:9.2f} {r['speedup']:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
