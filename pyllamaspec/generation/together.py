"""generate() with several prompts: their generations decoded together (lifecycle.py), each
round's drafts of all of them verified in one target evaluation."""
from __future__ import annotations

from collections import deque

from ..engine.cancel import Cancel
from ..engine.model import Model
from ..engine.sampling import SamplingParams
from ..speculation.decoder import DraftParams
from .lifecycle import Generation, Scheduler


def generate_together(ids: list[list[int]], target: Model, drafter, samplings: list[SamplingParams],
                      draft: DraftParams, *, max_tokens: int, stop: list[str], cancel: Cancel | None = None,
                      logprobs: int | None = None, cache_prompt: bool = True,
                      n_parallel: int | None = None, constraint=None) -> list[dict]:
    """The result dicts of generate()'s loop, one per prompt, in order. At most n_parallel at
    once (default: all of them), and no more than the context's cells hold; the others wait
    their turn. A failure stops them all and is raised. constraint (a GrammarSpec): each
    generation gets a grammar of its own from it."""
    if isinstance(drafter, Model):
        target.check_draft(drafter)
    gens = [Generation(i, target, drafter, sampling=sp, draft=draft, max_tokens=max_tokens, stop=stop,
                       logprobs=logprobs, cancel=cancel, cache_prompt=cache_prompt, constraint=constraint)
            for i, sp in zip(ids, samplings)]
    sched = Scheduler(target, n_parallel or len(gens), k_max=draft.n_draft)
    if isinstance(drafter, Model):
        sched.n_parallel = min(sched.n_parallel, drafter.n_seq_max)
    waiting = deque(gens)

    def emit(g: Generation, pieces) -> None:
        pass                                      # the text is in each result at the end

    try:
        while waiting or sched.running:
            while waiting and sched.has_room(waiting[0]):
                sched.admit(waiting.popleft(), emit)
            sched.step(emit)
    finally:
        for g in list(sched.running) + list(waiting):
            g.end(ok=False)
    return [g.result for g in gens]
