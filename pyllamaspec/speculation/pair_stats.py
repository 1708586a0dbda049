"""What is learned about a target and a drafter, kept for the next generation with them.

Costs are properties of the models and the machine, not of one generation: a target's
verification cost per batch size is shared by every drafter that works with it; a drafter's cost
per drafted token and the acceptance estimates belong to the pair (acceptance is a property of the
pair more than of the text). The registry keeps them for as long as the target Model lives (weak
references: closing and dropping a Model forgets them)."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field


@dataclass
class DraftCost:
    """Seconds per drafted token (None: not measured yet) and how many measurements made it."""
    seconds: float | None = None
    n_obs: int = 0


@dataclass
class PairStats:
    """One (target, drafter) pair: the target's eval cost by batch size (seconds; shared with the
    target's other pairs, whether the batch is one sequence's or several), the drafter's cost
    (per drafted token alone; per step of a batch round by the number of sequences), and the
    acceptance estimates the last generation left (DraftPolicy.state(); None: none yet)."""
    target_costs: dict[int, float] = field(default_factory=dict)
    # how many measurements made each target cost (shared like target_costs; a cost given, not
    # measured, has none): a cost measured once may be an outlier (DraftPolicy.target_cost)
    target_obs: dict[int, int] = field(default_factory=dict)
    draft_cost: DraftCost = field(default_factory=DraftCost)
    acceptance: dict | None = None
    # a batch round's draft (batch.py): seconds per drafting step with n sequences drafting
    draft_step_costs: dict[int, float] = field(default_factory=dict)
    # the last one-sequence round chose plain decoding by measured costs (DraftPolicy.choose):
    # the next generation alone may leave its draft model's prompt to a catch-up
    plain_now: bool = False


class PairRegistry:
    """PairStats by target (weakly) and drafter key (a drafter's `key`: "ngram", "mtp", a draft
    model's file)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_target: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def lookup(self, target: object, drafter_key: str | None) -> PairStats:
        with self._lock:
            costs, obs, pairs = self._by_target.setdefault(target, ({}, {}, {}))
            if drafter_key is None:            # plain decoding: the target's costs only
                return PairStats(target_costs=costs, target_obs=obs)
            if drafter_key not in pairs:
                pairs[drafter_key] = PairStats(target_costs=costs, target_obs=obs)
            return pairs[drafter_key]


registry = PairRegistry()
