"""Images as llama.cpp's libmtmd (b11434) hands them to a vision encoder.

``load_image`` decodes a file as mtmd's helper does with stb_image's 3-channel load: alpha is
dropped (not composited), grey and palette images are expanded to RGB, 16-bit samples keep their
high byte. Lossless formats (PNG, BMP, ...) give the same pixels as stb_image; JPEG decoders
differ in their IDCT and chroma upsampling, so a JPEG's pixels may differ by a few levels.

``preprocess`` is mtmd's fixed-size preprocessor (``mtmd_image_preprocessor_fixed_size``, the one
the ``gemma3`` projector uses): the image scaled to fit a square of ``image_size`` keeping its aspect
ratio (``img_tool::resize``, pad style ceil), resampled, pasted centred on a ``pad_color`` canvas,
then ``x / 255`` and ``(x - mean) / std`` in float32. The resampler is Pillow's separable filter
(``Resample.c``: normalized coefficients in 22-bit fixed point, the horizontal pass, rounded and
clipped to bytes, then the vertical one), written here in numpy: Pillow's own ``Image.resize`` is not
used because Pillow (13) runs the vertical pass first on some images, which mtmd never does, and
then differs by one level on some pixels.

With ``Preprocess.smart`` (``SmartResize``: the Qwen projectors (``qwen2vl_merger``,
``qwen2.5vl_merger``, ``qwen3vl_merger``), ``gemma4v`` and ``pixtral``, mtmd's
``mtmd_image_preprocessor_dyn_size``) the target is not a square but the image's own "smart
resize" (``img_tool::calc_size_preserved_ratio``): each edge rounded to a multiple of ``align``
(patch_size * n_merge), then, if the area is over ``max_pixels`` (under ``min_pixels``), both edges
scaled by the same factor and rounded down (up) to that multiple, in float32 as C++ computes it;
the image is then fitted into that rectangle as above (bicubic, pad ceil, black, centred).
``for_projector`` picks the preprocessing a projector type takes.
"""
from __future__ import annotations

import io
import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError

MAX_PIXELS = 1 << 26  # 64 Mi pixels: a larger image is refused before it is decoded

SUPPORT = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}  # mtmd's RESIZE_ALGO_*: Pillow's filters
RESAMPLES = tuple(SUPPORT)
PADS = ("ceil", "nearest", "none")  # mtmd's PAD_CEIL, PAD_NEAREST, PAD_NONE
PRECISION_BITS = 22  # the coefficients' fixed point: 32 - 8 - 2


# clip.cpp's token limits per image for the types that resize to the image's own size (clip.cpp's
# load_hparams: set_limit_image_tokens(8, 4096) for qwen2vl / qwen2.5vl / qwen3vl, (70, 1120) for
# gemma4v, (8, 1024) for pixtral; all bicubic into multiples of patch_size * n_merge; pixtral's
# n_merge: spatial_merge_size (Mistral Small 3.x: 2), else 1)
DYN_SIZE_TOKENS = {"qwen3vl_merger": (8, 4096), "qwen2vl_merger": (8, 4096), "qwen2.5vl_merger": (8, 4096),
                   "gemma4v": (70, 1120), "pixtral": (8, 1024)}


@dataclass(frozen=True)
class SmartResize:
    """mtmd's dyn-size target (calc_size_preserved_ratio): edges multiples of ``align``, the area
    within ``min_pixels`` .. ``max_pixels`` (0: no bound)."""

    align: int
    min_pixels: int = 0
    max_pixels: int = 0

    def __post_init__(self) -> None:
        if self.align <= 0 or self.min_pixels < 0 or self.max_pixels < 0:
            raise InvalidArgumentError(f"bad smart resize {self}")
        if self.max_pixels and self.max_pixels < self.min_pixels:
            raise InvalidArgumentError(f"max_pixels {self.max_pixels} is less than min_pixels {self.min_pixels}")


@dataclass(frozen=True)
class Preprocess:
    """What a projector's preprocessing takes from its file and its type (clip.cpp's hparams).
    ``smart`` None: the fixed ``image_size`` square (gemma3); else the image's smart-resized size."""

    image_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resample: str = "bilinear"
    pad: str = "ceil"
    pad_color: tuple[int, int, int] = (0, 0, 0)
    smart: SmartResize | None = None

    def __post_init__(self) -> None:
        if self.image_size <= 0:
            raise InvalidArgumentError(f"image_size must be positive, got {self.image_size}")
        if self.resample not in RESAMPLES:
            raise InvalidArgumentError(f"resample must be one of {', '.join(RESAMPLES)}, got {self.resample!r}")
        if self.pad not in PADS:
            raise InvalidArgumentError(f"pad must be one of {', '.join(PADS)}, got {self.pad!r}")


def load_image(src: bytes | str | os.PathLike):
    """The image in ``src`` (the file's bytes, or its path) as a ``PIL.Image.Image`` in RGB;
    a file that cannot be read or decoded, or of more than ``MAX_PIXELS``, raises
    ``InvalidArgumentError``."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(src, (bytes, bytearray, memoryview)):
        what, fp = "image data", io.BytesIO(bytes(src))
    else:
        what = f"image file {os.fspath(src)!r}"
        try:
            fp = open(src, "rb")
        except OSError as e:
            raise InvalidArgumentError(f"cannot read {what}: {e.strerror or e}") from e
    try:
        with fp, warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below anyway
            im = Image.open(fp)
            with im:
                w, h = im.size
                if w <= 0 or h <= 0 or w * h > MAX_PIXELS:
                    raise InvalidArgumentError(f"{what} is {w}x{h} pixels: at most {MAX_PIXELS} are accepted")
                im.load()
                return _to_rgb(im)
    except InvalidArgumentError:
        raise
    except UnidentifiedImageError as e:
        raise InvalidArgumentError(f"cannot decode {what}: not an image format Pillow reads") from e
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as e:
        raise InvalidArgumentError(f"cannot decode {what}: {e}") from e


def _to_rgb(im):
    """RGB as stb_image's 3-channel load gives it: alpha dropped, grey replicated, palettes
    expanded, 16-bit grey reduced to its high byte (Pillow would clip it instead)."""
    from PIL import Image

    if im.mode == "RGB":
        return im.copy()
    if im.mode.startswith("I;16") or im.mode == "I":
        grey = (np.asarray(im).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8)
        return Image.fromarray(np.repeat(grey[:, :, None], 3, axis=2), "RGB")
    return im.convert("RGB")


def for_projector(proj_type: str, image_size: int, patch_size: int, n_merge: int, mean, std, *,
                  min_tokens: int | None = None, max_tokens: int | None = None) -> Preprocess:
    """How mtmd preprocesses for a projector of ``proj_type`` (clip.cpp's load_hparams and
    mtmd.cpp's choice of preprocessor): a dyn-size type (``DYN_SIZE_TOKENS``) bicubic into its
    smart-resized size, ``min_tokens`` / ``max_tokens`` overriding the type's limits as mtmd's
    image_min_tokens / image_max_tokens do (each token is n_merge x n_merge patches); any other
    (gemma3) bilinear into the ``image_size`` square."""
    mean, std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
    if proj_type not in DYN_SIZE_TOKENS:
        return Preprocess(image_size, mean, std)
    lo, hi = DYN_SIZE_TOKENS[proj_type]
    area = patch_size * patch_size * n_merge * n_merge   # pixels per token (set_limit_image_tokens)
    lo, hi = (min_tokens if min_tokens and min_tokens > 0 else lo), (max_tokens if max_tokens and max_tokens > 0 else hi)
    return Preprocess(image_size, mean, std, resample="bicubic",
                      smart=SmartResize(patch_size * n_merge, lo * area, hi * area))


def _round_half_away(v: np.float32) -> int:
    """C's round of a float: ties away from zero (exact: a float32 plus 0.5 is exact in float64)."""
    x = float(v)
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def smart_size(w: int, h: int, s: SmartResize) -> tuple[int, int]:
    """(width, height) as calc_size_preserved_ratio computes them, float32 throughout: edges
    rounded to multiples of ``align`` (at least one), then an area over max_pixels scaled down by
    beta = sqrt(h * w / max) and floored to the multiple, or one under min_pixels scaled up by
    beta = sqrt(min / (h * w)) and ceiled."""
    f32, a = np.float32, s.align
    fa = f32(a)
    w_bar = max(a, _round_half_away(f32(w) / fa) * a)
    h_bar = max(a, _round_half_away(f32(h) / fa) * a)
    if s.max_pixels > 0 and h_bar * w_bar > s.max_pixels:
        beta = np.sqrt(f32(h) * f32(w) / f32(s.max_pixels))
        h_bar = max(a, int(np.floor(f32(h) / beta / fa)) * a)
        w_bar = max(a, int(np.floor(f32(w) / beta / fa)) * a)
    elif s.min_pixels > 0 and h_bar * w_bar < s.min_pixels:
        beta = np.sqrt(f32(s.min_pixels) / (f32(h) * f32(w)))
        h_bar = int(np.ceil(f32(h) * beta / fa)) * a
        w_bar = int(np.ceil(f32(w) * beta / fa)) * a
    return w_bar, h_bar


def target_size(w: int, h: int, p: Preprocess) -> tuple[int, int]:
    """The (width, height) the encoder takes for a w x h image."""
    return smart_size(w, h, p.smart) if p.smart is not None else (p.image_size, p.image_size)


def fit_size(w: int, h: int, p: Preprocess, target: tuple[int, int] | None = None) -> tuple[int, int]:
    """The size mtmd resamples a w x h image to (img_tool::resize) inside ``target`` (tw, th;
    default the image_size square): scale = min(tw / w, th / h) and each edge times scale in
    float32, rounded up (pad "ceil") or to nearest (ties away from zero), at most its target edge;
    pad "none" stretches to the target."""
    tw, th = target or (p.image_size, p.image_size)
    if p.pad == "none":
        return tw, th
    scale = min(np.float32(tw) / np.float32(w), np.float32(th) / np.float32(h))
    edges = (np.float32(w) * scale, np.float32(h) * scale)  # float32 products, as in C++
    if p.pad == "ceil":
        return tuple(min(int(np.ceil(e)), t) for e, t in zip(edges, (tw, th)))
    return tuple(min(int(np.floor(np.float64(e) + 0.5)), t) for e, t in zip(edges, (tw, th)))  # exact in float64


def _filter(name: str, x: float) -> float:
    if name == "lanczos":
        return _sinc(x) * _sinc(x / 3.0) if -3.0 <= x < 3.0 else 0.0
    x = abs(x)
    if name == "bilinear":
        return 1.0 - x if x < 1.0 else 0.0
    a = -0.5  # Pillow's bicubic (ggml's and PyTorch's use -0.75)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _sinc(v: float) -> float:
    return 1.0 if v == 0.0 else math.sin(v * math.pi) / (v * math.pi)


def _coefficients(n_in: int, n_out: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(first input index, int32 weights (n_out, ksize)) of each output pixel, in double precision
    as Pillow computes them (plain Python floats: the same operations in the same order), then
    rounded half away from zero to PRECISION_BITS fixed point."""
    scale = n_in / n_out
    fscale = max(scale, 1.0)  # upscaling keeps the filter's width, downscaling widens it
    support = SUPPORT[name] * fscale
    inv = 1.0 / fscale
    ksize = int(math.ceil(support)) * 2 + 1
    first = np.zeros(n_out, np.int64)
    weights = np.zeros((n_out, ksize), np.int32)
    for o in range(n_out):
        center = (o + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        n = min(int(center + support + 0.5), n_in) - lo
        taps = [_filter(name, (k + lo - center + 0.5) * inv) for k in range(n)]
        total = 0.0
        for v in taps:  # sequential, as C adds them (sum() compensates from Python 3.12)
            total += v
        if total != 0.0:
            taps = [v / total for v in taps]
        first[o] = lo
        weights[o, :len(taps)] = [int(v * (1 << PRECISION_BITS) + (-0.5 if v < 0 else 0.5)) for v in taps]
    return first, weights


def _resample_axis(src: np.ndarray, n_out: int, axis: int, name: str) -> np.ndarray:
    """One pass along ``axis`` of a uint8 (h, w, 3) array: int32 sums from a rounding half,
    shifted back and clipped to bytes."""
    n_in = src.shape[axis]
    first, weights = _coefficients(n_in, n_out, name)
    idx = np.minimum(first[:, None] + np.arange(weights.shape[1]), n_in - 1)  # past the taps: weight 0
    shape = [1, 1, 1]
    shape[axis] = n_out
    acc = np.full(src.shape[:axis] + (n_out,) + src.shape[axis + 1:], 1 << (PRECISION_BITS - 1), np.int32)
    for k in range(weights.shape[1]):
        acc += np.take(src, idx[:, k], axis=axis).astype(np.int32) * weights[:, k].reshape(shape)
    return np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)


def resample(rgb: np.ndarray, width: int, height: int, name: str = "bilinear") -> np.ndarray:
    """uint8 (h, w, 3) resampled to (height, width, 3) as mtmd's ``resize_pillow``: the horizontal
    pass, then the vertical one, each only where that size changes."""
    if not (0 < width <= 65536 and 0 < height <= 65536):
        raise InvalidArgumentError(f"resize target {width}x{height} is out of range")
    out = rgb
    if width != rgb.shape[1]:
        out = _resample_axis(out, width, 1, name)
    if height != rgb.shape[0]:
        out = _resample_axis(out, height, 0, name)
    return out if out is not rgb else rgb.copy()


def fit(rgb: np.ndarray, p: Preprocess) -> np.ndarray:
    """uint8 (h, w, 3) -> uint8 (th, tw, 3) (``target_size``): resampled and padded as mtmd does."""
    h, w = rgb.shape[:2]
    tw, th = target_size(w, h, p)
    if (w, h) == (tw, th):
        return rgb.copy()
    nw, nh = fit_size(w, h, p, (tw, th))
    if nw == 0 or nh == 0:
        raise InvalidArgumentError(f"a {w}x{h} image scales to {nw}x{nh} pixels: too thin to use")
    small = resample(rgb, nw, nh, p.resample)
    if p.pad == "none":
        return small
    if p.pad == "ceil":
        ox, oy = (tw - nw) // 2, (th - nh) // 2
    else:  # round((t - n) / 2.0f), ties away from zero
        ox, oy = (tw - nw + 1) // 2, (th - nh + 1) // 2
    out = np.empty((th, tw, 3), np.uint8)
    out[:] = np.asarray(p.pad_color, np.uint8)
    out[oy:oy + nh, ox:ox + nw] = small
    return out


def preprocess(img, p: Preprocess) -> np.ndarray:
    """float32 (3, th, tw), planar RGB (the image_size square, or the smart-resized size): the
    encoder's input for ``img`` (a ``PIL.Image.Image`` or a uint8 (h, w, 3) array)."""
    rgb = np.asarray(img if isinstance(img, np.ndarray) else _to_rgb(img), dtype=np.uint8)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise InvalidArgumentError(f"expected an RGB image, got an array of shape {rgb.shape}")
    x = fit(rgb, p).astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(p.mean, np.float32)) / np.asarray(p.std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))
