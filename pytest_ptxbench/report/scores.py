"""What each trajectory of one or more runs achieved: its handed-over kernel on every shape (from
`results.jsonl`), the best kernel within each turn budget (from the trajectory record), the failing
stage of every turn, and its tokens and cost. A run without trajectories (`reference`, `file:`) counts
each (task, target, trajectory number) as one trajectory of one turn."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..agent.trajectory import Trajectory
from ..verdict import STAGES
from .runs import Run
from .stats import geomean

NO_KERNEL = "no kernel"
NONE_FAILED = "none failed"  # no stage failed, some could not run here
PASSED = "passed"
TURN_CATEGORIES = (NO_KERNEL, *STAGES, NONE_FAILED, PASSED)


@dataclass(frozen=True)
class Score:
    """One kernel judged on some shapes: correct = the check stage passed on each (at least one);
    verified = correct, and inspect (SASS) and profile (ncu) passed; speedup = the geometric mean over
    the shapes when each was timed, else None."""

    correct: bool = False
    verified: bool = False
    speedup: float | None = None
    checked: bool = field(default=False, compare=False)  # the check stage ran (no GPU: it did not)


def score(verdicts: Iterable[Mapping[str, Any]]) -> Score:
    by_stage: dict[str, list[Mapping[str, Any]]] = {}
    for verdict in verdicts:
        by_stage.setdefault(verdict["stage"], []).append(verdict)

    def passed(stage: str) -> bool:
        return bool(by_stage.get(stage)) and all(v["status"] == "passed" for v in by_stage[stage])

    correct = passed("check")
    verified = correct and passed("inspect") and passed("profile")
    speedups = [v["data"].get("speedup") for v in by_stage.get("time", []) if v["status"] == "passed"]
    timed = [float(s) for s in speedups if isinstance(s, (int, float)) and s > 0]
    every_shape = correct and len(timed) == len(by_stage["check"])
    checked = any(v["status"] in ("passed", "failed") for v in by_stage.get("check", []))
    return Score(correct, verified, geomean(timed) if every_shape else None, checked)


def turn_category(turn: Mapping[str, Any]) -> str:
    """What became of one turn: no kernel, the first stage that failed, none failed, or passed."""
    if turn["kernel"] is None or not turn["verdicts"]:
        return NO_KERNEL
    statuses = {v["stage"]: v["status"] for v in turn["verdicts"] if v["status"] != "passed"}
    failed = [s for s in STAGES if statuses.get(s) == "failed"]
    if failed:
        return failed[0]
    ran = {v["stage"] for v in turn["verdicts"]}
    return PASSED if not statuses and ran >= set(STAGES) else NONE_FAILED


@dataclass(frozen=True)
class Budget:
    """The best kernel within a turn budget: on the visible shapes (its turn's verdicts) and on the hidden
    shapes when the run scored that kernel there (the handed-over kernel), else None."""

    turn: int | None
    visible: Score
    hidden: Score | None


@dataclass(frozen=True)
class TrajectoryScore:
    run: Path
    model: str
    target: str
    task: str
    trajectory: int
    final: Score  # the handed-over kernel on every shape the run evaluated
    hidden: Score | None  # ... on its hidden shapes (None: none evaluated)
    shapes: dict[str, tuple[bool, Score]] = field(default_factory=dict)  # shape id → (hidden, score)
    budgets: dict[int, Budget] = field(default_factory=dict)
    turns: tuple[str, ...] = ()  # turn_category of each turn
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0

    @property
    def cell(self) -> tuple[str, str, str]:
        return (self.model, self.target, self.task)


def score_runs(runs: Sequence[Run]) -> list[TrajectoryScore]:
    """Every trajectory of `runs`, ordered by model, target, task, run and trajectory number."""
    out = [s for run in runs for s in _score_run(run)]
    return sorted(out, key=lambda s: (*s.cell, str(s.run), s.trajectory))


def _score_run(run: Run) -> list[TrajectoryScore]:
    rows: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    budget_rows: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in run.results:
        key = (row["task"], row["target"], int(row["trajectory"]))
        (rows if row.get("budget") is None else budget_rows).setdefault(key, []).append(row)
    records = {
        (t.info["ptxbench"]["task"], t.info["ptxbench"]["target"], int(t.info["ptxbench"]["trajectory"])): t
        for t in run.trajectories
    }
    scores = []
    for key in sorted(rows.keys() | records.keys()):
        task, target, number = key
        own = rows.get(key, [])
        record = records.get(key)
        shapes = {r["shape_id"]: (bool(r["hidden"]), score(r["verdicts"])) for r in own}
        hidden = [v for r in own if r["hidden"] for v in r["verdicts"]]
        final = score(v for r in own for v in r["verdicts"]) if own else _best_turn(record)
        model = own[0]["model"] if own else run.model
        base = TrajectoryScore(run.path, model, target, task, number, final, score(hidden) if hidden else None, shapes)
        scores.append(_with_record(base, record, own + budget_rows.get(key, [])) if record else base)
    return scores


def _best_turn(record: Trajectory | None) -> Score:
    best = record.best() if record else None
    return score(best["verdicts"]) if best else Score()


def _with_record(base: TrajectoryScore, record: Trajectory, rows: Sequence[Mapping[str, Any]]) -> TrajectoryScore:
    by_turn = {t["turn"]: t for t in record.turns}
    budgets = {}
    for k, number in record.info["ptxbench"].get("budgets", {}).items():
        turn = by_turn.get(number) if number is not None else None
        hidden_rows = [
            r for r in rows if r["hidden"] and turn and (r["candidate"] or {}).get("sha256") == turn["sha256"]
        ]
        budgets[int(k)] = Budget(
            number,
            score(turn["verdicts"]) if turn else Score(),
            score(v for r in hidden_rows for v in r["verdicts"]) if hidden_rows else None,
        )
    calls = [t for t in record.turns if not t.get("replayed")]
    costs = [t["cost"] for t in calls]
    return replace(
        base,
        budgets=budgets,
        turns=tuple(turn_category(t) for t in record.turns),
        calls=len(calls),
        input_tokens=sum(t["tokens"]["input"] for t in calls),
        output_tokens=sum(t["tokens"]["output"] for t in calls),
        cost=None if None in costs else sum(costs),
    )
