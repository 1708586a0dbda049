"""mlx-lm's shapes: ``from pyllamaspec.mlx import load, generate, stream_generate`` (the model
first, greedy by default). See pyllamaspec.frontends.mlx_api."""
from .frontends.mlx_api import TokenizerWrapper, generate, load, stream_generate

__all__ = ["load", "generate", "stream_generate", "TokenizerWrapper"]
