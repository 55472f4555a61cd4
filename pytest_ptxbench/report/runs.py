"""Reading a run directory (`ptxbench-run/2`) back without pytest: the environment, the results, the
sessions and the trajectories, each validated, with errors that name the file (and line, field and value)
that is wrong.

The format is described in `docs/run-directory.md`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.trajectory import Trajectory, TrajectoryError
from ..languages import CUDA, LANGUAGES
from ..rundir import ENVIRONMENT, FORMAT, RESULTS, SESSIONS, SessionRecord
from ..verdict import Outcome, Status

# A row's fields and the JSON types each may have; the optional ones are checked when present.
RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "task": (str,),
    "target": (str,),
    "shape": (dict,),
    "hidden": (bool,),
    "trajectory": (int,),
    "model": (str,),
    "outcome": (str,),
    "verdicts": (list,),
    "shape_id": (str,),
}
OPTIONAL_RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "budget": (int, type(None)),
    "reason": (str, type(None)),
    "candidate": (dict, type(None)),
    "session": (str,),
    "lang": (str,),
}
VERDICT_FIELDS: dict[str, tuple[type, ...]] = {"stage": (str,), "status": (str,), "message": (str,)}
OPTIONAL_VERDICT_FIELDS: dict[str, tuple[type, ...]] = {"data": (dict,), "seconds": (int, float)}
SESSION_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "started": (str,),
    "collected": (list,),
    "finished": (str, type(None)),
    "exit_status": (int, type(None)),
}
JSON_TYPES = {str: "a string", bool: "true or false", int: "an integer", float: "a number", dict: "an object"}
JSON_TYPES |= {list: "a list", type(None): "null"}


class RunError(ValueError):
    """A run directory that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Run:
    path: Path
    environment: dict[str, Any]
    results: list[dict[str, Any]]  # each test's current rows (see `current_rows`), each with its `lang`
    trajectories: list[Trajectory]
    sessions: list[SessionRecord]  # empty for a directory written before sessions were recorded

    @property
    def model(self) -> str:
        return str(self.environment["settings"]["model"])

    @property
    def task_set(self) -> str:
        return str(self.environment["task_set"])

    @property
    def cut_short(self) -> str | None:
        """Why the run is incomplete, in words: its last session did not finish, or a test it collected has
        no row. None when complete, or when the directory predates session records."""
        if not self.sessions:
            return None
        reasons = [self.sessions[-1].cut_short] if self.sessions[-1].cut_short else []
        tested = {row["id"] for row in self.results if row.get("budget") is None}
        collected = list(dict.fromkeys(test for s in self.sessions for test in s.collected))
        missing = [test for test in collected if test not in tested]
        if missing:
            named = ", ".join(missing[:3]) + (", …" if len(missing) > 3 else "")
            reasons.append(f"{len(missing)} of {len(collected)} collected tests have no row ({named})")
        return "; ".join(reasons) or None


def load_run(path: Path) -> Run:
    """The run directory at `path`, validated; RunError naming the offending file otherwise."""
    if not path.is_dir():
        raise RunError(f"{path}: not a directory")
    environment = _environment(path / ENVIRONMENT)
    results = current_rows(_results(path / RESULTS))
    sessions = _sessions(path / SESSIONS)
    trajectories = []
    for file in sorted((path / "trajectories").glob("*.json")):
        try:
            record = Trajectory.load(file, path)
        except TrajectoryError as exc:
            raise RunError(str(exc)) from None
        _check_value(str(file), "info.ptxbench.lang", record.lang, list(LANGUAGES))
        trajectories.append(record)
    return Run(path, environment, results, trajectories, sessions)


def current_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each test's current rows: those of the last session that wrote the test, one per budget, the last
    written. The harness keeps only these; directories of older versions also hold the rows a rerun or a
    resume superseded (rows without a session count as one session)."""
    latest = {row["id"]: row.get("session") for row in rows}
    current = {(row["id"], row.get("budget")): row for row in rows if row.get("session") == latest[row["id"]]}
    return list(current.values())


def _environment(file: Path) -> dict[str, Any]:
    if not file.is_file():
        raise RunError(f"{file}: missing: {file.parent} is not a ptxbench run directory")
    try:
        raw = json.loads(file.read_bytes())
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
    for number, line in enumerate(file.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{file}:{number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise RunError(f"{where}: not valid JSON (a truncated line?): {exc}") from None
        missing = [k for k in RESULT_FIELDS if not isinstance(row, dict) or k not in row]
        if missing:
            raise RunError(f"{where}: missing field(s) {', '.join(missing)}")
        _check_types(where, "", row, RESULT_FIELDS, OPTIONAL_RESULT_FIELDS)
        _check_value(where, "outcome", row["outcome"], [o.value for o in Outcome])
        row.setdefault("lang", CUDA.name)  # a row written before the languages: CUDA
        _check_value(where, "lang", row["lang"], list(LANGUAGES))
        for index, verdict in enumerate(row["verdicts"]):
            name = f"verdicts[{index}]"
            if not isinstance(verdict, dict):
                raise RunError(f"{where}: field {name!r} is {_shown(verdict)}; expected an object")
            absent = [k for k in VERDICT_FIELDS if k not in verdict]
            if absent:
                raise RunError(f"{where}: field {name!r} lacks {', '.join(absent)}")
            _check_types(where, f"{name}.", verdict, VERDICT_FIELDS, OPTIONAL_VERDICT_FIELDS)
            _check_value(where, f"{name}.status", verdict["status"], [s.value for s in Status])
        rows.append(row)
    return rows


def _sessions(file: Path) -> list[SessionRecord]:
    if not file.exists():
        return []
    try:
        raw = json.loads(file.read_bytes())
    except ValueError as exc:
        raise RunError(f"{file}: not valid JSON (truncated?): {exc}") from None
    if not isinstance(raw, list):
        raise RunError(f"{file}: is {_shown(raw)}; expected a list of sessions")
    records = []
    for index, record in enumerate(raw):
        where = f"{file}: session {index}"
        if not isinstance(record, dict) or not set(SESSION_FIELDS) <= set(record):
            raise RunError(f"{where}: expected an object with {', '.join(SESSION_FIELDS)}, got {_shown(record)}")
        _check_types(where, "", record, SESSION_FIELDS, {})
        for test in record["collected"]:
            if not isinstance(test, str):
                raise RunError(f"{where}: field 'collected' holds {_shown(test)}; expected test ids (strings)")
        records.append(SessionRecord(**{name: record[name] for name in SESSION_FIELDS}))  # later fields ignored
    return records


def _check_types(
    where: str,
    prefix: str,
    record: dict[str, Any],
    required: dict[str, tuple[type, ...]],
    optional: dict[str, tuple[type, ...]],
) -> None:
    """RunError naming the field and its value when a field has a JSON type it may not have (JSON's true
    and false are not integers here)."""
    for name, types in {**required, **optional}.items():
        if name not in record:
            continue
        value = record[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            expected = " or ".join(JSON_TYPES[t] for t in types)
            raise RunError(f"{where}: field {prefix + name!r} is {_shown(value)}; expected {expected}")


def _check_value(where: str, name: str, value: str, allowed: list[str]) -> None:
    if value not in allowed:
        raise RunError(f"{where}: field {name!r} is {_shown(value)}; expected one of {', '.join(allowed)}")


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
