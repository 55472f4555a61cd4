"""The interleaved timer: candidate replays and baseline calls alternate in blocks, measured alike.

After the warm-ups, `runs` timed runs of each, in BLOCKS blocks. The timed runs whose outputs are
rechecked are drawn from a secret seed per call: a kernel that does the full work only on a fixed
schedule's runs (a device-side call counter) cannot know which.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client import Runner

BLOCKS = 5
RECHECKS = 10  # one wrong on half the runs escapes all of them with probability 0.5 ** 10 < 0.1%

Runs = list[dict[str, Any]]


def recheck_schedule(first: int, runs: int) -> frozenset[int]:
    draw = secrets.SystemRandom()
    return frozenset(draw.sample(range(first, first + runs), min(runs, RECHECKS)))


@dataclass
class Interleaved:
    candidate: Runs = field(default_factory=list)
    baseline: Runs = field(default_factory=list)
    rechecked: list[int] = field(default_factory=list)
    overruns: list[str] = field(default_factory=list)


def interleave(
    runner: Runner,
    baseline: Callable[[int, int], Runs],
    runs: int,
    warmup: int,
    recheck: Callable[[int, dict[str, Path]], None],
    placement: int = 0,
) -> Interleaved:
    """`baseline(count, first)` times the baseline's runs; `recheck(index, outputs)` compares a rechecked
    run's saved outputs (and may delete them)."""
    schedule = recheck_schedule(warmup, runs)
    out = Interleaved(rechecked=sorted(schedule))
    baseline(warmup, 0)
    runner.time(placement, warmup, 0, [])
    first, per_block = warmup, max(1, runs // BLOCKS)
    while len(out.candidate) < runs:
        count = min(per_block, runs - len(out.candidate))
        out.baseline += baseline(count, first)
        timed = runner.time(placement, count, first, sorted(i for i in schedule if first <= i < first + count))
        out.candidate += timed.runs
        out.overruns += [name for name in timed.overruns if name not in out.overruns]
        for index, files in timed.saved.items():
            recheck(index, files)
        first += count
    return out
