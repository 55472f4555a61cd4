"""The timed-run protocol both children follow, so candidate and baseline are measured alike.

Before each run, outside the timed region: fresh input values copied in place, outputs and workspace
poisoned, the persisting-L2 window reset, L2 flushed (2x its size), the device idle. The timed
region: start event, the call, a device-wide synchronisation (work on other streams counts), end event.
CUPTI reports the kernels that ran inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cudart import Runtime
from .tracing import Tracer, span_ms


class RunFailed(RuntimeError):
    """The call returned an error or the device faulted during a run."""


class Clock:
    def __init__(self, runtime: Runtime, tracer: Tracer, stream: int) -> None:
        self.runtime, self.tracer, self.stream = runtime, tracer, stream
        self.start, self.end = runtime.event(), runtime.event()
        self.flush_bytes = 2 * runtime.l2_bytes()
        self.flush_buffer = runtime.malloc(self.flush_bytes)

    def runs(
        self,
        count: int,
        first: int,
        prepare: Callable[[int], None],
        call: Callable[[], int],
        after: Callable[[int], None] = lambda i: None,
    ) -> list[dict[str, Any]]:
        """`count` timed runs; run i uses input set `first + i` (rotated by `prepare`); `after(i)` runs once
        run i is done, outside the timed region (its outputs are still in place)."""
        rt = self.runtime
        out = []
        for i in range(first, first + count):
            prepare(i)
            rt.reset_persisting_l2()
            rt.memset(self.flush_buffer, i & 0xFF, self.flush_bytes)
            _raise_on(rt, "before the run", rt.synchronize())
            begin = self.tracer.now()
            rt.record(self.start, self.stream)
            code = call()
            fault = rt.synchronize()
            rt.record(self.end, self.stream)
            event_ms = rt.elapsed_ms(self.start, self.end)
            kernels = self.tracer.window(begin, self.tracer.now())
            if code != 0:
                raise RunFailed(f"the call returned {rt.error_name(code)} ({code}) in run {i}")
            _raise_on(rt, f"in run {i}", fault)
            after(i)
            out.append(
                {
                    "index": i,
                    "event_ms": event_ms,
                    "span_ms": span_ms(kernels),
                    "kernels": [{"name": k.name, "ms": (k.end_ns - k.start_ns) / 1e6} for k in kernels],
                }
            )
        return out


def _raise_on(runtime: Runtime, when: str, code: int) -> None:
    if code != 0:
        raise RunFailed(f"the device reported {runtime.error_name(code)} ({code}) {when}")
