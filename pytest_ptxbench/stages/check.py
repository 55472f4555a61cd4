"""Stage *check*: the candidate's outputs against the trusted reference, element by element.

An element is wrong when its absolute AND relative error exceed the task's tolerance for its dtype, or
when it is not finite (unless the reference holds that same infinity: the LSE of a row with nothing to
attend); a task's matched ratio may forgive a few wrong elements, never a non-finite one. Poisoned
elements left as they were are reported as never written; a second call on the first input set with a
different, finite poison catches stale results. All-zero outputs and inputs the call changed fail too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..child.wire import as_float
from ..task.catalogue import Tolerance
from ..verdict import Status, Verdict

POISONS = (0xFF, 0x7F)  # NaN in every float format; a huge finite value (bf16 0x7F7F, fp32 0x7F7F7F7F)
WORST = 5
CHUNK = 1 << 18  # elements compared at a time
THREADS = min(8, os.cpu_count() or 1)


@dataclass
class Comparison:
    output: str
    label: str  # which input set / poison
    elements: int
    wrong: int
    unwritten: int
    all_zero: bool
    max_abs_error: float
    worst: list[str] = field(default_factory=list)
    nonfinite: int = 0  # written NaN or infinity: never within a matched ratio
    digest: str = ""  # sha256 of the stored bytes compared, where the caller recorded it

    @property
    def ok(self) -> bool:
        return self.unwritten == 0 and self.nonfinite == 0 and not self.all_zero

    def passes(self, matched_ratio: float) -> bool:
        """ok, and no more wrong elements than the ratio forgives (rounded down, float noise aside)."""
        return self.ok and self.wrong <= int((1 - matched_ratio) * self.elements + 1e-6)

    def summary(self) -> str:
        parts = []
        if self.unwritten:
            parts.append(f"{self.unwritten} of {self.elements} elements of {self.output} never written")
        if self.nonfinite:
            parts.append(f"{self.nonfinite} of {self.elements} elements of {self.output} not finite")
        if self.all_zero:
            parts.append(f"{self.output} is all zeros")
        if self.wrong:
            parts.append(
                f"{self.wrong} of {self.elements} elements of {self.output} wrong; worst: {'; '.join(self.worst)}"
            )
        return f"{', '.join(parts)} ({self.label})"


def compare(
    output: str, label: str, got: np.ndarray, dtype: str, expected: np.ndarray, tolerance: Tolerance, poison: int
) -> Comparison:
    """`got` holds the stored values (bf16 as raw bits); `expected` is fp32 of the same shape. The work goes
    in chunks that stay in the CPU's caches, on several threads (numpy lets go of the interpreter's lock):
    outputs reach hundreds of MB, compared several times a shape."""
    stored, reference = got.reshape(-1), expected.reshape(-1)
    tally = _Tally(0, 0, 0, -1.0, False, False, [])
    with ThreadPoolExecutor(THREADS) as pool:
        for part in pool.map(
            lambda start: _chunk(stored, reference, start, dtype, tolerance, poison), range(0, stored.size, CHUNK)
        ):
            tally = tally.plus(part)
    worst = []
    for _, flat in sorted(tally.candidates, key=lambda c: (-c[0], c[1]))[:WORST]:
        index = np.unravel_index(flat, got.shape)
        value = float(as_float(stored[flat : flat + 1], dtype)[0])
        worst.append(f"{output}[{', '.join(map(str, index))}] = {value:.6g}, expected {reference[flat]:.6g}")
    return Comparison(
        output,
        label,
        int(got.size),
        tally.wrong,
        tally.unwritten,
        all_zero=not tally.any_value and tally.any_expected,
        max_abs_error=tally.max_error if tally.max_error >= 0 else float("inf"),
        worst=worst,
        nonfinite=tally.nonfinite,
    )


@dataclass(frozen=True)
class _Tally:
    """What one chunk, or several added up, holds."""

    unwritten: int
    nonfinite: int
    wrong: int
    max_error: float  # -1: nothing measurable yet
    any_value: bool
    any_expected: bool
    candidates: list[tuple[float, int]]  # (error, flat index) of the worst wrong elements of each chunk

    def plus(self, other: _Tally) -> _Tally:
        return _Tally(
            self.unwritten + other.unwritten,
            self.nonfinite + other.nonfinite,
            self.wrong + other.wrong,
            max(self.max_error, other.max_error),
            self.any_value or other.any_value,
            self.any_expected or other.any_expected,
            self.candidates + other.candidates,
        )


def _chunk(
    stored: np.ndarray, reference: np.ndarray, start: int, dtype: str, tolerance: Tolerance, poison: int
) -> _Tally:
    poison_bits = int.from_bytes(bytes([poison]) * stored.dtype.itemsize, "little")
    bits = stored[start : start + CHUNK].view(f"u{stored.dtype.itemsize}")  # the bits, to find the poison
    ref = reference[start : start + CHUNK]
    poisoned = bits == poison_bits
    values = as_float(stored[start : start + CHUNK], dtype)
    finite = np.isfinite(values)
    exact = values == ref  # also the same infinity where the reference is one (the LSE of an empty row)
    with np.errstate(invalid="ignore"):
        error = np.abs(values - ref)
    far = (error > tolerance.atol) & (error > tolerance.rtol * np.abs(ref))
    bad = ~exact & (~finite | ~np.isfinite(ref) | far)
    measurable = error[np.isfinite(error)]
    count = int(np.count_nonzero(bad))
    candidates = []
    if count:
        ranked = np.where(bad, np.nan_to_num(error, nan=np.inf, posinf=np.inf), -1.0)
        top = np.argpartition(ranked, -min(count, WORST))[-min(count, WORST) :]
        candidates = [(float(ranked[i]), start + int(i)) for i in top]
    return _Tally(
        int(np.count_nonzero(poisoned)),
        int(np.count_nonzero(~finite & ~poisoned & ~exact)),
        count,
        float(measurable.max()) if measurable.size else -1.0,
        bool(np.any(values != 0)),
        bool(np.any(ref != 0)),
        candidates,
    )


def verdict(
    comparisons: Sequence[Comparison],
    matched_ratio: float,
    changed_inputs: Sequence[str],
    overruns: Sequence[str],
    seconds: float,
) -> Verdict:
    problems = []
    if overruns:
        problems.append(f"the call wrote past the end of {', '.join(sorted(set(overruns)))}")
    if changed_inputs:
        problems.append(f"the call changed its inputs: {', '.join(sorted(set(changed_inputs)))}")
    for c in comparisons:
        if not c.passes(matched_ratio):
            problems.append(c.summary())
    data: dict[str, Any] = {
        "comparisons": [
            {
                "output": c.output,
                "label": c.label,
                "elements": c.elements,
                "wrong": c.wrong,
                "unwritten": c.unwritten,
                "nonfinite": c.nonfinite,
                "all_zero": c.all_zero,
                "max_abs_error": c.max_abs_error,
                "worst": c.worst,
            }
            for c in comparisons
        ],
        "changed_inputs": sorted(set(changed_inputs)),
        "overruns": sorted(set(overruns)),
    }
    if problems:
        return Verdict("check", Status.FAILED, "; ".join(problems), data, seconds)
    labels = sorted({c.label.split(",")[0] for c in comparisons})
    data["summary"] = f"{len(labels)} input sets"
    return Verdict("check", Status.PASSED, f"correct on {', '.join(labels)}", data, seconds)
