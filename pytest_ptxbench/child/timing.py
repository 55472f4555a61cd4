"""The timed-run protocol both children follow, so candidate and baseline are measured alike.

Before each run, outside the timed region: fresh input values copied in place, outputs and workspace
poisoned, the persisting-L2 window reset, L2 flushed (2x its size), the device idle. Then the hold (a
0.5 ms spin, hold.py) is enqueued, so that the whole call is enqueued before any of it runs. The timed
region: start event, the call, a device-wide synchronisation (work on other streams counts), end event.
CUPTI reports the kernels, memsets and copies that ran inside it; the span runs from the first one's start
to the last one's end, and the idle time is the part of the span when none of them ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cudart import Runtime
from .hold import HOLD_NS, Hold
from .tracing import Activity, Tracer, driver_kernels, idle_ms, span_ms, without_hold


class RunFailed(RuntimeError):
    """The call returned an error or the device faulted during a run."""


class Clock:
    def __init__(self, runtime: Runtime, tracer: Tracer, stream: int, hold_ns: int = HOLD_NS) -> None:
        self.runtime, self.tracer, self.stream = runtime, tracer, stream
        self.start, self.end = runtime.event(), runtime.event()
        self.flush_bytes = 2 * runtime.l2_bytes()
        self.flush_buffer = runtime.malloc(self.flush_bytes)
        self.hold = Hold(hold_ns)  # in the runtime's context, current from here on

    def runs(
        self,
        count: int,
        first: int,
        prepare: Callable[[int], None],
        call: Callable[[], int],
        after: Callable[[int], None] = lambda i: None,
        launched: set[str] | None = None,
    ) -> list[dict[str, Any]]:
        """`count` timed runs; run i uses input set `first + i` (rotated by `prepare`); `after(i)` runs once
        run i is done, outside the timed region (its outputs are still in place). `launched`: the kernels the
        call launches from the host, where known (the runner's graphs); any other kernel is the driver's."""
        rt = self.runtime
        out = []
        for i in range(first, first + count):
            prepare(i)
            rt.reset_persisting_l2()
            rt.memset(self.flush_buffer, i & 0xFF, self.flush_bytes)
            _raise_on(rt, "before the run", rt.synchronize())
            begin = self.tracer.now()
            self.hold.launch(self.stream)
            rt.record(self.start, self.stream)
            code = call()
            fault = rt.synchronize()
            rt.record(self.end, self.stream)
            event_ms = rt.elapsed_ms(self.start, self.end)
            traced = self.tracer.window(begin, self.tracer.now())
            if code != 0:
                raise RunFailed(f"the call returned {rt.error_name(code)} ({code}) in run {i}")
            _raise_on(rt, f"in run {i}", fault)
            try:
                activities = without_hold(traced)
            except LookupError as exc:
                raise RunFailed(f"run {i}: {exc}") from None
            if launched is not None:
                activities = driver_kernels(activities, launched)
            after(i)
            out.append(
                {
                    "index": i,
                    "event_ms": event_ms,
                    "span_ms": span_ms(activities),
                    "idle_ms": idle_ms(activities),
                    "kernels": _named(activities, "kernel"),
                    "driver": _named(activities, "driver"),
                }
            )
        return out


def _named(activities: list[Activity], kind: str) -> list[dict[str, Any]]:
    return [{"name": a.name, "ms": (a.end_ns - a.start_ns) / 1e6} for a in activities if a.kind == kind]


def _raise_on(runtime: Runtime, when: str, code: int) -> None:
    if code != 0:
        raise RunFailed(f"the device reported {runtime.error_name(code)} ({code}) {when}")
