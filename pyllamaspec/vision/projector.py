"""Projector: a vision projector (llama.cpp's mmproj GGUF) in the core, which turns an image into
the rows a text model reads in place of token embeddings."""
from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ..engine import _native
from ..engine._native import ffi, lib
from ..errors import InvalidArgumentError
from .image import for_projector, load_image, preprocess

ImageLike = Union[str, bytes, "os.PathLike[str]", Any]   # a file, its bytes, or a PIL image

# a chat resends all its images every turn: the rows of the last few are kept (by their pixels'
# hash, as llama-server knows an image again), so a turn encodes only its new images
CACHE_IMAGES = 8


@dataclass(frozen=True)
class ProjectorInfo:
    type: str                 # clip.projector_type, e.g. "gemma3"
    image_size: int           # the square the encoder takes, in pixels
    patch_size: int
    n_merge: int
    n_embd: int               # the rows' width: the text model's (its n_embd_inp) they are for
    n_tokens: int             # rows per image
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    non_causal: bool          # an image's rows attend to each other both ways
    mrope: bool = False       # the text model places the rows at 2-D M-RoPE positions (Qwen)
    n_deepstack: int = 0      # deepstack mergers (Qwen3-VL): a row is n_embd / (1 + this) x (1 + this)
    row_breaks: bool = False  # pixtral: an [IMG_BREAK] row after each grid row but the last

    def n_rows(self, nx: int, ny: int) -> int:
        """The rows of an image whose merged grid is nx x ny (its breaks too)."""
        return nx * ny + (ny - 1 if self.row_breaks else 0)


@dataclass(frozen=True)
class ImageRows:
    """One image as the text model reads it: its rows and what identifies it (a hash of the
    pixels the encoder saw, so one image sent twice is known again, as llama-server does)."""
    rows: np.ndarray          # (n_tokens, width) float32: the projector's n_embd (deepstack slices too)
    digest: str
    non_causal: bool
    # (nx, ny): the rows' grid where the text model places them at 2-D M-RoPE positions (the Qwen
    # family: row i at (p0, p0 + i // nx, p0 + i % nx, 0), the image taking max(nx, ny)
    # positions); None: one position a row, as a token's
    grid: tuple[int, int] | None = None

    @property
    def n_tokens(self) -> int:
        return int(self.rows.shape[0])


def _token_limits(lo: int | None, hi: int | None) -> tuple[int | None, int | None]:
    """(min, max) rows an image may take; None: the type's (llama.cpp's -1 "read from model")."""
    out = []
    for name, v in (("image_min_tokens", lo), ("image_max_tokens", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise InvalidArgumentError(f"{name} must be an integer, got {v!r}")
        if v is not None and v < -1:
            raise InvalidArgumentError(f"{name} must be positive (or -1: the projector's own), got {v}")
        out.append(v if v is not None and v > 0 else None)
    if out[0] is not None and out[1] is not None and out[0] > out[1]:
        raise InvalidArgumentError(f"image_min_tokens ({out[0]}) is more than image_max_tokens ({out[1]})")
    return out[0], out[1]


class Projector(_native.Closeable):
    """`with Projector("mmproj.gguf") as p: rows = p.encode("cat.png")`. One encode at a time
    (a lock); the model it serves is checked by width when its rows are evaluated. The rows of
    the last CACHE_IMAGES images are kept: the same pixels again are not encoded again (the
    rows returned are read-only, shared by every encode of those pixels)."""

    def __init__(self, path: str | os.PathLike, n_threads: int = 0, *, image_min_tokens: int | None = None,
                 image_max_tokens: int | None = None):
        """image_min_tokens / image_max_tokens: the rows an image may take, for the types that
        size images dynamically (the Qwen projectors), as llama.cpp's --image-min-tokens /
        --image-max-tokens (None, 0 or -1: the type's own limits); other types ignore them."""
        self.path = os.fspath(path)
        limits = _token_limits(image_min_tokens, image_max_tokens)
        if not os.path.isfile(self.path):
            from ..errors import ModelNotFoundError
            raise ModelNotFoundError(f"projector file not found: {self.path}")
        out = ffi.new("psl_projector **")
        _native.check(lib.psl_projector_load(self.path.encode(), int(n_threads), out))
        self._p = out[0]
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()   # digest -> rows, oldest first
        i = ffi.new("psl_projector_info *")
        _native.check(lib.psl_projector_get_info(self._p, i))
        self.info = ProjectorInfo(ffi.string(i.type).decode(), i.image_size, i.patch_size, i.n_merge, i.n_embd,
                                  i.n_tokens, tuple(i.image_mean), tuple(i.image_std), bool(i.non_causal),
                                  bool(i.mrope), int(i.n_deepstack), bool(i.row_breaks))
        # how mtmd resizes for this type (gemma3: bilinear into the square, black padding)
        self.preprocess = for_projector(self.info.type, self.info.image_size, self.info.patch_size,
                                        self.info.n_merge, self.info.mean, self.info.std, min_tokens=limits[0],
                                        max_tokens=limits[1])

    def close(self) -> None:
        p, self._p = getattr(self, "_p", None), None
        if p is not None:
            with self._lock:
                lib.psl_projector_free(p)
                self._cache.clear()

    def pixels(self, image: ImageLike) -> np.ndarray:
        """The image as the encoder takes it: (3, H, W) float32 (gemma3: the image_size square;
        the Qwen projectors and pixtral: the smart resize's rectangle)."""
        img = image if hasattr(image, "convert") and hasattr(image, "size") else load_image(image)
        return preprocess(img, self.preprocess)

    def encode(self, image: ImageLike) -> ImageRows:
        """An image (file path, bytes, or a PIL image) -> its rows."""
        px = np.ascontiguousarray(self.pixels(image), np.float32)
        return self.encode_pixels(px)

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """The merged grid (nx, ny) of an image width x height (preprocessed); a size the type
        cannot take raises InvalidArgumentError."""
        nx, ny = ffi.new("int32_t *"), ffi.new("int32_t *")
        with self._lock:
            self._check_open()
            _native.check(lib.psl_projector_image_grid(self._p, int(width), int(height), nx, ny))
        return int(nx[0]), int(ny[0])

    def _check_open(self) -> None:
        if self._p is None:
            from ..errors import ModelClosedError
            raise ModelClosedError("the projector is closed")

    def encode_pixels(self, px: np.ndarray) -> ImageRows:
        px = np.ascontiguousarray(px, np.float32)
        if px.ndim != 3 or px.shape[0] != 3:
            raise InvalidArgumentError(f"pixels of shape {px.shape}; the projector takes (3, height, width)")
        grid = self.grid(px.shape[2], px.shape[1])
        # the shape too: the same bytes as another rectangle are another image
        digest = hashlib.sha256(repr(px.shape).encode() + px.tobytes()).hexdigest()
        with self._lock:
            self._check_open()
            rows = self._cache.get(digest)
            if rows is None:
                rows = self._run_encoder(px, self.info.n_rows(*grid))
                rows.flags.writeable = False          # shared by every encode of these pixels
                self._cache[digest] = rows
                while len(self._cache) > CACHE_IMAGES:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(digest)
        return ImageRows(rows, digest, self.info.non_causal, grid if self.info.mrope else None)

    def _run_encoder(self, px: np.ndarray, n_tokens: int) -> np.ndarray:
        """The encoder in the core (the caller holds the lock): pixels -> (n_tokens, n_embd) rows."""
        out = np.empty((n_tokens, self.info.n_embd), np.float32)
        _native.check(lib.psl_projector_encode(self._p, ffi.from_buffer("float[]", px), px.shape[2], px.shape[1],
                                               ffi.from_buffer("float[]", out, require_writable=True), out.size))
        return out
