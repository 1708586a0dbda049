"""What a user gives as a draft, opened: the one place where generate(), the CLI, the server and
the benchmark turn it into what a Decoder takes.

A draft is a path (a draft model; an EAGLE-3, DFlash or Gemma 4 assistant head, by what the
file holds; the target's own file, when it carries MTP layers and no type is asked, meaning
those layers, as llama.cpp detects draft-mtp from nextn tensors), a loaded Model or DraftHead, a
Drafter, "ngram", "mtp" or llama.cpp's --spec-type names (kept as they are: the Decoder's
make_drafter reads them), or None (plain decoding)."""
from __future__ import annotations

import os
from contextlib import ExitStack

from ..engine.head import HEAD_TYPES, DraftHead, file_arch
from ..engine.model import DRAFT_OPTIONS, Model
from ..errors import InvalidArgumentError, PyllamaspecError
from ..speculation.drafter import Drafter
from ..speculation.spec_types import parse as parse_spec_types

Draft = "Model | DraftHead | Drafter | str | None"


def is_draft_name(d) -> bool:
    """Whether d names a drafter rather than a file: "ngram", "mtp" or --spec-type names."""
    if not isinstance(d, str) or os.path.exists(d):
        return False
    if d in ("ngram", "mtp"):
        return True
    try:
        parse_spec_types(d)
        return True
    except PyllamaspecError:
        return False


def own_mtp(path, target: Model, spec_type) -> bool:
    """The target's own file as its draft, no type asked, and MTP layers to draft with."""
    return (spec_type is None and isinstance(path, (str, os.PathLike)) and os.path.exists(path)
            and os.path.samefile(path, target.path) and target.n_mtp_layers > 0)


def open_draft(given, target: Model, stack: ExitStack, *, spec_type=None, n_gpu_layers: int = 0,
               **model_kw) -> Draft:
    """given, opened for target (a file's model or head enters stack: closed with it); model_kw
    go to a draft model's Model() (DRAFT_OPTIONS added: no tokenizer, unless its vocabulary
    differs from the target's, Model.check_draft)."""
    if given is None or isinstance(given, (Model, DraftHead, Drafter)):
        if getattr(given, "closed", False):
            raise InvalidArgumentError("the draft model is closed")
        return given
    if is_draft_name(given):
        return given
    if own_mtp(given, target, spec_type):
        return "mtp"
    if file_arch(given) in HEAD_TYPES:
        return stack.enter_context(DraftHead(given, n_gpu_layers=n_gpu_layers))
    kw = {**DRAFT_OPTIONS, **model_kw}
    draft = Model(given, n_gpu_layers=n_gpu_layers, **kw)
    if not kw["tokenizer"] and target.vocab_difference(draft) is not None:
        draft.close()                    # another vocabulary: its drafts are text, it needs its tokenizer
        draft = Model(given, n_gpu_layers=n_gpu_layers, **{**kw, "tokenizer": True})
    return stack.enter_context(draft)
