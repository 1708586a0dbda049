"""Chat messages with image parts (OpenAI's {"type": "image_url", "image_url": {"url": ...}}, or
{"type": "image", "image": ...}) as llama-server reads them: each image becomes a media marker in
the message's text, the parts joined as llama.cpp's common_chat_msg joins them (a newline between
text parts, none next to a marker), and the images are returned in order."""
from __future__ import annotations

import base64
import binascii
import os
from typing import Any, Mapping, Sequence

from ..errors import InvalidArgumentError
from .prompt import MEDIA_MARKER


def has_media(messages: Any) -> bool:
    """Whether any message's content is a list holding a part other than text."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return False
    return any(isinstance(m, Mapping) and isinstance(m.get("content"), list) and
               any(isinstance(p, Mapping) and p.get("type") != "text" for p in m["content"]) for m in messages)


def split_media(messages: Sequence[Mapping[str, Any]], local_files: bool = True,
                marker: str = MEDIA_MARKER) -> tuple[list[dict], list]:
    """(messages whose list contents are text with markers, the images: bytes or file paths).
    local_files: a path or file:// URL is read (the Python API); a server passes False unless
    allowed. A URL to fetch is refused: nothing is downloaded. marker: the default one (the
    Python API, as llama-mtmd-cli), or the server's random one (prompt.server_marker)."""
    out, images = [], []
    for i, m in enumerate(messages):
        c = m.get("content") if isinstance(m, Mapping) else None
        if not isinstance(c, list):
            out.append(m)
            continue
        text, after_marker = "", False
        for j, p in enumerate(c):
            kind = p.get("type") if isinstance(p, Mapping) else None
            if kind == "text":
                if not isinstance(p.get("text"), str):
                    raise InvalidArgumentError(f"messages[{i}].content[{j}].text must be a string")
                if text and not after_marker:
                    text += "\n"
                text += p["text"]
                after_marker = False
            elif kind in ("image_url", "image"):
                images.append(_source(p, kind, local_files, f"messages[{i}].content[{j}]"))
                text += marker
                after_marker = True
            else:
                raise InvalidArgumentError(f"messages[{i}].content[{j}]: unsupported part type {kind!r} "
                                           f"(text, image_url, image)")
        out.append(dict(m, content=text))
    return out, images


def _source(part: Mapping, kind: str, local_files: bool, where: str):
    if kind == "image_url":
        v = part.get("image_url")
        url = v.get("url") if isinstance(v, Mapping) else v
    else:
        url = part.get("image", part.get("url", part.get("path")))
    if hasattr(url, "convert") or isinstance(url, (bytes, bytearray)):
        return url                                  # a PIL image, or the file's bytes
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"{where}: an image part needs a URL (a data: URL) or a file")
    if url.startswith("data:"):
        head, sep, data = url.partition(",")
        if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
            raise InvalidArgumentError(f"{where}: a data URL must be data:image/...;base64,...")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(f"{where}: the data URL's base64 is malformed") from None
    if url.startswith(("http://", "https://")):
        raise InvalidArgumentError(f"{where}: image URLs are not fetched; send the image as a data URL")
    if not local_files:
        raise InvalidArgumentError(f"{where}: local image files are not allowed here; send a data URL")
    return url[len("file://"):] if url.startswith("file://") else url
