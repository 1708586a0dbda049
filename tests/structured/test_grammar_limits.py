"""Grammars and JSON schemas a client may send cannot crash, pin or bloat the process (issue 48):
GBNF compiling is bounded (nesting, rules, elements, parser stacks, time) and refused fast with
the limit named; schemas nested too deep are refused by name instead of a RecursionError; a
grammar that allows no token of the vocabulary is a clear error at the start and a finish later;
the server compiles off the event loop, so /health answers while a hostile grammar is refused."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pyllamaspec import Model, generate
from pyllamaspec.engine.grammar import Grammar, GrammarLimits, check_grammar
from pyllamaspec.errors import GrammarError
from pyllamaspec.structured.json_schema import json_schema_to_grammar


def _nested_parens(n: int) -> str:
    return "root ::= " + "(" * n + '"a"' + ")" * n


def _rule_chain(n: int) -> str:
    body = "\n".join(f'r{k} ::= r{k + 1} "x"' for k in range(1, n))
    return f'root ::= r1 "x"\n{body}\nr{n} ::= "y"'


def _nested_repetitions(levels: int, bound: int) -> str:
    names = [chr(ord("a") + i) for i in range(levels)]
    rules = [f"{a} ::= {b}{{0,{bound}}}" for a, b in zip(names, names[1:])]
    return "\n".join(["root ::= a", *rules, f'{names[-1]} ::= "x"{{0,{bound}}}'])


def _alternatives(n: int) -> str:
    return "root ::= " + " | ".join(f'"a{k}"' for k in range(n))


# The issue's cases: before, the first two crashed the process (the parser and the left-recursion
# check recursed), the third pinned a thread for 40+ minutes, the fourth took 13.2 s (19.6 s here).
HOSTILE = {
    "100000 nested parentheses": (_nested_parens(100_000), "max_depth"),
    "a chain of 300000 rules": (_rule_chain(300_000), "max_rules"),
    "repetitions {0,2000} nested 4 deep": (_nested_repetitions(4, 2000), "max_stacks"),
    "repetitions {0,300} nested 3 deep": (_nested_repetitions(3, 300), "max_stacks"),
    "200000 alternatives": (_alternatives(200_000), "max_set"),
}

# Each case runs in a child process (a regression that crashes must fail the test, not the
# suite), timed, with its peak RSS over the interpreter's before the case.
CHILD = textwrap.dedent("""
    import json, resource, sys, time
    from pyllamaspec.engine.grammar import check_grammar
    from pyllamaspec.errors import GrammarError
    text = sys.stdin.read()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    try:
        check_grammar(text)
        out = "accepted"
    except GrammarError as e:
        out = str(e)
    print(json.dumps({"s": time.perf_counter() - t, "out": out,
                      "rss_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}))
""")


def _in_child(text: str) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"the check crashed (exit {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_grammar_refused_fast_naming_the_limit(name):
    text, limit = HOSTILE[name]
    r = _in_child(text)
    assert limit in r["out"], r["out"]
    # measured here: 0.01-0.16 s and 0-40 MiB; the issue's bound is 2 s
    assert r["s"] < 2.0, r
    assert r["rss_mib"] < 200, r


def test_limits_are_what_refuses():
    """Negative controls: with a limit raised, the same texts compile (so the refusals above
    come from the limits, not from a broken parser), and the time limit alone stops a compile
    whose states multiply."""
    check_grammar(_nested_parens(5000), limits=GrammarLimits(max_depth=10_000))
    check_grammar(_rule_chain(150_000), limits=GrammarLimits(max_rules=200_000, max_stacks=0))
    check_grammar(_alternatives(100_000), limits=GrammarLimits(max_set=200_000))
    t = time.perf_counter()
    with pytest.raises(GrammarError, match="timeout_ms"):
        check_grammar(_nested_repetitions(4, 2000),
                      limits=GrammarLimits(max_stacks=0, max_set=0, max_set_storage=0, timeout_ms=300))
    assert time.perf_counter() - t < 1.5


def test_limits_are_checked():
    with pytest.raises(Exception, match="max_depth"):
        check_grammar('root ::= "a"', limits=GrammarLimits(max_depth=-1))


def test_real_grammars_fit_the_default_limits():
    """What real requests send stays well inside: a schema's grammar with long bounded arrays
    and strings, 2000 optional properties, an enumeration of 20,000 values."""
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 64}, "maxItems": 200},
        "points": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 2,
                   "maxItems": 50},
        **{f"p{i}": {"type": "number"} for i in range(2000)}},
        "required": ["tags"]}
    t = time.perf_counter()
    check_grammar(json_schema_to_grammar(schema))
    check_grammar(json_schema_to_grammar({"enum": [f"value-{i}" for i in range(20_000)]}))
    assert time.perf_counter() - t < 10


@pytest.mark.parametrize("depth,kind", [(450, "object"), (900, "array"), (3000, "anyOf")])
def test_deep_schemas_refused_by_name(depth, kind):
    s: dict = {"type": "string"}
    for _ in range(depth):
        s = ({"type": "object", "properties": {"x": s}} if kind == "object" else
             {"type": "array", "items": s} if kind == "array" else {"anyOf": [s, {"type": "null"}]})
    with pytest.raises(GrammarError, match="nested deeper than 128"):
        json_schema_to_grammar(s)


def test_schema_depth_inside_the_limit_converts():
    s: dict = {"type": "string"}
    for _ in range(120):
        s = {"type": "object", "properties": {"x": s}, "required": ["x"]}
    check_grammar(json_schema_to_grammar(s))


def test_many_optional_properties_convert_without_recursion():
    """2,000 optional properties raised RecursionError (one Python frame per property)."""
    props = {f"p{i}": {"type": "integer"} for i in range(2000)}
    t = time.perf_counter()
    g = json_schema_to_grammar({"type": "object", "properties": props})
    assert time.perf_counter() - t < 5
    assert g.count("-rest ::=") == 1999
    check_grammar(g)


def test_lone_surrogate_is_a_grammar_error():
    """JSON allows "\ud800"; UTF-8 does not: a GrammarError, where it was a UnicodeEncodeError (a 500)."""
    with pytest.raises(GrammarError, match="not valid Unicode"):
        check_grammar('root ::= "\ud800"')
    with pytest.raises(GrammarError, match="not valid Unicode"):
        json_schema_to_grammar({"type": "string", "pattern": "^a\ud800$"})
    # found by scripts/fuzz.py --kind grammar: enum values sorted by their UTF-8 bytes
    g = json_schema_to_grammar({"allOf": [{"enum": ["\ud800", "a"]}, {"enum": ["\ud800", "b"]}]})
    with pytest.raises(GrammarError, match="not valid Unicode"):
        check_grammar(g)


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    with Model(smollm2_path, n_ctx=256) as m:
        yield m


def test_grammar_allowing_no_token_is_refused_at_the_start(smollm2):
    # a class that admits no character: no token can start the answer
    with pytest.raises(GrammarError, match="allows no token"):
        generate("hi", smollm2, max_tokens=4, grammar="root ::= [^\\x00-\\U0010FFFF]")


def test_dead_end_later_ends_the_generation(smollm2):
    """After "a" nothing can follow and the grammar is not complete: the generation stops there
    (finish "stop"), where it raised "allows no token" from inside the round."""
    r = generate("hi", smollm2, max_tokens=4, grammar='root ::= "a" [^\\x00-\\U0010FFFF]')
    assert (r.text, r.finish_reason) == ("a", "stop")
    g = Grammar('root ::= "a" [^\\x00-\\U0010FFFF]', smollm2)
    assert not g.dead_end
    assert g.accept(smollm2.tokenize("a", add_special=False)) == 1
    assert g.dead_end and not g.may_end
    eog = smollm2.eos_token
    assert g.mask().sum() >= 1 and g.mask()[eog] and g.allows(eog)
    # a complete grammar is not a dead end: its end-of-generation token comes from may_end
    done = Grammar('root ::= "a"', smollm2)
    done.accept(smollm2.tokenize("a", add_special=False))
    assert done.may_end and not done.dead_end


def test_server_refuses_hostile_grammars_fast_and_stays_up(smollm2_path):
    pytest.importorskip("starlette")
    from test_server import MODEL_FLAGS, Server
    s = Server(["-m", str(smollm2_path), "-np", "2", *MODEL_FLAGS])
    try:
        worst = []
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                t = time.perf_counter()
                s.health()
                worst.append(time.perf_counter() - t)
                time.sleep(0.02)
        th = threading.Thread(target=poll)
        th.start()
        try:
            for name, (text, limit) in HOSTILE.items():
                t = time.perf_counter()
                code, body = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 4, "grammar": text})
                took = time.perf_counter() - t
                assert code == 400 and limit in json.dumps(body), (name, code, body)
                assert took < 2.0, (name, took)
            for depth in (450, 900):       # written by hand: json.dumps recurses too
                schema = '{"type": "object", "properties": {"x": ' * depth + '{"type": "string"}' + "}}" * depth
                code, body = s.post("/v1/chat/completions", (
                    '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "response_format": '
                    '{"type": "json_schema", "json_schema": {"schema": ' + schema + "}}}").encode())
                assert code == 400 and "nested" in json.dumps(body), (depth, code, body)
            code, body = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 4,
                                                    "grammar": "root ::= [^\\x00-\\U0010FFFF]"})
            assert code == 400 and "allows no token" in json.dumps(body), (code, body)
        finally:
            stop.set()
            th.join()
        # /health is never held up by a compile (measured here: at most 0.02 s over 35 polls;
        # the issue's bound is 0.2 s)
        assert max(worst) < 0.2, max(worst)
        code, body = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 4, "grammar": 'root ::= "ok"'})
        assert code == 200 and body["choices"][0]["text"] == "ok"
    finally:
        s.stop()


def test_limit_passed_at_run_time_ends_that_generation_with_its_error(smollm2):
    """A grammar whose states multiply only after some text compiles (its first state is small),
    then passes max_stacks in a mask: the grammar stops at a dead end (only end-of-generation
    allowed) and its generation ends with a GrammarError naming the limit, instead of failing
    the round (which in the server carries other requests) or pinning the thread."""
    from pyllamaspec.engine.sampling import SamplingParams
    from pyllamaspec.generation.lifecycle import Generation, run_alone
    from pyllamaspec.speculation.decoder import DraftParams
    text = 'root ::= n0\nn0 ::= n1{0,300}\nn1 ::= n2{0,300}\nn2 ::= "x"{2,300}'
    lim = GrammarLimits(max_stacks=5000)
    g = Grammar(text, smollm2, limits=lim)
    x = smollm2.tokenize("x", add_special=False)
    for _ in range(4):
        if g.failure:
            break
        g.mask()
        g.accept(x)
    assert g.failure and "max_stacks" in g.failure
    m = g.mask()
    assert m[smollm2.eos_token] and g.dead_end and m.sum() <= 8     # the end-of-generation tokens only
    assert not g.allows(x[0])

    gen = Generation(smollm2.tokenize("hi"), smollm2, None, sampling=SamplingParams(temperature=0.0),
                     draft=DraftParams(), max_tokens=16, stop=[], grammar=Grammar(text, smollm2, limits=lim))
    with pytest.raises(GrammarError, match="max_stacks"):
        list(run_alone(gen))
    assert set(smollm2.detokenize(gen.result["tokens"])) <= {"x"}
