"""Contents as a template takes them (engine/template_content.py), as llama.cpp's
messages_inp_normalizer hands them over: strings wrapped as one text part for a template that
reads only parts, text parts joined for one that reads only strings, both kept for one that
takes both."""
from __future__ import annotations

import pytest

from pyllamaspec.engine.chat_template import ChatTemplate, check_messages
from pyllamaspec.errors import InvalidArgumentError

# written here: the three kinds of content handling seen in model cards' templates
TYPED = ("{% for m in messages %}<{{ m.role }}>{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}"
         "{% endif %}{% endfor %}|{% endfor %}")
BOTH = ("{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% else %}"
        "{% for c in m.content %}[{{ c.text }}]{% endfor %}{% endif %}|{% endfor %}")
STRING = "{% for m in messages %}<{{ m.role }}>{{ m.content }}|{% endfor %}"
PARTS = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]


def render(src: str, content) -> str:
    return ChatTemplate(src).render([{"role": "user", "content": content}], add_generation_prompt=False)


def test_a_template_of_typed_parts_gets_a_string_as_one_text_part():
    assert render(TYPED, "hi there") == "<user>hi there|"
    assert render(TYPED, PARTS) == "<user>ab|"


def test_a_template_of_both_gets_what_it_is_given():
    assert render(BOTH, "hi there") == "<user>hi there|"
    assert render(BOTH, PARTS) == "<user>[a][b]|"


def test_a_template_of_strings_gets_text_parts_joined_by_newlines():
    assert render(STRING, "hi there") == "<user>hi there|"
    assert render(STRING, PARTS) == "<user>a\nb|"        # llama.cpp's concat_content_parts


def test_negative_control_a_string_iterated_as_parts_renders_empty():
    # what the typed template made of a string before: its characters have no .type
    import jinja2
    t = jinja2.Environment().from_string(TYPED)
    assert t.render(messages=[{"role": "user", "content": "hi there"}]) == "<user>|"


def test_a_system_prompt_merged_into_the_first_turn_takes_text_parts_too():
    no_system = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}"
                 "<{{ m.role }}>{{ m.content }}|{% endfor %}")
    out = ChatTemplate(no_system).render([{"role": "system", "content": PARTS}, {"role": "user", "content": "q"}],
                                         add_generation_prompt=False)
    assert out == "<user>a\nb\nq|"


@pytest.mark.parametrize("content", [[{"type": "text"}], [{"type": "text", "text": 3}], [{"type": "x", "text": "a"}],
                                     ["a"], 5])
def test_other_contents_are_refused(content):
    with pytest.raises(InvalidArgumentError, match="content"):
        check_messages([{"role": "user", "content": content}])
