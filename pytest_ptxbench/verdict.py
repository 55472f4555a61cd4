"""Typed verdicts: what each pipeline stage decided, and how verdicts combine into a test outcome."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# Every stage of the pipeline, in order. GPU stages need a device of the target's architecture.
STATIC_STAGES = ("build", "inspect")
GPU_STAGES = ("check", "profile", "sanitize", "time")
STAGES = STATIC_STAGES + GPU_STAGES


class Status(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"  # a fault of the candidate
    SKIPPED = "skipped"  # could not run here (no GPU, wrong architecture, an earlier stage failed)
    TOOL_UNAVAILABLE = "tool-unavailable"  # a tool that cannot run on this host or this kernel


@dataclass(frozen=True)
class Verdict:
    """One stage's decision, with a short message for the model and the human and its numbers."""

    stage: str
    status: Status
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Verdict:
        """The inverse of `to_json`; KeyError/ValueError on a malformed record."""
        return cls(
            raw["stage"], Status(raw["status"]), raw["message"], dict(raw.get("data", {})), raw.get("seconds", 0.0)
        )


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    reason: str


def stage_statuses(verdicts: Iterable[Verdict]) -> dict[str, Status]:
    """The one rule that combines a stage's verdicts over the shapes it was judged on: failed when it failed
    on any, passed only when it passed on every one, else the first reason it could not run (skipped or
    tool-unavailable). Stages without a verdict are absent."""
    combined: dict[str, Status] = {}
    for verdict in verdicts:
        before = combined.get(verdict.stage)
        if before is None or before is Status.PASSED or verdict.status is Status.FAILED:
            combined[verdict.stage] = verdict.status
    return combined


def decide(verdicts: Sequence[Verdict], require_gpu: bool = False) -> Decision:
    """A test fails when any stage failed, is skipped when a required stage could not run, passes
    only when every stage of the pipeline passed (on every shape: `stage_statuses`). `require_gpu`
    turns the skip into a failure."""
    failed = [v for v in verdicts if v.status is Status.FAILED]
    if failed:
        return Decision(Outcome.FAILED, "; ".join(f"{v.stage} failed: {v.message}" for v in failed))
    statuses = stage_statuses(verdicts)
    not_run = [s for s in STAGES if statuses.get(s) is not Status.PASSED]
    if not not_run:
        return Decision(Outcome.PASSED, "every stage passed")
    reasons = [v.message for v in verdicts if v.stage in not_run and not v.passed and v.message]
    missing = [s for s in not_run if s not in statuses]
    if missing:
        reasons.append(f"{', '.join(missing)} did not run")
    done = ", ".join(_describe(s, verdicts) for s in STAGES if statuses.get(s) is Status.PASSED) or "nothing"
    reason = f"passed: {done}; " + "; ".join(dict.fromkeys(reasons))
    return Decision(Outcome.FAILED if require_gpu else Outcome.SKIPPED, reason)


def _describe(stage: str, verdicts: Sequence[Verdict]) -> str:
    """A passed stage, with the summary of its first verdict (the first shape's) where it has one."""
    summary = next(v for v in verdicts if v.stage == stage).data.get("summary")
    return f"{stage} ({summary})" if summary else stage
