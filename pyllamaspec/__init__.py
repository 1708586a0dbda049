"""pyllamaspec: speculative decoding for quantized GGUF models on a ggml core."""
from __future__ import annotations

from .engine._native import set_verbose, system_info
from .engine.cancel import Cancel
from .engine.chat_template import BUILTIN_TEMPLATES, ChatTemplate
from .engine.model import ModelInfo
from .engine.sampling import SamplingParams, TokenLogprobs
from .engine.vocab import Detokenizer, Tokenizer
from .errors import (
                     BackendError,
                     ChatTemplateError,
                     ContextFullError,
                     EvaluationInterrupted,
                     InvalidArgumentError,
                     ModelClosedError,
                     ModelFormatError,
                     ModelIOError,
                     ModelNotFoundError,
                     NoVocabularyError,
                     OutOfMemoryError,
                     PyllamaspecError,
                     RpcError,
                     TokenOutOfRangeError,
                     UnsupportedModelError,
)
from .frontends.chat import ChatResult, chat
from .generation.generate import GenerationResponse, GenerationResult, generate, stream_generate
# Model: the engine's Model with llama-cpp-python's create_* methods and Model(model_path=...)
from .frontends.llama_api import Llama, LlamaGrammar, LlamaState, Model
from .speculation.decoder import Decoder, DraftParams, Stats

__version__ = "0.1.0"

__all__ = [
    "generate", "stream_generate", "GenerationResult", "GenerationResponse", "TokenLogprobs", "chat", "ChatResult",
    "ChatTemplate", "BUILTIN_TEMPLATES", "ChatTemplateError", "Cancel", "Model", "Llama", "LlamaGrammar", "LlamaState", "ModelInfo", "SamplingParams",
    "DraftParams", "Decoder",
    "Stats", "Detokenizer", "Tokenizer", "system_info", "set_verbose", "PyllamaspecError", "InvalidArgumentError",
    "ModelIOError", "ModelNotFoundError", "ModelFormatError", "UnsupportedModelError",
    "TokenOutOfRangeError", "ContextFullError", "BackendError", "OutOfMemoryError",
    "EvaluationInterrupted", "NoVocabularyError", "ModelClosedError", "RpcError",
]
