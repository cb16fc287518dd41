"""``advanced.scalingModifiers.formula``: KEDA's expression over named triggers.

KEDA evaluates the formula with expr-lang (``pkg/scaling/modifiers``). The
simulator parses the part of expr-lang users write for autoscaling with a
small recursive-descent parser, following expr-lang's precedence (lowest
first): ``cond ? a : b``; ``||``/``or``; ``&&``/``and``; comparisons
``== != < <= > >=``; ``+ -``; ``* /``; unary ``-``, ``!``/``not``; numbers,
trigger names, parentheses and the calls ``min``, ``max``, ``abs``, ``ceil``,
``floor``. Types are checked when parsed (a comparison is a bool, the
condition of ``?:`` must be one, the result must be a number), so a formula
KEDA would reject fails here, with the construct named, not mid-run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Formula", "ScalingModifiers", "float64_arith", "parse_formula"]

_SUPPORTED = (
    "supported: numbers, trigger names, + - * /, comparisons, && || !, cond ? a : b, "
    "parentheses, min() max() abs() ceil() floor()"
)
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[-+*/()<>?:,!]))"
)
_FUNCTIONS = {"min": (2, None), "max": (2, None), "abs": (1, 1), "ceil": (1, 1), "floor": (1, 1)}
_WORD_OPS = {"and": "&&", "or": "||", "not": "!"}


@dataclass(frozen=True)
class _Num:
    value: float


@dataclass(frozen=True)
class _Name:
    name: str


@dataclass(frozen=True)
class _Unary:
    op: Literal["-", "!"]
    arg: Node


@dataclass(frozen=True)
class _Binary:
    """Arithmetic (``+ - * /``), comparison or ``&&``/``||``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class _If:
    cond: Node
    then: Node
    other: Node


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[Node, ...]


Node = _Num | _Name | _Unary | _Binary | _If | _Call
"""A parsed formula node."""


@dataclass(frozen=True)
class Formula:
    """A checked formula: its text, the trigger names it reads, its tree."""

    text: str
    names: frozenset[str]
    tree: Node = field(default=_Num(0.0), compare=False, repr=False)

    def evaluate(self, values: Mapping[str, float]) -> float:
        """The formula's value for ``values`` (every name in :attr:`names`)."""
        result = _eval(self.tree, values)
        return float(result)


@dataclass(frozen=True)
class ScalingModifiers:
    """``advanced.scalingModifiers``: one composite metric for the HPA."""

    formula: Formula
    target: float
    activation_target: float = 0.0
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"


def parse_formula(text: str, known: frozenset[str], where: str = "formula") -> Formula:
    """``text`` parsed and type-checked over the trigger names in ``known``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where} must be a non-empty string")
    parser = _Parser(text.strip(), known, where)
    tree, kind = parser.ternary()
    if parser.peek() is not None:
        raise parser.error(f"unexpected {parser.peek()!r}")
    if kind != "num":
        raise parser.error("the formula must give a number, not a comparison")
    return Formula(text.strip(), frozenset(parser.names), tree)


class _Parser:
    """Recursive descent over the tokens; each method returns (node, type)."""

    def __init__(self, text: str, known: frozenset[str], where: str) -> None:
        self.text = text
        self.known = known
        self.where = where
        self.names: set[str] = set()
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise self.error(f"unexpected character {text[pos:].strip()[0]!r}")
            token = m.group("num") or m.group("name") or m.group("op")
            self.tokens.append(_WORD_OPS.get(token, token))
            pos = m.end()
        self.i = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"{self.where} {self.text!r}: {what}; {_SUPPORTED}")

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise self.error(f"expected {expected or 'more'}, got {token or 'the end'}")
        self.i += 1
        return token

    def ternary(self) -> tuple[Node, str]:
        cond, kind = self.logical("||")
        if self.peek() != "?":
            return cond, kind
        if kind != "bool":
            raise self.error("the condition of ?: must be a comparison")
        self.take("?")
        a, ka = self.ternary()
        self.take(":")
        b, kb = self.ternary()
        if ka != kb:
            raise self.error("both branches of ?: must have the same type")
        return _If(cond, a, b), ka

    def logical(self, op: str) -> tuple[Node, str]:
        lower = (lambda: self.logical("&&")) if op == "||" else self.comparison
        return self._binary((op,), lower, "bool", "needs comparisons on both sides")

    def comparison(self) -> tuple[Node, str]:
        left, kind = self.additive()
        if self.peek() in ("==", "!=", "<", "<=", ">", ">="):
            op = self.take()
            right, kr = self.additive()
            if kind != "num" or kr != "num":
                raise self.error(f"{op} compares numbers")
            return _Binary(op, left, right), "bool"
        return left, kind

    def additive(self) -> tuple[Node, str]:
        return self._binary(("+", "-"), self.multiplicative, "num", "needs numbers")

    def multiplicative(self) -> tuple[Node, str]:
        return self._binary(("*", "/"), self.unary, "num", "needs numbers")

    def _binary(
        self,
        ops: tuple[str, ...],
        lower: Callable[[], tuple[Node, str]],
        operand: str,
        needs: str,
    ) -> tuple[Node, str]:
        """A left-associative chain of ``ops`` over ``lower``'s terms, each of kind
        ``operand`` (an error saying what ``op`` ``needs`` otherwise)."""
        left, kind = lower()
        while self.peek() in ops:
            op = self.take()
            right, kr = lower()
            if kind != operand or kr != operand:
                raise self.error(f"{op} {needs}")
            left = _Binary(op, left, right)
        return left, kind

    def unary(self) -> tuple[Node, str]:
        token = self.peek()
        if token in ("-", "+"):
            self.take()
            arg, kind = self.unary()
            if kind != "num":
                raise self.error(f"unary {token} needs a number")
            return (_Unary("-", arg) if token == "-" else arg), "num"
        if token == "!":
            self.take()
            arg, kind = self.unary()
            if kind != "bool":
                raise self.error("! needs a comparison")
            return _Unary("!", arg), "bool"
        return self.primary()

    def primary(self) -> tuple[Node, str]:
        token = self.take()
        if token == "(":
            node = self.ternary()
            self.take(")")
            return node
        if token[0].isdigit() or token[0] == ".":
            return _Num(float(token)), "num"
        if token[0].isalpha() or token[0] == "_":
            if self.peek() == "(":
                return self.call(token)
            if token not in self.known:
                raise self.error(
                    f"{token!r} names no trigger "
                    f"(named triggers: {', '.join(sorted(self.known)) or 'none'})"
                )
            self.names.add(token)
            return _Name(token), "num"
        raise self.error(f"unexpected {token!r}")

    def call(self, name: str) -> tuple[Node, str]:
        if name not in _FUNCTIONS:
            raise self.error(f"the function {name}()")
        self.take("(")
        args: list[Node] = []
        while True:
            arg, kind = self.ternary()
            if kind != "num":
                raise self.error(f"{name}() takes numbers")
            args.append(arg)
            if self.peek() != ",":
                break
            self.take(",")
        self.take(")")
        lo, hi = _FUNCTIONS[name]
        if len(args) < lo or (hi is not None and len(args) > hi):
            raise self.error(f"{name}() with {len(args)} argument(s)")
        return _Call(name, tuple(args)), "num"


def _eval(node: Node, values: Mapping[str, float]) -> float | bool:
    if isinstance(node, _Num):
        return node.value
    if isinstance(node, _Name):
        return float(values[node.name])
    if isinstance(node, _Unary):
        inner = _eval(node.arg, values)
        return (not inner) if node.op == "!" else -float(inner)
    if isinstance(node, _If):
        return _eval(node.then if _eval(node.cond, values) else node.other, values)
    if isinstance(node, _Call):
        return _call(node.name, [float(_eval(a, values)) for a in node.args])
    if node.op == "&&":
        return bool(_eval(node.left, values)) and bool(_eval(node.right, values))
    if node.op == "||":
        return bool(_eval(node.left, values)) or bool(_eval(node.right, values))
    a = float(_eval(node.left, values))
    b = float(_eval(node.right, values))
    if node.op in ("==", "!=", "<", "<=", ">", ">="):
        return _compare(node.op, a, b)
    return float64_arith(node.op, a, b)


def _call(name: str, args: list[float]) -> float:
    if name == "min":
        return min(args)
    if name == "max":
        return max(args)
    if name == "abs":
        return abs(args[0])
    if name == "ceil":
        return float(math.ceil(args[0])) if math.isfinite(args[0]) else args[0]
    return float(math.floor(args[0])) if math.isfinite(args[0]) else args[0]


def _compare(op: str, a: float, b: float) -> bool:
    return {
        "==": a == b,
        "!=": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[op]


def float64_arith(op: str, a: float, b: float) -> float:
    """``a op b`` as Go computes it on float64s (KEDA's expr-lang and Prometheus
    alike): a division by zero is ±Inf, or NaN for 0/0, never an error."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0.0:  # expr-lang divides float64s: ±Inf, NaN for 0/0
        return math.nan if a == 0.0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b
