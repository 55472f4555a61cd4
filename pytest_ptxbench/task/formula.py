"""Arithmetic formulas from task files (FLOPs, bytes, workspace), evaluated without `eval`.

Evaluation is bounded so that no formula can hang or exhaust memory: a formula is short, every number
it reaches (constants, axis values, intermediate results) stays within MAX_MAGNITUDE, and an exponent
within MAX_EXPONENT, so that `9 ** 9 ** 9 ** 9` fails at once instead of computing for ever.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
MAX_LENGTH = 1000  # characters
MAX_NODES = 200  # nodes of the syntax tree
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e30  # far beyond any FLOP or byte count, far below what takes time to compute


class FormulaError(ValueError):
    """A formula uses syntax or names that the catalogue does not allow, or leaves its bounds."""


class Formula:
    """`2 * M * N * K` or `4 * B * H * S * S * D * (0.5 if mask == 'causal' else 1)`."""

    def __init__(self, text: str, names: Iterable[str]) -> None:
        self.text = text
        if len(text) > MAX_LENGTH:
            raise FormulaError(f"{len(text)} characters, more than {MAX_LENGTH}: {text[:60]!r}...")
        try:
            self._tree = ast.parse(text, mode="eval").body
        except SyntaxError as exc:
            raise FormulaError(f"not an arithmetic expression: {text!r}") from exc
        nodes = list(ast.walk(self._tree))
        if len(nodes) > MAX_NODES:
            raise FormulaError(f"{len(nodes)} terms and operators in {text!r}, more than {MAX_NODES}")
        allowed = set(names)
        for node in nodes:
            if isinstance(node, ast.Name) and node.id not in allowed:
                raise FormulaError(f"unknown name {node.id!r} in {text!r} (known: {', '.join(sorted(allowed))})")
            if not isinstance(node, _ALLOWED_NODES):
                raise FormulaError(f"{type(node).__name__} is not allowed in {text!r}")
            if isinstance(node, ast.Constant) and not _plain_constant(node.value):
                constant = ast.get_source_segment(text, node)
                raise FormulaError(f"constant {constant} in {text!r}: words and numbers up to {MAX_MAGNITUDE:.0e} only")

    def __call__(self, values: Mapping[str, float | str]) -> float:
        """The formula's number for the axis `values`; FormulaError where it leaves the bounds."""
        return _number(self._tree, values)

    def __repr__(self) -> str:
        return f"Formula({self.text!r})"


_ALLOWED_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.USub,
    ast.IfExp,
    ast.Compare,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    *_BINARY,
)


def _plain_constant(value: object) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_MAGNITUDE


def _number(node: ast.expr, values: Mapping[str, float | str]) -> float:
    """The value of `node`, which must be a real number within MAX_MAGNITUDE."""
    value = _evaluate(node, values)
    if isinstance(value, str):
        raise FormulaError(f"{ast.unparse(node)!r} is the word {value!r}, not a number")
    if not isinstance(value, (int, float)):
        raise FormulaError(f"{ast.unparse(node)!r} is not a real number")
    if not abs(value) <= MAX_MAGNITUDE:  # NaN too
        raise FormulaError(f"{ast.unparse(node)!r} exceeds {MAX_MAGNITUDE:.0e} in magnitude")
    return value


def _evaluate(node: ast.expr, values: Mapping[str, float | str]) -> float | str:
    """The value of `node`: a number, or a word (an axis value or a constant) for comparisons."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _number(node.left, values), _number(node.right, values)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise FormulaError(f"exponent {right!r} in {ast.unparse(node)!r} is beyond ±{MAX_EXPONENT}")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise FormulaError(f"{ast.unparse(node)!r} divides by zero") from None
        except OverflowError:
            raise FormulaError(f"{ast.unparse(node)!r} exceeds {MAX_MAGNITUDE:.0e} in magnitude") from None
    if isinstance(node, ast.UnaryOp):
        return -_number(node.operand, values)
    if isinstance(node, ast.IfExp):
        branch = node.body if _evaluate(node.test, values) else node.orelse
        return _evaluate(branch, values)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        first, second = _evaluate(node.left, values), _evaluate(node.comparators[0], values)
        try:
            return float(_COMPARE[type(node.ops[0])](first, second))
        except TypeError:
            raise FormulaError(f"{ast.unparse(node)!r} orders a word against a number") from None
    raise FormulaError(f"cannot evaluate {ast.unparse(node)!r}")


_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
