"""Nsight Compute's raw CSV page (`--csv --page raw --print-metric-instances details`): one row per
profiled launch, with per-opcode executed counts as `total (OPCODE: n; OPCODE: n; ...)` cells."""

from __future__ import annotations

import csv
import io
import math
import re
from collections import Counter
from dataclasses import dataclass

OPCODES_METRIC = "sass__inst_executed_per_opcode_with_modifier_all"
TIME_METRIC = "gpu__time_duration.sum"
_INSTANCE = re.compile(r"^\s*([^:;()]+?)\s*:\s*([\d,.]+|n/a|nan)\s*$", re.IGNORECASE)
_TIME_UNITS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


NO_PERMISSION = "ERR_NVGPUCTRPERM"  # ncu's code for "this user may not read the performance counters"


def errors(log: str) -> list[str]:
    """ncu's own `==ERROR==` lines in its log file (the profiled program's output never goes there)."""
    return [line.removeprefix("==ERROR==").strip() for line in log.splitlines() if line.startswith("==ERROR==")]


class NcuParseError(ValueError):
    """The capture is missing, partial or not numbers."""


@dataclass(frozen=True)
class Launch:
    kernel: str
    time_ms: float
    executed: Counter[str]  # full mnemonic → warp-level executed count


def parse_raw_csv(text: str) -> list[Launch]:
    """Launches in the order profiled. Lines before the header (==PROF== lines, the program's own
    output) are skipped; a units row after the header is read for the time unit."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[1:]
    for column in ("Kernel Name", OPCODES_METRIC, TIME_METRIC):
        if column not in header:
            raise NcuParseError(f"column {column!r} missing from ncu's CSV header")
    name_at, opcodes_at, time_at = (header.index(c) for c in ("Kernel Name", OPCODES_METRIC, TIME_METRIC))
    scale = 1e-6
    if body and not body[0][0].strip():  # the units row
        scale = _TIME_UNITS.get(body[0][time_at].strip(), scale)
        body = body[1:]
    launches = []
    for row in body:
        if len(row) != len(header):
            raise NcuParseError(f"a row of {len(row)} cells under a header of {len(header)}: {row[:3]}")
        launches.append(Launch(row[name_at], _number(row[time_at]) * scale, parse_instances(row[opcodes_at])))
    return launches


def parse_instances(cell: str) -> Counter[str]:
    """`6,176 (LEA: 832; HGMMA.64x8x16.F32.BF16: 320)` → Counter; NaN or n/a anywhere is an error."""
    total, _, rest = cell.partition("(")
    counts: Counter[str] = Counter()
    for item in filter(None, (part.strip() for part in rest.rstrip(") ").split(";"))):
        m = _INSTANCE.match(item)
        if not m:
            raise NcuParseError(f"unreadable opcode count {item!r}")
        counts[m.group(1)] += int(_number(m.group(2)))
    if total.strip() and _number(total) != sum(counts.values()):
        raise NcuParseError(f"per-opcode counts add up to {sum(counts.values())}, not the total {total.strip()}")
    return counts


def _number(text: str) -> float:
    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        raise NcuParseError(f"not a number: {text!r}") from None
    if math.isnan(value):
        raise NcuParseError("NaN in the capture")
    return value
