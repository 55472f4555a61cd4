"""Supervised repair examples (`ptxbench fixit`): the task card, a kernel that failed and the harness's
feedback on it, then a verified repair. Repairs come from the trajectories themselves (a failed turn
followed later by a verified turn) or from a teacher model (fixit_teacher.py).

A repair is verified at one of two levels: `full` (every stage passed on a GPU) or `static` (build and
inspect passed and no stage failed: what a machine without a GPU can establish).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.trajectory import Trajectory, standing
from ..candidate import digest
from ..languages import LANGUAGES, Language
from ..rundir import atomically, write_atomic
from .runs import Run
from .scores import turn_category

LEVELS = {"static": 2, "full": 3}  # verification level → the `standing` rank it needs
REPAIR_REQUEST = (
    "This kernel failed in the harness. Repair it with the smallest change that fixes what the harness "
    "found; keep everything else as it is. Reply with the whole {suffix} file in one ```{fence} block."
)


@dataclass(frozen=True)
class FailedTurn:
    """A turn whose kernel failed a stage."""

    run: Run
    record: Trajectory
    turn: dict[str, Any]

    @property
    def stage(self) -> str:
        return turn_category(self.turn)

    @property
    def language(self) -> Language:
        return LANGUAGES[self.record.lang]

    def fenced(self, source: str) -> str:
        return f"```{self.language.fences[0]}\n{source.rstrip()}\n```"

    @property
    def ptxbench(self) -> dict[str, Any]:
        info: dict[str, Any] = self.record.info["ptxbench"]
        return info

    def prompt(self) -> str:
        """What the learner (or the teacher) is asked: card, the wrong kernel, its feedback, the request."""
        source = self.record.kernel_source(self.turn)
        request = REPAIR_REQUEST.format(suffix=self.language.suffix, fence=self.language.fences[0])
        return (
            f"{self.record.card}\n\n## A kernel that failed\n{self.fenced(source)}\n\n"
            f"## What the harness found\n{self.turn['feedback']}\n\n{request}"
        )


def verification(turn: dict[str, Any]) -> tuple[str | None, float | None]:
    """(`full`, speedup) when every stage passed, (`static`, None) when no stage failed, else (None, None)."""
    rank, speedup = standing(turn)
    if rank == LEVELS["full"]:
        return "full", speedup if speedup > 0 else None
    return ("static", None) if rank == LEVELS["static"] else (None, None)


def failed_turns(runs: Sequence[Run]) -> Iterator[FailedTurn]:
    for run in runs:
        for record in run.trajectories:
            for turn in record.turns:
                if turn["kernel"] is not None and standing(turn)[0] == 1:
                    yield FailedTurn(run, record, turn)


def example(
    failed: FailedTurn, repaired: str, source: str, level: str, speedup: float | None, repaired_turn: int | None
) -> dict[str, Any]:
    """One row: id, messages with their loss mask, metadata."""
    wrong = failed.turn["sha256"]
    repaired_sha = digest(repaired)
    messages = [
        {"role": "system", "content": failed.record.system, "loss": False},
        {"role": "user", "content": failed.prompt(), "loss": False},
        {"role": "assistant", "content": failed.fenced(repaired), "loss": True},
    ]
    info = failed.ptxbench
    metadata = {
        "source": source,
        "model": failed.run.model,
        "run": str(failed.run.path),
        "trajectory": failed.record.path.stem,
        "family": info["family"],
        "task": info["task"],
        "target": info["target"],
        "lang": failed.language.name,
        "failed_turn": failed.turn["turn"],
        "repaired_turn": repaired_turn,
        "failure_stage": failed.stage,
        "verification": level,
        "speedup": speedup,
        "wrong_sha256": wrong,
        "repaired_sha256": repaired_sha,
        "feedback_sha256": digest(failed.turn["feedback"] or ""),
        "card_sha256": digest(failed.record.card),
    }
    return {"id": digest(f"{source}\0{wrong}\0{repaired_sha}"), "messages": messages, "metadata": metadata}


def self_repairs(runs: Sequence[Run], level: str = "static") -> list[dict[str, Any]]:
    """Each failed turn paired with the first later turn of its trajectory verified at `level` or better."""
    rows = []
    for failed in failed_turns(runs):
        later = failed.record.turns[failed.turn["turn"] :]
        for turn in later:
            found, speedup = verification(turn)
            if found is not None and LEVELS[found] >= LEVELS[level]:
                source = failed.record.kernel_source(turn)
                rows.append(example(failed, source, "self-repair", found, speedup, turn["turn"]))
                break
    return rows


def select(
    rows: Sequence[dict[str, Any]],
    stages: Sequence[str] = (),
    targets: Sequence[str] = (),
    min_speedup: float | None = None,
    balance: bool = False,
) -> list[dict[str, Any]]:
    """Rows of the given failure stages and targets (all when empty), with a repaired speedup of at
    least `min_speedup`; duplicates (same id) dropped; `balance` keeps as many rows per task as the
    task with the fewest has (the lowest ids, which are hashes: an unbiased pick)."""
    kept: dict[str, dict[str, Any]] = {}
    for row in rows:
        meta = row["metadata"]
        if (stages and meta["failure_stage"] not in stages) or (targets and meta["target"] not in targets):
            continue
        if min_speedup is not None and (meta["speedup"] is None or meta["speedup"] < min_speedup):
            continue
        kept.setdefault(row["id"], row)
    chosen = sorted(kept.values(), key=lambda r: r["id"])
    if balance and chosen:
        by_task: dict[str, list[dict[str, Any]]] = {}
        for row in chosen:
            by_task.setdefault(row["metadata"]["task"], []).append(row)
        n = min(len(group) for group in by_task.values())
        chosen = sorted((r for group in by_task.values() for r in group[:n]), key=lambda r: r["id"])
    return chosen


def write(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Parquet when `path` ends in .parquet (pyarrow, the `report` extra), else JSON lines; written under a
    temporary name, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix != ".parquet":
        write_atomic(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomically(path) as temporary:
        pq.write_table(pa.Table.from_pylist(list(rows), schema=_schema(pa)), temporary)


def _schema(pa: Any) -> Any:
    text, integer = pa.string(), pa.int64()
    metadata = [
        (name, text)
        for name in (
            "source",
            "model",
            "run",
            "trajectory",
            "family",
            "task",
            "target",
            "lang",
            "failure_stage",
            "verification",
        )
    ]
    metadata += [("failed_turn", integer), ("repaired_turn", integer), ("speedup", pa.float64())]
    metadata += [(f"{name}_sha256", text) for name in ("wrong", "repaired", "feedback", "card")]
    message = pa.struct([("role", text), ("content", text), ("loss", pa.bool_())])
    return pa.schema([("id", text), ("messages", pa.list_(message)), ("metadata", pa.struct(metadata))])
