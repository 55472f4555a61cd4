"""The hold: one thread that spins on the GPU's global timer before each timed call.

While it spins, the host enqueues the whole call, so the call's launches reach an idle GPU back to back and
no host time between them enters the span. It is PTX, JIT-loaded through the driver (children only); the
tracer removes it from each run's activities by its reserved name (tracing.HOLD).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cu

from .driver import ok
from .tracing import HOLD

HOLD_NS = 500_000  # 0.5 ms: far longer than enqueueing any task's call

_PTX = """.version 7.0
.target sm_70
.address_size 64
.visible .entry {name}()
{{
    .reg .u64 %start, %now;
    .reg .pred %waiting;
    mov.u64 %start, %globaltimer;
SPIN:
    mov.u64 %now, %globaltimer;
    sub.u64 %now, %now, %start;
    setp.lt.u64 %waiting, %now, {ns};
    @%waiting bra SPIN;
    ret;
}}
"""


def ptx(hold_ns: int) -> str:
    return _PTX.format(name=HOLD, ns=int(hold_ns))


class Hold:
    """`launch(stream)` enqueues a spin of `hold_ns` on `stream` (in the current context)."""

    def __init__(self, hold_ns: int = HOLD_NS) -> None:
        module = ok("cuModuleLoadData", cu.cuModuleLoadData(ptx(hold_ns).encode() + b"\0"))
        self._function: Any = ok("cuModuleGetFunction", cu.cuModuleGetFunction(module, HOLD.encode()))

    def launch(self, stream: int) -> None:
        ok("cuLaunchKernel", cu.cuLaunchKernel(self._function, 1, 1, 1, 1, 1, 1, 0, cu.CUstream(stream), 0, 0))
