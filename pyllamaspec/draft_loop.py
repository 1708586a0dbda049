"""The drafting loop the sampled drafters share (a draft model, the target's MTP head): draw a
token from each step's logits, keep its q row for verification, and stop early where its top
probability is below p_min, where the cost model says the next token is not worth its cost,
or at an end-of-generation token. Where the logits come from is the drafter's business."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .cost_model import DraftPolicy


def draft(d, next_logits: Callable[[int, int], np.ndarray], first: int, k_max: int, out: np.ndarray,
          p_min: float, policy: DraftPolicy | None) -> int:
    """Drafts up to k_max tokens into out; returns how many. d: the drafter (its sampler, q
    rows, p_max, params.n_min, penalized, eog; d.evals counts the steps). next_logits(token,
    k): the logits of draft position k, given the token before it (first, then each draft)."""
    k = 0
    d.evals = 0
    p_all = 1.0                              # the chance that the whole draft is accepted
    tok = first
    while k < k_max:
        logits = next_logits(tok, k)
        d.evals += 1
        drafted, p_max = d.sampler.sample(logits, None if d.q is None else d.q[k])
        more = True
        if k >= d.params.n_min:
            if p_max < p_min:
                break
            if policy is not None:
                p_all *= policy.token_alpha(p_max)
                keep, more = policy.keep_drafting(p_all, first=k == 0)
                if not keep:
                    break
        out[k] = drafted
        d.p_max[k] = p_max
        k += 1
        if d.penalized:
            d.sampler.push(out[k - 1:k])
        if drafted in d.eog or not more:     # nothing worth drafting after the end
            break
        tok = int(drafted)
    return k
