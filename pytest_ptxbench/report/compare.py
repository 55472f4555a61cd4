"""`ptxbench compare A B`: what changed per test between two runs (outcome, speedup)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .runs import Run
from .tables import Table

SPEEDUP_CHANGE = 0.02  # relative change in speedup below which a test is "unchanged"


def speedup(row: Mapping[str, Any] | None) -> float | None:
    if row is None:
        return None
    for verdict in row["verdicts"]:
        value = verdict.get("data", {}).get("speedup")
        if verdict["stage"] == "time" and verdict["status"] == "passed" and isinstance(value, (int, float)):
            return float(value)
    return None


def change(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> str:
    """In words: only in A, only in B, the outcome's change, or the speedup's, or unchanged."""
    if a is None:
        return "only in B"
    if b is None:
        return "only in A"
    if a["outcome"] != b["outcome"]:
        return f"{a['outcome']} → {b['outcome']}"
    before, after = speedup(a), speedup(b)
    if before is not None and after is not None and abs(after / before - 1) >= SPEEDUP_CHANGE:
        return "faster" if after > before else "slower"
    return "unchanged"


def compare(a: Run, b: Run, everything: bool = False) -> Table:
    """One row per test id (changed ones only unless `everything`); the note counts each kind of change."""
    rows_a = {r["id"]: r for r in a.results if r.get("budget") is None}  # test outcomes, not budget scores
    rows_b = {r["id"]: r for r in b.results if r.get("budget") is None}
    rows: list[list[str]] = []
    counts: dict[str, int] = {}
    for test in sorted(rows_a.keys() | rows_b.keys()):
        ra, rb = rows_a.get(test), rows_b.get(test)
        what = change(ra, rb)
        counts[what] = counts.get(what, 0) + 1
        if what != "unchanged" or everything:
            rows.append([test, _outcome(ra), _outcome(rb), _speedup(speedup(ra)), _speedup(speedup(rb)), what])
    note = f"A: {a.path} ({a.model}, task set {a.task_set}); B: {b.path} ({b.model}, task set {b.task_set}). "
    note += ", ".join(f"{what}: {n}" for what, n in sorted(counts.items()))
    if a.task_set != b.task_set:
        note += ". The task sets differ: a test id may not name the same workload."
    header = ["test", "outcome A", "outcome B", "speedup A", "speedup B", "change"]
    return Table("Changes from A to B", header, rows, note)


def _outcome(row: Mapping[str, Any] | None) -> str:
    return str(row["outcome"]) if row else "–"


def _speedup(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "–"
