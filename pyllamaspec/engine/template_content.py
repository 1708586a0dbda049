"""A message's content as a chat template takes it, as llama.cpp hands it over (common/chat.cpp:
its capability probe and messages_inp_normalizer): some templates read content as a string,
some only as a list of typed parts ({"type": "text", "text": ...}: iterating a string there
yields its characters, and the message renders empty), most take both. A template that takes
only parts gets each string wrapped as one text part; one that takes only strings gets a list's
text parts joined (a newline between parts, none around an image's marker: the joining already
done for messages with images, vision/messages.py); one that takes both gets what it is given."""
from __future__ import annotations

import functools
from typing import Any, Callable

MARKER = "STRING_MARKER"      # llama.cpp's probe text


def is_text_parts(c: Any) -> bool:
    """Whether c is a list of text parts (each {"type": "text", "text": str})."""
    return isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text" and
                                       isinstance(p.get("text"), str) for p in c)


def joined(c: Any) -> Any:
    """A list of text parts as one string (llama.cpp's concat_content_parts); others as they are."""
    return "\n".join(p["text"] for p in c) if is_text_parts(c) else c


def content_caps(source: str, compile_bounded: Callable) -> tuple[bool, bool]:
    """(takes string content, takes typed content): a one-message conversation rendered both
    ways must succeed and show the text (a list printed whole, as a string template prints one,
    does not count as taking it)."""
    return _caps(source, compile_bounded)


@functools.lru_cache(maxsize=64)
def _caps(source: str, compile_bounded: Callable) -> tuple[bool, bool]:
    def shows(content) -> bool:
        try:
            out = compile_bounded(source).render(messages=[{"role": "user", "content": content}],
                                                 add_generation_prompt=True, bos_token="", eos_token="")
        except Exception:            # noqa: BLE001 - a probe: any failure means "does not take it"
            return False
        return MARKER in out and "'type'" not in out and '"type"' not in out
    return shows(MARKER), shows([{"type": "text", "text": MARKER}])


def as_template_takes(source: str, msgs: list[dict], compile_bounded: Callable) -> list[dict]:
    """The messages with their contents as the template takes them (the module's docstring)."""
    if not any(isinstance(m.get("content"), (str, list)) for m in msgs):
        return msgs
    string_ok, typed_ok = content_caps(source, compile_bounded)
    out = []
    for m in msgs:
        c = m.get("content")
        if typed_ok and not string_ok and isinstance(c, str):
            m = dict(m, content=[{"type": "text", "text": c}])
        elif not typed_ok and is_text_parts(c):
            m = dict(m, content=joined(c))
        out.append(m)
    return out
