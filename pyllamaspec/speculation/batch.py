"""Several sequences' speculative rounds at once (llama-server's parallel slots): each decoder
keeps its own sequence, sampler, drafter and acceptance; the round's work is shared.

One round for decoders d_1..d_S on one target (Decoder.step is the same round for one):
  1. the batch's cost model (batch_policy.py) picks one draft length k for all, from the target's
     cost at the whole batch's size;
  2. the drafters draft together: step j of every sequence's draft is one evaluation per draft
     model (drafter.py propose_steps; an MTP head or n-gram lookup runs its own steps);
  3. the target evaluates every sequence's [last, x_1..x_k] in ONE call (Model.decode);
  4. each decoder settles its own round (Decoder.settle): the acceptance test min(1, p/q) on its
     rows, the rollback of its sequence, its drafter's rollback, its bookkeeping.
Each sequence's output is what its decoder alone would give: greedy, its tokens; sampled, its
target's distribution (the draft lengths only change how fast).
"""
from __future__ import annotations

import time

import numpy as np

from ..engine.model import Model
from .batch_policy import BatchPolicy
from .decoder import Decoder
from .drafters import NO_DRAFT, Draft
from .drafter import Eval
from .pair_stats import registry


class BatchRound:
    """Rounds of several decoders on one target model (see the module's docstring)."""

    def __init__(self, target: Model, k_max: int = 16):
        self.target = target
        self.k_max = k_max
        self._policies: dict = {}
        self._rows = np.empty((0, target.n_vocab), np.float32)   # the verify rows, reused round to round

    def policy(self, dec: Decoder) -> BatchPolicy:
        """The batch cost model of the decoder's pair (its target's costs, its drafter's)."""
        key = dec.drafter.key if dec.drafter is not None else None
        p = self._policies.get(key)
        if p is None:
            p = self._policies[key] = BatchPolicy(registry.lookup(self.target, key), self.k_max)
        return p

    def draft_later(self, dec: Decoder, n_seq: int) -> bool:
        """Whether a generation starting with n_seq - 1 others running leaves its draft model's
        prompt to the catch-up of a round that drafts (Decoder.prefill's draft_later): when its
        pair's rounds of that many sequences decode plainly now (alone: the last one-sequence
        round, DraftPolicy.choose), or surely will (the batch cost model's verdict). Evaluated
        at once, the prompt costs the draft model as much as the catch-up would (more: the
        catch-up takes its last CATCH_UP_MAX tokens), and rounds that decode plainly may never
        need it."""
        if dec.drafter is None or not dec.dp.adaptive:
            return False
        if n_seq == 1:
            return dec.policy.stats.plain_now
        p = self.policy(dec)
        return p.decoding_plainly() or p.plain_sure(n_seq, min(dec.k_max, dec.drafter.max_draft))

    def step(self, decs: list[Decoder], wants: list[int | None]) -> list[list[tuple[int, bool]]]:
        """One round of every decoder (each wants at most wants[i] more tokens); returns each
        one's new tokens with whether its drafter proposed them."""
        if any(d.target is not self.target for d in decs):
            raise ValueError("a batch round's decoders share one target")
        full = [d._draft_cap(w) for d, w in zip(decs, wants)]
        caps = [min(c, d.drafter.max_draft) if d.drafter is not None else 0 for d, c in zip(decs, full)]
        ks = self._choose(decs, caps)
        t_round = time.perf_counter()
        drafts = self._propose(decs, ks)
        # each generation's grammar cuts its draft and appends the text it forces (constraint.py)
        drafts = [d.constraint.complete(dr, c) for d, dr, c in zip(decs, drafts, full)]
        if any(dr.n for dr in drafts):
            # a verifying round's evaluation is the cost model's measurement of n verified
            # tokens: a joining prompt goes alone first (plain rounds carry them)
            for d in decs:
                d.eval_pending()
        t0 = time.perf_counter()
        for d in decs:
            d.stats.t_draft += t0 - t_round
        rows, n_pasts, prompts = self._verify(decs, drafts, t0)
        out = []
        plain = max(ks, default=0) == 0
        for d, dr, p, n_past in zip(decs, drafts, rows, n_pasts):
            out.append(d.settle(dr, p, n_past, t0, t_round, batch=len(decs)))
            d.stats.batch_rounds += 1
            d.stats.batch_seqs += len(decs)
            d.stats.batch_plain += plain
        # the cost of verifying n tokens: the evaluation and the acceptance tests of their rows
        # (a large vocabulary's rows cost milliseconds to test: Gemma 3's 262k); a plain round
        # that carried a prompt's tokens says nothing of it
        if not prompts:
            self.policy(decs[0]).observe_target(sum(dr.n + 1 for dr in drafts), time.perf_counter() - t0)
        return out

    def _verify(self, decs: list[Decoder], drafts: list[Draft], t0: float) -> tuple[list, list[int], bool]:
        """The target's one evaluation of every sequence's [last, drafts], after the prompt
        tokens a generation that just joined has not evaluated yet (Decoder.pending: rows for
        its round's tokens only); returns each one's rows, its length before them, and
        whether a prompt was evaluated."""
        parts, n_pasts, prompts = [], [], False
        for d, dr in zip(decs, drafts):
            toks = d.batch_tokens(dr)
            if d.pending is not None:
                parts.append((d.tseq, np.concatenate([d.pending, toks]), len(toks)))
                n_pasts.append(d.tseq.n_past + len(d.pending))
                prompts = True
            else:
                parts.append((d.tseq, toks, "all"))
                n_pasts.append(d.tseq.n_past)
        n_rows = sum(dr.n + 1 for dr in drafts)
        rows = self.target.decode(parts, out=self._rows_for(n_rows))
        dt = time.perf_counter() - t0
        for d in decs:
            if d.pending is not None:
                d.pending = None
                d.stats.t_prompt += dt
        return rows, n_pasts, prompts

    def _rows_for(self, n: int) -> np.ndarray:
        """A buffer for n logits rows (a large vocabulary's rows are megabytes: allocated once)."""
        if self._rows.shape[0] < n:
            self._rows = np.empty((n, self.target.n_vocab), np.float32)
        return self._rows

    def _choose(self, decs: list[Decoder], caps: list[int]) -> list[int]:
        """Each decoder's draft length this round: one k for the decoders whose pair shares a
        cost model (the usual case: one drafter kind for all), capped by each one's room."""
        ks = [0] * len(decs)
        groups: dict = {}
        for i, (d, c) in enumerate(zip(decs, caps)):
            if c > 0:
                groups.setdefault(d.drafter.key, []).append(i)
        n_total = len(decs)
        for key, idx in groups.items():
            dec0 = decs[idx[0]]
            if not dec0.dp.adaptive:
                for i in idx:
                    ks[i] = caps[i]
                continue
            pending = sum(decs[i].drafter.pending(decs[i].seq) if hasattr(decs[i].drafter, "pending") else 0
                          for i in idx)
            k = self.policy(dec0).choose([decs[i].policy.alpha_upper for i in idx], [caps[i] for i in idx],
                                         n_plain=n_total - len(idx), pending=pending)
            for i in idx:
                ks[i] = min(k, caps[i])
        return ks

    def _propose(self, decs: list[Decoder], ks: list[int]) -> list[Draft]:
        """Every decoder's draft, the drafters' evaluations on one model batched step by step."""
        drafts: list[Draft] = [NO_DRAFT] * len(decs)
        active: dict[int, tuple] = {}
        for i, (d, k) in enumerate(zip(decs, ks)):
            if k > 0:
                self._advance(active, drafts, i, d.drafter.propose_steps(d.seq, k, d.policy, d.constraint, batch=True), first=True)
        steps, seconds, n_up, up_seconds = 0, 0.0, 0, 0.0
        while active:
            # a draft model's catch-up (its unseen text, after plain rounds or a prompt left
            # to it) is no drafting step: timed apart (BatchPolicy.observe_catch_up)
            up = sum(len(r.tokens) for _, r in active.values() if isinstance(r, Eval) and r.logits == "none")
            t0 = time.perf_counter()
            results = self._run_requests(active)
            for i, res in results.items():
                self._advance(active, drafts, i, active[i][0], res)
            dt = time.perf_counter() - t0
            if up:
                n_up, up_seconds = n_up + up, up_seconds + dt
            else:
                steps, seconds = steps + 1, seconds + dt
        n_drafting = sum(k > 0 for k in ks)
        if n_drafting:                    # (an n-gram lookup: no steps, no cost)
            pol = self.policy(decs[next(i for i, k in enumerate(ks) if k > 0)])
            pol.observe_draft(n_drafting, max(steps, 1), seconds)
            pol.observe_catch_up(n_up, up_seconds)
        return drafts

    @staticmethod
    def _advance(active: dict, drafts: list[Draft], i: int, gen, value=None, first: bool = False) -> None:
        try:
            active[i] = (gen, next(gen) if first else gen.send(value))
        except StopIteration as e:
            drafts[i] = e.value if e.value is not None else NO_DRAFT
            active.pop(i, None)

    @staticmethod
    def _run_requests(active: dict) -> dict:
        """The pending requests: Evals grouped by model, one Model.decode each; others alone."""
        results = {}
        by_model: dict = {}
        for i, (_, req) in active.items():
            if isinstance(req, Eval):
                by_model.setdefault(req.seq.model, []).append(i)
            else:
                results[i] = req.run()
        for model, idx in by_model.items():
            if len(idx) == 1:
                results[idx[0]] = active[idx[0]][1].run()
                continue
            reqs = [active[i][1] for i in idx]
            rows = model.decode([(r.seq, r.tokens, r.logits) for r in reqs])
            for i, r in zip(idx, rows):
                results[i] = r
        return results
