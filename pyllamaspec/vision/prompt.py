"""A prompt with images, tokenized as llama.cpp's libmtmd does (mtmd_tokenize): the text split at
its media markers, each piece tokenized alone (special tokens parsed, none added), each image
wrapped in its family's markers, BOS first where the model adds one.

An image's positions hold ids of its own, negative (from the hash of its pixels): a cache that
holds a prompt knows where a later prompt parts from it, image or text, by comparing ids alone,
as llama-server compares an image chunk's hash. They are never tokens: the target evaluates the
image's rows there, and a sampler (and a drafter with no model of its own) sees `placeholder`
instead. A draft model reads rows there too (draft_images): a draft projector's (draft_rows),
else the target's where they fit its width, else zeros, as llama.cpp's common/speculative.cpp."""
from __future__ import annotations

import functools
import os
import secrets
import string
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgumentError
from .projector import ImageRows

# llama.cpp's mtmd_default_marker(): generate(), chat() and the CLI use it, as llama-mtmd-cli does
MEDIA_MARKER = "<__media__>"
MARKER_CHARS = string.digits + string.ascii_uppercase + string.ascii_lowercase   # llama-server's random_string()

# the text around an image, by projector type (mtmd.cpp's img_beg / img_end)
WRAP = {"gemma3": ("<start_of_image>", "<end_of_image>"),
        # mtmd.cpp's img_beg / img_end for the Qwen family's projectors
        "qwen2vl_merger": ("<|vision_start|>", "<|vision_end|>"),
        "qwen2.5vl_merger": ("<|vision_start|>", "<|vision_end|>"),   # clip-impl.h's name for Qwen2.5-VL
        "qwen3vl_merger": ("<|vision_start|>", "<|vision_end|>"),
        "gemma4v": ("<|image>", "<image|>"),
        "pixtral": ("", "[IMG_END]")}   # mtmd.cpp: [IMG_END] after the image, nothing before


def random_marker() -> str:
    """A marker of llama-server's form: "<__media_" + 32 random letters and digits + "__>"."""
    return "<__media_" + "".join(secrets.choice(MARKER_CHARS) for _ in range(32)) + "__>"


@functools.lru_cache(maxsize=1)
def server_marker() -> str:
    """The server's marker (llama-server's get_media_marker()): LLAMA_MEDIA_MARKER where set and
    not empty, else a random one drawn once per process. A client cannot guess it, so text that
    spells <__media__> (or anything else) stays text; /props shows it."""
    return os.environ.get("LLAMA_MEDIA_MARKER") or random_marker()


def image_ids(img: ImageRows) -> list[int]:
    """The image's positions' ids: -1 - (a 30-bit number from its hash + i)."""
    base = int(img.digest[:8], 16) & 0x3FFFFFFF
    return [-1 - ((base + i) & 0x3FFFFFFF) for i in range(img.n_tokens)]


@dataclass
class ImagePrompt:
    """Token ids (an image's positions: its own negative ids) and the images by their first id;
    draft_rows: the same images encoded by a draft model's own projector (draft_mmproj=), by the
    same first ids."""
    ids: list[int]
    images: dict[int, ImageRows] = field(default_factory=dict)
    placeholder: int = 0
    draft_rows: dict[int, ImageRows] = field(default_factory=dict)

    def draft_images(self, width: int) -> dict[int, ImageRows]:
        """The rows a draft model of input width `width` reads at the images: its projector's,
        else the target's where they are that wide, else zero rows (the images' positions and
        grids kept), as llama.cpp's common/speculative.cpp feeds a draft of another width. Zeros,
        not the placeholder token: on the tiny pairs of tests/vision/test_vision_draft.py the
        drafts after an image were accepted slightly more often so (docs/vision.md's figures)."""
        if self.draft_rows:
            return self.draft_rows
        if self.draft_fits(width):
            return self.images
        return {k: ImageRows(np.zeros((img.n_tokens, width), np.float32), img.digest, img.non_causal, img.grid)
                for k, img in self.images.items()}

    def draft_fits(self, width: int) -> bool:
        """Whether a draft model of input width `width` reads rows of the images (its own
        projector's, or the target's of its width), not zeros."""
        return bool(self.draft_rows) or all(img.rows.shape[1] == width for img in self.images.values())

    def text_ids(self) -> list[int]:
        """The ids a drafter or a sampler sees: each image position as the placeholder token."""
        return [t if t >= 0 else self.placeholder for t in self.ids]

    def chunks(self, start: int, end: int, rows: dict[int, ImageRows] | None = None):
        """The ids [start, end) in runs: ("text", ids) and ("image", ImageRows, its ids); rows:
        the images' rows to give (draft_images()), by their first id (default: the target's). An
        image cut by start (a cache that kept part of it) is refused: callers cut before it."""
        rows = self.images if rows is None else rows
        i = start
        while i < end:
            if self.ids[i] >= 0:
                j = i
                while j < end and self.ids[j] >= 0:
                    j += 1
                yield "text", self.ids[i:j]
                i = j
                continue
            img = rows.get(self.ids[i])
            if img is None or i + img.n_tokens > end:
                raise InvalidArgumentError(f"position {i} is inside an image, not at its start")
            yield "image", img, self.ids[i:i + img.n_tokens]
            i += img.n_tokens

    def starts(self) -> list[int]:
        """Where each image begins (the length of the prompt before it): a hybrid keeps its
        state there, so a later prompt with another image resumes from the text before it."""
        return [i for i, t in enumerate(self.ids) if t < 0 and t in self.images]

    def image_start(self, n: int) -> int:
        """n, or where the image that position n falls inside begins (an image is evaluated whole)."""
        i = 0
        while i < min(n, len(self.ids)):
            img = self.images.get(self.ids[i]) if self.ids[i] < 0 else None
            if img is not None:
                if i + img.n_tokens > n:
                    return i
                i += img.n_tokens
            else:
                i += 1
        return n


def check_markers(text: str, n_images: int, marker: str = MEDIA_MARKER) -> None:
    """InvalidArgumentError unless text holds one marker per image (before any is encoded)."""
    n = text.count(marker)
    if n != n_images:                      # mtmd's wording, with the marker it looked for
        raise InvalidArgumentError(f"number of media markers in text ({n}) does not match number of bitmaps "
                                   f"({n_images}); the media marker is {marker!r}")


def tokenize(model, text: str, images: list[ImageRows], kind: str, add_special: bool = True,
             marker: str = MEDIA_MARKER) -> ImagePrompt:
    """text with one marker per image -> ImagePrompt (mtmd_tokenize's order)."""
    check_markers(text, len(images), marker)
    parts = text.split(marker)
    beg, end = WRAP.get(kind, ("", ""))
    ids: list[int] = model.tokenize("", add_special=True, parse_special=True) if add_special else []   # BOS
    p = ImagePrompt(ids, {}, _placeholder(model, beg))
    for k, piece in enumerate(parts):
        ids += model.tokenize(piece, add_special=False, parse_special=True) if piece else []
        if k < len(images):
            img = images[k]
            if img.rows.shape[1] != model.info.n_embd_inp:
                raise InvalidArgumentError(f"the projector's rows are {img.rows.shape[1]} wide; the model takes "
                                           f"{model.info.n_embd_inp} (n_embd {model.info.n_embd} and its deepstack "
                                           f"slices, if any: a projector made for another model)")
            ids += model.tokenize(beg, add_special=False, parse_special=True) if beg else []
            own = image_ids(img)
            p.images[own[0]] = img
            ids += own
            ids += model.tokenize(end, add_special=False, parse_special=True) if end else []
    return p


def attach_draft_rows(p: ImagePrompt, rows: list[ImageRows], draft_model) -> None:
    """A draft projector's rows of the prompt's images (in the prompt's order) into p.draft_rows,
    checked: as wide as the draft model's input, as many rows (and the same grid) as the target's,
    since the draft reads them at the image's positions in the target's text."""
    width = draft_model.info.n_embd_inp
    firsts = p.starts()
    if len(rows) != len(firsts):
        raise InvalidArgumentError(f"{len(rows)} draft images for {len(firsts)} images in the prompt")
    for pos, img in zip(firsts, rows):
        target = p.images[p.ids[pos]]
        check_draft_width(img.rows.shape[1], width)
        if img.n_tokens != target.n_tokens or img.grid != target.grid:
            raise InvalidArgumentError(f"the draft projector gives an image {img.n_tokens} rows (grid {img.grid}); "
                                       f"the target's gives it {target.n_tokens} (grid {target.grid}): the draft "
                                       "reads its rows at the target's positions, so the two projectors must "
                                       "size images alike")
        p.draft_rows[p.ids[pos]] = img


def check_draft_width(rows_width: int, model_width: int) -> None:
    """InvalidArgumentError unless a draft projector's rows fit the draft model."""
    if rows_width != model_width:
        raise InvalidArgumentError(f"the draft projector's rows are {rows_width} wide; the draft model takes "
                                   f"{model_width} (a draft mmproj made for another model)")


def _placeholder(model, beg: str) -> int:
    """The token a drafter sees at an image's positions: the family's image token where the
    vocabulary has one (Gemma 3's <image_soft_token>, Gemma 4's <|image|>, Pixtral's [IMG]), else
    its image-begin marker, else 0."""
    for name in ("<image_soft_token>", "<|image|>", "[IMG]", beg):
        if name:
            t = model.tokenize(name, add_special=False, parse_special=True)
            if len(t) == 1:
                return t[0]
    return 0
