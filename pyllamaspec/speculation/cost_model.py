"""The cost model: how many tokens a round should draft, and when a draft should stop.

Speculation is exact whatever the draft length, so the length is free to optimize for speed.
DraftPolicy estimates what a round costs (measured draft and target times) and yields (the
acceptance rate), picks the draft length k with the most expected tokens per second each round,
k = 0 (plain decoding) when speculation would not pay, and while a draft model drafts, decides
token by token whether the next one is worth its cost (keep_drafting).
"""
from __future__ import annotations

import bisect
import math

import numpy as np

from .pair_stats import PairStats


def cost_at(costs: dict[int, float], n: int, doubtful: frozenset[int] = frozenset()) -> float:
    """Seconds an evaluation of n tokens takes, from the measured costs by batch size: measured,
    interpolated linearly between measurements, or extrapolated optimistically beyond them;
    never more than a larger batch measured (fewer tokens do not cost more: a slow outlier at
    n would otherwise stand for good where it makes n look too dear to be chosen, so measured,
    again, as a batch round's plain decoding of S sequences at n = S). A cost in `doubtful`
    (measured once) is believed no higher than the other measurements put it: one slow
    measurement (a cold first round faulting the weights in, a busy moment) would otherwise
    keep n from being chosen, and so measured again, for good (the demo pair on 2 cores: a first
    round's 104 ms at n = 5 against 30 at n = 1 and 119 at n = 8 kept every later round at k = 1)."""
    est = _estimate(costs, n)
    if n in doubtful:
        others = {m: c for m, c in costs.items() if m != n}
        if len(others) >= 2:
            est = min(est, _estimate(others, n))
    above = [c for m, c in costs.items() if m > n]
    return min(est, min(above)) if above else est


def _estimate(costs: dict[int, float], n: int) -> float:
    pts = sorted(costs.items())
    if n in costs:
        return costs[n]
    if len(pts) == 1:                      # one point: assume cost grows slowly with n
        n0, c0 = pts[0]
        return c0 * (1 + 0.02 * (n - n0))
    if n > pts[-1][0]:
        # Beyond the largest batch measured, assume half the average growth so far: batches
        # cost less per token as they grow, and an optimistic guess gets measured (then
        # corrected) the first time it is chosen, where a pessimistic one would never be.
        (n0, c0), (n1, c1) = pts[0], pts[-1]
        return c1 + 0.5 * (c1 - c0) / (n1 - n0) * (n - n1)
    lo = max((p for p in pts if p[0] < n), default=pts[0])
    hi = min((p for p in pts if p[0] > n), default=pts[-1])
    if lo[0] == hi[0]:
        lo, hi = pts[0], pts[1]
    slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
    return max(1e-9, lo[1] + slope * (n - lo[0]))


def updated_cost(old: float | None, x: float) -> float:
    """A cost estimate updated with measurement x: faster is believed at once, slower slowly
    (delays only ever slow a measurement down: a page fault, a busy machine)."""
    return x if old is None or x < old else 0.8 * old + 0.2 * x


class DraftPolicy:
    """Picks the draft length k that maximizes expected tokens per second.

    With a per-token acceptance probability a, a round drafting k tokens yields
    E[k] = (1 - a^(k+1)) / (1 - a) tokens (accepted prefix + the target's token) and costs
    k * c_draft + c_target(k + 1), plus, for a draft model, a^k * c_draft: the next round's
    catch-up on x_k, which it drafted without evaluating (round_cost). k = 0 is plain decoding:
    1 token for c_target(1). A target cost measured once is doubted (cost_at) and, where plain
    decoding wins, measured again at once.
    a is estimated from accepted prefixes (accepted tokens vs rejections, slowly forgetting),
    one estimate per kind of proposal (see select). Choices use its optimistic bound (mean + Z
    standard deviations of the Beta posterior): one unlucky round, which moves the mean a lot
    while evidence is thin, cannot turn speculation off; as rounds accrue the bound closes in on
    the mean, and a draft that does not pay is dropped within a few rounds. The costs are
    measured times, each estimate believing a faster measurement at once and a slower one slowly
    (delays only ever slow a measurement down: a page fault, a busy machine); c_target(n) between
    measured n is interpolated linearly, beyond them optimistically.

    While a draft model drafts, keep_drafting stops it where one more token is not worth its cost
    (in place of a fixed --draft-p-min): each drafted token's chance of acceptance is learned as a
    function of the draft's confidence in it (its top probability, in bins), the chance that the
    whole draft so far is accepted is their product P, and a token is kept while P times the
    time a token takes at the rate speculative rounds reach exceeds what verifying it adds; another
    is drafted while that is expected to hold for it too, draft time included (renewal reward: a
    round's marginal tokens must come at least as cheaply as its tokens on average, and a rule
    that stops too early makes rounds dearer, which makes marginal tokens worth more). A fixed
    p_min (llama.cpp's 0.75) wastes a draft evaluation every round it stops on, and stops drafts that a pair whose models
    agree (one model at two precisions) would have had accepted.
    """

    FORGET = 0.97          # weight of the past in the acceptance estimate, per round
    Z = 1.0                # optimism of the acceptance bound the choices use
    START_K = 4            # the first round drafts this many tokens, to measure the draft's pace
    EXPLORE = 0.02         # while k = 0 wins, probes (a few drafted tokens, after the draft model
    BACKOFF_MAX = 64       # catches up) may cost this fraction of the plain decoding time around
                           # them; each probe that confirms plain decoding halves that, to 1/64
    PROBE_K = 4            # the longest probe
    CONFIDENT = 3          # draft-cost measurements before "too slow even if always right" is believed
    RECHECK = 1.5          # a plain round this much slower than c_target(1) is measured again first
    BINS = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95)   # edges of the draft-confidence bins (top probability)

    def __init__(self, k_max: int, prior_alpha: float = 0.7, prior_weight: float = 2.0,
                 stats: PairStats | None = None):
        self.k_max = k_max
        self.prior = (prior_alpha * prior_weight, (1 - prior_alpha) * prior_weight)
        self.acc, self.rej = self.prior
        # estimates are kept per (phase, kind of proposal): a thinking model's reasoning block and
        # its answer are drafted at different rates (set_phase)
        self.phase = "answer"
        self.drafter_key = None
        self.key = (self.phase, None)
        self.counts: dict = {}
        # the measured costs live in the pair's PairStats (kept for the next generation)
        self.stats = stats if stats is not None else PairStats()
        if self.stats.acceptance:
            self.resume(self.stats.acceptance)
        self.c_catch_up: float | None = None
        self.plain_time = 0.0
        self.spec_time = 0.0                                # drafting rounds' time since a plain one
        self.backoff = 1
        self.p_pay = 0.0                                    # chance_speculation_pays, per plain stretch
        self.calib = [self.prior] * (len(self.BINS) + 1)    # (accepted, rejected) per confidence bin
        self.token_time: float | None = None                # seconds per token, speculative rounds
        # the last plain round was slow: measure again. A generation starts so: a token's cost
        # grows with the context (SmolLM2 on 2 cores: 7 ms at 10 tokens, 18 at 300), and the
        # c_target(1) the last generation left, at its end, would make drafting look worth it
        # until EXPLORE of the drafting time brought a plain round (10-13 ms a token against
        # 7-9 plain, 70-115 of 256 tokens drafted with its Q8_0, which never pays there)
        self.recheck = True
        # a drafter whose draft costs one pass whatever its length (a DFlash block): c_draft is
        # then per round, and a drafted token costs only its verification
        self.per_round = False
        # a hybrid target verifies a token tree's branches whole (speculation/tree/verify.py): its
        # rows are then every branch's, shared nodes repeated (speculation/tree/policy.py)
        self.tree_whole_branches = False

    @property
    def c_target(self) -> dict[int, float]:
        """Seconds a target eval of n tokens takes, by n (shared by the target's pairs)."""
        return self.stats.target_costs

    @c_target.setter
    def c_target(self, costs: dict[int, float]) -> None:
        self.stats.target_costs.clear()
        self.stats.target_costs.update(costs)
        self.stats.target_obs.clear()
        self.recheck = False                     # given, not measured: nothing to measure again

    @property
    def c_draft(self) -> float | None:
        """Seconds per drafted token (None: not measured yet)."""
        return self.stats.draft_cost.seconds

    @c_draft.setter
    def c_draft(self, seconds: float | None) -> None:
        self.stats.draft_cost.seconds = seconds

    @property
    def n_draft_obs(self) -> int:
        return self.stats.draft_cost.n_obs

    @n_draft_obs.setter
    def n_draft_obs(self, n: int) -> None:
        self.stats.draft_cost.n_obs = n

    @property
    def measuring(self) -> bool:
        """Nothing measured of the draft yet: the next round is the first, short, draft."""
        return self.c_draft is None

    @property
    def alpha(self) -> float:
        return self.acc / (self.acc + self.rej)

    @classmethod
    def _upper(cls, acc: float, rej: float) -> float:
        """Mean + Z standard deviations of Beta(acc, rej)."""
        n = acc + rej
        a = acc / n
        return min(1.0, a + cls.Z * math.sqrt(a * (1 - a) / (n + 1)))

    @property
    def alpha_upper(self) -> float:
        """The acceptance's optimistic bound."""
        return self._upper(self.acc, self.rej)

    def select(self, key) -> None:
        """Switches to the acceptance estimate kept for `key` (a drafter's kind of proposal:
        the n-gram drafter's match length and whether its last proposal was taken whole, as
        their reliability differs) in the current phase."""
        self.drafter_key = key
        full = (self.phase, key)
        if full != self.key:
            self.counts[self.key] = (self.acc, self.rej)
            self.acc, self.rej = self.counts.get(full, self.prior)
            self.key = full

    def set_phase(self, phase: str) -> None:
        """"thinking" inside a reasoning block, "answer" elsewhere: each has its estimates."""
        if phase != self.phase:
            self.phase = phase
            self.select(self.drafter_key)

    def observe_round(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.acc = self.acc * self.FORGET + accepted
            self.rej = self.rej * self.FORGET + (1 if accepted < drafted else 0)

    def observe_verified(self, drafted: int, accepted: int, p_max: np.ndarray | None,
                         round_seconds: float) -> None:
        """A verified round: its acceptance, and where the drafter said how confident it was in
        each token (p_max), the outcome by confidence and the rate speculative rounds reach."""
        self.observe_round(drafted, accepted)
        if p_max is not None and drafted:
            self.observe_tokens(p_max, accepted)
            self.observe_rate(round_seconds, accepted + 1)

    def save(self) -> None:
        """Leaves the acceptance estimates to the pair's next generation."""
        self.stats.acceptance = self.state()

    def observe_tokens(self, p_max: np.ndarray, accepted: int) -> None:
        """The outcome of each drafted token whose fate is known (the accepted prefix and the first
        rejected one), in the bin of the draft's confidence in it."""
        for i, pm in enumerate(p_max[:accepted + 1]):
            b = bisect.bisect_right(self.BINS, pm)
            acc, rej = self.calib[b]
            ok = i < accepted
            self.calib[b] = (acc * self.FORGET + ok, rej * self.FORGET + (not ok))

    def token_alpha(self, p_max: float) -> float:
        """A drafted token's chance of acceptance given the draft's confidence (optimistic bound)."""
        return self._upper(*self.calib[bisect.bisect_right(self.BINS, p_max)])

    def verify_slope(self) -> float:
        """What one more drafted token adds to a verification: the smallest average slope of the
        measured target costs from the smallest batch with a draft in it (n >= 2; the step from
        one token to two is a change of kernel, not a slope). Optimistic, as a slope read off a
        slow measurement would keep drafts short, and with them the measurements that would
        correct it."""
        pts = sorted((n, c) for n, c in self.c_target.items() if n >= 2)
        if len(pts) >= 2:
            (n0, c0), rest = pts[0], pts[1:]
            return max(0.0, min((c - c0) / (n - n0) for n, c in rest))
        if pts:
            return max(0.0, (pts[0][1] - self.target_cost(1)) / (pts[0][0] - 1))
        return 0.02 * self.target_cost(1)

    def observe_rate(self, seconds: float, tokens: int) -> None:
        """A speculative round's time and the tokens it produced: token_time, the time a token
        takes at the rate speculation actually reaches, is what a marginal token must beat."""
        if tokens > 0:
            x = seconds / tokens
            self.token_time = x if self.token_time is None else 0.8 * self.token_time + 0.2 * x

    def keep_drafting(self, p_all: float, first: bool = False) -> tuple[bool, bool]:
        """After drafting a token, the whole draft accepted with probability p_all: (keep the
        token, draft another). Renewal reward: a round pays while its marginal tokens come at
        least as cheaply as its tokens on average (token_time). The first token is always kept:
        choose() found that one pays, and every speculative round keeps token_time measured."""
        if self.token_time is None or self.c_draft is None:
            return True, True
        gain = p_all * self.token_time            # expected time the token saves
        slope = self.verify_slope()
        keep = first or gain >= slope
        # drafting another evaluates the token just drafted, which the next round would catch up
        # on anyway were the whole draft accepted (round_cost): it adds c_draft * (1 - p_all)
        c_more = 0.0 if self.per_round else self.c_draft * ((1 - p_all) if self.catches_up else 1.0)
        more = keep and gain * self.alpha >= c_more + slope
        return keep, more

    def draft_cost(self, k: int) -> float:
        """Seconds drafting k tokens takes."""
        cd = self.c_draft or 0.0
        return (cd if k > 0 else 0.0) if self.per_round else k * cd

    @property
    def catches_up(self) -> bool:
        """Whether the drafter keeps a cache it catches up on (a draft model): it drafts x_k
        without evaluating it, so a round whose k drafts are all accepted leaves the next round
        one token to catch up on, an evaluation as dear as a drafted token's."""
        return self.c_catch_up is not None and not self.per_round

    def round_cost(self, k: int, alpha: float) -> float:
        """Seconds a round drafting k tokens costs: drafting, the target verifying k + 1 tokens,
        and (a drafter that catches up) the chance alpha^k that the next round catches up on
        x_k. Short drafts are all accepted most often: leaving that out (the demo pair drafting
        1 token a round, catching up on it each round) made them look a third cheaper."""
        if k == 0:
            return self.target_cost(1)
        return self.draft_cost(k) + self.catch_up_cost(k, alpha) + self.target_cost(k + 1)

    def catch_up_cost(self, depth: int, alpha: float) -> float:
        """The next round's expected catch-up on a draft of `depth` tokens (round_cost)."""
        return alpha ** depth * (self.c_draft or 0.0) if self.catches_up else 0.0

    _cost = staticmethod(updated_cost)

    def observe_draft(self, seconds: float, n_tokens: int) -> None:
        if n_tokens > 0:
            self.c_draft = self._cost(self.c_draft, seconds if self.per_round else seconds / n_tokens)
            self.n_draft_obs += 1

    def observe_catch_up(self, seconds: float, n_tokens: int) -> None:
        if n_tokens > 0:
            self.c_catch_up = self._cost(self.c_catch_up, seconds / n_tokens)

    def observe_target(self, n: int, seconds: float) -> None:
        old = self.c_target.get(n)
        self.c_target[n] = self._cost(old, seconds)
        self.stats.target_obs[n] = self.stats.target_obs.get(n, 0) + 1
        # Only plain rounds measure c_target(1), and a slow one (a busy machine: 38-54 ms where
        # SmolLM2 takes 6) makes drafting look worth it until a plain round comes again
        # (EXPLORE of the drafting time): the next round is plain, to measure it again.
        if n == 1 and old is not None:
            self.recheck = seconds > self.RECHECK * old

    def target_cost(self, n: int) -> float:
        return cost_at(self.c_target, n, self.measured_once())

    def measured_once(self) -> frozenset[int]:
        """The batch sizes whose target cost one measurement made."""
        return frozenset(m for m, c in self.stats.target_obs.items() if c == 1)

    @staticmethod
    def expected_tokens(alpha: float, k: int) -> float:
        if alpha >= 1.0:
            return k + 1.0
        return (1 - alpha ** (k + 1)) / (1 - alpha)

    def best_k(self, k_cap: int, alpha: float | None = None) -> int:
        """The k in [0, k_cap] with the most expected tokens per second (at the estimated
        acceptance, or at `alpha`)."""
        a = self.alpha if alpha is None else alpha
        best_k, best = 0, 1.0 / self.target_cost(1)
        for k in range(1, k_cap + 1):
            rate = self.expected_tokens(a, k) / self.round_cost(k, a)
            if rate > best * (1 + 1e-9):
                best_k, best = k, rate
        return best_k

    def probe_cost(self, n_catch_up: int, k: int = 1) -> float:
        """Seconds a probe of k tokens adds to a plain round: the draft catching up on
        n_catch_up tokens, drafting k, and the target verifying k + 1 tokens instead of 1."""
        cd = self.c_draft or 0.0
        cu = self.c_catch_up if self.c_catch_up is not None else cd
        return self.draft_cost(k) + cu * n_catch_up + max(0.0, self.target_cost(k + 1) - self.target_cost(1))

    def state(self) -> dict:
        """The acceptance estimates, to start a later generation with the same pair from."""
        counts = dict(self.counts)
        counts[self.key] = (self.acc, self.rej)
        return counts

    def resume(self, counts: dict, weight: float = 8.0) -> None:
        """Starts from estimates a generation with the same pair left (see state), worth at most
        `weight` rounds of evidence, so that a different text soon has its own say."""
        for key, (a, r) in counts.items():
            scale = min(1.0, weight / max(a + r, 1e-9))
            self.counts[key] = (a * scale, r * scale)
        self.acc, self.rej = self.counts.pop(self.key, self.prior)

    def choose(self, k_cap: int, n_catch_up: int = 0) -> int:
        """The draft length for the next round (0: plain decoding). n_catch_up: the tokens a
        draft model would evaluate before drafting."""
        k = self._choose(k_cap, n_catch_up)
        self.stats.plain_now = k == 0 and not self.measuring and 1 in self.c_target
        if k == 0:
            self.spec_time = 0.0                  # the plain round measures c_target(1)
        return k

    def _choose(self, k_cap: int, n_catch_up: int) -> int:
        k_cap = min(k_cap, self.k_max)
        if self.measuring:
            return min(k_cap, self.START_K)    # nothing measured yet: a short draft measures it
        if 1 not in self.c_target or self.recheck:
            return 0                           # one plain round measures the target's own pace
        a = self.alpha_upper
        k = self.best_k(k_cap, alpha=a)
        if k > 0:
            self.plain_time, self.backoff = 0.0, 1
            # Drafting wins, yet only plain rounds measure c_target(1): a plain round now and then
            # (EXPLORE of the drafting time), or one slow plain round (a busy machine) would make
            # drafting look better for good, with no plain round left to correct it.
            self.spec_time += self.round_cost(k, a)
            if self.EXPLORE * self.spec_time >= self.target_cost(1):
                return 0
            return k
        # Plain decoding wins. A draft cost not believed yet is measured again at once, not left
        # to the probes' budget: a cost that high would keep the next probe away for the whole
        # generation (issue 27: a cold first draft, ~700 ms/token, then 124 plain rounds).
        if self.implausible_draft_cost():
            return min(k_cap, self.START_K)
        # So is a target cost measured once (the first round's, say: one slow measurement of c(5)
        # kept the demo pair plain for some 400 tokens, until a probe measured it again)
        once = sorted(n for n in self.measured_once() if 2 <= n <= k_cap + 1)
        if once:
            return once[0] - 1
        # If it would win even were every draft accepted, by a draft cost
        # measured often enough to be believed, no probe can change that: the draft is just too
        # slow for this target.
        if self.best_k(k_cap, alpha=1.0) == 0 and self.n_draft_obs >= self.CONFIDENT:
            return 0
        # Otherwise probe now and then, so a draft that does better is noticed, within a budget:
        # a probe comes once the plain rounds since the last one took probe_cost / budget. The
        # budget follows the uncertainty: half the chance that speculation pays after all while
        # evidence is thin (a few unlucky rounds), else EXPLORE of the time, halved by each
        # probe that confirms plain decoding. A probe drafts what would pay were the draft always
        # right (1 to PROBE_K): one that succeeds then tells more than one token could.
        k = max(1, min(self.best_k(k_cap, alpha=1.0), self.PROBE_K))
        if self.plain_time == 0.0:             # a plain stretch begins: how likely is it wrong?
            self.p_pay = self.chance_speculation_pays(k_cap)
        self.plain_time += self.target_cost(1)
        budget = max(self.EXPLORE / self.backoff, self.p_pay / 2)
        if budget * self.plain_time >= self.probe_cost(n_catch_up, k):
            self.plain_time = 0.0
            self.backoff = min(2 * self.backoff, self.BACKOFF_MAX)
            return k
        return 0

    def implausible_draft_cost(self) -> bool:
        """A draft cost per token above the target's for a whole token, measured fewer than
        CONFIDENT times: an outlier to measure again (the first evaluations of a cold mmap fault
        their pages in; a busy machine stalls one), not a draft to judge, as a draft is chosen
        for being cheaper than its target."""
        return (self.c_draft is not None and self.n_draft_obs < self.CONFIDENT and 1 in self.c_target
                and self.c_draft > self.target_cost(1))

    def chance_speculation_pays(self, k_cap: int) -> float:
        """The posterior chance that the acceptance is above the break-even one (the least at
        which best_k drafts), by a normal approximation of Beta(acc, rej)."""
        lo, hi = 0.0, 1.0
        for _ in range(7):                     # best_k grows with alpha: bisect the break-even
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self.best_k(k_cap, alpha=mid) > 0 else (mid, hi)
        a, n = self.alpha, self.acc + self.rej
        sd = math.sqrt(a * (1 - a) / (n + 1))
        return 0.5 * math.erfc((hi - a) / (sd * math.sqrt(2))) if sd > 0 else float(a >= hi)
