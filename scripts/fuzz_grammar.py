"""Grammar side of scripts/fuzz.py: GBNF text and JSON schemas as a client may send them, compiled
on a real vocabulary and followed for a few tokens. Seeded by issue 48's hostile cases (deep
nesting, long rule chains, nested bounded repetitions, many alternatives, deep schemas, many
optional properties) at random sizes, plus random grammars and schemas, mutated. A case must end
within its time bound and its memory bound, compiled or refused with a PyllamaspecError; any other
exception, a crash or a hang is a finding. A case is a plain dict (saved as JSON, replayed).
"""
from __future__ import annotations

import json
import random
import warnings

from fuzz_bounds import Bounds, Violation, mutate


# ---- GBNF ------------------------------------------------------------------------------------------

def _hostile_gbnf(rng: random.Random) -> str:
    n = rng.choice([10, 1000, 5000, 30000, 100000, 300000])
    kind = rng.randrange(5)
    if kind == 0:
        return "root ::= " + "(" * n + '"a"' + ")" * n
    if kind == 1:
        n = min(n, 200000)
        return 'root ::= r1 "x"\n' + "".join(f'r{k} ::= r{k + 1} "x"\n' for k in range(1, n)) + f'r{n} ::= "y"'
    if kind == 2:
        levels, bound = rng.randint(2, 5), rng.choice([2, 50, 300, 2000, 2001, 5000])
        names = [f"n{i}" for i in range(levels)]
        rules = [f"{a} ::= {b}{{0,{bound}}}" for a, b in zip(names, names[1:])]
        return "\n".join(["root ::= n0", *rules, f'{names[-1]} ::= "x"{{{rng.randint(0, 3)},{bound}}}'])
    if kind == 3:
        return "root ::= " + " | ".join(f'"a{k}"' for k in range(min(n, 250000)))
    # repetitions of repetitions inside one rule, and long literals repeated
    lit = '"' + "x" * rng.choice([1, 100, 5000]) + '"'
    return f"root ::= (({lit}{{0,{rng.choice([10, 2000])}}}){{{rng.randint(0, 2000)}}})"


def _item(rng: random.Random, rules: list[str], depth: int) -> str:
    r = rng.random()
    if r < 0.3:
        return json.dumps("".join(rng.choice("ab\"\\{}é😀") for _ in range(rng.randint(0, 4))))
    if r < 0.45:
        return rng.choice(["[a-z]", "[^\"\\\\]", "[0-9]", ".", "[\\x00-\\x7f]", "[^\\x00-\\U0010FFFF]"])
    if r < 0.6:
        return rng.choice(rules)
    if r < 0.7:
        return rng.choice(["<[0]>", "!<[1]>", "<[999999]>"])
    if depth < 4:
        return "(" + _alts(rng, rules, depth + 1) + ")"
    return '"z"'


def _alts(rng: random.Random, rules: list[str], depth: int) -> str:
    out = []
    for _ in range(rng.randint(1, 3)):
        seq = []
        for _ in range(rng.randint(0, 4)):
            it = _item(rng, rules, depth)
            q = rng.random()
            if q < 0.15:
                it += rng.choice("*+?")
            elif q < 0.25:
                lo = rng.choice([0, 1, 3, 2000, 2001])
                it += rng.choice([f"{{{lo}}}", f"{{{lo},}}", f"{{{lo},{lo + rng.choice([0, 1, 50, 3000])}}}"])
            seq.append(it)
        out.append(" ".join(seq))
    return " | ".join(out)


def _random_gbnf(rng: random.Random) -> str:
    names = ["root"] + [f"r{i}" for i in range(rng.randint(0, 6))]
    return "\n".join(f"{n} ::= {_alts(rng, names, 0)}" for n in names)


def _mutate(rng: random.Random, text: str) -> str:
    return mutate(rng, text, "()[]{}|*+?\"\\\n:=-^<>!#\x00\ud800", max_ops=4, max_span=40, max_copies=50,
                  truncate=True)


# ---- JSON schemas ------------------------------------------------------------------------------------

def _schema(rng: random.Random, depth: int) -> dict:
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "pattern"]
    if depth < 6:
        kinds += ["object", "array", "anyOf", "allOf", "ref"]
    k = rng.choice(kinds)
    if k == "object":
        props = {f"p{i}": _schema(rng, depth + 1) for i in range(rng.randint(0, 5))}
        s: dict = {"type": "object", "properties": props}
        if props and rng.random() < 0.5:
            s["required"] = rng.sample(sorted(props), rng.randint(0, len(props)))
        if rng.random() < 0.3:
            s["additionalProperties"] = rng.choice([True, False, {"type": "integer"}])
        return s
    if k == "array":
        s = {"type": "array", "items": _schema(rng, depth + 1)}
        if rng.random() < 0.5:
            s["minItems"] = rng.choice([0, 1, 5, 2000])
        if rng.random() < 0.5:
            s["maxItems"] = rng.choice([0, 1, 10, 2000, 10**9])
        return s
    if k in ("anyOf", "allOf"):
        return {k: [_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if k == "ref":
        return {"$ref": rng.choice(["#", "#/properties/p0", "#/$defs/x", "#/nowhere"])}
    if k == "enum":
        return {"enum": [rng.choice([1, "a", None, True, 2.5, {"k": [1]}, "\ud800"]) for _ in range(rng.randint(1, 4))]}
    if k == "const":
        return {"const": rng.choice(["x" * rng.randint(0, 50), 7, None, [1, 2]])}
    if k == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-z]{2,5}$", "^(a|b)+$", "^" + "(" * 300 + "a" + ")" * 300 + "$",
                                                         "^a{0,2000}{0,2000}$", "^[\\d]{1,3}(-\\d+)*$", "(unbalanced"])}
    if k == "integer":
        s = {"type": "integer"}
        if rng.random() < 0.5:
            s["minimum"] = rng.choice([-(2**70), -5, 0, 10**18])
        if rng.random() < 0.5:
            s["maximum"] = rng.choice([-3, 99, 2**63, 10**30])
        return s
    if k == "string" and rng.random() < 0.5:
        return {"type": "string", "minLength": rng.choice([0, 3, 2000]), "maxLength": rng.choice([1, 10, 5000])}
    return {"type": k}


def _hostile_schema(rng: random.Random) -> dict:
    depth = rng.choice([50, 127, 129, 450, 900])
    s: dict = {"type": "string"}
    key = rng.choice(["object", "array", "anyOf"])
    for _ in range(depth):
        s = ({"type": "object", "properties": {"x": s}} if key == "object" else
             {"type": "array", "items": s} if key == "array" else {"anyOf": [s, {"type": "null"}]})
    if rng.random() < 0.5:
        return s
    n = rng.choice([10, 2000, 5000])
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}


# ---- cases -------------------------------------------------------------------------------------------

def make_case(rng: random.Random, names: list[str]) -> dict:
    case = {"kind": "grammar", "model": rng.choice(names), "steps": [rng.randrange(1 << 20) for _ in range(8)]}
    r = rng.random()
    if r < 0.25:
        case["gbnf"] = _hostile_gbnf(rng)
    elif r < 0.6:
        text = _random_gbnf(rng)
        case["gbnf"] = _mutate(rng, text) if rng.random() < 0.5 else text
    elif r < 0.75:
        case["schema"] = _hostile_schema(rng)
    else:
        case["schema"] = _schema(rng, 0)
    return case


class _Vocab:
    """A Tokenizer as a Grammar's model: its vocabulary is all a grammar reads."""

    def __init__(self, tok, n: int):
        self._model, self._users, self.n_vocab = tok._model, tok._users, n


def run_case(case: dict, tok) -> None:
    """Compiles the case's grammar on tokenizer `tok` and follows it for a few tokens (masks,
    accepts); a PyllamaspecError is the caller's to accept. Raises Violation past a bound: each
    step (the compile, a mask, an accept) within 2 s (the core bounds each by its
    timeout_ms, 1 s), the child's peak RSS within its bound (fuzz_bounds.py)."""
    from pyllamaspec.engine.grammar import Grammar
    from pyllamaspec.structured.json_schema import json_schema_to_grammar
    bounds = Bounds()

    def compile_():
        with warnings.catch_warnings():     # an unsupported pattern accepts any string: a warning, fine
            warnings.simplefilter("ignore")
            text = case["gbnf"] if "gbnf" in case else json_schema_to_grammar(case["schema"])
        return Grammar(text, _Vocab(tok, n))

    n = tok.vocab_info.n_tokens
    g = bounds.step("compiling", compile_)
    for step in case["steps"]:
        allowed = bounds.step("a mask", g.mask).nonzero()[0]
        if allowed.size == 0:
            raise Violation("the mask allows no token (a dead end must allow the end-of-generation tokens)")
        bounds.step("an accept", lambda: g.accept([int(allowed[step % allowed.size]), step % n]))
        if step % 3 == 0 and g.n_accepted:
            g.rewind(1)
