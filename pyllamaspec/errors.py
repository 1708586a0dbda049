"""The exceptions pyllamaspec raises: one family, one class per status the core reports."""
from __future__ import annotations


class PyllamaspecError(Exception):
    """Base class of every error pyllamaspec raises."""

    status: int = -1

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(PyllamaspecError, ValueError):
    """A parameter is outside its domain."""
    status = 1


class ChatTemplateError(InvalidArgumentError):
    """A chat template could not be compiled or rendered, or refused the conversation
    (raise_exception in the template)."""


class GrammarError(InvalidArgumentError):
    """A grammar (GBNF) or JSON schema that cannot constrain generation: the message names the
    problem and where (line:column of the grammar, the schema's path)."""


class ModelIOError(PyllamaspecError, OSError):
    """A model file could not be opened or read."""
    status = 2


class ModelNotFoundError(ModelIOError, FileNotFoundError):
    """The model path does not exist."""


class ModelFormatError(PyllamaspecError, ValueError):
    """The file is not a valid GGUF model (bad magic, truncated, missing or misshapen tensors)."""
    status = 3


class UnsupportedModelError(PyllamaspecError):
    """A valid file the core does not run (unknown architecture, unsupported feature)."""
    status = 4


class TokenOutOfRangeError(PyllamaspecError, ValueError):
    """A token id (or index) outside its range."""
    status = 5


class ContextFullError(PyllamaspecError):
    """The evaluation would pass the context length n_ctx."""
    status = 6


class BackendError(PyllamaspecError, RuntimeError):
    """The compute backend failed."""
    status = 7


class RpcError(BackendError):
    """An RPC server could not be reached, is busy, speaks another protocol version, or was lost
    during a call (see pyllamaspec.rpc). From generate(), ``tokens`` and ``text`` hold what was
    produced before the failure."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message, status)
        self.tokens: list[int] = []
        self.text: str = ""


class OutOfMemoryError(PyllamaspecError, MemoryError):
    status = 8


class BufferTooSmallError(PyllamaspecError, ValueError):
    status = 9


class EvaluationInterrupted(PyllamaspecError):
    """An evaluation was stopped by an interrupt (Ctrl-C); the cache is unchanged."""
    status = 10


class NoVocabularyError(PyllamaspecError):
    """The model file carries no tokenizer."""
    status = 11


class InternalError(PyllamaspecError, RuntimeError):
    status = 12


class ModelClosedError(InvalidArgumentError):
    """A Model (or Tokenizer, Detokenizer) was used after close(), or while closing: like I/O
    on a closed file, a ValueError."""


BY_STATUS: dict[int, type[PyllamaspecError]] = {
    cls.status: cls
    for cls in (InvalidArgumentError, ModelIOError, ModelFormatError, UnsupportedModelError,
                TokenOutOfRangeError, ContextFullError, BackendError, OutOfMemoryError,
                BufferTooSmallError, EvaluationInterrupted, NoVocabularyError, InternalError)
}
