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
                marker: str = MEDIA_MARKER, media_path: str | None = None) -> tuple[list[dict], list]:
    """(messages whose list contents are text with markers, the images: bytes or file paths).
    local_files: a path or file:// URL is read (the Python API); a server passes False, and then
    takes what llama-server takes: data URLs, bare base64, and file:// URLs relative to its
    --media-path directory (media_path) when it has one. A URL to fetch is refused: nothing is
    downloaded. marker: the default one (the Python API, as llama-mtmd-cli), or the server's
    random one (prompt.server_marker)."""
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
                images.append(_source(p, kind, local_files, f"messages[{i}].content[{j}]", media_path))
                text += marker
                after_marker = True
            else:
                raise InvalidArgumentError(f"messages[{i}].content[{j}]: unsupported part type {kind!r} "
                                           f"(text, image_url, image)")
        out.append(dict(m, content=text))
    return out, images


def _source(part: Mapping, kind: str, local_files: bool, where: str, media_path: str | None = None):
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
        return _server_source(url, where, media_path)
    return url[len("file://"):] if url.startswith("file://") else url


def _server_source(url: str, where: str, media_path: str | None) -> bytes:
    """What llama-server's handle_media reads besides data URLs: a file:// URL names a file under
    --media-path (the server's directory, read here so that a missing file is the request's
    error), anything else is base64 without the data: head."""
    if url.startswith("file://"):
        if not media_path:
            raise InvalidArgumentError(f"{where}: file:// URLs are not allowed unless --media-path is specified")
        rel = url[len("file://"):]
        if not media_file_name_ok(rel):
            raise InvalidArgumentError(f"{where}: file path is not allowed: {rel[:200]!r}")
        try:
            with open(os.path.join(media_path, rel.lstrip("/")), "rb") as f:
                return f.read()
        except OSError:
            raise InvalidArgumentError(f"{where}: file does not exist or cannot be opened: {rel}") from None
    try:
        data = base64.b64decode(url, validate=True)
    except (binascii.Error, ValueError):
        data = b""
    if not data:
        raise InvalidArgumentError(f"{where}: an image must be a data URL (data:image/...;base64,...), base64, "
                                   f"or a file:// URL under the server's --media-path; local paths are not read")
    return data


# What llama.cpp's fs_validate_filename refuses in a media path (subdirectories allowed): control
# characters, the look-alikes of '.', '/' and '\', surrogates, U+FFFD, the BOM, and : * ? " < > |
_REFUSED = set(range(0x20)) | {0x7F} | set(range(0x80, 0xA0)) | {0xFF0E, 0x2215, 0x2216, 0xFFFD, 0xFEFF} \
    | {ord(c) for c in ':*?"<>|'}


def media_file_name_ok(name: str) -> bool:
    """Whether llama-server would open this path under --media-path: at most 255 bytes, none of
    the refused characters, no leading or trailing space or trailing '.', no '..' anywhere."""
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError:           # a lone surrogate
        return False
    if not name or n > 255 or name == ".":
        return False
    if any(ord(c) in _REFUSED or 0xD800 <= ord(c) <= 0xDFFF for c in name):
        return False
    return not (name[0] == " " or name[-1] in " .") and ".." not in name
