"""JSON schema -> GBNF, giving llama.cpp b11434's grammar to the character (its
common/json-schema-to-grammar.cpp: the same rule names, the same whitespace rule `space`, the
same property order and optional-property chains, `additionalProperties`, enums and consts as
literals, bounded arrays and strings, integer ranges, ^...$ patterns, string formats, $refs).
The model picks its own whitespace inside what the grammar allows, so only the same grammar
gives llama-server's output. tests/structured/test_json_schema.py compares with llama.cpp's own
conversions (scripts/json_schema_reference.py)."""
from __future__ import annotations

import re
import warnings
from typing import Any

from ..errors import GrammarError
from .gbnf_text import (INT64_MAX, INT64_MIN, INT_MAX, InvalidPattern, PatternReader, UnsupportedPattern,
                        build_repetition, dump_json, format_literal, from_latin1, min_max_int)
from .schema_model import (ALL_OF, ANY, ANY_OF, ARRAY, BOOLEAN, CONST, ENUM, INTEGER, NULL, NUMBER, OBJECT, REF,
                           STRING, TUPLE, Node, read_schema)

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

# name -> (rule, dependencies)
PRIMITIVES: dict[str, tuple[str, tuple[str, ...]]] = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?', ("integral-part", "decimal-part")),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": ("object | array | string | number | boolean | null", ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"', ("string", "value")),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\\""', ()),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
}
STRING_FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) '
             '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}
RESERVED = {"root"} | set(PRIMITIVES) | set(STRING_FORMATS)


class SchemaConverter:
    """Collects rules by name (a name taken by another rule gets a number), as llama.cpp's
    converter does; grammar() writes them sorted by name."""

    def __init__(self, dotall: bool = False):
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.resolving: set[str] = set()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def add_rule(self, name: str, rule: str) -> str:
        esc = re.sub(r"[^a-zA-Z0-9-]+", "-", name)
        if esc not in self.rules or self.rules[esc] == rule:
            self.rules[esc] = rule
            return esc
        i = 0
        while f"{esc}{i}" in self.rules and self.rules[f"{esc}{i}"] != rule:
            i += 1
        self.rules[f"{esc}{i}"] = rule
        return f"{esc}{i}"

    def add_primitive(self, name: str, rule: tuple[str, tuple[str, ...]]) -> str:
        n = self.add_rule(name, rule[0])
        for dep in rule[1]:
            dep_rule = PRIMITIVES.get(dep) or STRING_FORMATS.get(dep)
            if dep_rule is None:
                self.errors.append(f"Rule {dep} not known")
                continue
            if dep not in self.rules:
                self.add_primitive(dep, dep_rule)
        return n

    def grammar(self) -> str:
        if self.errors:
            raise GrammarError("JSON schema conversion failed:\n" + "\n".join(self.errors))
        if self.warnings:
            warnings.warn("JSON schema conversion was incomplete: " + "; ".join(self.warnings), stacklevel=3)
        return "".join(f"{k} ::= {v}\n" for k, v in sorted(self.rules.items(), key=lambda kv: kv[0].encode()))

    # ---- nodes ----------------------------------------------------------------------------------

    def visit(self, node: Node, name: str) -> str:
        rule_name = name + "-" if name in RESERVED else (name or "root")
        sub = name + ("-" if name else "")
        k = node.kind
        if k == REF:
            return self.add_rule(rule_name, self.resolve(node))
        if k == ANY_OF:
            alts = [self.visit(c, name + ("-" if name else "alternative-") + str(i)) for i, c in enumerate(node.children)]
            return self.add_rule(rule_name, " | ".join(alts))
        if k == ALL_OF:
            return self.all_of(node, name, rule_name)
        if k == CONST:
            return self.add_rule(rule_name, format_literal(dump_json(node.value)))
        if k == ENUM:
            return self.add_rule(rule_name, "(" + " | ".join(format_literal(dump_json(v)) for v in node.values) + ")")
        if k == OBJECT:
            if not node.properties and node.additional is not None and node.additional.kind == ANY:
                return self.add_rule(rule_name, self.add_primitive("object", PRIMITIVES["object"]))
            return self.add_rule(rule_name, self.object_rule(node.properties, node.additional, name))
        if k == TUPLE:
            items = [self.visit(c, f"{sub}tuple-{i}") for i, c in enumerate(node.children)]
            return self.add_rule(rule_name, '"[" space ' + ' "," space '.join(items) + ' space "]"')
        if k == ARRAY:
            return self.array(node, sub, rule_name)
        if k == STRING:
            return self.string(node, rule_name)
        if k == INTEGER:
            if node.minimum == INT64_MIN and node.maximum == INT64_MAX:
                return self.primitive(rule_name, "integer")
            return self.add_rule(rule_name, "(" + min_max_int(node.minimum, node.maximum) + ")")
        simple = {NUMBER: "number", BOOLEAN: "boolean", NULL: "null"}
        if k in simple:
            return self.primitive(rule_name, simple[k])
        return self.add_rule(rule_name, self.add_primitive("value", PRIMITIVES["value"]))     # ANY

    def primitive(self, rule_name: str, type_name: str) -> str:
        return self.add_primitive("root" if rule_name == "root" else type_name, PRIMITIVES[type_name])

    def resolve(self, node: Node) -> str:
        frag = node.ref.split("#", 1)[1] if "#" in node.ref else node.ref
        ref_name = "ref" + re.sub(r"[^a-zA-Z0-9-]+", "-", frag)
        if ref_name not in self.rules and node.ref not in self.resolving:
            if node.target is None:
                self.errors.append("Unresolved $ref " + node.ref)
                return ""
            self.resolving.add(node.ref)
            ref_name = self.visit(node.target, ref_name)
            self.resolving.discard(node.ref)
        return ref_name

    def array(self, node: Node, sub: str, rule_name: str) -> str:
        if node.items.kind == ANY and node.min_items == 0 and node.max_items < 0:
            return self.primitive(rule_name, "array")
        item = self.visit(node.items, sub + "item")
        hi = INT_MAX if node.max_items < 0 else node.max_items
        return self.add_rule(rule_name, '"[" space ' + build_repetition(item, node.min_items, hi, '"," space')
                             + ' space "]"')

    def string(self, node: Node, rule_name: str) -> str:
        if node.pattern:
            return self.pattern(node.pattern, rule_name)
        if node.format == "uuid":
            return self.primitive(rule_name, "uuid")
        if node.format:
            prim = node.format + "-string"
            return self.add_rule(rule_name, self.add_primitive(prim, STRING_FORMATS[prim]))
        if node.min_length > 0 or node.max_length >= 0:
            char = self.add_primitive("char", PRIMITIVES["char"])
            hi = INT_MAX if node.max_length < 0 else node.max_length
            return self.add_rule(rule_name, '"\\"" ' + build_repetition(char, node.min_length, hi) + ' "\\""')
        return self.primitive(rule_name, "string")

    def pattern(self, pattern: str, name: str) -> str:
        snapshot = dict(self.rules)
        try:
            if len(pattern.encode()) < 2 or pattern[0] != "^" or pattern[-1] != "$":
                raise UnsupportedPattern("not anchored with '^' and '$'")
            reader = PatternReader(pattern, name, lambda n, r: self.add_rule(n, from_latin1(r)), self.dot)
            rule = from_latin1(reader.convert())
            return self.add_rule(name, '"\\"" (' + rule + ') "\\""')
        except UnsupportedPattern as e:
            self.rules = snapshot
            self.warnings.append(f"pattern {pattern} is not supported ({e}), accepting any string")
            return self.add_rule(name, self.add_primitive("string", PRIMITIVES["string"]))
        except InvalidPattern as e:
            self.rules = snapshot
            self.errors.append(f"Invalid pattern {pattern}: {e}")
            return ""

    def dot(self) -> str:
        return self.add_rule("dot", "[\\U00000000-\\U0010FFFF]" if self.dotall else "[^\\x0A\\x0D]")

    def all_of(self, node: Node, name: str, rule_name: str) -> str:
        required: set[str] = set()
        props: list[tuple[str, Node, bool]] = []
        enum_counts: dict[str, int] = {}

        def add(comp: Node, is_required: bool) -> None:
            if comp.kind == REF:
                if comp.target is not None:
                    add(comp.target, is_required)
            elif comp.kind == OBJECT:
                for pname, pnode, _ in comp.properties:
                    props.append((pname, pnode, False))
                    if is_required:
                        required.add(pname)
            elif comp.kind == ENUM:
                for v in comp.values:
                    lit = format_literal(dump_json(v))
                    enum_counts[lit] = enum_counts.get(lit, 0) + 1
        for child in node.children:
            if child.kind == ANY_OF:
                for alt in child.children:
                    add(alt, False)
            else:
                add(child, True)
        if enum_counts:
            # in UTF-8 byte order, as llama.cpp's std::set (a lone surrogate sorts too: Grammar refuses it)
            common = [lit for lit in sorted(enum_counts, key=lambda x: x.encode("utf-8", "surrogatepass"))
                      if enum_counts[lit] == len(node.children)]
            if common:
                return self.add_rule(rule_name, "(" + " | ".join(common) + ")")
        props = [(n, s, n in required) for n, s, _ in props]
        return self.add_rule(rule_name, self.object_rule(props, None, name))

    def object_rule(self, props: list[tuple[str, Node, bool]], additional: Node | None, name: str) -> str:
        """Required properties in schema order, then the optional ones, each optional chain
        written as llama.cpp writes it (a `-rest` rule per position)."""
        sub = name + ("-" if name else "")
        kv: dict[str, str] = {}
        required, optional, names = [], [], []
        for pname, pnode, is_req in props:
            value = self.visit(pnode, sub + pname)
            kv[pname] = self.add_rule(sub + pname + "-kv", format_literal(dump_json(pname)) + ' space ":" space ' + value)
            (required if is_req else optional).append(pname)
            names.append(pname)
        if additional is not None:
            kv["*"] = self.additional_rule(additional, names, sub + "additional")
            optional.append("*")
        if not required and not optional:
            return '"{" space "}"'
        rule = '"{" space ' + ' "," space '.join(kv[p] for p in required)
        if optional:
            rule += " ("
            if required:
                rule += ' "," space ( '
            rests = self.rest_rules(optional, kv, name)
            rule += " | ".join(self.optional_first(optional[i], kv) + (" " + rests[i + 1] if i + 1 < len(optional) else "")
                               for i in range(len(optional)))
            if required:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def additional_rule(self, additional: Node, names: list[str], sub: str) -> str:
        value = (self.add_primitive("value", PRIMITIVES["value"]) if additional.kind == ANY
                 else self.visit(additional, sub + "-value"))
        key = (self.add_primitive("string", PRIMITIVES["string"]) if not names
               else self.add_rule(sub + "-k", self.not_strings(names)))
        return self.add_rule(sub + "-kv", key + ' ":" space ' + value)

    # llama.cpp writes the optional properties k_i..k_n as k_i's pair, then a `k_i-rest` rule:
    # k_(i+1)'s pair, optional, then k_(i+1)'s rest rule, and so on (recursively, one chain per
    # starting property). The rest rules are the same for every start, so they are made once,
    # last first (the order llama.cpp's recursion adds them in, which decides their names).
    @staticmethod
    def optional_first(k: str, kv: dict[str, str]) -> str:
        return kv[k] + (' ( "," space ' + kv[k] + " )*" if k == "*" else "")

    def rest_rules(self, keys: list[str], kv: dict[str, str], name: str) -> list[str]:
        """rests[j]: the rule name of the chain from keys[j] on, keys[j] optional (j >= 1)."""
        rests = [""] * (len(keys) + 1)
        for j in range(len(keys) - 1, 0, -1):
            k = keys[j]
            body = '( "," space ' + kv[k] + " )" + ("*" if k == "*" else "?")
            if j + 1 < len(keys):
                body += " " + rests[j + 1]
            rests[j] = self.add_rule(name + ("-" if name else "") + keys[j - 1] + "-rest", body)
        return rests

    def not_strings(self, strings: list[str]) -> str:
        """A JSON string that is none of `strings`: a trie of them, each node allowing any other
        character to leave it (llama.cpp's _not_strings)."""
        trie: dict = {}
        ends_root = False
        for s in strings:
            node = trie
            if not s:
                ends_root = True
            for ch in s:
                node = node.setdefault(ch, {})
            node.setdefault(None, True)
        char = self.add_primitive("char", PRIMITIVES["char"])

        def walk(node: dict) -> str:
            kids = sorted((c for c in node if c is not None), key=ord)
            parts, rejects = [], ""
            for c in kids:
                rejects += c
                child = node[c]
                has_kids = any(x is not None for x in child)
                parts.append(f"[{c}]" + (f" ({walk(child)})" if has_kids else f" {char}+"))
            out = " | ".join(parts)
            if kids:
                out += f' | [^"{rejects}] {char}*'
            return out
        return '["] ( ' + walk(trie) + " )" + ("" if ends_root else "?") + ' ["]'


def json_schema_to_grammar(schema: Any, dotall: bool = False) -> str:
    """llama.cpp's json_schema_to_grammar(schema): GBNF text with a `root` rule."""
    conv = SchemaConverter(dotall)
    conv.visit(read_schema(schema), "")
    return conv.grammar()


__all__ = ["json_schema_to_grammar", "SchemaConverter", "SPACE_RULE"]
