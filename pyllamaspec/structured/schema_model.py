"""A JSON schema read into the nodes a grammar is made from: the subset llama.cpp b11434 converts,
classified as its common/json-schema.cpp classifies it (which keyword wins, what a missing
"type" means, how bounds round), so that json_schema.py gives llama.cpp's grammar to the
character. A schema outside the subset is a GrammarError naming where ("#/properties/x")."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import GrammarError

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

# Node kinds
ANY, REF, ANY_OF, ALL_OF, CONST, ENUM, NULL, BOOLEAN, NUMBER, INTEGER, STRING, ARRAY, TUPLE, OBJECT = (
    "any", "ref", "anyOf", "allOf", "const", "enum", "null", "boolean", "number", "integer", "string", "array",
    "tuple", "object")

FORMATS = {"date": "date", "time": "time", "date-time": "date-time"}

# Schemas nested deeper than this are refused: the reader and the converter recurse once per
# level (a few Python frames each), and a client's schema must not reach the interpreter's
# recursion limit. Real schemas nest a few levels, generated ones a few dozen.
MAX_DEPTH = 128


@dataclass(eq=False)
class Node:
    kind: str
    children: list["Node"] = field(default_factory=list)       # anyOf / allOf / tuple items
    value: Any = None                                           # const
    values: list = field(default_factory=list)                  # enum
    ref: str = ""
    target: "Node | None" = None
    minimum: int = INT64_MIN
    maximum: int = INT64_MAX
    pattern: str = ""
    format: str = ""                                            # "", "uuid", "date", "time", "date-time"
    min_length: int = 0
    max_length: int = -1
    items: "Node | None" = None                                 # array
    min_items: int = 0
    max_items: int = -1
    properties: list[tuple[str, "Node", bool]] = field(default_factory=list)   # (name, schema, required)
    additional: "Node | None" = None                            # None: no additional properties


def _fail(path: str, msg: str):
    raise GrammarError(f"JSON schema error at {path}: {msg}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(schema: dict, key: str, path: str, default: int) -> int:
    if key not in schema:
        return default
    v = schema[key]
    if not _is_int(v) or v < 0 or v > 2**31 - 1:
        _fail(path, f"{key} must be a non-negative integer")
    return v


def _bound(schema: dict, key: str, path: str, round_up: bool) -> int:
    """A fractional bound rounds inwards, towards the integers it still admits."""
    v = schema[key]
    if _is_int(v):
        return max(INT64_MIN, min(INT64_MAX, v))
    if not _is_number(v) or not math.isfinite(v):
        _fail(path, f"{key} must be a number")
    return int(math.ceil(v) if round_up else math.floor(v))


def _format(schema: dict, path: str) -> str:
    if "format" not in schema:
        return ""
    f = schema["format"]
    if not isinstance(f, str):
        _fail(path, "format must be a string")
    if f in FORMATS:
        return FORMATS[f]
    if f == "uuid" or (len(f) == 5 and f.startswith("uuid") and "1" <= f[4] <= "5"):
        return "uuid"
    return ""


class SchemaReader:
    """Builds the nodes of one schema document; $refs point into the same document."""

    def __init__(self, root: Any):
        self.root = root
        self.refs: dict[str, Node | None] = {}
        self.pending: list[Node] = []
        self.depth = 0

    def read(self) -> Node:
        node = self.node(self.root, "#")
        for r in self.pending:
            r.target = self.refs[r.ref]
        return node

    def resolve(self, ref: str, path: str) -> Any:
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = int(sel) if sel.isdigit() else len(target)
                if idx >= len(target):
                    _fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                _fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def ref(self, value: Any, path: str) -> Node:
        if not isinstance(value, str):
            _fail(path, "$ref must be a string")
        if not value.startswith("#/"):
            _fail(path, f"unsupported $ref {value}, only references into the same document are supported")
        if value not in self.refs:
            self.refs[value] = None          # a cycle back to this $ref stops here
            self.refs[value] = self.node(self.resolve(value, path), value)
        node = Node(REF, ref=value)
        self.pending.append(node)
        return node

    def alternatives(self, kind: str, alts: Any, path: str) -> Node:
        if not isinstance(alts, list):
            _fail(path, "must be an array of schemas")
        if not alts:
            _fail(path, "must not be empty")
        return Node(kind, children=[self.node(a, f"{path}/{i}") for i, a in enumerate(alts)])

    def object(self, schema: dict, path: str) -> Node:
        req = schema.get("required")
        required = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
        node = Node(OBJECT)
        if "properties" in schema:
            props = schema["properties"]
            if not isinstance(props, dict):
                _fail(path, "properties must be an object")
            node.properties = [(name, self.node(p, f"{path}/properties/{name}"), name in required)
                               for name, p in props.items()]
        if "additionalProperties" in schema:
            add = schema["additionalProperties"]
            if isinstance(add, bool):
                node.additional = Node(ANY) if add else None
            elif isinstance(add, dict):
                node.additional = self.node(add, f"{path}/additionalProperties")
            else:
                _fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            node.additional = Node(ANY)      # {"type": "object"} alone: any object
        return node

    def array(self, schema: dict, path: str) -> Node:
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if isinstance(items, list):
                return Node(TUPLE, children=[self.node(it, f"{path}/{key}/{i}") for i, it in enumerate(items)])
            item = self.node(items, f"{path}/{key}")
        else:
            item = Node(ANY)
        return Node(ARRAY, items=item, min_items=_count(schema, "minItems", path, 0),
                    max_items=_count(schema, "maxItems", path, -1))

    def string(self, schema: dict, path: str) -> Node:
        node = Node(STRING)
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                _fail(path, "pattern must be a string")
            try:
                schema["pattern"].encode("utf-8")
            except UnicodeEncodeError:
                _fail(path, "pattern is not valid Unicode text (a lone surrogate)")
            node.pattern = schema["pattern"]
        node.format = _format(schema, path)
        node.min_length = _count(schema, "minLength", path, 0)
        node.max_length = _count(schema, "maxLength", path, -1)
        return node

    def integer(self, schema: dict, path: str) -> Node:
        node = Node(INTEGER)
        if "minimum" in schema:
            node.minimum = _bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            node.minimum = _bound(schema, "exclusiveMinimum", path, False) + 1
        if "maximum" in schema:
            node.maximum = _bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            node.maximum = _bound(schema, "exclusiveMaximum", path, True) - 1
        return node

    def node(self, schema: Any, path: str) -> Node:
        if self.depth >= MAX_DEPTH:
            _fail(path[:200] + ("..." if len(path) > 200 else ""), f"nested deeper than {MAX_DEPTH} levels")
        self.depth += 1
        try:
            return self._node(schema, path)
        finally:
            self.depth -= 1

    def _node(self, schema: Any, path: str) -> Node:
        if not isinstance(schema, dict):
            _fail(path, "schema must be an object")
        if "$ref" in schema:
            return self.ref(schema["$ref"], path)
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.alternatives(ANY_OF, schema[key], f"{path}/{key}")
        t = schema.get("type")
        if isinstance(t, list):              # {"type": [a, b], ...}: one alternative per type
            if not t:
                _fail(path, "type must not be empty")
            return Node(ANY_OF, children=[self.node(dict(schema, type=x), f"{path}/type/{i}") for i, x in enumerate(t)])
        if "const" in schema:
            return Node(CONST, value=schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                _fail(path, "enum must be a non-empty array")
            return Node(ENUM, values=list(values))
        if t is not None and not isinstance(t, str):
            _fail(path, "type must be a string or an array of strings")
        return self.typed(schema, path, t or "")

    def typed(self, schema: dict, path: str, t: str) -> Node:
        has_props = "properties" in schema or ("additionalProperties" in schema
                                               and schema["additionalProperties"] is not True)
        if not t:                            # the structural keywords decide, in llama.cpp's order
            if has_props:
                return self.object(schema, path)
            if "allOf" in schema:
                return self.alternatives(ALL_OF, schema["allOf"], f"{path}/allOf")
            if "items" in schema or "prefixItems" in schema:
                return self.array(schema, path)
            if any(k in schema for k in ("pattern", "minLength", "maxLength")) or _format(schema, path):
                return self.string(schema, path)
            return Node(ANY)
        if t == "object":
            if not has_props and "allOf" in schema:
                return self.alternatives(ALL_OF, schema["allOf"], f"{path}/allOf")
            return self.object(schema, path)
        if t == "string":
            if "allOf" in schema:
                return self.alternatives(ALL_OF, schema["allOf"], f"{path}/allOf")
            return self.string(schema, path)
        simple = {"array": None, "integer": None, "number": NUMBER, "boolean": BOOLEAN, "null": NULL}
        if t not in simple:
            _fail(path, f"unrecognized type {t}")
        if t == "array":
            return self.array(schema, path)
        if t == "integer":
            return self.integer(schema, path)
        return Node(simple[t])


def read_schema(schema: Any) -> Node:
    return SchemaReader(schema).read()


def may_be_string(node: Node, seen: set | None = None) -> bool:
    """Whether a value the schema admits may be a string, through any branch of it."""
    seen = set() if seen is None else seen
    k = node.kind
    if k == STRING:
        return True
    if k == CONST:
        return isinstance(node.value, str)
    if k == ENUM:
        return any(isinstance(v, str) for v in node.values)
    if k == REF:
        if node.target is None or id(node.target) in seen:
            return False
        seen.add(id(node.target))
        out = may_be_string(node.target, seen)
        seen.discard(id(node.target))
        return out
    if k == ANY_OF:
        return any(may_be_string(c, seen) for c in node.children)
    if k == ALL_OF:
        constrained = [c for c in node.children if c.kind != ANY]
        return bool(constrained) and all(may_be_string(c, seen) for c in constrained)
    return False
