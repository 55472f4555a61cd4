"""Estimators over trajectories: Wilson intervals for shares, the unbiased pass@k, fast_p, and a
seeded bootstrap interval for the geometric-mean speedup."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

Z95 = 1.959963984540054
FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a share (95 % by default); (0, 1) without trials. Rounding never puts
    a bound outside [0, 1] or on the wrong side of the share (0/n has the lower bound 0, n/n the upper 1)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of Chen et al. (2021): 1 - C(n-c, k) / C(n, k), for n samples with c correct."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n = {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def fast_p(speedups: Sequence[float | None], p: float) -> float:
    """The share of trajectories whose kernel is correct and faster than `p` × the baseline; an entry is
    the speedup of a correct kernel, or None (not correct, or its time failed). Trajectories not judged
    (the check or time could not run) are no entries."""
    if not speedups:
        raise ValueError("fast_p needs at least one judged trajectory")
    return sum(1 for s in speedups if s is not None and s > p) / len(speedups)


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def bootstrap_geomean(
    values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval of the geometric mean, reproducible through its seed."""
    if not values:
        raise ValueError("no values to resample")
    rng = random.Random(seed)
    means = sorted(geomean(rng.choices(values, k=len(values))) for _ in range(resamples))
    return (means[int(0.025 * (resamples - 1))], means[math.ceil(0.975 * (resamples - 1))])
