"""Speculative decoding: a draft proposes, the target verifies in one batched pass.

One round (Leviathan et al. 2023; Chen et al. 2023):
  1. the drafter proposes up to k tokens x_1..x_k: a draft model samples them from its adjusted
     distribution q (stopping early where the next token is not worth its cost, see
     cost_model.py, or below a fixed p_min); an n-gram
     drafter copies what followed the last n tokens earlier in the text (q: a point mass); the
     target's MTP head drafts from its own hidden state (drafters/);
  2. the target evaluates [last, x_1..x_k] in ONE call, giving p at k+1 positions;
  3. the core accepts x_i with probability min(1, p_i(x_i)/q_i(x_i)) (greedy: iff it is the
     target's argmax), draws the next token from norm(max(0, p_i - q_i)) at the first rejection,
     or a bonus token from p_{k+1} when all pass;
  4. the caches roll back to the accepted prefix (the target's here, a drafter's in accepted()).
The tokens produced are distributed exactly as the target's own (greedy: identical), whatever
k is, so k is free to optimize: a cost model picks it each round from the measured costs and
the running acceptance rate, and picks k = 0 (plain decoding) when speculation would not pay.

Bookkeeping: `seq` holds every token so far. The target's sequence (one of the target Model's,
leased for this generation: generations sharing a Model never mix) holds seq[:-1] between rounds
(the last token is fed with the next drafts); a drafter keeps whatever state it needs in step
(drafter.py). Which drafter it is never matters to the round. Several decoders' rounds
made together, verified in one target evaluation: batch.py.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from ..engine import _args
from ..engine.grammar import Grammar
from ..engine.head import DraftHead
from ..engine.model import Model
from ..engine.sequence import ContextSequence
from ..engine.sampling import MAX_LOGPROBS, Sampler, SamplingParams, TokenLogprobs, logprobs as core_logprobs
from ..errors import ContextFullError, InvalidArgumentError, NoVocabularyError, PyllamaspecError
from .cost_model import DraftPolicy
from .constraint import Constraint
from .drafters import NO_DRAFT, Draft, Drafter, make_drafter
from .pair_stats import registry
from .params import DraftParams
from .tree.verify import TreeRound, TreeVerifier, main_chain

__all__ = ["Decoder", "DraftParams", "Stats"]


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
    forced: int = 0              # drafts a grammar forced (free: no drafter proposed them)
    forced_accepted: int = 0
    thinking_drafted: int = 0    # of drafted / accepted, those of rounds inside a reasoning block
    thinking_accepted: int = 0
    batch_rounds: int = 0        # rounds verified together with other sequences' (batch.py)
    batch_seqs: int = 0          # the sequences those rounds' evaluations carried, summed
    batch_plain: int = 0         # of them, rounds the batch's cost model decoded plainly
    tree_rounds: int = 0         # rounds that verified a token tree (speculation/tree/verify.py)
    tree_nodes: int = 0          # the nodes those rounds verified, summed
    tree_rows: int = 0           # the target rows they evaluated (a hybrid repeats shared nodes)
    tree_shape: str = ""         # the shape drafted last (speculation/tree/draft.py)
    # how the drafter's tokens become the target's: "" (the same vocabulary), "cross-vocabulary"
    # (a draft model of another tokenizer: its text re-tokenized, drafters/cross_vocab.py)
    draft_mode: str = ""
    # per tree round: (nodes verified, depth accepted, the branch kept: its leaf's rank)
    tree_log: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def mean_batch(self) -> float:
        """Sequences per target evaluation, on average (1: alone)."""
        return self.batch_seqs / self.batch_rounds if self.batch_rounds else 1.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Tokens gained per round: the accepted drafts (forced ones too) plus the target's own."""
        return (self.accepted + self.forced_accepted + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def n_prompt_evaluated(self) -> int:
        """Prompt tokens the prefill evaluated: neither the cached prefix nor the last token,
        which the first round evaluates with its drafts."""
        return max(0, self.n_prompt - 1 - self.n_reused)

    @property
    def prompt_tps(self) -> float:
        """Prefill tokens per second (0 when it evaluated nothing: no rate to measure)."""
        n = self.n_prompt_evaluated
        return n / self.t_prompt if n and self.t_prompt > 0 else 0.0

    @property
    def generate_tps(self) -> float:
        return self.n_generated / self.t_generate if self.t_generate > 0 else 0.0

    def record_tree(self, r: TreeRound, shape: str) -> None:
        self.tree_rounds += 1
        self.tree_nodes += r.nodes
        self.tree_rows += r.rows
        self.tree_shape = shape
        self.tree_log.append((r.nodes, len(r.path), r.branch))

    def thinking_acceptance(self) -> tuple[float, float] | None:
        """(acceptance inside reasoning blocks, elsewhere), None where no block was drafted in."""
        if not self.thinking_drafted:
            return None
        rest = self.drafted - self.thinking_drafted
        return (self.thinking_accepted / self.thinking_drafted,
                (self.accepted - self.thinking_accepted) / rest if rest else 0.0)

    def record_round(self, drafted: int, accepted: int, forced: int = 0, forced_accepted: int = 0) -> None:
        self.rounds += 1
        self.drafted += drafted
        self.accepted += accepted
        self.forced += forced
        self.forced_accepted += forced_accepted
        self.accepted_per_round.append(accepted + forced_accepted)

    @property
    def forced_acceptance_rate(self) -> float:
        return self.forced_accepted / self.forced if self.forced else 0.0

    @property
    def t_loop(self) -> float:
        """Time in the Python loop: generation time neither model's core accounts for."""
        return max(0.0, self.t_generate - self.t_draft - self.t_target)


class Decoder:
    """Token-level generation from a target model, with an optional drafter: a draft Model, a
    DraftHead (EAGLE-3, DFlash), "ngram" (prompt lookup), "mtp" (the target's own MTP layers),
    llama.cpp's --spec-type names (also draft_params.spec_type) or a Drafter (drafters/).
    tokens() yields (token, from_draft) as tokens are accepted. With `logprobs` (0..20), each
    round's TokenLogprobs (the token's and the top n) are in round_logprobs, read from the
    verification's logits rows (no extra evaluation)."""

    def __init__(self, target: Model, draft: "Model | DraftHead | str | Drafter | None", sampling: SamplingParams,
                 draft_params: DraftParams | None = None, logprobs: int | None = None,
                 grammar: Grammar | None = None):
        self.target = target
        self.sampling = sampling
        if logprobs is not None:
            _args.integer("logprobs", logprobs, 0, MAX_LOGPROBS)
        self.n_logprobs = logprobs
        self.round_logprobs: list[TokenLogprobs] = []
        self.dp = draft_params or DraftParams()
        V = target.n_vocab
        self.t_sampler = Sampler(V, sampling)
        try:
            eog = target.eog_tokens
        except NoVocabularyError:
            eog = frozenset()
        self.drafter = make_drafter(target, draft, sampling, self.dp, eog)
        self.images = None    # an ImagePrompt (vision/prompt.py) whose ids the prompt is
        # the longest draft: --draft-max, or the drafter's own size (llama.cpp's n-gram kinds)
        own = self.drafter.n_max if self.drafter is not None else None
        self.k_max = min(own, _args.MAX_DRAFT) if own is not None else self.dp.n_draft
        self.t_logits = np.empty((self.k_max + 1, V), np.float32)
        self.batch = np.empty(self.k_max + 1, np.int32)
        # --ignore-eos: the target's rows never choose these (a drafted one is then rejected)
        self.banned = np.array(sorted(eog), np.int64) if sampling.ignore_eos else None
        # the grammar, if any: a property of every round (constraint.py)
        self.constraint = Constraint(grammar, target, forced=self.dp.forced)
        self.constraint.attach(self.t_sampler)
        # what earlier generations learned of this target and drafter (pair_stats.py)
        self.policy = DraftPolicy(self.k_max,
                                  stats=registry.lookup(target, self.drafter.key if self.drafter else None))
        self.policy.per_round = self.drafter is not None and self.drafter.cost_per_round
        self.stats = Stats(draft_mode=self.drafter.mode if self.drafter is not None else "")
        self.tree = TreeVerifier(target, self.t_sampler)
        self.policy.tree_whole_branches = self.tree.hybrid
        self.seq: list[int] = []
        self.tseq: ContextSequence | None = None        # the target's sequence this generation holds
        # prompt tokens the target has not evaluated yet (prefill's target_later): the first
        # round evaluates them before its own batch (a batch round: in the same evaluation)
        self.pending: np.ndarray | None = None

    @property
    def draft(self) -> Model | None:
        """The draft model the drafter evaluates, if it has one."""
        return self.drafter.draft_model if self.drafter is not None else None

    def sequences(self) -> list[ContextSequence]:
        """The model sequences this generation holds (the target's, a draft model's)."""
        d = self.drafter.draft_seq if self.drafter is not None else None
        return [s for s in (self.tseq, d) if s is not None]

    # -- prompt ---------------------------------------------------------------------------
    def open(self, prompt: list[int], fresh: bool = False, stop=None) -> None:
        """Takes a sequence of the target (and the drafter its own) for a generation after
        prompt: the one holding most of it (fresh: an empty one), waiting while every sequence
        is taken (stop() gives up, EvaluationInterrupted). prefill() opens if not done yet."""
        if self.tseq is None:
            self.tseq = self.target.lease(None if fresh else prompt[:-1], stop=stop)
        if self.drafter is not None:
            self.drafter.see_images(self.images)     # a draft model may read the images' rows
            self.drafter.open(self._text(prompt), fresh, stop)

    def _text(self, prompt: list[int]) -> list[int]:
        """The prompt as the sampler and a drafter see it: an image's positions as a placeholder
        (a draft model that reads the rows there has them from see_images: drafters/model.py)."""
        return prompt if self.images is None else self.images.text_ids()

    def prefill(self, prompt: list[int], fresh: bool = False, progress=None, draft_later: bool = False,
                target_later: bool = False, checkpoints: Sequence[int] = ()) -> None:
        """Evaluate the prompt (all but its last token, which the first round feeds). What a
        model's cache already holds of it (its longest common prefix with the cached ids: the
        previous turns of a chat) is kept, not evaluated again (fresh: nothing is kept); on
        the CPU the result is bit-identical to a fresh evaluation where the model's batched and
        one-token evaluations are (SmolLM2: yes; Gemma 3: not quite, as in llama.cpp).
        progress(done, total): called after each batch of the target's evaluation (a long
        prompt's progress bar). draft_later: the next rounds are not expected to draft (a batch
        decoding plainly): a draft model leaves the prompt to its catch-up (Drafter.prefill_later).
        target_later: the target's part is left to the first round (self.pending), which a batch
        round evaluates together with the other sequences' (llama-server's continuous batching).
        checkpoints: prompt lengths at which a hybrid target keeps its recurrent state
        (ContextSequence.take_checkpoint: where a later prompt may part from this one, a chat's
        user turns), the evaluation split there; not with target_later."""
        if not prompt:
            raise InvalidArgumentError("the prompt is empty (no tokens)")
        # (a draft of another vocabulary reads a window of the text: cross_vocab.py)
        for m in (self.target, None if self.stats.draft_mode else self.draft):
            if m is not None and len(prompt) >= m.n_ctx:
                raise ContextFullError(f"the prompt has {len(prompt)} tokens; the context holds {m.n_ctx} "
                                       f"(raise n_ctx / -c)")
        if self.images is not None and (self.images.ids != list(prompt) or prompt[-1] < 0):
            raise InvalidArgumentError("a prompt with images must be its ImagePrompt's ids, ending with text")
        t0 = time.perf_counter()
        self.open(prompt, fresh)
        self.seq = list(self._text(prompt))
        head = np.asarray(prompt[:-1], np.int64 if self.images is not None else np.int32)
        if self.sampling.penalized:              # llama.cpp penalizes repeats of the prompt too
            self.t_sampler.reset(self.seq)
        if fresh:
            self.tseq.clear()
        n_keep = self.tseq.reuse_prefix(prompt[:-1])
        if self.images is not None:             # an image kept in part is evaluated again, whole
            target_later, n_keep = False, self.images.image_start(n_keep)
            self.tseq.truncate(n_keep)
        self.pending = None
        if self.images is not None:              # a hybrid keeps its state before each image too
            checkpoints = [*checkpoints, *self.images.starts()]
        cuts = [p - n_keep for p in sorted(set(checkpoints)) if n_keep < p <= len(head)]
        if cuts and not self.target.memory.get("recurrent_bytes", 0):
            cuts = []                            # nothing to keep: the cache rolls back exactly
        if n_keep < len(head) and target_later and not cuts:
            self.pending = head[n_keep:]
        elif n_keep < len(head) and self.images is not None:
            self._eval_images(n_keep, len(head), progress, [n_keep + c for c in cuts])
        elif n_keep < len(head):
            self._eval_prompt(head[n_keep:], progress, cuts)
        if self.drafter is not None:
            prefill = self.drafter.prefill_later if draft_later else self.drafter.prefill
            self.stats.n_draft_reused = prefill(self.seq, self.tseq, fresh)
        self.stats.n_prompt = len(prompt)
        self.stats.n_reused = n_keep
        self.stats.t_prompt = time.perf_counter() - t0

    def _eval_images(self, start: int, end: int, progress, cuts: Sequence[int] = ()) -> None:
        """The prompt's positions [start, end) into the target's cache, text and images in turn:
        an image's rows as one batch (they may attend to each other both ways), at the grid's 2-D
        positions where the text model places them so. A hybrid's checkpoints at the cuts
        (positions of the prompt) of its text, and after an image for a cut within it."""
        done = start
        for run in self.images.chunks(start, end):
            if run[0] == "text":
                n = len(run[1])
                self._eval_prompt(np.asarray(run[1], np.int32), None, [c - done for c in cuts if done < c <= done + n])
                done += n
            else:
                img, ids = run[1], run[2]
                self.tseq.eval_rows(img.rows, ids, img.non_causal, grid=img.grid, draft_token=self.images.placeholder)
                done += len(ids)
                if any(done - len(ids) < c <= done for c in cuts):
                    self.tseq.take_checkpoint()
            if progress is not None:
                progress(done - start, end - start)

    def _eval_prompt(self, ids: np.ndarray, progress, cuts: Sequence[int] = ()) -> None:
        """The prompt's tokens into the target's cache, a checkpoint taken after each cut (the
        tokens before it); with progress, one n_batch batch per call (the batches the core would
        make of one call: the same evaluation)."""
        bounds = [0, *cuts] + ([] if cuts and cuts[-1] == len(ids) else [len(ids)])
        for a, b in zip(bounds, bounds[1:]):
            if progress is None:
                self.tseq.eval(ids[a:b], logits="none")
            else:
                step = max(1, self.target.n_batch)
                for i in range(a, b, step):
                    self.tseq.eval(ids[i:min(i + step, b)], logits="none")
                    progress(min(i + step, b), len(ids))
            if b in cuts:
                self.tseq.take_checkpoint()

    # -- rounds ---------------------------------------------------------------------------
    def room(self) -> int:
        """Tokens the target can still take (the pending last token included)."""
        return self.target.n_ctx - len(self.seq) + 1

    def step(self, want: int | None = None) -> list[tuple[int, bool]]:
        """One round: draft, verify in one batch, accept or resample, roll back. Returns the new
        tokens, each with whether it was drafted (by the drafter or forced by a grammar).
        `want`: how many more tokens the caller will take (max_tokens left); a round drafts no
        more than that needs, so nothing is verified only to be dropped."""
        cap = self._draft_cap(want)
        k = min(cap, self.drafter.max_draft) if self.drafter is not None else 0
        self.eval_pending()
        t_round = time.perf_counter()
        draft = self.drafter.propose(self.seq, k, self.policy, self.constraint) if k else NO_DRAFT
        # drafts the grammar forbids are cut; the text it forces is appended (free drafts)
        draft = self.constraint.complete(draft, cap)
        t0 = time.perf_counter()
        self.stats.t_draft += t0 - t_round
        # the target scores [last, x_1..x_k] in one batch: p_1..p_{k+1}
        n_past = self.tseq.n_past
        draft, p = self._score(draft)
        return self.settle(draft, p, n_past, t0, t_round)

    def eval_pending(self) -> None:
        """The prompt tokens prefill left to the first round, evaluated now (alone)."""
        if self.pending is not None:
            t0 = time.perf_counter()
            self.tseq.eval(self.pending, logits="none")
            self.pending = None
            self.stats.t_prompt += time.perf_counter() - t0

    def settle(self, draft: Draft, p: np.ndarray, n_past: int, t0: float, t_round: float,
               batch: int = 1) -> list[tuple[int, bool]]:
        """The round after the target scored the draft (rows p, its sequence at n_past before
        them): the acceptance test, the rollback, the bookkeeping. batch: the sequences the
        target's evaluation carried (its cost is the batch's, observed by batch.py)."""
        # x_i is accepted with probability min(1, p_i(x_i)/q_i(x_i)) (greedy: iff it is the
        # argmax); the first rejection draws from norm(max(0, p_i - q_i)), else a bonus from p_{k+1}
        # (under a grammar p and q lose the forbidden tokens first: the sampler holds it)
        if self.banned is not None and self.banned.size:
            p[:, self.banned] = -np.inf
        if self.constraint.queue:
            self.constraint.mask(p, draft)
        if draft.parents is None:
            n_acc, nxt = self.t_sampler.verify(p, draft.tokens, draft.q)
            self.tseq.truncate(n_past + 1 + n_acc)             # roll back the rejected drafts
            new, rows = [int(t) for t in draft.tokens[:n_acc]] + [int(nxt)], p
        else:
            new, rows = self._settle_tree(draft, p, n_past)
            n_acc = len(new) - 1
        dt = time.perf_counter() - t0
        self.stats.t_target += dt
        if batch == 1:
            self.policy.observe_target(len(rows) if draft.parents is None else self.tree.rows, dt)
        self._extend(new, rows)
        self.constraint.advance(new)                         # the grammar takes the round's text
        self._observe(draft, new, n_acc, t_round, batch)
        return [(t, i < n_acc) for i, t in enumerate(new)]

    def _settle_tree(self, draft: Draft, p: np.ndarray, n_past: int) -> tuple[list[int], np.ndarray]:
        """A tree's acceptance (tree/verify.py) and rollback: the new text and the rows that scored it."""
        path, nxt = self.tree.accept(p, draft)
        r = self.tree.finish(self.tseq, draft, path, n_past)
        self.stats.record_tree(r, self.drafter.tree_shape if self.drafter is not None else "")
        return [int(draft.tokens[i]) for i in path] + [int(nxt)], p[[0] + [i + 1 for i in path]]

    def _observe(self, draft: Draft, new: list[int], n_acc: int, t_round: float, batch: int = 1) -> None:
        """The drafter rolls back its own state and the cost model learns from the drafter's
        part of the draft (forced drafts are the grammar's, not the drafter's)."""
        own = draft.n - draft.n_forced
        own_acc = min(n_acc, own)
        if self.drafter is not None:
            self.drafter.accepted(self.seq, new, draft)
            # a tree: the cost model learns from the branch kept, as from a chain
            part = slice(0, own) if draft.parents is None else self.tree.kept
            p_max = draft.p_max[part] if draft.p_max is not None else None
            n_part = own if draft.parents is None else len(self.tree.kept)
            self.policy.observe_verified(n_part, own_acc, p_max, (time.perf_counter() - t_round) / batch)
        if self.drafter is not None or self.constraint.active:
            self.stats.record_round(own, own_acc, draft.n_forced, n_acc - own_acc)
            if self.policy.phase == "thinking":
                self.stats.thinking_drafted += own
                self.stats.thinking_accepted += own_acc

    def _draft_cap(self, want: int | None) -> int:
        """The longest draft this round may verify: n_draft, the context's room, what the caller
        still wants, and how far the target (a hybrid's recurrent snapshot ring) rolls back in
        O(1) (the drafter's own bound applies to its part)."""
        room = self.room()
        if room < 1:
            raise ContextFullError(f"context full: {len(self.seq)} tokens, n_ctx {self.target.n_ctx}")
        return min(self.k_max, room - 1, max(0, want - 1) if want is not None else room,
                   self.target.max_rollback)

    def batch_tokens(self, draft: Draft) -> np.ndarray:
        """The round's batch: the last token, then the draft (a chain)."""
        n = draft.n + 1
        self.batch[0] = self.seq[-1]
        self.batch[1:n] = draft.tokens
        return self.batch[:n]

    def _score(self, draft: Draft) -> tuple[Draft, np.ndarray]:
        """The target's logits for the round's batch: a chain's, or a tree's (tree/verify.py; its
        first branch as a chain when too few of the target's sequences are free)."""
        if draft.parents is not None:
            # the tree's nodes each take a cell: near the context's end, its first branch only
            tree = self.tree.lease(draft, self.sampling.greedy) if draft.n < self.room() else None
            if tree is not None:
                try:
                    return tree, self.tree.score(self.tseq, self.seq[-1], tree)
                except BaseException:
                    self.tree.release()
                    raise
            draft = main_chain(draft)
        return draft, self.tseq.eval(self.batch_tokens(draft), logits="all", out=self.t_logits)

    def _extend(self, new: list[int], rows: np.ndarray) -> None:
        """Appends a round's tokens to the text, the penalties' history and the logprobs (row i
        scored the i-th new token)."""
        if self.n_logprobs is not None:
            self.round_logprobs = core_logprobs(rows, new, self.n_logprobs)
        if self.sampling.penalized:
            self.t_sampler.push(new)
        self.seq.extend(new)

    def keep(self, n: int) -> None:
        """Drops from both caches what lies past the first n tokens of the sequence: tokens a
        round accepted beyond the output (a stop string, max_tokens), so that the caches hold
        what the caller saw and the next call's prefix reuse starts from it."""
        for s in self.sequences():
            try:
                if not s.closed and s.n_past > n:
                    s.truncate(n)
            except PyllamaspecError:      # a model that failed (a lost RPC server): its error stands
                pass

    def close(self) -> None:
        """Leaves the models as they were given (a draft model's head restored, the sequences
        given back with what they hold for the next prompt), keeping the acceptance estimates
        for the next generation with the same pair."""
        if self.drafter is not None and self.dp.adaptive and self.stats.rounds:
            self.policy.save()
        if self.drafter is not None:
            self.drafter.close()
        self._release()

    def _release(self) -> None:
        if self.tseq is not None:
            self.tseq.release()
            self.tseq = None

    def __del__(self) -> None:                # a decoder dropped without close(): its sequences go back
        try:
            self._release()
            d = self.drafter.draft_seq if self.drafter is not None else None
            if d is not None:
                d.release()
        except Exception:
            pass

    def tokens(self) -> Iterator[tuple[int, bool]]:
        """Yields (token, from_draft) forever (until the context is full)."""
        while True:
            yield from self.step()
