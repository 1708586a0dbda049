"""MTP drafting: a target whose GGUF carries NextN/MTP layers (qwen35) drafts with them, from
its own last hidden state: no draft model, no second tokenizer, the weights shared.

Each step runs the MTP block once (csrc/engine/mtp.h): step 0 takes the token after the cache and the
target's hidden state before it, step s the step s - 1 draft token and the MTP's own output
state, so a k-token draft costs k MTP-block evaluations (one attention layer, its FFN and the
output head). The core keeps the MTP cache in step with the target's (its eval fills it, its
truncation rolls it back), so this drafter holds no cache of its own. Drafts are sampled from
the MTP's adjusted distribution q, as a draft model's are, and verified exactly: greedy output
is the target's own, sampled output keeps the target's distribution.

Token trees (DraftParams.tree, as a draft model's: tree/sampled.py, tree/draft.py): step 0 is
the root's evaluation; a node grown is an MTP draft node run from its parent's output state
(psl_context_seq_mtp_draft_nodes: the core keeps every node's state until the draft ends), the
nodes of one expansion in one MTP batch. Nothing of it enters the MTP cache.
"""
from __future__ import annotations

import time

import numpy as np

from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...engine.sequence import ContextSequence
from ...errors import UnsupportedModelError
from ..params import DraftParams
from ..drafter import Call
from ..tree.sampled import TreeSampledDrafter
from ..tree.draft import TreeBuilder

__all__ = ["MtpDrafter"]


class MtpTree(TreeBuilder):
    """A tree's nodes evaluated by the MTP block of the target's sequence tseq: the root is the
    round's step 0 (MTP node 0), each node grown the next MTP node, a child of its parent's."""

    def __init__(self, tseq: ContextSequence, sampler, greedy: bool, rng: np.random.Generator, eog: frozenset[int]):
        super().__init__(sampler, greedy, rng, eog)
        self.tseq = tseq
        self.mtp_node = {-1: 0}              # tree node -> its MTP draft node
        self.n_mtp = 1

    def _eval(self, grow: list, toks: list[int]) -> list[np.ndarray | None]:
        if not grow:
            return []
        t0 = time.perf_counter()
        rows = self.tseq.mtp_draft_nodes([toks[i] for i, _, _ in grow], [self.mtp_node[e.node] for _, e, _ in grow])
        self.expansions.append((len(grow), time.perf_counter() - t0))
        for j, (i, _, _) in enumerate(grow):
            self.mtp_node[i] = self.n_mtp + j
        self.n_mtp += len(grow)
        return list(rows)


class MtpDrafter(TreeSampledDrafter):
    """Drafts with the target's MTP block: a chain, or a token tree (see the module's docstring)."""

    key = "mtp"
    SEED_MIX = (0xD1B54A32D192ED03, 0x8CB92BA72F3D8DD7)

    def __init__(self, target: Model, sampling: SamplingParams, params: DraftParams, eog: frozenset[int]):
        if target.n_mtp_layers < 1:
            raise UnsupportedModelError(
                f"draft_model='mtp': {target.path!s} has no MTP (NextN) layers to draft with "
                f"(nextn_predict_layers is 0, or the converter left their tensors out)")
        super().__init__(target.n_vocab, sampling, params, eog)
        target.enable_mtp()
        self.target = target
        self.tseq = None                        # the target's sequence the generation holds
        self.logits = np.empty(target.n_vocab, np.float32)

    def prefill(self, prompt: list[int], target=None, fresh: bool = False) -> int:
        self.tseq = target if target is not None else self.target.sequence(0)
        return super().prefill(prompt)

    def room(self) -> int:
        return self.target.n_ctx - self.tseq.n_past

    def next_step(self, token: int, k: int) -> Call:
        return Call(lambda: self.tseq.mtp_draft(token, k, out=self.logits))

    def new_tree(self) -> MtpTree:
        return MtpTree(self.tseq, self.sampler, self.greedy, self.rng, self.eog)
