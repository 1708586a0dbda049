"""Images in the CLI's conversation, as llama-mtmd-cli's chat mode takes them: `/image FILE`
loads an image for the next user message (several may be loaded), `--image FILE` attaches to
the first. A loaded image is a chat message part, {"type": "image", "image": the file's bytes},
which chat() and the conversation read alike (vision/messages.py): the model's chat template
places it, and prefix reuse across turns works as for text."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ...errors import InvalidArgumentError

COMMANDS = ("/image", "/audio", "/video")     # llama-mtmd-cli's; a projector here takes images only

NEEDS_MMPROJ = "images need a vision projector: --mmproj FILE (llama.cpp's mmproj GGUF)"


@dataclass
class Staged:
    """What a media command did: the part to attach (None: nothing loaded) and what to say."""
    part: dict | None
    message: str
    error: bool


def is_media_command(line: str) -> bool:
    word = line.strip().split(maxsplit=1)
    return bool(word) and word[0] in COMMANDS


def image_part(path: str, projector) -> dict:
    """The image in `path`, read and decoded now (a clear error for a missing or broken file):
    its bytes, not its path, are kept, since a chat resends it every turn and a file changed or
    removed later must not break the turns after."""
    from ...vision.image import load_image
    if projector is None:
        raise InvalidArgumentError(NEEDS_MMPROJ)
    path = os.path.expanduser(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read image file {path!r}: {e.strerror or e}") from None
    try:
        load_image(data)                           # decodable, and not too large
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{path}: {e}") from None
    return {"type": "image", "image": data}


def stage(line: str, projector) -> Staged:
    """A `/image FILE` (or /audio, /video) line -> the part to attach, or why not."""
    command, _, path = line.strip().partition(" ")
    path = path.strip()                            # as llama-cli strips a pasted name
    if command != "/image":
        return Staged(None, f"error: {command}: this projector takes images only (/image FILE)", True)
    if not path:
        return Staged(None, "error: missing media filename: /image FILE", True)
    try:
        part = image_part(path, projector)
    except InvalidArgumentError as e:
        return Staged(None, f"error: {e}", True)
    return Staged(part, f"{path} image loaded", False)


def stage_line(line: str, projector) -> dict | None:
    """stage() with its message printed (llama-mtmd-cli's "FILE image loaded" on stdout, an
    error on stderr); the part, or None."""
    s = stage(line, projector)
    print(s.message, file=sys.stderr if s.error else sys.stdout, flush=True)
    return s.part


def initial_images(files: list[str], projector) -> list[dict]:
    """--image FILE ... with a conversation: the parts for the first user message (a file that
    cannot be read stops the CLI before the conversation starts, as with one prompt)."""
    return [image_part(f, projector) for f in files]


def banner(projector) -> str:
    """The commands, as llama-mtmd-cli lists them when its chat mode starts."""
    lines = [" Running in chat mode, available commands:"]
    if projector is not None:
        lines.append("   /image <path>    load an image")
    lines += ["   /clear           clear the chat history", "   /quit or /exit   exit the program"]
    return "\n".join(lines)
