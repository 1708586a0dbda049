"""Whether a draft model tokenizes as its target, and if not, whether text can bridge them
(speculation/drafters/cross_vocab.py): Model.check_draft and Model.vocab_difference."""
from __future__ import annotations

import weakref

from ..errors import NoVocabularyError, UnsupportedModelError
from ._native import lib
from .vocab import TokenAttr, VocabMixin as Model    # (a Model: model.py imports this module)

SAME, CROSS = "same", "cross-vocabulary"


def vocab_difference(target: "Model", draft: "Model") -> str | None:
    """None where draft tokenizes exactly as target (same ids, token text and types, special
    tokens), else the first difference; read from the files' tokenizer arrays, so a draft loaded
    without its tokenizer is compared too (NoVocabularyError: a file has no token texts). Both
    are Models (checked by Model.check_draft / vocab_difference)."""
    with target._users, draft._users:
        try:
            target._check(lib.psl_vocab_compatible(target._model, draft._model))
            return None
        except UnsupportedModelError as e:
            return str(e)


def draft_mode(target: "Model", draft: "Model", cache: "weakref.WeakKeyDictionary") -> str:
    """SAME, or CROSS where both tokenizers read and write text and give text back as they read
    it; else NoVocabularyError / UnsupportedModelError saying why text cannot bridge them.
    cache: the target's answers, by draft."""
    mode = cache.get(draft)
    if mode is not None:
        return mode
    why = vocab_difference(target, draft)
    if why is not None:
        for m, name in ((target, "target"), (draft, "draft")):
            _check_bridgeable(m, name, why)
    cache[draft] = mode = SAME if why is None else CROSS
    return mode


def _check_bridgeable(m: "Model", name: str, why: str) -> None:
    try:
        m.tokenize(b"a", add_special=False)
    except NoVocabularyError as e:
        raise NoVocabularyError(f"the vocabularies differ ({why}), and the {name} cannot write text "
                                f"({e}): a draft of another vocabulary is bridged by text") from None
    probe = _round_trip_probe(m)
    back = b"".join(m.token_to_piece(t, render_special=True) for t in m.tokenize(probe, add_special=False))
    if back != probe:
        raise UnsupportedModelError(
            f"the vocabularies differ ({why}), and the {name}'s tokenizer does not give text back as it "
            f"read it ({probe!r} -> {back!r}: a space added before the text, SentencePiece's "
            f"add_space_prefix, or a normalization): drafts cannot be bridged by text; use a draft of the "
            f"target's vocabulary")


def _round_trip_probe(m: "Model") -> bytes:
    """Text of the model's own ordinary tokens (two pieces that start and end with no
    whitespace), which a tokenizer that gives text back as it read it tokenizes back to itself."""
    pieces: list[bytes] = []
    for t in range(min(m.n_vocab, 4096)):
        piece = m.token_to_piece(t)
        if piece and piece.strip() == piece and m.token_attr(t) == TokenAttr.NORMAL:
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError:
                continue
            pieces.append(piece)
            if len(pieces) == 2:
                break
    return b"".join(pieces)
