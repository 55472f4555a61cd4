"""Stage *sanitize*: compute-sanitizer's memcheck, racecheck and synccheck on the task's small
sanitizer shape. Findings fail the candidate; a tool that cannot run a legitimate kernel is reported
as `tool-unavailable`, never as the candidate's fault."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import process
from ..toolchain import Tool
from ..verdict import Status, Verdict

TOOLS = ("memcheck", "racecheck", "synccheck")
FOUND = 42  # --error-exitcode: the tool found errors
SHOWN = 12


def sanitize(
    tool: Tool,
    child: Sequence[str],
    plan: Path,
    result: Path,
    env: Mapping[str, str],
    timeout: float,
    prefix: Sequence[str] = (),
) -> Verdict:
    """memcheck, racecheck and synccheck over one replay; `prefix`: the sandbox compute-sanitizer runs in."""
    findings: dict[str, list[str]] = {}
    unavailable: dict[str, str] = {}
    seconds = 0.0
    for name in TOOLS:
        log = plan.with_name(f"{plan.stem}.{name}.log")
        result.unlink(missing_ok=True)
        argv = [
            *prefix,
            str(tool.path),
            "--tool",
            name,
            "--error-exitcode",
            str(FOUND),
            "--print-limit",
            "20",
            # the runner is harness code: its driver API errors (cuda-python probing entry points the driver
            # lacks) are not the candidate's findings
            "--report-api-errors",
            "no",
            "--log-file",
            str(log),
            *child,
        ]
        done = process.run(argv, timeout, cwd=plan.parent, env=env)
        seconds += done.seconds
        report = log.read_text(errors="replace").splitlines() if log.exists() else []
        child_result = json.loads(result.read_text(errors="replace")) if result.exists() else None
        if done.timed_out:
            findings[name] = [f"did not finish within {timeout:.0f} s"]
        elif done.returncode == FOUND:
            findings[name] = [
                line.removeprefix("========= ").strip() for line in report if line.startswith("========= ")
            ][:SHOWN]
        elif done.returncode != 0 or child_result is None or not child_result.get("ok"):
            error = child_result.get("error") if child_result else None
            unavailable[name] = f"exit {done.returncode} with no finding" + (f" ({error})" if error else "")
    data = {"findings": findings, "unavailable": unavailable, "compute_sanitizer": tool.version}
    if findings:
        text = "; ".join(f"{n}: {' | '.join(lines[:4])}" for n, lines in findings.items())
        return Verdict("sanitize", Status.FAILED, text, data, seconds)
    if unavailable:
        text = "; ".join(f"{n} could not run this kernel: {why}" for n, why in unavailable.items())
        return Verdict("sanitize", Status.TOOL_UNAVAILABLE, text, data, seconds)
    data["summary"] = "memcheck, racecheck, synccheck clean"
    return Verdict("sanitize", Status.PASSED, "memcheck, racecheck and synccheck found nothing", data, seconds)
