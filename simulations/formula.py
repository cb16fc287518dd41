"""``advanced.scalingModifiers.formula``: KEDA's expression over named triggers.

KEDA evaluates the formula with expr-lang (``pkg/scaling/modifiers``); the
simulator supports the arithmetic part users write for autoscaling, whose
syntax expr-lang shares with Python: numbers, trigger names, ``+ - * /``,
unary minus, parentheses and ``min(...)``/``max(...)``. It is parsed with
Python's own :mod:`ast` and checked against that whitelist, so anything else
(the ``?:`` ternary, comparisons, other functions) is a ``ValueError`` naming
it rather than a guess.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Formula", "ScalingModifiers", "parse_formula"]

_SUPPORTED = "supported: numbers, trigger names, + - * /, unary minus, parentheses, min(), max()"
_BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
}


@dataclass(frozen=True)
class Formula:
    """A checked formula: its text and the trigger names it reads."""

    text: str
    names: frozenset[str]

    def evaluate(self, values: Mapping[str, float]) -> float:
        """The formula's value for ``values`` (every name in :attr:`names`)."""
        return _eval(ast.parse(self.text, mode="eval").body, values)


@dataclass(frozen=True)
class ScalingModifiers:
    """``advanced.scalingModifiers``: one composite metric for the HPA."""

    formula: Formula
    target: float
    activation_target: float = 0.0
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"


def parse_formula(text: str, known: frozenset[str], where: str = "formula") -> Formula:
    """``text`` checked against the whitelist and the trigger names in ``known``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where} must be a non-empty string")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"{where} {text!r} does not parse; {_SUPPORTED}") from None
    names: set[str] = set()
    for node in ast.walk(tree.body):
        if isinstance(node, ast.Name):
            if node.id not in known and node.id not in ("min", "max"):
                raise ValueError(
                    f"{where} {text!r}: {node.id!r} names no trigger "
                    f"(named triggers: {', '.join(sorted(known)) or 'none'})"
                )
            if node.id not in ("min", "max"):
                names.add(node.id)
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in ("min", "max")):
                raise ValueError(f"{where} {text!r}: only min() and max() calls; {_SUPPORTED}")
            if node.keywords or len(node.args) < 2:
                raise ValueError(f"{where} {text!r}: min/max take two or more arguments")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                raise ValueError(f"{where} {text!r}: operator not supported; {_SUPPORTED}")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub | ast.UAdd):
                raise ValueError(f"{where} {text!r}: operator not supported; {_SUPPORTED}")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise ValueError(f"{where} {text!r}: {node.value!r} is not a number")
        elif not isinstance(node, ast.operator | ast.unaryop | ast.expr_context):
            raise ValueError(
                f"{where} {text!r}: {type(node).__name__} is not supported; {_SUPPORTED}"
            )
    return Formula(text.strip(), frozenset(names))


def _eval(node: ast.expr, values: Mapping[str, float]) -> float:
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)
        return float(node.value)
    if isinstance(node, ast.Name):
        return float(values[node.id])
    if isinstance(node, ast.UnaryOp):
        inner = _eval(node.operand, values)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Call):
        args = [_eval(a, values) for a in node.args]
        assert isinstance(node.func, ast.Name)
        return min(args) if node.func.id == "min" else max(args)
    assert isinstance(node, ast.BinOp)
    a = _eval(node.left, values)
    b = _eval(node.right, values)
    op = _BINOPS[type(node.op)]
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0.0:  # expr-lang divides float64s: ±Inf, NaN for 0/0
        return math.nan if a == 0.0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b
