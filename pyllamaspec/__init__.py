"""pyllamaspec: speculative decoding for quantized GGUF models on a ggml core."""
from __future__ import annotations

from ._native import set_verbose, system_info
from .cancel import Cancel
from .chat import ChatResult, chat
from .chat_template import BUILTIN_TEMPLATES, ChatTemplate
from .errors import (BackendError, ChatTemplateError, ContextFullError, EvaluationInterrupted, InvalidArgumentError,
                     ModelClosedError, ModelFormatError, ModelIOError, ModelNotFoundError, NoVocabularyError,
                     OutOfMemoryError, PyllamaspecError, RpcError, TokenOutOfRangeError, UnsupportedModelError)
from .generate import GenerationResponse, GenerationResult, generate, stream_generate
from .model import Model, ModelInfo
from .sampling import SamplingParams, TokenLogprobs
from .speculative import Decoder, DraftParams, Stats
from .vocab import Detokenizer, Tokenizer

__version__ = "0.1.0"

__all__ = [
    "generate", "stream_generate", "GenerationResult", "GenerationResponse", "TokenLogprobs", "chat", "ChatResult",
    "ChatTemplate", "BUILTIN_TEMPLATES", "ChatTemplateError", "Cancel", "Model", "ModelInfo", "SamplingParams",
    "DraftParams", "Decoder",
    "Stats", "Detokenizer", "Tokenizer", "system_info", "set_verbose", "PyllamaspecError", "InvalidArgumentError",
    "ModelIOError", "ModelNotFoundError", "ModelFormatError", "UnsupportedModelError",
    "TokenOutOfRangeError", "ContextFullError", "BackendError", "OutOfMemoryError",
    "EvaluationInterrupted", "NoVocabularyError", "ModelClosedError", "RpcError",
]
