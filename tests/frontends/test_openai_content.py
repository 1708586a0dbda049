"""A chat message whose content is a list of text parts reaches the template as llama-server
passes it to a template of string contents (common/chat.cpp, concat_content_parts): the parts
joined by newlines, none before the first non-empty text (before: joined with nothing, so
["Hello", "world"] read "Helloworld" where llama-server reads "Hello\\nworld")."""
from __future__ import annotations

import pytest

from pyllamaspec.frontends.server.openai_format import APIError, parse_chat


def _content(parts) -> str:
    req = parse_chat({"messages": [{"role": "user", "content": parts}]}, n_ctx=512)
    return req.messages[0]["content"]


@pytest.mark.parametrize("texts, want", [
    (["Hello"], "Hello"),
    (["Hello", "world"], "Hello\nworld"),
    (["a", "", "b"], "a\n\nb"),
    (["", "b"], "b"),              # llama-server adds a newline only after text
    (["a\n", "b"], "a\n\nb"),
])
def test_text_parts_are_joined_as_llama_server_joins_them(texts, want):
    assert _content([{"type": "text", "text": t} for t in texts]) == want


def test_a_string_content_is_kept_and_a_bad_part_is_a_400():
    assert _content("Hello world") == "Hello world"
    with pytest.raises(APIError, match="only text and image_url parts"):
        _content([{"type": "audio", "text": "x"}])
