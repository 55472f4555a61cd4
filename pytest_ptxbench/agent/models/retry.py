"""Bounded retries with exponential backoff around one model call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from . import ModelError

T = TypeVar("T")
MAX_DELAY = 60.0


def with_retries(
    call: Callable[[], T],
    retryable: Callable[[Exception], bool],
    retries: int,
    delay: float,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, retried up to `retries` times on errors that `retryable` accepts, waiting `delay`
    seconds before the first retry and doubling (at most 60 s). Raises ModelError when it gives up."""
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not retryable(exc):
                raise ModelError(f"{what}: {_describe(exc)}") from exc
            if attempt == retries:
                tried = f"gave up after {retries + 1} attempts" if retries else "--ptx-max-retries=0: not retried"
                raise ModelError(f"{what}: {_describe(exc)} ({tried})") from exc
            sleep(min(delay * 2**attempt, MAX_DELAY))
            attempt += 1


def _describe(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
