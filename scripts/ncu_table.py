#!/usr/bin/env python3
"""One line per kernel launch of an `ncu --csv --page raw` report (scripts/device_check.sh ncu): duration, SM
clock, tensor pipe and issue activity, L2 and DRAM throughput, and the top stall reasons (warps stalled per
issued instruction). `--metrics` prints the metrics to ask ncu for, beyond its SpeedOfLight and WarpStateStats
sections."""

from __future__ import annotations

import csv
import sys

COLUMNS = {
    "us": "gpu__time_duration.sum",
    "GHz": "sm__cycles_elapsed.avg.per_second",
    "tensor%": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue%": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "L2%": "lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
    "DRAM%": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
}
STALL = ("smsp__average_warps_issue_stalled_", "_per_issue_active.ratio")
NOT_STALLS = ("selected", "not_issued")  # `selected` is the issue itself: 1.00 per issue, always


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return float("nan")


# Factors to microseconds and to GHz from the units ncu prints in a raw report's second row.
TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
TO_GHZ = {"hz": 1e-9, "khz": 1e-6, "mhz": 1e-3, "ghz": 1.0, "cycle/nsecond": 1.0, "cycle/usecond": 1e-3}


def scaled(label: str, unit: str, value: float) -> float:
    """Durations in us and clocks in GHz, whatever unit ncu printed."""
    if label == "us":
        return value * TO_US.get(unit.lower(), float("nan"))
    if label == "GHz":
        return value * TO_GHZ.get(unit.lower(), float("nan"))
    return value


def main() -> int:
    if sys.argv[1:] == ["--metrics"]:
        print(",".join(v for k, v in COLUMNS.items() if k not in ("us", "DRAM%")))  # those come with SpeedOfLight
        return 0
    with open(sys.argv[1], newline="") as handle:
        lines = [line for line in handle if line.startswith('"')]  # ncu's own log lines come first
    rows = list(csv.reader(lines))
    if len(rows) < 3:
        print("no kernel in the report")
        return 1
    header, units, data = rows[0], rows[1], rows[2:]
    index = {name: i for i, name in enumerate(header)}
    name_col = index.get("Kernel Name", 0)
    print(" | ".join(["kernel", *COLUMNS, "top stalls (warps per issue)"]))
    for row in data:
        cells = []
        for label, metric in COLUMNS.items():
            i = index.get(metric)
            cells.append("-" if i is None else f"{scaled(label, units[i], number(row[i])):.3g}")
        stalls = sorted(
            (
                (number(row[i]), name[len(STALL[0]) : -len(STALL[1])])
                for name, i in index.items()
                if name.startswith(STALL[0]) and name.endswith(STALL[1]) and not any(n in name for n in NOT_STALLS)
            ),
            reverse=True,
        )
        top = ", ".join(f"{what} {value:.2f}" for value, what in stalls[:6])
        print(" | ".join([row[name_col][:60], *cells, top]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
