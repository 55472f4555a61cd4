"""GPU times from CUPTI activity tracing: every kernel, memset and copy on every stream, with its name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HOLD = "ptxbench_hold"  # the harness's own kernel before each timed call (hold.py); a candidate may not use it


@dataclass(frozen=True)
class Activity:
    kind: str  # "kernel", "memset", "memcpy", or "driver" (see driver_kernels)
    name: str  # a kernel's mangled name, as in the cubin; the kind for memsets and copies
    start_ns: int
    end_ns: int


class Tracer:
    """Records kernel, memset and copy activity; `window` returns what ran between two timestamps."""

    def __init__(self) -> None:
        from cupti import cupti  # the cupti-python wheel; imported only in a child

        self._cupti = cupti
        self._records: list[Activity] = []
        kinds = cupti.ActivityKind
        self._kinds = {kinds.CONCURRENT_KERNEL: "kernel", kinds.MEMSET: "memset", kinds.MEMCPY: "memcpy"}
        for kind in self._kinds:
            cupti.activity_enable(kind)
        cupti.activity_register_callbacks(self._requested, self._completed)

    @staticmethod
    def _requested() -> tuple[int, int]:
        return 8 * 1024 * 1024, 0

    def _completed(self, activities: list[Any]) -> None:
        for a in activities:
            kind = self._kinds.get(a.kind)
            if kind is not None:
                name = str(a.name) if kind == "kernel" else kind
                self._records.append(Activity(kind, name, int(a.start), int(a.end)))

    def now(self) -> int:
        return int(self._cupti.get_timestamp())

    def window(self, start_ns: int, end_ns: int) -> list[Activity]:
        """Activities that started and ended inside [start_ns, end_ns]; older records are dropped."""
        self._cupti.activity_flush_all(1)
        inside = [r for r in self._records if r.start_ns >= start_ns and r.end_ns <= end_ns]
        self._records = [r for r in self._records if r.start_ns > end_ns]
        return inside


def without_hold(activities: list[Activity]) -> list[Activity]:
    """The call's own activities: all but the earliest kernel named like the hold (LookupError if none ran)."""
    holds = [a for a in activities if a.kind == "kernel" and a.name == HOLD]
    if not holds:
        raise LookupError(f"the hold kernel {HOLD!r} is missing from the trace")
    first = min(holds, key=lambda a: a.start_ns)
    return [a for a in activities if a is not first]


def driver_kernels(activities: list[Activity], launched: set[str]) -> list[Activity]:
    """Kernels not named in `launched` (the graph's kernel nodes) marked as the driver's: in the runner, which
    runs nothing but its graphs, such a kernel is one the driver runs in place of a memset or copy node
    (`memset32`, `memcpy32_post`), or one the call's own kernels launched from the device; part of the call."""
    return [
        Activity("driver", a.name, a.start_ns, a.end_ns) if a.kind == "kernel" and a.name not in launched else a
        for a in activities
    ]


def span_ms(activities: list[Activity]) -> float:
    """From the first activity's start to the last one's end."""
    if not activities:
        return 0.0
    return (max(a.end_ns for a in activities) - min(a.start_ns for a in activities)) / 1e6


def idle_ms(activities: list[Activity]) -> float:
    """The time inside the span when nothing traced ran: the gaps between a call's launches."""
    idle, reached = 0, None
    for a in sorted(activities, key=lambda a: a.start_ns):
        if reached is not None and a.start_ns > reached:
            idle += a.start_ns - reached
        reached = a.end_ns if reached is None else max(reached, a.end_ns)
    return idle / 1e6
