"""pytest-benchmark records the candidate's GPU latencies (CUPTI spans from the time stage) as its
rounds: a timer that replays them, advanced by one latency per pedantic round. The baseline's
figures and the speedup travel in `extra_info`."""

from __future__ import annotations

from typing import Any

from .verdict import Verdict


class ReplayClock:
    """Reads as the running total of the latencies replayed so far (seconds)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._pending: list[float] = []

    def __call__(self) -> float:
        return self.total

    def load(self, seconds: list[float]) -> None:
        self._pending = list(seconds)

    def step(self) -> None:
        self.total += self._pending.pop(0)

    def __repr__(self) -> str:
        return "ptxbench.cupti_span"


def record(benchmark: Any, clock: ReplayClock, time: Verdict) -> None:
    """One pedantic round per timed run of the candidate (pytest-benchmark disables itself under xdist)."""
    data = time.data
    spans = [ms / 1e3 for ms in data["spans_ms"]]
    benchmark.extra_info.update(
        {
            key: data[key]
            for key in ("baseline", "baseline_median_ms", "baseline_iqr_ms", "speedup", "tflops", "floor_ms")
        }
    )
    clock.load(spans)
    benchmark.pedantic(clock.step, rounds=len(spans), iterations=1, warmup_rounds=0)
