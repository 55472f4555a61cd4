"""What each trajectory of one or more runs achieved: its handed-over kernel on every shape (from
`results.jsonl`), the best kernel within each turn budget (from the trajectory record), the failing
stage of every turn, and its tokens and cost. A run without trajectories (`reference`, `file:`) counts
each (task, target, language, trajectory number) as one trajectory of one turn."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..agent.trajectory import Trajectory
from ..verdict import STAGES, Outcome, Status, Verdict, decide, stage_statuses
from .runs import Run
from .stats import geomean

NO_KERNEL = "no kernel"
NONE_FAILED = "none failed"  # no stage failed, some could not run here
PASSED = "passed"
TURN_CATEGORIES = (NO_KERNEL, *STAGES, NONE_FAILED, PASSED)


@dataclass(frozen=True)
class Score:
    """One kernel judged on some shapes, each stage's verdicts combined by `verdict.stage_statuses`. A figure
    is None where it was not judged (a stage it needs could not run here, e.g. without a GPU).
    correct: check passed on every shape (False: no kernel, or build, inspect or check failed);
    verified: correct, and inspect (SASS) and profile (ncu) passed;
    timed: correct and time passed on every shape (False: not correct, or time failed);
    speedup, speed_of_light: geometric means over the shapes when timed (the share of the roofline reached)."""

    correct: bool | None = False
    verified: bool | None = False
    speedup: float | None = None
    speed_of_light: float | None = None
    timed: bool | None = False


def score(verdicts: Iterable[Mapping[str, Any]]) -> Score:
    judged = [Verdict.from_json(dict(v)) for v in verdicts]
    statuses = stage_statuses(judged)
    correct = _stages(statuses, ("build", "inspect", "check")) if judged else False
    verified = _both(correct, _stages(statuses, ("inspect", "profile")))
    timed = _both(correct, _stages(statuses, ("time",)))
    if not timed:
        return Score(correct, verified, timed=timed)
    times = [v.data for v in judged if v.stage == "time"]
    return Score(correct, verified, _geomean(times, "speedup"), _geomean(times, "speed_of_light"), timed)


def _stages(statuses: Mapping[str, Status], stages: Sequence[str]) -> bool | None:
    """False when one of `stages` failed, True when each passed on every shape, else None (not judged)."""
    if any(statuses.get(s) is Status.FAILED for s in stages):
        return False
    return True if all(statuses.get(s) is Status.PASSED for s in stages) else None


def _both(a: bool | None, b: bool | None) -> bool | None:
    """Three-valued and: False when either is, None when either is not judged, else True."""
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _geomean(data: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """The geometric mean of a figure over the shapes; None unless every shape has a positive one."""
    values = [float(d[key]) for d in data if isinstance(d.get(key), (int, float)) and d[key] > 0]
    return geomean(values) if values and len(values) == len(data) else None


def turn_category(turn: Mapping[str, Any]) -> str:
    """What became of one turn: no kernel, the first stage that failed, none failed, or passed."""
    if turn["kernel"] is None or not turn["verdicts"]:
        return NO_KERNEL
    verdicts = [Verdict.from_json(v) for v in turn["verdicts"]]
    statuses = stage_statuses(verdicts)
    failed = [s for s in STAGES if statuses.get(s) is Status.FAILED]
    if failed:
        return failed[0]
    return PASSED if decide(verdicts).outcome is Outcome.PASSED else NONE_FAILED


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
    lang: str  # the kernels' language: a key of `languages.LANGUAGES`
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
    def cell(self) -> tuple[str, str, str, str]:
        return (self.model, self.target, self.task, self.lang)


def score_runs(runs: Sequence[Run]) -> list[TrajectoryScore]:
    """Every trajectory of `runs`, ordered by model, target, task, language, run and trajectory number."""
    out = [s for run in runs for s in _score_run(run)]
    return sorted(out, key=lambda s: (*s.cell, str(s.run), s.trajectory))


Key = tuple[str, str, str, int]  # a trajectory of a run: task, target, language, trajectory number


def _score_run(run: Run) -> list[TrajectoryScore]:
    rows: dict[Key, list[dict[str, Any]]] = {}
    budget_rows: dict[Key, list[dict[str, Any]]] = {}
    for row in run.results:
        key = (row["task"], row["target"], row["lang"], int(row["trajectory"]))
        (rows if row.get("budget") is None else budget_rows).setdefault(key, []).append(row)
    records: dict[Key, Trajectory] = {}
    for t in run.trajectories:
        info = t.info["ptxbench"]
        records[(info["task"], info["target"], t.lang, int(info["trajectory"]))] = t
    scores = []
    for key in sorted(rows.keys() | records.keys()):
        task, target, lang, number = key
        own = rows.get(key, [])
        record = records.get(key)
        shapes = {r["shape_id"]: (bool(r["hidden"]), score(r["verdicts"])) for r in own}
        hidden = [v for r in own if r["hidden"] for v in r["verdicts"]]
        final = score(v for r in own for v in r["verdicts"]) if own else _best_turn(record)
        model = own[0]["model"] if own else run.model
        hidden_score = score(hidden) if hidden else None
        base = TrajectoryScore(run.path, model, target, task, lang, number, final, hidden_score, shapes)
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
