"""The cost model of a batch round (batch.py): one draft length for every sequence of the batch,
chosen from the target's cost at the whole batch's size.

With S sequences drafting k tokens each (sequence i: at most cap_i), a round verifies
n = sum(min(k, cap_i) + 1) tokens in one target evaluation and drafts in k steps of S tokens;
it yields sum E(a_i, min(k, cap_i)) tokens, E(a, k) = (1 - a^(k+1)) / (1 - a) with a_i each
sequence's acceptance (its DraftPolicy's optimistic bound). The chosen k maximizes yield / cost,
cost = k c_step(S) + c_target(n): k = 0 (plain decoding of all S) when nothing pays. The more
sequences share a round, the more a verified token costs where the target's evaluation grows
with its size (a CPU), and the less room there is to speculate: the batch's stats say how many
rounds it decoded plainly (Stats.batch_plain).

Costs are measured: c_target by batch size in the pair's PairStats (shared with one-sequence
rounds, as n tokens cost alike whichever sequences they belong to), c_step by the number of
sequences drafting. The first rounds draft START_K tokens to measure; while plain decoding
wins, a probe now and then keeps the estimates honest, unless even drafts that were always right
could not pay: a probe (its drafting, extra verified rows and the draft models' catch-up on what
plain rounds decoded) comes once the plain rounds since the last took probe / (EXPLORE / backoff),
the backoff doubling (to BACKOFF_MAX) with each probe that plain decoding wins again, as
DraftPolicy.choose's.
"""
from __future__ import annotations

from .cost_model import DraftPolicy, cost_at, updated_cost
from .pair_stats import PairStats


class BatchPolicy:
    START_K = DraftPolicy.START_K
    PROBE_K = DraftPolicy.PROBE_K
    EXPLORE = DraftPolicy.EXPLORE
    CONFIDENT = DraftPolicy.CONFIDENT

    def __init__(self, stats: PairStats, k_max: int):
        self.stats, self.k_max = stats, k_max
        self.plain_time = 0.0
        self.spec_time = 0.0                     # drafting rounds' time since a plain one
        self.backoff = 1                         # divides EXPLORE: doubles with each probe plain wins again
        self.probing = False                     # the last round chosen was a probe
        self.last_k: int | None = None           # the last round's choice (None: none yet)
        self.n_step_obs = 0
        self.c_catch_up: float | None = None     # seconds per token a draft model catches up on
        # while choose() runs: the costs it looked up (the measurements cannot change meanwhile,
        # and its search asks for the same few sizes ~50 times a round)
        self._memo: dict[tuple[bool, int], float | None] | None = None

    def target_cost(self, n: int) -> float:
        return self._cost(True, n)

    def step_cost(self, n_seq: int) -> float | None:
        return self._cost(False, n_seq)

    def _cost(self, target: bool, n: int) -> float | None:
        memo = self._memo
        if memo is not None and (target, n) in memo:
            return memo[(target, n)]
        costs = self.stats.target_costs if target else self.stats.draft_step_costs
        c = cost_at(costs, n) if costs else None
        if memo is not None:
            memo[(target, n)] = c
        return c

    def observe_target(self, n: int, seconds: float) -> None:
        t = self.stats.target_costs
        t[n] = updated_cost(t.get(n), seconds)

    def observe_draft(self, n_seq: int, k: int, seconds: float) -> None:
        """A batch round's drafting: k steps of n_seq sequences took seconds."""
        if k > 0 and n_seq > 0:
            c = self.stats.draft_step_costs
            c[n_seq] = updated_cost(c.get(n_seq), seconds / k)
            self.n_step_obs += 1

    def observe_catch_up(self, n_tokens: int, seconds: float) -> None:
        """Draft models catching up on n_tokens they had not seen (after plain rounds) took seconds."""
        if n_tokens > 0:
            self.c_catch_up = updated_cost(self.c_catch_up, seconds / n_tokens)

    def rate(self, k: int, alphas: list[float], caps: list[int], n_plain: int, pending: int = 0) -> float:
        """Expected tokens per second of a round drafting k (n_plain sequences without a drafter);
        a drafting round first pays for the draft models' catch-up on what plain rounds decoded
        (pending tokens): without it, plain and drafting rounds alternate where drafting barely
        pays, each switch a catch-up of up to CATCH_UP_MAX tokens a sequence."""
        tokens = n_plain + sum(DraftPolicy.expected_tokens(a, min(k, c)) for a, c in zip(alphas, caps))
        cost = self.round_cost(k, caps, n_plain)
        if k > 0 and max(caps, default=0) > 0 and self.c_catch_up is not None:
            cost += pending * self.c_catch_up
        return tokens / cost

    def best_k(self, alphas: list[float], caps: list[int], n_plain: int, pending: int = 0) -> int:
        best_k, best = 0, self.rate(0, alphas, caps, n_plain)
        for k in range(1, min(self.k_max, max(caps, default=0)) + 1):
            r = self.rate(k, alphas, caps, n_plain, pending)
            if r > best * (1 + 1e-9):
                best_k, best = k, r
        return best_k

    def plain_sure(self, n_seq: int, k_cap: int) -> bool:
        """Whether rounds of n_seq sequences decode plainly without probes: even drafts that
        were always right could not pay, by step costs measured CONFIDENT times (choose's rule)."""
        if self.n_step_obs < self.CONFIDENT or self.step_cost(n_seq) is None or not self.stats.target_costs:
            return False
        return self.best_k([1.0] * n_seq, [k_cap] * n_seq, 0) == 0

    def choose(self, alphas: list[float], caps: list[int], n_plain: int = 0, pending: int = 0) -> int:
        """The draft length of the round: alphas and caps of the sequences that draft (their
        acceptance bound, their longest draft), n_plain sequences that do not, pending tokens
        their draft models must catch up on first (whether drafting could ever pay, and the
        probes, are judged without: a catch-up is paid once)."""
        self._memo = {}
        try:
            k = self._choose(alphas, caps, n_plain, pending)
        finally:
            self._memo = None
        self.last_k = k
        return k

    def decoding_plainly(self) -> bool:
        """Whether its rounds decode plainly now (measured, the last one chose k = 0): a
        generation joining the batch may leave its draft model's prompt to the catch-up of a
        round that drafts (a catch-up is CATCH_UP_MAX tokens at most, and few come)."""
        return self.last_k == 0

    def _choose(self, alphas: list[float], caps: list[int], n_plain: int, pending: int) -> int:
        if not caps or max(caps) == 0:
            return 0
        if self.step_cost(len(caps)) is None or not self.stats.target_costs:
            return min(max(caps), self.START_K)   # nothing measured yet: a short draft measures it
        probed, self.probing = self.probing, False
        ones = [1.0] * len(caps)
        k_ones = self.best_k(ones, caps, n_plain)  # drafts always right: an upper bound of k's rate
        k = self.best_k(alphas, caps, n_plain, pending) if k_ones > 0 else 0
        if k > 0:
            self.plain_time, self.backoff = 0.0, 1
            # Drafting wins, yet only plain rounds measure the plain round's cost, which moves
            # (the contexts grow, the machine's load changes): a plain round once the drafting
            # rounds since the last took its cost / EXPLORE, as DraftPolicy.choose does. Without
            # it a plain cost measured high once kept a batch drafting for good.
            self.spec_time += self.round_cost(k, caps, n_plain)
            if self.EXPLORE * self.spec_time >= self.target_cost(n_plain + len(caps)):
                self.spec_time = 0.0
                return 0
            return k
        self.spec_time = 0.0
        if probed:                                # the probe did not make drafting pay
            self.backoff = min(2 * self.backoff, DraftPolicy.BACKOFF_MAX)
        if k_ones == 0 and self.n_step_obs >= self.CONFIDENT:
            return 0                              # even drafts always right could not pay
        self.plain_time += self.target_cost(n_plain + len(caps))
        k = max(1, min(k_ones, self.PROBE_K))
        if self.EXPLORE / self.backoff * self.plain_time >= self.probe_cost(k, len(caps), n_plain, pending):
            self.plain_time, self.probing = 0.0, True
            return k
        return 0

    def round_cost(self, k: int, caps: list[int], n_plain: int) -> float:
        """The estimated time of a round drafting k (each sequence at most its cap), the draft
        models' catch-up aside: one evaluation of every sequence's tokens, and the longest
        draft's steps of the sequences that draft."""
        drafted = [min(k, c) for c in caps]
        n_drafting = sum(1 for j in drafted if j > 0)
        return (self.target_cost(n_plain + sum(j + 1 for j in drafted))
                + max(drafted, default=0) * (self.step_cost(n_drafting) or 0.0))

    def probe_cost(self, k: int, n_seq: int, n_plain: int = 0, pending: int = 0) -> float:
        """What a probe of k drafted tokens a sequence costs over a plain round: the drafting,
        the extra rows verified, and the draft models' catch-up on pending tokens first."""
        return (k * (self.step_cost(n_seq) or 0.0) + (pending * self.c_catch_up if self.c_catch_up else 0.0)
                + self.target_cost(n_plain + n_seq * (k + 1)) - self.target_cost(n_plain + n_seq))
