"""Label selectors in trigger metadata: PromQL matchers and Kubernetes pod selectors.

A small real parser that turns user text into validated values, so metadata
is never pasted raw into a PromQL query or a Kubernetes API call; errors are
plain ``ValueError``, which ``decision.settings`` wraps with the key at fault.
``selector`` matchers become :class:`LabelMatcher` values that re-emit
themselves escaped, their regexes limited by :func:`re2_problem` to what
Prometheus (RE2) and Python's ``re`` (direct scrape) read alike;
``podSelector`` is checked by :func:`validate_pod_selector`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LabelMatcher", "parse_selector", "re2_problem", "validate_pod_selector"]


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPS = ("=~", "!~", "!=", "=")  # longest first so "=~" is not read as "="
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"}


# Constructs Python's re accepts but RE2 (Go regexp, what Prometheus runs)
# rejects with "invalid or unsupported Perl syntax", or reads differently.
_RE2_GROUP_PREFIXES: tuple[tuple[str, str], ...] = (
    ("(?<=", "lookbehind '(?<='"),
    ("(?<!", "negative lookbehind '(?<!'"),
    ("(?=", "lookahead '(?='"),
    ("(?!", "negative lookahead '(?!'"),
    ("(?P=", "backreference '(?P=name)'"),
    ("(?>", "atomic group '(?>'"),
    ("(?(", "conditional '(?('"),
    ("(?#", "comment '(?#'"),
)
_RE2_FLAGS = frozenset("ims")
_RE2_MAX_REPEAT = 1000  # Go regexp's limit on {n,m} counts
_RE_REPEAT = re.compile(r"\{([0-9]*)(,([0-9]*))?\}")
_RE_NAMED_GROUP = re.compile(r"\(\?P<([^>]*)>")
_RE_FLAGS_GROUP = re.compile(r"\(\?([A-Za-z]*)(?:-([A-Za-z]*))?[:)]")
_RE_OCTAL3 = re.compile(r"[0-7]{3}")
_ASCII_WORD = re.compile(r"[A-Za-z0-9_]+")


def re2_problem(pattern: str) -> str | None:
    """The first construct in ``pattern`` outside the RE2/Python common
    subset, described for an error message; None if there is none.

    A selector regex is pasted into PromQL, where Prometheus compiles it with
    Go's RE2-syntax engine, and is also run by Python's ``re`` for direct
    scrape and discovery. Python accepts lookaround, backreferences,
    possessive quantifiers, atomic groups and conditionals that make every
    Prometheus query fail with HTTP 400, so they are refused up front, as
    are a few that both accept but read differently (``[[:alpha:]]``,
    ``{,n}``). A lexical scan, not a parser: ``re.compile`` still validates
    the pattern afterwards.
    """
    i, n = 0, len(pattern)
    in_class = False
    class_body = 0  # index of a class's first member: a ']' there is literal
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt in ("1", "2", "3", "4", "5", "6", "7", "8", "9"):
                # Python and Go agree only on three-digit octal escapes.
                if not _RE_OCTAL3.match(pattern, i + 1):
                    return f"backreference '\\{nxt}'"
            elif nxt in ("Z", "u", "U", "N"):
                return f"escape '\\{nxt}'"
            elif nxt == "b" and in_class:
                return "escape '\\b' inside a character class"
            elif nxt and not nxt.isascii():
                return f"escape of a non-ASCII character '\\{nxt}'"
            i += 2
            continue
        if in_class:
            if c == "]" and i > class_body:
                in_class = False
            elif c == "[":
                return "'[' inside a character class (write '\\[')"
            elif c in "-&~|" and pattern[i + 1 : i + 2] == c:
                return f"'{c}{c}' inside a character class"
            i += 1
            continue
        if c == "[":
            in_class = True
            i += 2 if pattern[i + 1 : i + 2] == "^" else 1
            class_body = i
            continue
        if c == "(" and pattern.startswith("(?", i):
            for prefix, what in _RE2_GROUP_PREFIXES:
                if pattern.startswith(prefix, i):
                    return what
            if m := _RE_NAMED_GROUP.match(pattern, i):
                if not _ASCII_WORD.fullmatch(m.group(1)):
                    return f"group name {m.group(1)!r} (RE2 allows only A-Z, a-z, 0-9 and _)"
                i = m.end()
                continue
            if m := _RE_FLAGS_GROUP.match(pattern, i):
                bad = sorted(set(m.group(1) + (m.group(2) or "")) - _RE2_FLAGS)
                if bad:
                    return f"inline flag '{bad[0]}' (RE2 knows i, m and s)"
                i = m.end()
                continue
            i += 2
            continue
        end = i + 1 if c in "*+?" else 0
        if c == "{" and (m := _RE_REPEAT.match(pattern, i)) and m.group(0) != "{}":
            low, _, high = m.groups()
            if not low:
                return f"repeat '{m.group(0)}' without a minimum (RE2 reads it as text)"
            if int(low) > _RE2_MAX_REPEAT or (high and int(high) > _RE2_MAX_REPEAT):
                return f"repeat count over {_RE2_MAX_REPEAT} in '{m.group(0)}'"
            end = m.end()
        if end:
            following = pattern[end : end + 1]
            if following == "+":
                return f"possessive quantifier '{pattern[end - 1]}+'"
            i = end + (1 if following == "?" else 0)  # a lazy '?' is fine
            continue
        i += 1
    return None


@dataclass(frozen=True)
class LabelMatcher:
    """One PromQL label matcher, e.g. ``model=~"llama.*"``.

    ``value`` is the unescaped value; :meth:`promql` re-escapes it, so the
    text emitted is always a single well-formed matcher.
    """

    name: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if not _LABEL_NAME.fullmatch(self.name):
            raise ValueError(f"invalid label name {self.name!r}")
        if self.name.startswith("__"):
            raise ValueError(f"label name {self.name!r} is reserved (starts with '__')")
        if self.op not in _OPS:
            raise ValueError(f"invalid matcher operator {self.op!r}")
        if self.op in ("=~", "!~"):
            # Both engines read this value: Prometheus (Go regexp, RE2 syntax)
            # in the query, Python's re in matches(). Accept only the common
            # subset, checked first so Python never warns about RE2-isms.
            problem = re2_problem(self.value)
            if problem is not None:
                raise ValueError(
                    f"regular expression for {self.name} is not RE2 (Prometheus) syntax: {problem}"
                )
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValueError(f"invalid regular expression for {self.name}: {exc}") from None

    def promql(self) -> str:
        """The matcher as PromQL text, value escaped as a double-quoted string."""
        escaped = (
            self.value.replace("\\", "\\\\")
            .replace('"', '\\"')
            .replace("\n", "\\n")
            .replace("\r", "\\r")
            .replace("\t", "\\t")
        )
        return f'{self.name}{self.op}"{escaped}"'

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this matcher (PromQL semantics:
        a missing label is the empty string; regexes are fully anchored).

        Used by direct scrape and discovery, where there is no Prometheus
        to apply the matcher.
        """
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        hit = re.fullmatch(self.value, actual) is not None
        return hit if self.op == "=~" else not hit


def _parse_quoted(text: str, pos: int) -> tuple[str, int]:
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\":
            if i + 1 >= len(text):
                break
            nxt = text[i + 1]
            if nxt not in _ESCAPES:
                raise ValueError(f"unsupported escape '\\{nxt}' at position {i}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        if ch == "\n":
            raise ValueError(f"newline inside quoted value at position {i}")
        out.append(ch)
        i += 1
    raise ValueError(f"unterminated quoted value starting at position {pos}")


def parse_selector(text: str) -> tuple[LabelMatcher, ...]:
    """Parse ``name op "value"`` matchers separated by commas.

    Optional surrounding braces are allowed (``{app="vllm"}``); values must
    be quoted (double, single quotes); a trailing comma is allowed, like
    PromQL. Anything else (``}``, ``or``, an unquoted value) is an error, so
    an injection like ``a="x"}or vector(1)`` cannot get through.
    """
    s = text.strip()
    if s.startswith("{"):
        if not s.endswith("}"):
            raise ValueError("unbalanced '{'")
        s = s[1:-1]
    matchers: list[LabelMatcher] = []
    i, n = 0, len(s)

    def skip_ws(j: int) -> int:
        while j < n and s[j] in " \t":
            j += 1
        return j

    i = skip_ws(i)
    while i < n:
        m = _LABEL_NAME.match(s, i)
        if not m:
            raise ValueError(f"expected a label name at position {i}: {s[i : i + 12]!r}")
        name = m.group(0)
        i = skip_ws(m.end())
        op = next((o for o in _OPS if s.startswith(o, i)), None)
        if op is None:
            raise ValueError(f"expected one of = != =~ !~ after {name!r} at position {i}")
        i = skip_ws(i + len(op))
        if i >= n or s[i] not in "\"'":
            raise ValueError(f"expected a quoted value for {name!r} at position {i}")
        value, i = _parse_quoted(s, i)
        matchers.append(LabelMatcher(name, op, value))
        i = skip_ws(i)
        if i < n:
            if s[i] != ",":
                raise ValueError(f"expected ',' at position {i}: {s[i : i + 12]!r}")
            i = skip_ws(i + 1)
    return tuple(matchers)


# --------------------------------------------------------------------------
# Kubernetes label selectors (``podSelector``)
# --------------------------------------------------------------------------

_K8S_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_K8S_KEY = re.compile(
    rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_K8S_NAME}"
)
_K8S_VALUE = re.compile(rf"({_K8S_NAME})?")
_K8S_SET = re.compile(r"\s*(\S+?)\s+(in|notin)\s*\(([^()]*)\)\s*")
_K8S_EQ = re.compile(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(\S*)\s*")
_K8S_EXISTS = re.compile(r"\s*(!?)\s*(\S+)\s*")


def _split_k8s_selector(text: str) -> list[str]:
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ')'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '('")
    parts.append(text[start:])
    return parts


def validate_pod_selector(text: str) -> str:
    """Validate Kubernetes label-selector syntax (``a=b,c in (d,e),!f``).

    Returns the normalised text (whitespace trimmed) that is passed to the
    API's ``labelSelector`` query parameter.
    """
    if not text.strip():
        raise ValueError("empty selector")
    out: list[str] = []
    for part in _split_k8s_selector(text):
        if m := _K8S_SET.fullmatch(part):
            key, op, values = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            if not _K8S_KEY.fullmatch(key):
                raise ValueError(f"invalid label key {key!r}")
            if not values or any(not _K8S_VALUE.fullmatch(v) or not v for v in values):
                raise ValueError(f"invalid value list for {key!r}")
            out.append(f"{key} {op} ({','.join(values)})")
        elif m := _K8S_EQ.fullmatch(part):
            key, op, value = m.groups()
            if not _K8S_KEY.fullmatch(key):
                raise ValueError(f"invalid label key {key!r}")
            if not _K8S_VALUE.fullmatch(value):
                raise ValueError(f"invalid label value {value!r} for {key!r}")
            out.append(f"{key}{op}{value}")
        elif m := _K8S_EXISTS.fullmatch(part):
            bang, key = m.groups()
            if not _K8S_KEY.fullmatch(key):
                raise ValueError(f"invalid selector term {part.strip()!r}")
            out.append(f"{bang}{key}")
        else:
            raise ValueError(f"invalid selector term {part.strip()!r}")
    return ",".join(out)
