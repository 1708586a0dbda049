"""Pieces of GBNF text a JSON schema turns into, written as llama.cpp b11434 writes them
(common/json-schema-to-grammar.cpp): literals, repetitions, integer ranges, string patterns.
Each function returns the same characters, because the grammar's text decides where the model
may put whitespace: only the same grammar gives llama-server's output."""
from __future__ import annotations

import json
import re
from typing import Any, Callable

INT_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def dump_json(value: Any) -> str:
    """nlohmann's dump(): compact, UTF-8 kept, keys in order."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}


def format_literal(text: str) -> str:
    """A GBNF string literal (only CR, LF, '"' and backslash are escaped)."""
    return '"' + re.sub(r'[\r\n"\\]', lambda m: _LITERAL_ESCAPES[m.group()], text) + '"'


def build_repetition(item: str, lo: int, hi: int, separator: str = "") -> str:
    """item repeated lo..hi times (hi INT_MAX: unbounded), separated by `separator` if given."""
    has_max = hi != INT_MAX
    if hi == 0:
        return ""
    if lo == 0 and hi == 1:
        return item + "?"
    if not separator:
        if lo == 1 and not has_max:
            return item + "+"
        if lo == 0 and not has_max:
            return item + "*"
        return item + "{" + str(lo) + "," + (str(hi) if has_max else "") + "}"
    out = item + " " + build_repetition("(" + separator + " " + item + ")", 0 if lo == 0 else lo - 1,
                                        hi - 1 if has_max else hi)
    return "(" + out + ")?" if lo == 0 else out


# ---- integers between bounds ----------------------------------------------------------------

def _digit_range(lo: str, hi: str) -> str:
    return "[" + lo + "]" if lo == hi else "[" + lo + "-" + hi + "]"


def _more_digits(lo: int, hi: int) -> str:
    out = "[0-9]"
    if lo == hi == 1:
        return out
    out += "{" + str(lo)
    if hi != lo:
        out += ","
        if hi != INT_MAX:
            out += str(hi)
    return out + "}"


def _uniform_range(lo: str, hi: str) -> str:
    """The decimal strings from lo to hi (same length)."""
    i = 0
    while i < len(lo) and i < len(hi) and lo[i] == hi[i]:
        i += 1
    out = '"' + lo[:i] + '"' if i > 0 else ""
    if i >= len(lo) or i >= len(hi):
        return out
    if i > 0:
        out += " "
    sub = len(lo) - i - 1
    if sub <= 0:
        return out + "[" + lo[i] + "-" + hi[i] + "]"
    lo_sub, hi_sub, zeros, nines = lo[i + 1:], hi[i + 1:], "0" * sub, "9" * sub
    up = chr(ord(hi[i]) - 1)
    reached = False
    out += "("
    if lo_sub == zeros:
        out += _digit_range(lo[i], up) + " " + _more_digits(sub, sub)
    else:
        out += "[" + lo[i] + "] (" + _uniform_range(lo_sub, nines) + ")"
        if lo[i] < up:
            out += " | "
            if hi_sub == nines:
                out += _digit_range(chr(ord(lo[i]) + 1), hi[i])
                reached = True
            else:
                out += _digit_range(chr(ord(lo[i]) + 1), up)
            out += " " + _more_digits(sub, sub)
    if not reached:
        out += " | " + _digit_range(hi[i], hi[i]) + " " + _uniform_range(zeros, hi_sub)
    return out + ")"


def min_max_int(lo: int, hi: int, decimals: int = 16, top: bool = True) -> str:
    """Integers in [lo, hi] (INT64_MIN / INT64_MAX: unbounded on that side)."""
    has_min, has_max = lo != INT64_MIN, hi != INT64_MAX
    if has_min and has_max:
        return _bounded(lo, hi, decimals)
    less = max(decimals - 1, 1)
    if has_min:
        return _from(lo, decimals, less, top)
    if has_max:
        if hi >= 0:
            head = '"-" [1-9] ' + _more_digits(0, less) + " | " if top else ""
            return head + min_max_int(0, hi, decimals, True)
        return '"-" (' + min_max_int(-hi, INT64_MAX, decimals, False) + ")"
    raise ValueError("at least one of min_value or max_value must be set")


def _bounded(lo: int, hi: int, decimals: int) -> str:
    if lo < 0 and hi < 0:
        return '"-" (' + min_max_int(-hi, -lo, decimals, True) + ")"
    out = ""
    if lo < 0:
        out = '"-" (' + min_max_int(0, -lo, decimals, True) + ") | "
        lo = 0
    lo_s, hi_s = str(lo), str(hi)
    for digits in range(len(lo_s), len(hi_s)):
        out += _uniform_range(lo_s, "9" * digits) + " | "
        lo_s = "1" + "0" * digits
    return out + _uniform_range(lo_s, hi_s)


def _from(lo: int, decimals: int, less: int, top: bool) -> str:
    if lo < 0:
        return ('"-" (' + min_max_int(INT64_MIN, -lo, decimals, False) + ") | [0] | [1-9] "
                + _more_digits(0, decimals - 1))
    if lo == 0:
        return "[0] | [1-9] " + _more_digits(0, less) if top else _more_digits(1, decimals)
    if lo <= 9:
        c, start = str(lo), "1" if top else "0"
        out = ""
        if c > start:
            out = _digit_range(start, chr(ord(c) - 1)) + " " + _more_digits(1, less) + " | "
        return out + _digit_range(c, "9") + " " + _more_digits(0, less)
    s = str(lo)
    c, n = s[0], len(s)
    out = ""
    if c > "1":
        out = _digit_range("1" if top else "0", chr(ord(c) - 1)) + " " + _more_digits(n, less) + " | "
    out += _digit_range(c, c) + " (" + min_max_int(int(s[1:]), INT64_MAX, less, False) + ")"
    if c < "9":
        out += " | " + _digit_range(chr(ord(c) + 1), "9") + " " + _more_digits(n - 1, less)
    return out


# ---- string patterns (^...$ regular expressions) ---------------------------------------------

class UnsupportedPattern(Exception):
    """A valid regular expression with no grammar equivalent (the string becomes any string)."""


class InvalidPattern(Exception):
    """Not a valid regular expression (the schema is refused)."""


NON_LITERAL = set("|.()[]{}*+?^$")
ESCAPED_IN_REGEX_NOT_IN_LITERAL = set("^$.[]()|{}*+?")
MAX_PATTERN_DEPTH = 100


def gbnf_escape_length(p: str, pos: int) -> int:
    """Length of a GBNF escape at pos (0 if there is none)."""
    if pos + 1 >= len(p) or p[pos] != "\\":
        return 0
    n_hex = {"x": 2, "u": 4, "U": 8}.get(p[pos + 1])
    if n_hex is None:
        return 2 if p[pos + 1] in 'trn\\"[]-' else 0
    if pos + 2 + n_hex > len(p):
        return 0
    if not all(h in "0123456789abcdefABCDEF" for h in p[pos + 2:pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


class PatternReader:
    """One ^...$ pattern into a rule. Works on the pattern's UTF-8 bytes (as latin-1 characters),
    as llama.cpp does: a multi-byte character before a quantifier splits as it splits there."""

    def __init__(self, pattern: str, name: str, add_rule: Callable[[str, str], str], dot_rule: Callable[[], str]):
        self.p = pattern.encode("utf-8").decode("latin-1")[1:-1]
        self.name = name
        self.add_rule = add_rule
        self.dot_rule = dot_rule
        self.i = 0
        self.depth = 0
        self.sub_ids: dict[str, str] = {}

    def convert(self) -> str:
        rule = _to_rule(self.transform())
        if self.depth != 0:
            raise InvalidPattern("unbalanced parentheses")
        return rule

    def transform(self) -> tuple[str, bool]:
        seq: list[tuple[str, bool]] = []
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == ".":
                seq.append((self.dot_rule(), False))
                self.i += 1
            elif c == "(":
                self.group(seq)
            elif c == ")":
                self.i += 1
                if self.depth == 0:
                    raise InvalidPattern("unbalanced parentheses")
                self.depth -= 1
                return _join(seq)
            elif c in "^$":
                raise UnsupportedPattern("anchor inside the pattern")
            elif c == "[":
                seq.append((self.char_class(), False))
            elif c == "|":
                seq.append(("|", False))
                self.i += 1
            elif c in "*+?":
                if not seq:
                    raise InvalidPattern("nothing to repeat")
                seq[-1] = (_to_rule(seq[-1]) + c, False)
                self.i += 1
            elif c == "{":
                self.braces(seq)
            else:
                seq.append((self.literal(c), True))
        return _join(seq)

    def group(self, seq: list) -> None:
        p = self.p
        self.i += 1
        if self.i < len(p) and p[self.i] == "?":
            if self.i + 1 < len(p) and p[self.i + 1] == ":":
                self.i += 2
            else:
                raise UnsupportedPattern("unsupported group syntax")
        self.depth += 1
        if self.depth > MAX_PATTERN_DEPTH:
            raise UnsupportedPattern("pattern nesting too deep")
        seq.append(("(" + _to_rule(self.transform()) + ")", False))

    def char_class(self) -> str:
        p = self.p
        out = "["
        self.i += 1
        while self.i < len(p) and p[self.i] != "]":
            if p[self.i] == "\\":
                n = gbnf_escape_length(p, self.i)
                if n == 0:
                    raise UnsupportedPattern("unsupported escape in character class: " + p[self.i:self.i + 2])
                out += p[self.i:self.i + n]
                self.i += n
            else:
                out += p[self.i]
                self.i += 1
        if self.i >= len(p):
            raise InvalidPattern("unterminated character class")
        self.i += 1
        return out + "]"

    def braces(self, seq: list) -> None:
        p = self.p
        start = self.i
        self.i += 1
        while self.i < len(p) and p[self.i] != "}":
            self.i += 1
        if self.i >= len(p):
            raise UnsupportedPattern("unterminated curly brackets")
        nums = p[start + 1:self.i].split(",")
        self.i += 1
        lo, hi = _bounds(nums)
        if not seq:
            raise InvalidPattern("nothing to repeat")
        sub, is_literal = seq[-1]
        if not is_literal:
            if sub not in self.sub_ids:
                self.sub_ids[sub] = ""
                self.sub_ids[sub] = self.add_rule(self.name + "-" + str(len(self.sub_ids)), sub)
            sub = self.sub_ids[sub]
        seq[-1] = (build_repetition('"' + sub + '"' if is_literal else sub, lo, hi), False)

    def literal(self, c: str) -> str:
        p, n = self.p, len(self.p)
        out = ""
        while self.i < n:
            ch = p[self.i]
            if ch == "\\":
                if self.i == n - 1:
                    raise InvalidPattern("trailing backslash")
                nxt = p[self.i + 1]
                if nxt in ESCAPED_IN_REGEX_NOT_IN_LITERAL:
                    out += nxt
                    self.i += 2
                else:
                    k = gbnf_escape_length(p, self.i)
                    if k == 0:
                        raise UnsupportedPattern("unsupported escape: " + p[self.i:self.i + 2])
                    out += p[self.i:self.i + k]
                    self.i += k
            elif ch == '"':
                out += '\\"'
                self.i += 1
            elif ch not in NON_LITERAL and (self.i == n - 1 or not out or p[self.i + 1] == "."
                                            or p[self.i + 1] not in NON_LITERAL):
                out += ch
                self.i += 1
            else:
                break
        if not out:
            raise UnsupportedPattern("unsupported character: " + c)
        return out


def _bounds(nums: list[str]) -> tuple[int, int]:
    if len(nums) not in (1, 2):
        raise UnsupportedPattern("wrong number of values in curly brackets")
    try:
        if len(nums) == 1:
            lo = hi = _stoi(nums[0])
        else:
            lo = _stoi(nums[0]) if nums[0] else 0
            hi = _stoi(nums[1]) if nums[1] else INT_MAX
    except ValueError:
        raise UnsupportedPattern("invalid number in curly brackets") from None
    return lo, hi


def _stoi(s: str) -> int:
    """C++'s std::stoi: leading whitespace, a sign, digits; the rest ignored; int range."""
    m = re.match(r"\s*([+-]?\d+)", s)
    if not m or not -2**31 <= int(m.group(1)) <= INT_MAX:
        raise ValueError(s)
    return int(m.group(1))


def _to_rule(item: tuple[str, bool]) -> str:
    text, is_literal = item
    return '"' + text + '"' if is_literal else text


def _join(seq: list[tuple[str, bool]]) -> tuple[str, bool]:
    """The sequence as one rule, consecutive literals merged."""
    out: list[tuple[str, bool]] = []
    lit = ""
    for text, is_literal in seq:
        if is_literal:
            lit += text
            continue
        if lit:
            out.append((lit, True))
            lit = ""
        out.append((text, False))
    if lit:
        out.append((lit, True))
    return " ".join(_to_rule(x) for x in out), False


def from_latin1(text: str) -> str:
    """Pattern output (UTF-8 bytes as latin-1 characters) back to text."""
    return text.encode("latin-1").decode("utf-8", "surrogateescape")
