"""List prices in USD per million tokens (input, output), in one place. A model not listed has no
price: its cost is None, never a guess. `--ptx-prices` overrides or adds entries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# Standard (short-context, uncached) list prices when this table was written.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-4.1": (2.0, 8.0),
    "o3": (2.0, 8.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.30, 2.50),
}


def price(model: str, overrides: Mapping[str, Sequence[float]] | None) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for `model`, or None when unknown."""
    if overrides and model in overrides:
        given = overrides[model]
        return float(given[0]), float(given[1])
    return PRICES.get(model)


def cost(
    model: str, input_tokens: int, output_tokens: int, overrides: Mapping[str, Sequence[float]] | None
) -> float | None:
    known = price(model, overrides)
    if known is None:
        return None
    return (input_tokens * known[0] + output_tokens * known[1]) / 1e6
