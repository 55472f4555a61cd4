"""Stage *profile*: Nsight Compute counts what executed, per kernel launch, under the real workload.

Every required opcode (with its modifiers) must have executed in a kernel of the candidate's own
module; any other kernel is foreign; an empty, partial or NaN capture fails; ncu that cannot run here
is `tool-unavailable`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import process
from ..parsers import ncu, sass
from ..toolchain import Tool
from ..verdict import Status, Verdict

METRICS = f"{ncu.TIME_METRIC},{ncu.OPCODES_METRIC}"


def command(tool: Tool, log: Path) -> list[str]:
    return [
        str(tool.path),
        "--clock-control",
        "none",
        "--print-kernel-base",
        "mangled",
        "--metrics",
        METRICS,
        "--print-metric-instances",
        "details",
        "--csv",
        "--page",
        "raw",
        "--log-file",
        str(log),
    ]


def profile(
    tool: Tool,
    child: Sequence[str],
    plan: Path,
    result: Path,
    env: Mapping[str, str],
    own_kernels: Mapping[str, str],
    required: Sequence[str],
    work: Work,
    timeout: float,
    prefix: Sequence[str] = (),
) -> Verdict:
    """`own_kernels`: mangled name → readable name, from inspect; `prefix`: the sandbox ncu runs in."""
    log = plan.with_suffix(".ncu.csv")
    done = process.run([*prefix, *command(tool, log), *child], timeout, cwd=plan.parent, env=env)
    child_result = json.loads(result.read_text(errors="replace")) if result.exists() else None
    if done.timed_out:
        return Verdict(
            "profile", Status.FAILED, f"the call did not finish under ncu within {timeout:.0f} s", seconds=done.seconds
        )
    if child_result is None or not child_result.get("ok"):
        error = child_result["error"] if child_result else f"the child died (exit {done.returncode})"
        return Verdict("profile", Status.FAILED, f"the candidate failed under ncu: {error}", seconds=done.seconds)
    text = log.read_text(errors="replace") if log.exists() else ""
    try:
        launches = ncu.parse_raw_csv(text)
    except ncu.NcuParseError as exc:
        return Verdict("profile", Status.FAILED, f"partial ncu capture: {exc}", seconds=done.seconds)
    if not launches:
        return _empty(text, done.returncode, tool.version, done.seconds)
    return _judge(launches, own_kernels, required, work, tool.version, done.seconds)


def _empty(log: str, returncode: int | None, version: str, seconds: float) -> Verdict:
    """No launch captured although the candidate's call succeeded: a failure, whatever ncu's exit status (a
    candidate can set that), except where ncu says it may not read the counters at all."""
    errors = ncu.errors(log)
    data = {"ncu": version, "ncu_errors": errors, "ncu_exit": returncode}
    if any(ncu.NO_PERMISSION in e for e in errors):
        return Verdict("profile", Status.TOOL_UNAVAILABLE, f"ncu cannot run here: {errors[0]}", data, seconds)
    said = (f"; ncu exited {returncode}" if returncode else "") + "".join(f"; {e}" for e in errors[:3])
    return Verdict("profile", Status.FAILED, f"empty ncu capture: no kernel was profiled{said}", data, seconds)


@dataclass(frozen=True)
class Work:
    """The task's analytic FLOPs at the profiled shape, the share the tensor cores must do, and the share the
    CUDA cores' floating-point arithmetic must stay under (tensor work on data that never reaches the
    output, while CUDA cores compute it, is decoy work)."""

    flops: float
    min_share: float
    max_simt_share: float = 0.25


def _judge(
    launches: list[ncu.Launch],
    own_kernels: Mapping[str, str],
    required: Sequence[str],
    work: Work,
    version: str,
    seconds: float,
) -> Verdict:
    foreign = sorted({launch.kernel for launch in launches} - set(own_kernels))
    own_executed: Counter[str] = Counter()
    for launch in launches:
        if launch.kernel in own_kernels:
            own_executed.update(launch.executed)
    executed = {p: sum(n for m, n in own_executed.items() if sass.matches(p, m)) for p in required}
    per_kernel: dict[str, dict[str, Any]] = {}
    for launch in launches:
        entry = per_kernel.setdefault(own_kernels.get(launch.kernel, launch.kernel), {"launches": 0, "time_ms": 0.0})
        entry["launches"] += 1
        entry["time_ms"] += launch.time_ms
        for pattern in required:
            hits = {m: n for m, n in launch.executed.items() if sass.matches(pattern, m)}
            for mnemonic, n in hits.items():
                entry[mnemonic] = entry.get(mnemonic, 0) + n
    data = {
        "executed": executed,
        "kernels": per_kernel,
        "foreign": foreign,
        "ncu": version,
        "time_ms": sum(launch.time_ms for launch in launches),
        "mangled": sorted({launch.kernel for launch in launches}),
    }
    tensor = sass.tensor_flops(dict(own_executed))
    simt = sass.simt_flops(dict(own_executed))
    data["tensor_flops"], data["simt_flops"], data["task_flops"] = tensor, simt, work.flops
    problems = []
    if tensor is not None and tensor < work.min_share * work.flops:
        problems.append(
            f"the tensor cores did {tensor / work.flops:.0%} of the task's FLOPs ({tensor:.3g} of {work.flops:.3g}); "
            f"at least {work.min_share:.0%} is required"
        )
    if simt > work.max_simt_share * work.flops:
        done = f"the tensor cores did {tensor / work.flops:.0%}, " if tensor is not None else ""
        problems.append(
            f"{done}the CUDA cores' arithmetic {simt / work.flops:.0%} of the task's FLOPs ({simt:.3g} of"
            f" {work.flops:.3g}); at most {work.max_simt_share:.0%} may be CUDA-core work"
        )
    if foreign:
        problems.append(f"kernels outside the candidate's module ran: {', '.join(foreign[:5])}")
    never = [p for p, n in executed.items() if n == 0]
    if never:
        problems.append(f"{', '.join(never)} never executed in the candidate's kernels")
    if problems:
        return Verdict("profile", Status.FAILED, "; ".join(problems), data, seconds)
    share = f"; tensor cores did {tensor / work.flops:.0%} of the FLOPs" if tensor is not None else ""
    share += f", CUDA cores {simt / work.flops:.0%}"
    data["summary"] = ", ".join(f"{p} x{n}" for p, n in executed.items()) + share
    return Verdict("profile", Status.PASSED, f"executed {data['summary']}", data, seconds)
