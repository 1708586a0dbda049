"""mlx-lm's shapes: ``from pyllamaspec.mlx import load, generate, stream_generate, make_sampler``
(the model first, greedy by default). See pyllamaspec.frontends.mlx_api."""
from .frontends.mlx_api import (TokenizerWrapper, generate, load, make_logits_processors, make_sampler,
                                stream_generate)

__all__ = ["load", "generate", "stream_generate", "TokenizerWrapper", "make_sampler", "make_logits_processors"]
