"""Resolved settings for driving agents and clients in-process: every option's default, then overrides."""

from __future__ import annotations

from typing import Any

from pytest_ptxbench.settings import defaults


def model_settings(**overrides: Any) -> dict[str, Any]:
    values = defaults()
    values.update(retry_delay=0.0, request_timeout=10.0)
    unknown = set(overrides) - set(values)
    assert not unknown, f"not settings: {unknown}"
    return {**values, **overrides}
