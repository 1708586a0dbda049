"""Image input for multimodal models: llama.cpp's mmproj projectors (Gemma 3 vision)."""
from .projector import ImageRows, Projector, ProjectorInfo

__all__ = ["Projector", "ProjectorInfo", "ImageRows"]
