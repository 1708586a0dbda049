"""Chat-template side of scripts/fuzz.py: Jinja templates as a GGUF or --chat-template may bring
them, rendered on a conversation. Seeded by issue 48's hostile templates (a string doubled, huge
widths, lipsum, nested loops) at random sizes, plus random templates of the constructions that
build strings (~, +, *, %, filters, str methods, macros, namespaces), mutated. Each render must
end within its time bound and its memory bound, rendered or refused with a ChatTemplateError (a
PyllamaspecError); any other exception, a crash or a hang is a finding.
"""
from __future__ import annotations

import random

from fuzz_bounds import Bounds, mutate

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|> {{ x }}"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "é 中文 😀" * 3}]


def _big(rng: random.Random) -> str:
    return str(rng.choice([3, 100, 10**4, 10**6, 10**8, 10**9, 2**31]))


def _expr(rng: random.Random, depth: int = 0) -> str:
    atoms = ["'a'", "'xy'", "s", "ns.s", "messages[0].content", "m.content", "'%5s'", "'{:>9}'", "bos_token",
             "(range(3)|list)", "[1, 2]"]
    if depth > 2:
        return rng.choice(atoms)
    e = _expr(rng, depth + 1)
    return rng.choice([
        f"{e} ~ {_expr(rng, depth + 1)}", f"{e} + {_expr(rng, depth + 1)}", f"{e} * {_big(rng)}",
        f"{e}|center({_big(rng)})", f"{e}|indent({_big(rng)})", f"{e}|replace('a', 'b' * {_big(rng)})",
        f"{e}|join('x' * {_big(rng)})", f"{e}|wordwrap(1, wrapstring='z' * {_big(rng)})",
        f"'%{_big(rng)}s' % {e}", f"'{{:>{_big(rng)}}}'.format({e})", f"({e}).ljust({_big(rng)})",
        f"lipsum({_big(rng)})", f"{e}|tojson", f"{e}|length", f"{e}|upper", f"{e}[:3]", f"{e} ** {_big(rng)}",
        rng.choice(atoms)])


def _statement(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if r < 0.25:
        return f"{{% set s = {_expr(rng)} %}}"
    if r < 0.4:
        return f"{{% set ns.s = {_expr(rng)} %}}"
    if r < 0.6 and depth < 3:
        body = "".join(_statement(rng, depth + 1) for _ in range(rng.randint(1, 3)))
        it = rng.choice(["messages", f"range({_big(rng)})", "range(3)"])
        return f"{{% for m in {it} %}}{body}{{% endfor %}}"
    if r < 0.7:
        return "{% macro f(n) %}{{ f(n + 1) if n < " + _big(rng) + " else n }}{% endmacro %}{{ f(0) }}"
    return f"{{{{ {_expr(rng)} }}}}"


def _hostile(rng: random.Random) -> str:
    n = rng.randint(20, 40)
    return rng.choice([
        "{% set s = 'a' %}" + "{% set s = s ~ s %}" * n + "{{ s }}",
        "{% set ns = namespace(s='a') %}{% for i in range(" + str(n) + ") %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
        "{{ ns.s }}",
        "{{ 'a'|center(" + _big(rng) + ") }}", "{{ lipsum(" + _big(rng) + ") }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{{ '%" + _big(rng) + "s' % 'a' }}", "{{ '{:>" + _big(rng) + "}'.format('a') }}",
    ])


def _mutate(rng: random.Random, text: str) -> str:
    return mutate(rng, text, ["{%", "%}", "{{", "}}", "~", "*", "|", "(", ")", "'", "\x00", "\ud800"], max_ops=3,
                  max_span=30, max_copies=20)


def make_case(rng: random.Random) -> dict:
    if rng.random() < 0.3:
        src = _hostile(rng)
    else:
        src = "{% set ns = namespace(s='') %}{% set s = '' %}" + "".join(_statement(rng) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.4:
            src = _mutate(rng, src)
    return {"kind": "template", "source": src, "generation_prompt": rng.random() < 0.5}


def run_case(case: dict) -> None:
    """Renders the case's template within the bounds (fuzz_bounds.py); a PyllamaspecError
    (ChatTemplateError) is the caller's to accept."""
    from pyllamaspec.engine.chat_template import ChatTemplate
    Bounds().step("rendering", lambda: ChatTemplate(case["source"]).render(
        MESSAGES, add_generation_prompt=case["generation_prompt"]))
