"""The server's generation thread in this process: whatever fails while a request is admitted
(its Generation made, its prompt evaluated) is that request's error, and the requests after it
are answered (before, the thread ended and every later request waited forever)."""
from __future__ import annotations

import asyncio

import pytest

import models
from pyllamaspec.engine.model import Model
from pyllamaspec.engine.sampling import SamplingParams
from pyllamaspec.frontends.server import worker as worker_mod
from pyllamaspec.frontends.server.openai_format import GenRequest
from pyllamaspec.speculation.decoder import DraftParams


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("worker") / "tiny.gguf"
    models.write_llama_gguf(path)
    with Model(path, n_ctx=128, n_threads=1) as m:
        yield m


async def _answer(w, req) -> tuple[str, object]:
    job = w.prepare(req, asyncio.get_running_loop())
    w.submit(job)
    async for kind, value in job.stream():
        if kind != "piece":
            return kind, value


def test_a_request_failing_at_admission_leaves_the_worker_running(target, monkeypatch):
    real = worker_mod.Generation
    calls = []

    def failing_once(*a, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom at admission")
        return real(*a, **kw)

    monkeypatch.setattr(worker_mod, "Generation", failing_once)
    w = worker_mod.Worker(target, None, worker_mod.Defaults(SamplingParams(temperature=0.0), DraftParams()))
    try:
        req = GenRequest(kind="completion", prompt=[1, 2, 3], max_tokens=3)

        async def both():
            return await asyncio.wait_for(asyncio.gather(_answer(w, req), _answer(w, req)), 60)

        (k1, v1), (k2, v2) = asyncio.run(both())
        assert k1 == "error" and "boom at admission" in str(v1)
        assert k2 == "done" and len(v2["tokens"]) == 3          # the next request is answered
        assert w.counters.errors == 1 and not w._waiting and not w._running
    finally:
        w.close()
