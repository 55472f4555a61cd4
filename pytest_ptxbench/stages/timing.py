"""Stage *time*: the candidate's latency against the baseline's, measured alike and interleaved.

GPU times come from CUPTI (the span of all kernels, memsets and copies of a run, on every stream, with
the host's enqueueing kept out by the hold before each call); CUDA events around each run, with a
device-wide synchronisation inside, cross-check them. The verdict fails on a foreign kernel, a kernel
named like the harness's hold, a run that launched nothing, a wrong timed output, or a time under the
speed-of-light floor.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..child.tracing import HOLD
from ..verdict import Status, Verdict

# Datasheet peaks per target (dense bf16 tensor FLOP/s, HBM bytes/s; H200's bandwidth, B200's figures).
PEAKS = {"h100": (989e12, 4.8e12), "b200": (2.25e15, 8.0e12)}
FLOOR_MARGIN = 0.9  # a time below 90% of the floor is impossible, not fast


@dataclass(frozen=True)
class Series:
    spans_ms: list[float]
    events_ms: list[float]
    idle_ms: list[float]  # per run, the part of the span when nothing ran

    @property
    def median(self) -> float:
        return statistics.median(self.spans_ms)

    @property
    def iqr(self) -> float:
        q = statistics.quantiles(self.spans_ms, n=4) if len(self.spans_ms) > 1 else [self.median] * 3
        return q[2] - q[0]


def series(runs: Sequence[dict[str, Any]]) -> Series:
    return Series([r["span_ms"] for r in runs], [r["event_ms"] for r in runs], [r["idle_ms"] for r in runs])


def floor_ms(target: str, flops: float, nbytes: float) -> float:
    peak_flops, peak_bytes = PEAKS[target]
    return max(flops / peak_flops, nbytes / peak_bytes) * 1e3


def problems_in(runs: Sequence[dict[str, Any]], own_kernels: set[str]) -> list[str]:
    """What the candidate's timed runs show that a fair kernel never does."""
    found = []
    if HOLD in own_kernels:
        found.append(f"a kernel is named {HOLD}, the name the harness reserves for its own")
    foreign = sorted({k["name"] for r in runs for k in r["kernels"]} - own_kernels)
    if foreign:
        found.append(f"kernels not in the candidate's module ran while timing: {', '.join(foreign[:5])}")
    empty = [r["index"] for r in runs if not r["kernels"]]
    if empty:
        found.append(f"no kernel ran in timed runs {empty[:10]}")
    late = [r["index"] for r in runs if r["span_ms"] > r["event_ms"] * 1.05 + 0.005]
    if late:
        found.append(f"kernels outlasted the timed region in runs {late[:10]}")
    return found


def verdict(
    candidate: Series,
    baseline: Series,
    baseline_library: str,
    target: str,
    flops: float,
    nbytes: float,
    problems: Sequence[str],
    data: dict[str, Any],
    seconds: float,
) -> Verdict:
    floor = floor_ms(target, flops, nbytes)
    numbers = {
        "median_ms": candidate.median,
        "iqr_ms": candidate.iqr,
        "events_median_ms": statistics.median(candidate.events_ms),
        "idle_median_ms": statistics.median(candidate.idle_ms),
        "baseline_median_ms": baseline.median,
        "baseline_iqr_ms": baseline.iqr,
        "baseline_idle_median_ms": statistics.median(baseline.idle_ms),
        "baseline": baseline_library,
        "speedup": baseline.median / candidate.median if candidate.median > 0 else None,
        "tflops": flops / candidate.median / 1e9 if candidate.median > 0 else None,
        "floor_ms": floor,
        # the share of the roofline reached: the speed-of-light floor over the measured time
        "speed_of_light": floor / candidate.median if candidate.median > 0 else None,
        "runs": len(candidate.spans_ms),
        "spans_ms": candidate.spans_ms,
        "baseline_spans_ms": baseline.spans_ms,
        **data,
    }
    found = list(problems)
    if candidate.median < floor * FLOOR_MARGIN:
        found.append(f"median {candidate.median:.4f} ms is under the speed-of-light floor {floor:.4f} ms")
    if found:
        return Verdict("time", Status.FAILED, "; ".join(found), numbers, seconds)
    numbers["summary"] = f"{candidate.median:.3f} ms, {numbers['speedup']:.2f}x {baseline_library}"
    return Verdict(
        "time",
        Status.PASSED,
        f"{candidate.median:.4f} ms (IQR {candidate.iqr:.4f}) against {baseline_library} {baseline.median:.4f} ms: "
        f"{numbers['speedup']:.3f}x",
        numbers,
        seconds,
    )
