"""Typed verdicts: what each pipeline stage decided, and how verdicts combine into a test outcome."""

from __future__ import annotations

import enum
from collections.abc import Sequence
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


def decide(verdicts: Sequence[Verdict], require_gpu: bool = False) -> Decision:
    """A test fails when any stage failed, is skipped when a required stage could not run, passes
    only when every stage of the pipeline passed. `require_gpu` turns the skip into a failure."""
    by_stage = {v.stage: v for v in verdicts}
    failed = [v for v in verdicts if v.status is Status.FAILED]
    if failed:
        return Decision(Outcome.FAILED, "; ".join(f"{v.stage} failed: {v.message}" for v in failed))
    not_run = [s for s in STAGES if s not in by_stage or not by_stage[s].passed]
    if not not_run:
        return Decision(Outcome.PASSED, "every stage passed")
    passed = [v for v in verdicts if v.passed]
    reasons = [by_stage[s].message for s in not_run if s in by_stage and by_stage[s].message]
    missing = [s for s in not_run if s not in by_stage]
    if missing:
        reasons.append(f"{', '.join(missing)} did not run")
    done = ", ".join(_describe(v) for v in passed) or "nothing"
    reason = f"passed: {done}; " + "; ".join(dict.fromkeys(reasons))
    return Decision(Outcome.FAILED if require_gpu else Outcome.SKIPPED, reason)


def _describe(verdict: Verdict) -> str:
    summary = verdict.data.get("summary")
    return f"{verdict.stage} ({summary})" if summary else verdict.stage
