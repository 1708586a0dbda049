"""Speculative decoding: a draft proposes, the target verifies in one batched pass.

One round (Leviathan et al. 2023; Chen et al. 2023):
  1. the drafter proposes up to k tokens x_1..x_k: a draft model samples them from its adjusted
     distribution q (stopping early where the next token is not worth its cost, see
     cost_model.py, or below a fixed p_min); an n-gram
     drafter copies what followed the last n tokens earlier in the text (q: a point mass);
  2. the target evaluates [last, x_1..x_k] in ONE call, giving p at k+1 positions;
  3. the core accepts x_i with probability min(1, p_i(x_i)/q_i(x_i)) (greedy: iff it is the
     target's argmax), draws the next token from norm(max(0, p_i - q_i)) at the first rejection,
     or a bonus token from p_{k+1} when all pass;
  4. both KV caches are truncated to the accepted prefix.
The tokens produced are distributed exactly as the target's own (greedy: identical), whatever
k is, so k is free to optimize: a cost model picks it each round from the measured costs and
the running acceptance rate, and picks k = 0 (plain decoding) when speculation would not pay.

Bookkeeping: `seq` holds every token so far. The target's cache holds seq[:-1] between rounds
(the last token is fed with the next drafts); a draft model's cache holds seq[:-1] but for
tokens it has not seen yet, which it catches up on when it next drafts (the most recent 32
at most, see ModelDrafter).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from . import _args
from . import draft_loop
from .cost_model import DraftPolicy
from .errors import ContextFullError, InvalidArgumentError, NoVocabularyError, PyllamaspecError
from .model import Model
from .mtp_drafter import MtpDrafter
from .sampling import MAX_LOGPROBS, Sampler, SamplingParams, TokenLogprobs, logprobs as core_logprobs


@dataclass
class DraftParams:
    """llama.cpp's --draft-max, --draft-min, --draft-p-min; `adaptive` lets the cost model pick
    the draft length (up to n_draft) each round and, token by token, where a draft model's draft
    stops; p_min (a draft stops where its top probability is below it) then defaults to none,
    else to llama.cpp's 0.75; `ngram` is the n-gram drafter's longest match;
    `draft_vocab`: a draft model with more than twice as many tokens computes logits for this
    many common ones only (Model.common_token_ids; 0 = all of them)."""
    n_draft: int = 16
    n_min: int = 0
    p_min: float | None = None
    adaptive: bool = True
    ngram: int = 3
    draft_vocab: int = 32768

    def __post_init__(self) -> None:
        _args.integer("n_draft", self.n_draft, 1, _args.MAX_DRAFT)
        _args.integer("n_min", self.n_min, 0, self.n_draft)
        if self.p_min is not None:
            _args.real("p_min", self.p_min, 0.0, 1.0)
        if not isinstance(self.adaptive, (bool, np.bool_)):
            raise InvalidArgumentError(f"adaptive must be True or False, got {self.adaptive!r}")
        _args.integer("ngram", self.ngram, 1, 64)
        _args.integer("draft_vocab", self.draft_vocab)


@dataclass
class Stats:
    """What a generation did and where its time went (seconds)."""
    n_prompt: int = 0
    n_generated: int = 0
    t_prompt: float = 0.0
    n_reused: int = 0            # prompt tokens the target's cache already held (not evaluated)
    n_draft_reused: int = 0      # the same for a draft model
    t_generate: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    t_draft: float = 0.0
    t_target: float = 0.0
    accepted_per_round: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens gained per round: the accepted drafts plus the target's own token."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def prompt_tps(self) -> float:
        return self.n_prompt / self.t_prompt if self.t_prompt > 0 else 0.0

    @property
    def generate_tps(self) -> float:
        return self.n_generated / self.t_generate if self.t_generate > 0 else 0.0

    @property
    def t_loop(self) -> float:
        """Time in the Python loop: generation time neither model's core accounts for."""
        return max(0.0, self.t_generate - self.t_draft - self.t_target)


# ---- drafters ---------------------------------------------------------------------------------

def _seed_for_draft(seed: int) -> int:
    return (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64


class ModelDrafter:
    """A small model that samples drafts from its adjusted distribution q.

    Its cache holds seq[:-1] except for `skipped` tokens: after a long stretch of plain decoding
    it catches up on the last CATCH_UP_MAX tokens only, placed right after what it holds (a
    drafter may see any text; the target's verification keeps the output exact)."""

    CATCH_UP_MAX = 32

    def __init__(self, model: Model, sampling: SamplingParams, params: DraftParams, eog: frozenset[int],
                 target: Model):
        self.model, self.params, self.eog = model, params, eog
        V = model.n_vocab
        # A large vocabulary's head is most of a small draft's cost (Gemma 3: 262k rows): the
        # draft computes the common tokens' logits only. It proposes no rare token, which only
        # costs acceptance; the target's verification keeps the output exact.
        self.saved_head = model.output_ids
        n = params.draft_vocab
        if n and V > 2 * n:
            cached = getattr(target, "_psl_common_ids", None)
            if cached is None or cached[0] != n:
                try:
                    common = target.common_token_ids(n)
                except NoVocabularyError:             # no token texts to rank: the full head
                    common = None
                target._psl_common_ids = cached = (n, common)
            if cached[1] is not None:
                ids = np.union1d(cached[1], np.fromiter(eog, np.int32)).astype(np.int32)
                if model.output_ids is None or not np.array_equal(model.output_ids, ids):
                    model.set_output_ids(ids)
        # Tokens the text uses join the head as they appear (rare names, identifiers, a loop
        # of odd tokens): texts repeat their own rare tokens.
        self.in_head = None
        if model.output_ids is not None and model.output_ids is not self.saved_head:
            self.in_head = np.zeros(V, bool)
            self.in_head[model.output_ids] = True
        self.sampler = Sampler(V, replace(sampling, seed=_seed_for_draft(sampling.seed)))
        # penalized like the target, drafts included, so that q stays close to p
        self.penalized = sampling.penalized
        self.logits = np.empty((1, V), np.float32)
        self.q = None if sampling.greedy else np.empty((params.n_draft, V), np.float32)
        self.p_max = np.zeros(params.n_draft, np.float32)
        self.skipped = 0
        self.evals = 0                           # draft evaluations of the last propose()

    def prefill(self, head: np.ndarray) -> int:
        """Brings the draft's cache to hold head, evaluating only what follows the longest
        common prefix with what it holds; returns how many tokens were reused."""
        n_keep = self.model.reuse_prefix(head.tolist())
        if n_keep < len(head):
            self.model.eval(head[n_keep:], logits="none")
        self.skipped = 0
        self.learn(head)
        return n_keep

    def learn(self, tokens) -> None:
        """Adds the tokens the restricted head lacks."""
        if self.in_head is not None:
            t = np.asarray(tokens, np.int64)
            new = t[~self.in_head[t]]
            if len(new):
                self.model.add_output_ids(new)
                self.in_head[new] = True

    def _unseen(self, seq: list[int]) -> tuple[int, int]:
        """(tokens of seq[:-1] the draft has not seen, how many of them it would evaluate: the
        last CATCH_UP_MAX at most, leaving room in its context for the last token)."""
        d = self.model
        gap = len(seq) - 1 - d.n_past - self.skipped
        return gap, max(0, min(gap, self.CATCH_UP_MAX, d.n_ctx - d.n_past - 1))

    def pending(self, seq: list[int]) -> int:
        """Tokens catch_up() would evaluate."""
        return self._unseen(seq)[1]

    def catch_up(self, seq: list[int]) -> int:
        """Evaluates the tokens of seq[:-1] the draft has not seen (the last CATCH_UP_MAX at
        most); returns how many."""
        d = self.model
        gap, n = self._unseen(seq)
        self.skipped += gap - n
        if n:
            d.eval(np.asarray(seq[len(seq) - 1 - n:-1], np.int32), logits="none")
        return n

    def propose(self, seq: list[int], k_max: int, out: np.ndarray, p_min: float = 0.0,
                policy: DraftPolicy | None = None) -> int:
        """Drafts up to k_max tokens after seq (call catch_up first), stopping early where the
        draft's top probability is below p_min, or where the cost model (policy) says the next
        token is not worth its cost. The top probabilities are kept in self.p_max."""
        d = self.model
        k_max = min(k_max, d.n_ctx - d.n_past)
        step = np.empty(1, np.int32)

        def next_logits(tok: int, k: int) -> np.ndarray:
            step[0] = tok
            return d.eval(step, logits="last", out=self.logits)[0]
        return draft_loop.draft(self, next_logits, int(seq[-1]), k_max, out, p_min, policy)

    def q_rows(self, k: int) -> np.ndarray | None:
        return None if self.q is None else self.q[:k]

    def accepted(self, seq: list[int], new: list[int], drafted: int = 0) -> None:
        if self.penalized:                       # the history is seq again, drafts rolled back
            self.sampler.truncate(len(seq) - len(new))
            self.sampler.push(new)
        # keep what the draft saw of the accepted prefix; the rest it evaluates next round
        self.model.truncate(min(self.model.n_past, len(seq) - 1 - self.skipped))
        if self.in_head is not None and not self.in_head[new[-1]]:
            self.learn(new[-1:])                 # accepted drafts were in the head already

    def close(self) -> None:
        """Gives the draft model its head back as it was."""
        m = self.model
        if not m.closed and (m.output_ids is not self.saved_head):
            m.set_output_ids(self.saved_head)


class NgramDrafter:
    """Prompt lookup: proposes what followed the most recent earlier occurrence of the last
    n tokens (n from `ngram` down to 1). Deterministic, so q is a point mass."""

    def __init__(self, params: DraftParams):
        self.params = params
        self.match = 0                           # length of the last proposal's match
        self.copying = False                     # the last round took every drafted token

    def prefill(self, head: np.ndarray) -> int:
        return 0

    def propose(self, seq: list[int], k_max: int, out: np.ndarray) -> int:
        s = np.asarray(seq, np.int64)
        for n in range(min(self.params.ngram, len(s) - 1), 0, -1):
            tail = s[-n:]
            # windows s[i:i+n] == tail, for i with something after them (i + n < len(s))
            hits = np.ones(len(s) - n, bool)
            for j in range(n):
                hits &= s[j:len(s) - n + j] == tail[j]
            idx = np.nonzero(hits)[0]
            if len(idx):
                start = int(idx[-1]) + n
                k = min(k_max, len(s) - start)
                out[:k] = s[start:start + k]
                self.match = n
                return k
        self.match = 0
        return 0

    def q_rows(self, k: int) -> None:
        return None

    def accepted(self, seq: list[int], new: list[int], drafted: int = 0) -> None:
        self.copying = drafted > 0 and len(new) == drafted + 1

    def close(self) -> None:
        pass


class Decoder:
    """Token-level generation from a target model, with an optional drafter: a draft Model,
    "ngram" (prompt lookup) or "mtp" (the target's own MTP layers, mtp_drafter.py). tokens() yields (token, from_draft) as tokens are accepted.
    With `logprobs` (0..20), each round's TokenLogprobs (the token's and the top n) are in
    round_logprobs, read from the verification's logits rows (no extra evaluation)."""

    def __init__(self, target: Model, draft: Model | str | None, sampling: SamplingParams,
                 draft_params: DraftParams | None = None, logprobs: int | None = None):
        self.target = target
        self.sampling = sampling
        if logprobs is not None:
            _args.integer("logprobs", logprobs, 0, MAX_LOGPROBS)
        self.n_logprobs = logprobs
        self.round_logprobs: list[TokenLogprobs] = []
        self.dp = draft_params or DraftParams()
        V = target.n_vocab
        self.t_sampler = Sampler(V, sampling)
        self.t_logits = np.empty((self.dp.n_draft + 1, V), np.float32)
        self.drafts = np.empty(self.dp.n_draft, np.int32)
        try:
            eog = target.eog_tokens
        except NoVocabularyError:
            eog = frozenset()
        if draft is None:
            self.drafter = None
        elif isinstance(draft, str):
            if draft == "mtp":
                self.drafter = MtpDrafter(target, sampling, self.dp, eog)
            elif draft == "ngram":
                self.drafter = NgramDrafter(self.dp)
            else:
                raise InvalidArgumentError(f"draft must be a Model, 'ngram' or 'mtp', got {draft!r}")
        else:
            if draft.n_vocab != V:
                raise InvalidArgumentError(f"draft has {draft.n_vocab} logits, target {V}")
            self.drafter = ModelDrafter(draft, sampling, self.dp, eog, target)
        # Costs are properties of the models and the machine, not of one generation: the policy
        # starts from what earlier generations with the same target measured (its acceptance
        # estimate starts afresh, as the text may differ).
        self.policy = DraftPolicy(self.dp.n_draft)
        known = getattr(target, "_psl_costs", None)
        if known is not None:
            self.policy.c_target = known
        else:
            target._psl_costs = self.policy.c_target
        if isinstance(self.drafter, ModelDrafter):
            self.policy.c_draft, self.policy.n_draft_obs = getattr(draft, "_psl_c_draft", (None, 0))
        # so do acceptance estimates, a property of the pair more than of the text: kept on the
        # target by drafter ("ngram" or the draft's file), they start the next generation
        self._pair = draft if isinstance(draft, str) else getattr(draft, "path", None)
        if self.drafter is not None and (known := getattr(target, "_psl_acceptance", {}).get(self._pair)):
            self.policy.resume(known)
        self.stats = Stats()
        self.seq: list[int] = []

    @property
    def draft(self) -> Model | None:
        return self.drafter.model if isinstance(self.drafter, ModelDrafter) else None

    # -- prompt ---------------------------------------------------------------------------
    def prefill(self, prompt: list[int]) -> None:
        """Evaluate the prompt (all but its last token, which the first round feeds). What a
        model's cache already holds of it (its longest common prefix with the cached ids: the
        previous turns of a chat) is kept, not evaluated again; on the CPU the result is
        bit-identical to a fresh evaluation where the model's batched and one-token evaluations
        are (SmolLM2: yes; Gemma 3: not quite, as in llama.cpp)."""
        if not prompt:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        for m in (self.target, self.draft):
            if m is not None and len(prompt) >= m.n_ctx:
                raise ContextFullError(f"the prompt has {len(prompt)} tokens; the context holds {m.n_ctx} "
                                       f"(raise n_ctx / -c)")
        t0 = time.perf_counter()
        self.seq = list(prompt)
        head = np.asarray(prompt[:-1], np.int32)
        if self.sampling.penalized:              # llama.cpp penalizes repeats of the prompt too
            self.t_sampler.reset(prompt)
            if isinstance(self.drafter, (ModelDrafter, MtpDrafter)):
                self.drafter.sampler.reset(prompt)
        n_keep = self.target.reuse_prefix(prompt[:-1])
        if n_keep < len(head):
            self.target.eval(head[n_keep:], logits="none")
        if self.drafter is not None:
            self.stats.n_draft_reused = self.drafter.prefill(head)
        self.stats.n_prompt = len(prompt)
        self.stats.n_reused = n_keep
        self.stats.t_prompt = time.perf_counter() - t0

    # -- rounds ---------------------------------------------------------------------------
    def room(self) -> int:
        """Tokens the target can still take (the pending last token included)."""
        return self.target.n_ctx - len(self.seq) + 1

    def step(self, want: int | None = None) -> list[tuple[int, bool]]:
        """One round: returns the new tokens, each with whether the drafter proposed it. `want`:
        how many more tokens the caller will take (max_tokens left); a round drafts no more than
        that needs, so nothing is verified only to be dropped."""
        room = self.room()
        if room < 1:
            raise ContextFullError(f"context full: {len(self.seq)} tokens, n_ctx {self.target.n_ctx}")
        # a hybrid target restores its recurrent state in O(1) only so far back (a longer draft,
        # if rejected early, would replay the whole cache)
        k_cap = min(self.dp.n_draft, room - 1, max(0, want - 1) if want is not None else room,
                    self.target.max_rollback)
        if isinstance(self.drafter, ModelDrafter):   # the draft drops at most k - 1 of its tokens
            k_cap = min(k_cap, self.drafter.model.max_rollback + 1)
        k = 0
        t_round = time.perf_counter()
        if self.drafter is not None and k_cap > 0:
            d = self.drafter
            if isinstance(d, NgramDrafter):
                k = self._propose_ngram(k_cap)
            elif (k_max := self.policy.choose(k_cap, d.pending(self.seq)) if self.dp.adaptive else k_cap) > 0:
                # the cost model's first round measures a batch of START_K + 1: nothing may cut it
                first = self.dp.adaptive and self.policy.measuring
                p_min = self.dp.p_min if self.dp.p_min is not None else 0.0 if self.dp.adaptive else 0.75
                t0 = time.perf_counter()
                n_up = d.catch_up(self.seq)
                t1 = time.perf_counter()
                # with sampling, the draft's confidence in a token tells how likely it is to be
                # accepted, and the cost model stops the draft token by token; greedy drafts carry
                # no such signal (their top probability is 1 by construction)
                per_token = self.dp.adaptive and not first and not self.sampling.greedy
                k = d.propose(self.seq, k_max, self.drafts, p_min=0.0 if first else p_min,
                              policy=self.policy if per_token else None)
                t2 = time.perf_counter()
                self.stats.t_draft += t2 - t0
                self.policy.observe_catch_up(t1 - t0, n_up)
                self.policy.observe_draft(t2 - t1, d.evals)

        t0 = time.perf_counter()
        n_before = self.target.n_past
        batch = np.empty(k + 1, np.int32)
        batch[0] = self.seq[-1]
        batch[1:] = self.drafts[:k]
        logits = self.target.eval(batch, logits="all", out=self.t_logits)
        q = self.drafter.q_rows(k) if self.drafter is not None else None
        n_acc, nxt = self.t_sampler.verify(logits, self.drafts[:k], q)
        self.target.truncate(n_before + 1 + n_acc)
        dt = time.perf_counter() - t0
        self.stats.t_target += dt
        self.policy.observe_target(k + 1, dt)

        if isinstance(self.drafter, ModelDrafter):
            self.drafter.model._psl_c_draft = (self.policy.c_draft, self.policy.n_draft_obs)
        new = [(int(t), True) for t in self.drafts[:n_acc]] + [(int(nxt), False)]
        ids = [t for t, _ in new]
        if self.n_logprobs is not None:          # row i scored the i-th new token
            self.round_logprobs = core_logprobs(logits, ids, self.n_logprobs)
        if self.sampling.penalized:
            self.t_sampler.push(ids)
        self.seq.extend(ids)
        if self.drafter is not None:
            self.drafter.accepted(self.seq, ids, k)
            self.policy.observe_round(k, n_acc)
            if isinstance(self.drafter, (ModelDrafter, MtpDrafter)) and k:
                self.policy.observe_tokens(self.drafter.p_max[:k], n_acc)
                self.policy.observe_rate(time.perf_counter() - t_round, n_acc + 1)
            self.stats.rounds += 1
            self.stats.drafted += k
            self.stats.accepted += n_acc
            self.stats.accepted_per_round.append(n_acc)
        return new

    def _propose_ngram(self, k_cap: int) -> int:
        """Looks the continuation up first (it costs next to nothing), then lets the cost model
        cut it, with the acceptance it has seen for matches of that length, apart for rounds
        after one that took every drafted token: inside a copied passage, a copy goes on."""
        t0 = time.perf_counter()
        found = self.drafter.propose(self.seq, k_cap, self.drafts)
        k = found
        if found and self.dp.adaptive:
            self.policy.select((self.drafter.match, self.drafter.copying))
            k = min(found, self.policy.choose(found))
        dt = time.perf_counter() - t0
        self.stats.t_draft += dt
        self.policy.observe_draft(dt, max(found, 1))
        return k

    def keep(self, n: int) -> None:
        """Drops from both caches what lies past the first n tokens of the sequence: tokens a
        round accepted beyond the output (a stop string, max_tokens), so that the caches hold
        what the caller saw and the next call's prefix reuse starts from it."""
        for m in (self.target, self.draft):
            try:
                if m is not None and not m.closed and m.n_past > n:
                    m.truncate(n)
            except PyllamaspecError:      # a model that failed (a lost RPC server): its error stands
                pass

    def close(self) -> None:
        """Leaves the models as they were given (a draft model's head restored), keeping the
        acceptance estimates for the next generation with the same pair."""
        if self.drafter is not None and self.dp.adaptive and self.stats.rounds:
            if not hasattr(self.target, "_psl_acceptance"):
                self.target._psl_acceptance = {}
            self.target._psl_acceptance[self._pair] = self.policy.state()
        if isinstance(self.drafter, ModelDrafter):
            self.drafter.close()

    def tokens(self) -> Iterator[tuple[int, bool]]:
        """Yields (token, from_draft) forever (until the context is full)."""
        while True:
            yield from self.step()
