#!/usr/bin/env python3
"""llama.cpp's GBNF for a corpus of JSON schemas, for tests/data/reference/json_schema_llamacpp.json
(tests/structured/test_json_schema.py checks that pyllamaspec's converter writes the same text). Not CI.

The schemas are written here (SCHEMAS) to reach every branch of llama.cpp's converter: types,
enums and consts, required and optional properties, additionalProperties, arrays and tuples with
bounds, strings with lengths, formats and ^...$ patterns (supported, unsupported, invalid),
integer ranges, $refs (recursive), anyOf / oneOf / allOf, type arrays, names that need escaping
or are reserved, and schemas llama.cpp refuses. scripts/llamacpp_json_schema.cpp (build line in
its header) converts them.

  python scripts/json_schema_reference.py /tmp/llamacpp_json_schema
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "reference" / "json_schema_llamacpp.json"

OBJ = {"type": "object"}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}

SCHEMAS = [
    {}, OBJ, {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}, {"type": "null"},
    {"type": "array"}, PERSON,
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}, "c": {"type": "boolean"}}},
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}, "c": {"type": "boolean"},
                                      "d": {"type": "null"}}, "required": ["c", "a"]},
    {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": True},
    {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": {"type": "string"},
     "required": ["x"]},
    {"type": "object", "additionalProperties": {"type": "number"}},
    {"type": "object", "properties": {"and": {}, "also": {}, "a": {}}, "additionalProperties": True},
    {"type": "object", "properties": {"first name": {"type": "string"}, "e-mail": {"type": "string", "format": "email"},
                                      "日本": {"type": "string"}, "quote\"d": {"const": 1}}, "required": ["first name"]},
    {"type": "object", "properties": {"string": {"type": "string"}, "root": {"type": "integer"}, "value": {},
                                      "object": {"type": "object"}}, "required": ["string"]},
    {"enum": ["red", "green", "blue"]},
    {"enum": ["a", 1, 2.5, True, None, {"k": [1, "x"]}, "é\n\"\\"]},
    {"const": "fixed"}, {"const": {"b": 1, "a": [True, None]}},
    {"type": "array", "items": {"type": "string"}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 5},
    {"type": "array", "items": {"type": "boolean"}, "minItems": 0, "maxItems": 1},
    {"type": "array", "items": {"type": "boolean"}, "minItems": 3, "maxItems": 3},
    {"type": "array", "items": {"type": "string"}, "maxItems": 0},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
    {"type": "array", "items": [{"type": "string"}, {"type": "number"}, {"enum": [1, 2]}]},
    {"type": "string", "minLength": 2},
    {"type": "string", "maxLength": 10},
    {"type": "string", "minLength": 1, "maxLength": 1},
    {"type": "string", "format": "date"}, {"type": "string", "format": "time"},
    {"type": "string", "format": "date-time"}, {"type": "string", "format": "uuid"},
    {"type": "string", "format": "uuid4"}, {"type": "string", "format": "hostname"},
    {"type": "string", "pattern": "^[a-z]+$"},
    {"type": "string", "pattern": "^\\d{3}-\\d{4}$"},
    {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3,}$"},
    {"type": "string", "pattern": "^(abc|def)+x?y*z{2,5}$"},
    {"type": "string", "pattern": "^a.b.c$"},
    {"type": "string", "pattern": "^(?:ab)+(cd){1,2}$"},
    {"type": "string", "pattern": "^\\.\\[x\\]\\(\\)\\$$"},
    {"type": "string", "pattern": "^\"quoted\"\\t\\x41$"},
    {"type": "string", "pattern": "^é+ü{2}$"},
    {"type": "string", "pattern": "no anchors"},
    {"type": "string", "pattern": "^(?=x)lookahead$"},
    {"type": "string", "pattern": "^\\w+$"},
    {"type": "string", "pattern": "^(unbalanced$"},
    {"type": "string", "pattern": "^[unterminated$"},
    {"type": "integer", "minimum": 0},
    {"type": "integer", "minimum": 1},
    {"type": "integer", "minimum": 5},
    {"type": "integer", "minimum": 42},
    {"type": "integer", "minimum": 900},
    {"type": "integer", "minimum": -5},
    {"type": "integer", "minimum": -123},
    {"type": "integer", "maximum": 0},
    {"type": "integer", "maximum": 99},
    {"type": "integer", "maximum": -7},
    {"type": "integer", "minimum": 3, "maximum": 250},
    {"type": "integer", "minimum": 0, "maximum": 10},
    {"type": "integer", "minimum": -10, "maximum": 10},
    {"type": "integer", "minimum": -300, "maximum": -20},
    {"type": "integer", "minimum": 1000, "maximum": 123456},
    {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
    {"type": "integer", "minimum": 1.5, "maximum": 9.5},
    {"type": "integer", "minimum": 100, "maximum": 100},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                         "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                        "required": ["v"]}}, "$ref": "#/$defs/node"},
    {"definitions": {"a": {"type": "string"}}, "type": "object", "properties": {"x": {"$ref": "#/definitions/a"},
                                                                               "y": {"$ref": "#/definitions/a"}}},
    {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    {"oneOf": [PERSON, {"type": "null"}]},
    {"type": ["string", "null"]},
    {"type": ["integer", "array"], "items": {"type": "integer"}, "minimum": 0},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
               {"type": "object", "properties": {"b": {"type": "integer"}}}]},
    {"allOf": [{"enum": ["x", "y", "z"]}, {"enum": ["y", "z", "w"]}]},
    {"allOf": [{"$ref": "#/$defs/base"}, {"anyOf": [{"type": "object", "properties": {"c": {"type": "number"}}}]}],
     "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}},
    {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string",
                                                                                          "pattern": "^[0-9]{5}$"}},
                    "required": ["street"]},
        "status": {"enum": ["active", "inactive"]},
        "score": {"type": "number"}, "created": {"type": "string", "format": "date-time"}},
     "required": ["name", "status"]},
    {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
     "required": ["city"], "additionalProperties": False},
    {"type": "unknown"},
    {"type": "object", "properties": []},
    {"$ref": "https://example.com/schema.json"},
    {"$ref": "#/$defs/missing"},
    {"type": "array", "minItems": -1},
    {"enum": []},
    {"type": []},
    {"oneOf": {}},
    [1, 2],
]


def main(probe: str) -> None:
    res = json.loads(subprocess.run([probe], input=json.dumps(SCHEMAS), capture_output=True, text=True,
                                    check=True).stdout)
    cases = [dict(schema=s, **r) for s, r in zip(SCHEMAS, res)]
    OUT.write_text(json.dumps({"probe": "scripts/llamacpp_json_schema.cpp (llama.cpp b11434)", "cases": cases},
                              ensure_ascii=False, indent=1) + "\n")
    print(f"{len(cases)} schemas, {sum('error' in c for c in cases)} refused", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
