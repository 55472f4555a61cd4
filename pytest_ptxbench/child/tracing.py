"""Kernel-level GPU times from CUPTI activity tracing: every kernel on every stream, with its name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KernelRecord:
    name: str  # mangled, as in the cubin
    start_ns: int
    end_ns: int


class Tracer:
    """Records concurrent-kernel activity; `window` returns the kernels that ran between two timestamps."""

    def __init__(self) -> None:
        from cupti import cupti  # the cupti-python wheel; imported only in a child

        self._cupti = cupti
        self._records: list[KernelRecord] = []
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
        cupti.activity_register_callbacks(self._requested, self._completed)

    @staticmethod
    def _requested() -> tuple[int, int]:
        return 8 * 1024 * 1024, 0

    def _completed(self, activities: list[Any]) -> None:
        for a in activities:
            if a.kind == self._cupti.ActivityKind.CONCURRENT_KERNEL:
                self._records.append(KernelRecord(str(a.name), int(a.start), int(a.end)))

    def now(self) -> int:
        return int(self._cupti.get_timestamp())

    def window(self, start_ns: int, end_ns: int) -> list[KernelRecord]:
        """Kernels that started and ended inside [start_ns, end_ns]; older records are dropped."""
        self._cupti.activity_flush_all(1)
        inside = [r for r in self._records if r.start_ns >= start_ns and r.end_ns <= end_ns]
        self._records = [r for r in self._records if r.start_ns > end_ns]
        return inside


def span_ms(kernels: list[KernelRecord]) -> float:
    """From the first kernel's start to the last kernel's end."""
    if not kernels:
        return 0.0
    return (max(k.end_ns for k in kernels) - min(k.start_ns for k in kernels)) / 1e6
