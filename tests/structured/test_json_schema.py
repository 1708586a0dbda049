"""JSON schema -> GBNF (structured/json_schema.py) writes llama.cpp b11434's grammar to
the character for a corpus of schemas reaching every branch of its converter, and refuses what
it refuses (tests/data/reference/json_schema_llamacpp.json, scripts/json_schema_reference.py)."""
from __future__ import annotations

import json
import warnings

import pytest

from conftest import reference_dir
from pyllamaspec.engine.grammar import check_grammar
from pyllamaspec.errors import GrammarError
from pyllamaspec.structured.formats import constraint_spec, response_content, response_format_schema
from pyllamaspec.structured.json_schema import json_schema_to_grammar

CASES = json.loads((reference_dir() / "json_schema_llamacpp.json").read_text())["cases"]


def _reference(case: dict) -> str:
    if "grammar_hex" in case:        # llama.cpp split a UTF-8 character: the bytes as they are
        return bytes.fromhex(case["grammar_hex"]).decode("utf-8", "surrogateescape")
    return case["grammar"]


@pytest.mark.parametrize("case", CASES, ids=[json.dumps(c["schema"])[:60] for c in CASES])
def test_same_grammar_as_llamacpp(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # unsupported patterns warn, as llama.cpp does
        if "error" in case:
            with pytest.raises(GrammarError):
                json_schema_to_grammar(case["schema"])
            return
        got = json_schema_to_grammar(case["schema"])
    assert got == _reference(case)
    if "grammar" in case:
        check_grammar(got)                          # and our parser reads it


def test_corpus_reaches_the_converter_branches():
    text = "".join(c.get("grammar", "") for c in CASES)
    for piece in ("-rest ::=", "additional-kv ::=", "ref-", "date-time-string ::=", "[0-9a-fA-F]{12}", "dot ::=",
                  "[^\"", "{2,5}", "[0-9]{1,15}", "alternative-1", "tuple-2"):
        assert piece in text, piece
    assert sum("error" in c for c in CASES) >= 8


def test_comparison_can_fail():
    case = next(c for c in CASES if c["schema"] == {"type": "integer", "minimum": 3, "maximum": 250})
    other = json_schema_to_grammar({"type": "integer", "minimum": 3, "maximum": 251})
    assert other != case["grammar"]


def test_response_format_as_llama_server_reads_it():
    s = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert response_format_schema({"type": "json_schema", "json_schema": {"schema": s}}) == s
    assert response_format_schema({"type": "json_object"}) == {}
    assert response_format_schema({"type": "json_object", "schema": s}) == s
    assert response_format_schema({"type": "text"}) is None
    with pytest.raises(Exception, match="json_object"):
        response_format_schema({"type": "xml"})
    spec = constraint_spec(response_format={"type": "json_object"})
    assert spec.schema == {"type": "object"} and "root ::= object" in spec.text
    with pytest.raises(Exception, match="both"):
        constraint_spec(grammar='root ::= "x"', json_schema=s)
    with pytest.raises(GrammarError, match="line 1"):
        constraint_spec(grammar='root ::= "x')


def test_response_content_drops_the_fence():
    assert response_content('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert response_content('  {"a": 1}\n') == '{"a": 1}'
