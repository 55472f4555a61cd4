"""Arithmetic formulas from task files (FLOPs, bytes, workspace), evaluated without `eval`."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


class FormulaError(ValueError):
    """A formula uses syntax or names that the catalogue does not allow."""


class Formula:
    """`2 * M * N * K` or `4 * B * H * S * S * D * (0.5 if mask == 'causal' else 1)`."""

    def __init__(self, text: str, names: Iterable[str]) -> None:
        self.text = text
        try:
            self._tree = ast.parse(text, mode="eval").body
        except SyntaxError as exc:
            raise FormulaError(f"not an arithmetic expression: {text!r}") from exc
        allowed = set(names)
        for node in ast.walk(self._tree):
            if isinstance(node, ast.Name) and node.id not in allowed:
                raise FormulaError(f"unknown name {node.id!r} in {text!r} (known: {', '.join(sorted(allowed))})")
            if not isinstance(node, _ALLOWED_NODES):
                raise FormulaError(f"{type(node).__name__} is not allowed in {text!r}")

    def __call__(self, values: Mapping[str, float | str]) -> float:
        return _evaluate(self._tree, values)

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


def _evaluate(node: ast.expr, values: Mapping[str, float | str]) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return node.value  # type: ignore[return-value]  # strings only reach comparisons
    if isinstance(node, ast.Name):
        return values[node.id]  # type: ignore[return-value]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, values), _evaluate(node.right, values))
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand, values)
    if isinstance(node, ast.IfExp):
        branch = node.body if _evaluate(node.test, values) else node.orelse
        return _evaluate(branch, values)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _evaluate(node.left, values), _evaluate(node.comparators[0], values)
        return float(_COMPARE[type(node.ops[0])](left, right))
    raise FormulaError(f"cannot evaluate {ast.dump(node)}")


_COMPARE: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
