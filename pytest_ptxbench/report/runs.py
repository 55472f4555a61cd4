"""Reading a run directory (`ptxbench-run/2`) back without pytest: the environment, the results and the
trajectories, each validated, with errors that name the file (and line) that is wrong.

The format is described in `docs/run-directory.md`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.trajectory import Trajectory, TrajectoryError
from ..rundir import FORMAT
from ..verdict import Verdict

RESULT_FIELDS = ("id", "task", "target", "shape", "hidden", "trajectory", "model", "outcome", "verdicts")


class RunError(ValueError):
    """A run directory that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Run:
    path: Path
    environment: dict[str, Any]
    results: list[dict[str, Any]]
    trajectories: list[Trajectory]

    @property
    def model(self) -> str:
        return str(self.environment["settings"]["model"])

    @property
    def task_set(self) -> str:
        return str(self.environment["task_set"])


def load_run(path: Path) -> Run:
    """The run directory at `path`, validated; RunError naming the offending file otherwise."""
    if not path.is_dir():
        raise RunError(f"{path}: not a directory")
    environment = _environment(path / "environment.json")
    results = _results(path / "results.jsonl")
    trajectories = []
    for file in sorted((path / "trajectories").glob("*.json")):
        try:
            trajectories.append(Trajectory.load(file, path))
        except TrajectoryError as exc:
            raise RunError(str(exc)) from None
    return Run(path, environment, results, trajectories)


def _environment(file: Path) -> dict[str, Any]:
    if not file.is_file():
        raise RunError(f"{file}: missing: {file.parent} is not a ptxbench run directory")
    try:
        raw = json.loads(file.read_text())
    except ValueError as exc:
        raise RunError(f"{file}: not valid JSON (truncated?): {exc}") from None
    if not isinstance(raw, dict) or "format" not in raw:
        raise RunError(f"{file}: no 'format' field: not a ptxbench run directory")
    family, _, _ = str(raw["format"]).partition("/")
    if raw["format"] != FORMAT:
        known = "a newer or older" if family == FORMAT.partition("/")[0] else "a foreign"
        raise RunError(f"{file}: format {raw['format']!r} is {known} format; this reader knows {FORMAT!r}")
    for key in ("task_set", "settings"):
        if key not in raw:
            raise RunError(f"{file}: missing field {key!r}")
    return raw


def _results(file: Path) -> list[dict[str, Any]]:
    if not file.is_file():
        raise RunError(f"{file}: missing: the run recorded no test")
    rows = []
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise RunError(f"{file}:{number}: not valid JSON (a truncated line?): {exc}") from None
        missing = [k for k in RESULT_FIELDS if not isinstance(row, dict) or k not in row]
        if missing:
            raise RunError(f"{file}:{number}: missing field(s) {', '.join(missing)}")
        try:
            for verdict in row["verdicts"]:
                Verdict.from_json(verdict)
        except (KeyError, TypeError, ValueError) as exc:
            raise RunError(f"{file}:{number}: malformed verdict ({type(exc).__name__}: {exc})") from None
        rows.append(row)
    return rows
