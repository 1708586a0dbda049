"""A draft model: a small model of the target's vocabulary samples drafts from its adjusted
distribution q (llama.cpp's draft-simple, with sampled verification).

Its sequence (one of the draft model's, leased for the generation) holds seq[:-1] except for
`skipped` tokens: after a long stretch of plain decoding it catches up on the last CATCH_UP_MAX
tokens only, placed right after what it holds (a drafter may see any text; the target's
verification keeps the output exact). Generations sharing a draft model share its restricted
head: the last one to finish gives the head back as it was. With images it reads rows at their
positions (see_images: its projector's, the target's of its width, else zeros), its cache then
holding the images' own ids there, as the target's; a catch-up evaluates the text (placeholders
at an image)."""
from __future__ import annotations

import threading
import warnings
import weakref

import numpy as np

from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...errors import InvalidArgumentError, NoVocabularyError, UnsupportedModelError
from ..params import DraftParams
from ..drafter import Draft, Eval, Steps
from ..tree.sampled import TreeSampledDrafter
from ..tree.draft import TreeDraft

# Model.common_token_ids(n) of each target, by n: a ranking of its vocabulary (computed once)
_COMMON_IDS: "weakref.WeakKeyDictionary[Model, tuple[int, np.ndarray | None]]" = weakref.WeakKeyDictionary()
# By draft model: [the drafters using it (weakly: one dropped without close() does not count),
# the head it had before the first of them]
_HEAD_USERS: "weakref.WeakKeyDictionary[Model, list]" = weakref.WeakKeyDictionary()
_HEAD_LOCK = threading.Lock()


def _common_ids(target: Model, n: int, eog: frozenset[int]) -> np.ndarray | None:
    """The restricted head's ids: the n commonest tokens and the end-of-generation ones."""
    cached = _COMMON_IDS.get(target)
    if cached is None or cached[0] != n:
        try:
            common = target.common_token_ids(n)
        except NoVocabularyError:                # no token texts to rank: the full head
            common = None
        if common is not None:
            common = np.union1d(common, np.fromiter(eog, np.int32)).astype(np.int32)
        _COMMON_IDS[target] = cached = (n, common)
    return cached[1]


class DraftModelDrafter(TreeSampledDrafter):
    """Drafts with a draft Model (a chain, or a token tree: tree/sampled.py); see the module's
    docstring."""

    CATCH_UP_MAX = 32

    def __init__(self, model: Model, sampling: SamplingParams, params: DraftParams, eog: frozenset[int],
                 target: Model):
        if model.n_vocab != target.n_vocab:
            raise InvalidArgumentError(f"draft has {model.n_vocab} logits, target {target.n_vocab}")
        super().__init__(model.n_vocab, sampling, params, eog)
        self.model = self.draft_model = model
        self.key = model.path
        self.draft_seq = None
        with _HEAD_LOCK:
            users = _HEAD_USERS.get(model)
            if users is None or not users[0]:
                users = _HEAD_USERS[model] = [weakref.WeakSet(), model.output_ids]
            users[0].add(self)
            self.saved_head = users[1]
            shared = len(users[0]) > 1
        self._open = True
        if not shared or model.output_ids is None:   # (else restricted by the first, grown by the text)
            self._restrict_head(target)
        # Tokens the text uses join the head as they appear (rare names, identifiers, a loop
        # of odd tokens): texts repeat their own rare tokens.
        self.in_head = None
        if model.output_ids is not None and model.output_ids is not self.saved_head:
            self.in_head = np.zeros(model.n_vocab, bool)
            self.in_head[model.output_ids] = True
        self.logits = np.empty((1, model.n_vocab), np.float32)
        self.step_buf = np.empty(1, np.int32)
        self.skipped = 0
        self.images = None            # the generation's ImagePrompt (see_images)
        self.image_rows = None        # the rows it reads at the images, by first id; None: placeholders

    def _restrict_head(self, target: Model) -> None:
        """A large vocabulary's head is most of a small draft's cost (Gemma 3: 262k rows): the
        draft computes the common tokens' logits only. It proposes no rare token, which only
        costs acceptance; the target's verification keeps the output exact."""
        n, m = self.params.draft_vocab, self.model
        if not n or m.n_vocab <= 2 * n:
            return
        ids = _common_ids(target, n, self.eog)
        if ids is not None and (m.output_ids is None or not np.array_equal(m.output_ids, ids)):
            m.set_output_ids(ids)

    @property
    def max_draft(self) -> int:
        return self.model.max_rollback + 1       # the draft drops at most k - 1 of its tokens

    def prefill(self, prompt: list[int], target=None, fresh: bool = False) -> int:
        """Brings its draft sequence to hold prompt[:-1], evaluating only what follows its
        longest common prefix with what it (or another of the draft's sequences) holds;
        returns how many tokens were reused."""
        head, n_keep = self._reuse(prompt, fresh)
        if n_keep < len(head) and self.image_rows is not None:
            self._eval_images(n_keep, len(head))
        elif n_keep < len(head):
            self.draft_seq.eval(head[n_keep:], logits="none")
        return n_keep

    def see_images(self, images) -> None:
        """The rows it reads at the images (ImagePrompt.draft_images: its projector's, the
        target's where as wide as its input, else zeros, with a warning as llama.cpp's)."""
        self.images, self.image_rows = images, None
        if images is None or not images.images:
            return
        width = self.model.info.n_embd_inp
        if not images.draft_fits(width):
            warnings.warn(f"the target's image rows are {next(iter(images.images.values())).rows.shape[1]} wide; "
                          f"the draft model takes {width}: it reads zero rows at the images and drafts poorly "
                          "after them (give it a projector of its own: draft_mmproj= / --mmproj-draft)",
                          stacklevel=2)
        self.image_rows = images.draft_images(width)

    def _ids(self, prompt: list[int]) -> list[int]:
        """prompt (text ids) as its cache holds it: the images' own ids where it reads their rows
        (so prefix reuse parts at another image, as the target's does)."""
        return self.images.ids[:len(prompt)] if self.image_rows is not None else list(prompt)

    def _eval_images(self, start: int, end: int) -> None:
        """The prompt's positions [start, end) into its cache, text and images in turn (the rows
        by the rule of its own architecture: eval_rows, as the target's)."""
        for run in self.images.chunks(start, end, self.image_rows):
            if run[0] == "text":
                self.draft_seq.eval(np.asarray(run[1], np.int32), logits="none")
                continue
            img, ids = run[1], run[2]
            try:
                self.draft_seq.eval_rows(img.rows, ids, img.non_causal, grid=img.grid,
                                         draft_token=self.images.placeholder)
            except UnsupportedModelError:        # an architecture that takes no rows: placeholders
                self.image_rows = None
                self.draft_seq.eval(np.full(len(ids), self.images.placeholder, np.int32), logits="none")

    def prefill_later(self, prompt: list[int], target=None, fresh: bool = False) -> int:
        """prefill() without the evaluation: what its sequence lacks of the prompt is left to
        catch_up_steps (its last CATCH_UP_MAX tokens, placed after what it holds) should a
        round draft; a batch decoding plainly then spends nothing on the draft model."""
        return self._reuse(prompt, fresh)[1]

    def _reuse(self, prompt: list[int], fresh: bool) -> tuple[np.ndarray, int]:
        """Its sequence truncated to its longest common prefix with prompt[:-1] (emptied if
        fresh): (prompt[:-1], that prefix's length)."""
        super().prefill(prompt)
        head = np.asarray(prompt[:-1], np.int32)
        self.open(prompt, fresh)
        if fresh:
            self.draft_seq.clear()
        ids = self._ids(prompt)[:-1]
        n_keep = self.draft_seq.reuse_prefix(ids)
        if self.image_rows is not None and self.images.image_start(n_keep) < n_keep:
            # an image kept in part is evaluated again, whole (reuse_prefix: a hybrid's checkpoints)
            n_keep = self.draft_seq.reuse_prefix(ids[:self.images.image_start(n_keep)])
        self.skipped = 0
        self.learn(head)
        return head, n_keep

    def open(self, prompt: list[int], fresh: bool = False, stop=None) -> None:
        if self.draft_seq is None:
            self.draft_seq = self.model.lease(None if fresh else self._ids(prompt)[:-1], stop=stop)

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
        n_past = self.draft_seq.n_past
        gap = len(seq) - 1 - n_past - self.skipped
        return gap, max(0, min(gap, self.CATCH_UP_MAX, self.model.n_ctx - n_past - 1))

    def pending(self, seq: list[int]) -> int:
        return self._unseen(seq)[1]

    def catch_up_steps(self, seq: list[int]) -> Steps:
        gap, n = self._unseen(seq)
        self.skipped += gap - n
        if n:
            yield Eval(self.draft_seq, np.asarray(seq[len(seq) - 1 - n:-1], np.int32), "none")
        return n

    def room(self) -> int:
        return self.model.n_ctx - self.draft_seq.n_past

    def next_step(self, token: int, k: int) -> Eval:
        self.step_buf[0] = token
        return Eval(self.draft_seq, self.step_buf, "last", self.logits)

    def new_tree(self) -> TreeDraft:
        return TreeDraft(self.model, self.draft_seq, self.sampler, self.greedy, self.rng, self.eog)

    def accepted(self, seq: list[int], new: list[int], draft: Draft) -> None:
        super().accepted(seq, new, draft)      # a tree's drafter keeps its accepted path
        # keep what the draft saw of the accepted prefix; the rest it evaluates next round
        d = self.draft_seq
        d.truncate(min(d.n_past, len(seq) - 1 - self.skipped))
        if self.in_head is not None and not self.in_head[new[-1]]:
            self.learn(new[-1:])                 # accepted drafts were in the head already

    def close(self) -> None:
        """Gives back its draft sequence and, the last drafter on the model to close, the
        draft model's head as it was."""
        if not self._open:
            return
        self._open = False
        self.release_tree()
        if self.draft_seq is not None:
            self.draft_seq.release()
            self.draft_seq = None
        m = self.model
        with _HEAD_LOCK:
            users = _HEAD_USERS.get(m)
            if users is not None:
                users[0].discard(self)
            last = users is None or not users[0]
            if users is not None and last:
                del _HEAD_USERS[m]
        if last and not m.closed and (m.output_ids is not self.saved_head):
            m.set_output_ids(self.saved_head)
