"""`ptxbench export RUN --format flashinfer-trace --out DIR`: a run directory as a FlashInfer-Trace tree.

Every kernel the run evaluated becomes a Solution (its source from `builds/`, else `kernels/`, checked
against the row's sha256; author: the row's model; an `extern "C"` launcher or Triton `run`, not a
TVM-FFI or torch binding, so flashinfer-bench's builders cannot run it as it is), every row with a kernel a
Trace, and each task and shape they use a Definition (`flashinfer_definition.py`) and a Workload.

A trace's status comes from the first stage that failed, in pipeline order:

| ptxbench | FlashInfer-Trace |
| --- | --- |
| every stage passed | PASSED, with correctness (check) and performance (time) |
| build or inspect failed | COMPILE_ERROR (inspect refuses the built code before it runs) |
| check failed, with comparisons | INCORRECT_NUMERICAL, with correctness |
| check failed without comparisons (a refused capture, a fault), profile, sanitize or time failed | RUNTIME_ERROR |
| nothing failed, a stage did not run here (no GPU, a tool unavailable) | no trace: no status says "not run" |

INCORRECT_SHAPE, INCORRECT_DTYPE and TIMEOUT are never written: ptxbench's outputs have their shape and
dtype by construction. Correctness: max_absolute_error is the largest over the check's comparisons; ptxbench
records no relative error, so max_relative_error is NaN unless a comparison carries `max_rel_error`.
Performance: latency_ms is the time stage's median, reference_latency_ms the baseline's median (the vendor
library the family is timed against, e.g. cuBLAS, not the torch reference), speedup_factor their ratio.
Environment: the row's device (or "no GPU" for rows judged without one), the time stage's libraries, the
harness's version and nvcc's. Timestamp: the start of the session that wrote the row.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..candidate import digest
from ..languages import LANGUAGES
from ..rundir import RESULTS, task_set_hash
from ..targets import TARGETS
from ..task.catalogue import Family, Task, load_catalogue
from ..task.flashinfer_trace import Definition, Workload, safetensors_int32
from ..verdict import STAGES
from .flashinfer_definition import Inexpressible, TaskDefinition, task_definition
from .runs import Run, RunError, load_run

FORMATS = ("flashinfer-trace",)
FAILED_STAGE_STATUS = {"build": "COMPILE_ERROR", "inspect": "COMPILE_ERROR", "check": "INCORRECT_NUMERICAL"}
NOT_RUN = "no stage failed, but not every stage ran (no GPU here, a tool unavailable): no status says so"
_DIGEST = re.compile(r"^[0-9a-f]{16}$")


@dataclass
class Export:
    definitions: dict[str, Definition] = field(default_factory=dict)
    workloads: dict[str, Workload] = field(default_factory=dict)  # by uuid
    solutions: dict[str, dict[str, Any]] = field(default_factory=dict)  # by name
    blobs: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # path → int32 tensors (page tables)
    traces: list[dict[str, Any]] = field(default_factory=list)
    not_traced: Counter[str] = field(default_factory=Counter)  # why → rows
    not_exported: dict[str, str] = field(default_factory=dict)  # family → why it has no definition

    def summary(self, out: Path) -> str:
        lines = [
            f"wrote {out}: {len(self.definitions)} definition(s), {len(self.workloads)} workload(s), "
            f"{len(self.solutions)} solution(s), {len(self.traces)} trace(s)"
        ]
        lines += [f"not traced: {count} row(s): {why}" for why, count in self.not_traced.items()]
        lines += [f"not exported: family {name}: {why}" for name, why in self.not_exported.items()]
        return "\n".join(lines)


def export_run(path: Path, catalogue: Path, out: Path) -> Export:
    """Export the run at `path`, its tasks read from `catalogue` (the one the run used), into the new or
    empty folder `out`; RunError naming the file and field when the run or the catalogue does not fit."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunError(f"--out={out} exists and is not an empty folder; choose a new one")
    run = load_run(path)
    files = sorted(catalogue.glob("*.yaml"))
    if run.task_set != task_set_hash(files):
        raise RunError(
            f"{path / 'environment.json'}: field 'task_set' is {run.task_set}, but {catalogue} hashes to "
            f"{task_set_hash(files)}: pass --tasks with the catalogue the run used"
        )
    export = collect(run, load_catalogue(catalogue))
    write(export, out)
    return export


def collect(run: Run, families: list[Family]) -> Export:
    """The tree's contents for `run`, in memory."""
    tasks = {t.name: (f, t) for f in families for t in f.tasks}
    made: dict[str, TaskDefinition | None] = {}
    export = Export()
    for row in run.results:
        where = f"{run.path / RESULTS}: row {row['id']!r}"
        if row.get("candidate") is None:
            export.not_traced["no kernel was evaluated"] += 1
            continue
        if row["task"] not in tasks:
            raise RunError(f"{where}: field 'task' is {row['task']!r}, a task the catalogue does not have")
        family, task = tasks[row["task"]]
        if task.name not in made:
            try:
                made[task.name] = task_definition(family, task)
            except Inexpressible as exc:
                made[task.name], export.not_exported[family.name] = None, str(exc)
        defined = made[task.name]
        if defined is None:
            export.not_traced[f"family {family.name} has no definition"] += 1
            continue
        export.definitions[defined.definition.name] = defined.definition
        shape, seed = _shape(row, family, where), _seed(run) if family.host_inputs else 0
        workload = defined.workload(shape, seed)
        export.workloads[workload.uuid] = workload
        if family.host_inputs:
            export.blobs[defined.blob_path(workload.uuid)] = defined.host_tables(shape, seed)
        solution = _solution(run, row, defined, where)
        export.solutions[solution["name"]] = solution
        evaluation = _evaluation(run, row, where)
        if isinstance(evaluation, str):
            export.not_traced[evaluation] += 1
            continue
        trace = {"definition": defined.definition.name, "workload": workload.to_json()}
        export.traces.append({**trace, "solution": solution["name"], "evaluation": evaluation})
    return export


def write(export: Export, out: Path) -> None:
    """The tree, as flashinfer-bench lays it out, written beside `out` and renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        ops = {name: d.op_type for name, d in export.definitions.items()}
        for name, definition in export.definitions.items():
            _put(staging / "definitions" / ops[name] / f"{name}.json", json.dumps(definition.to_json(), indent=2))
        lines: dict[Path, list[dict[str, Any]]] = {}
        for workload in export.workloads.values():
            path = staging / "workloads" / ops[workload.definition] / f"{workload.definition}.jsonl"
            lines.setdefault(path, []).append(workload.trace_json())
        for trace in export.traces:
            path = staging / "traces" / ops[trace["definition"]] / f"{trace['definition']}.jsonl"
            lines.setdefault(path, []).append(trace)
        for path, records in lines.items():
            _put(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in records))
        for blob, tensors in export.blobs.items():
            (staging / blob).parent.mkdir(parents=True, exist_ok=True)
            (staging / blob).write_bytes(safetensors_int32(tensors))
        for name, solution in export.solutions.items():
            folder = staging / "solutions" / ops[solution["definition"]] / solution["definition"]
            _put(folder / f"{name}.json", json.dumps(solution, indent=2, allow_nan=False))
        if out.exists():
            out.rmdir()
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _seed(run: Run) -> int:
    """The run's seed, which made its page tables."""
    seed = run.environment.get("settings", {}).get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise RunError(f"{run.path / 'environment.json'}: field 'settings.seed' is {seed!r}; the page tables need it")
    return seed


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _shape(row: dict[str, Any], family: Family, where: str) -> dict[str, Any]:
    shape = row["shape"]
    if sorted(shape) != sorted(family.shape_axes):
        raise RunError(f"{where}: field 'shape' has axes {sorted(shape)}; {family.name} has {list(family.shape_axes)}")
    return dict(shape)


def _solution(run: Run, row: dict[str, Any], defined: TaskDefinition, where: str) -> dict[str, Any]:
    language = LANGUAGES[row["lang"]]
    if row["target"] not in TARGETS:
        raise RunError(f"{where}: field 'target' is {row['target']!r}; known: {', '.join(TARGETS)}")
    file, source = _source(run, row, defined.family, defined.task, where)
    sha = row["candidate"]["sha256"]
    name = "_".join([_safe(row["model"]), defined.definition.name, row["target"], language.name, sha])
    entry = language.entry(defined.family)
    return {
        "name": name,
        "definition": defined.definition.name,
        "author": row["model"],
        "spec": {
            "language": language.name,
            "target_hardware": [TARGETS[row["target"]].arch],
            "entry_point": f"{file}::{entry}",
            "dependencies": [],
            "destination_passing_style": True,
        },
        "sources": [{"path": file, "content": source}],
        "description": f"ptxbench {language.name} candidate {sha} for {defined.task.name} ({row['target']}); "
        f"entry point: {language.signature(defined.family)} (ptxbench's contract, not a TVM-FFI or torch binding)",
    }


def _source(run: Run, row: dict[str, Any], family: Family, task: Task, where: str) -> tuple[str, str]:
    """The candidate's file name and text, from its build folder or, for a model's kernel, `kernels/`."""
    candidate = row["candidate"]
    sha = candidate.get("sha256") if isinstance(candidate, dict) else None
    if not isinstance(sha, str) or not _DIGEST.match(sha):
        raise RunError(f"{where}: field 'candidate.sha256' is {sha!r}; expected 16 hex digits")
    language = LANGUAGES[row["lang"]]
    scope = task.name if language.per_task else family.name
    name = f"candidate{language.suffix}"
    built = run.path / "builds" / f"{scope}-{row['target']}-{sha}" / name
    for place in [built, *sorted((run.path / "kernels").glob(f"*-{sha}{language.suffix}"))]:
        if place.is_file():
            text = place.read_text(errors="replace")
            if digest(text) != sha:
                raise RunError(
                    f"{place}: its sha256 is {digest(text)}, not the field 'candidate.sha256' {sha} of {where}"
                )
            if not text:
                raise RunError(f"{place}: empty: the source of {where}")
            return name, text
    raise RunError(
        f"{where}: field 'candidate.sha256' {sha}: no source at {built} nor kernels/*-{sha}{language.suffix} in {run.path}"
    )


def _evaluation(run: Run, row: dict[str, Any], where: str) -> dict[str, Any] | str:
    """The trace's evaluation, or why the row has none."""
    verdicts = row["verdicts"]
    failed = [v for v in verdicts if v["status"] == "failed"]
    first = min(failed, key=lambda v: STAGES.index(v["stage"]) if v["stage"] in STAGES else len(STAGES), default=None)
    if first is not None:
        status = FAILED_STAGE_STATUS.get(first["stage"], "RUNTIME_ERROR")
        if status == "INCORRECT_NUMERICAL" and not first.get("data", {}).get("comparisons"):
            status = "RUNTIME_ERROR"
    elif row["outcome"] == "passed":
        status = "PASSED"
    else:
        return NOT_RUN
    evaluation: dict[str, Any] = {
        "status": status,
        "environment": _environment(run, row, verdicts),
        "timestamp": _timestamp(run, row),
        "log": row.get("reason") or "",
    }
    if status in ("PASSED", "INCORRECT_NUMERICAL"):
        check = first if first is not None else _verdict(verdicts, "check", where)
        evaluation["correctness"] = _correctness(check)
    if status == "PASSED":
        evaluation["performance"] = _performance(_verdict(verdicts, "time", where), where)
    return evaluation


def _verdict(verdicts: list[dict[str, Any]], stage: str, where: str) -> dict[str, Any]:
    found = [v for v in verdicts if v["stage"] == stage]
    if not found:
        raise RunError(f"{where}: field 'verdicts' has no {stage} verdict, yet the row's outcome is passed")
    return found[-1]


def _correctness(check: dict[str, Any]) -> dict[str, Any]:
    comparisons = [c for c in check.get("data", {}).get("comparisons") or [] if isinstance(c, dict)]
    absolute = [c["max_abs_error"] for c in comparisons if _is_number(c.get("max_abs_error"))]
    relative = [c["max_rel_error"] for c in comparisons if _is_number(c.get("max_rel_error"))]
    counts = {k: sum(int(c.get(k) or 0) for c in comparisons) for k in ("elements", "wrong", "unwritten", "nonfinite")}
    note = "ptxbench records no relative error" if not relative else "from ptxbench's check comparisons"
    return {
        "max_absolute_error": _json_float(max(absolute) if absolute else math.nan),
        "max_relative_error": _json_float(max(relative) if relative else math.nan),
        "extra": {"ptxbench": {**counts, "comparisons": len(comparisons), "note": note}},
    }


def _performance(time: dict[str, Any], where: str) -> dict[str, float]:
    data = time.get("data", {})
    median = data.get("median_ms")
    if not _is_number(median) or not median > 0:
        raise RunError(f"{where}: field 'verdicts[time].data.median_ms' is {median!r}; expected a positive number")
    baseline, speedup = data.get("baseline_median_ms"), data.get("speedup")
    if not _is_number(baseline) and _is_number(speedup):
        baseline = median * speedup
    if not _is_number(speedup) and _is_number(baseline):
        speedup = baseline / median
    return {
        "latency_ms": float(median),
        "reference_latency_ms": float(baseline) if _is_number(baseline) else 0.0,
        "speedup_factor": float(speedup) if _is_number(speedup) else 0.0,
    }


def _environment(run: Run, row: dict[str, Any], verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    libs = {"ptxbench": str(run.environment.get("harness_version"))}
    nvcc = (run.environment.get("tools") or {}).get("nvcc")
    if isinstance(nvcc, dict) and nvcc.get("version"):
        libs["nvcc"] = str(nvcc["version"])
    for verdict in verdicts:
        if verdict["stage"] == "time" and isinstance(verdict.get("data", {}).get("libraries"), dict):
            libs |= {str(k): str(v) for k, v in verdict["data"]["libraries"].items() if v is not None}
    device = row.get("device")
    hardware = device if isinstance(device, str) and device else f"no GPU ({TARGETS[row['target']].label} target)"
    return {"hardware": hardware, "libs": libs}


def _timestamp(run: Run, row: dict[str, Any]) -> str:
    started = {s.id: s.started for s in run.sessions}.get(row.get("session") or "")
    started = started or run.environment.get("started")
    if not isinstance(started, str) or not started:
        raise RunError(f"{run.path / 'environment.json'}: field 'started' is {started!r}; expected a time")
    return started


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_float(value: float) -> float | str:
    """flashinfer-bench's spelling of a float JSON cannot hold ("NaN", "Infinity")."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "unknown"
