"""The terminal summary: one row per benchmark test, built from the reports' user properties so that
it also works under xdist."""

from __future__ import annotations

import math
from typing import Any

from .task.cases import natural
from .verdict import STAGES

PROPERTY = "ptxbench"
_SHORT = {"passed": "ok", "failed": "FAIL", "skipped": "-", "tool-unavailable": "n/a"}
REASON_CHARS = 80  # the reason column: one short line; the test report and results.jsonl keep it whole


def summary_row(evaluation_row: dict[str, Any]) -> dict[str, Any]:
    """The builtin-typed part of a result that travels in `user_properties`."""
    stages = {v["stage"]: v["status"] for v in evaluation_row["verdicts"]}
    timing: dict[str, Any] = next((v["data"] for v in evaluation_row["verdicts"] if v["stage"] == "time"), {})
    lang = evaluation_row.get("lang", "cuda")
    named = "" if lang == "cuda" else f"-{lang}"  # as the id names it
    return {
        "id": evaluation_row["id"],
        "family": evaluation_row["family"],
        "task": evaluation_row["task"],
        "target": evaluation_row["target"],
        "lang": lang,
        "shape": evaluation_row["id"].removeprefix(f"{evaluation_row['task']}-{evaluation_row['target']}{named}-"),
        "stages": stages,
        "outcome": evaluation_row["outcome"],
        "reason": short_reason(evaluation_row),
        "latency_ms": timing.get("median_ms"),
        "baseline_ms": timing.get("baseline_median_ms"),
        "baseline": timing.get("baseline"),
        "speedup": timing.get("speedup"),
        "speed_of_light": timing.get("speed_of_light"),
        "tflops": timing.get("tflops"),
    }


def render(rows: list[dict[str, Any]]) -> list[str]:
    header = [
        "task",
        "target",
        "lang",
        "shape",
        *STAGES,
        "latency",
        "baseline",
        "speedup",
        "SOL",
        "TFLOP/s",
        "outcome",
        "reason",
    ]
    table = [header]
    for row in sorted(rows, key=lambda r: natural(r["id"])):
        table.append(
            [
                row["task"],
                row["target"],
                row.get("lang", "cuda"),
                row["shape"],
                *(_SHORT.get(row["stages"].get(stage, "skipped"), "?") for stage in STAGES),
                _number(row.get("latency_ms"), "{:.3f} ms"),
                _baseline(row),
                _number(row.get("speedup"), "{:.2f}x"),
                _number(row.get("speed_of_light"), "{:.1%}"),
                _number(row.get("tflops"), "{:.0f}"),
                row["outcome"],
                row.get("reason", ""),
            ]
        )
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]


def family_means(rows: list[dict[str, Any]]) -> list[str]:
    """Per family, target and language: the geometric-mean speedup over the tests that passed, and how many
    of the family's tests that is (a test that did not pass has no speedup to average)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        family = row.get("family") or row["task"].split("-")[0]
        groups.setdefault((family, row["target"], row.get("lang", "cuda")), []).append(row)
    lines = []
    for (family, target, lang), members in sorted(groups.items()):
        speedups = [r["speedup"] for r in members if r["outcome"] == "passed" and r.get("speedup")]
        if speedups:
            mean = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
            lines.append(
                f"geometric-mean speedup {family} {target} {lang}: {mean:.2f}x over {len(speedups)} of"
                f" {len(members)} tests"
            )
    return lines


def short_reason(evaluation_row: dict[str, Any]) -> str:
    """Why a test did not pass, on one short line: the first stage that failed, else the first that could
    not run (the stage columns show which passed), else the decision's own reason (no kernel, a cap) without
    the agent's name, which the header shows."""
    if evaluation_row["outcome"] == "passed":
        return ""
    verdicts = evaluation_row["verdicts"]
    failed = [v for v in verdicts if v["status"] == "failed"]
    not_run = [v for v in verdicts if v["status"] != "passed"]
    first = (failed or not_run or [None])[0]
    reason, model = evaluation_row["reason"], evaluation_row["model"]
    if first:
        text = f"{first['stage']}: {first['message']}"
    else:
        text = reason[len(model) :].removeprefix(":") if reason.startswith(model) else reason
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def _baseline(row: dict[str, Any]) -> str:
    """`0.742 ms cuDNN`: the baseline's median latency and which library it was."""
    if row.get("baseline_ms") is None:
        return "-"
    return f"{row['baseline_ms']:.3f} ms {row.get('baseline') or ''}".rstrip()


def _number(value: float | None, form: str) -> str:
    return form.format(value) if value is not None else "-"
