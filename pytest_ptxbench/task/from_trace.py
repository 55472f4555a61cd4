"""Tasks from a FlashInfer-Trace tree (`--ptx-tasks=DIR`).

Each definition that is a task of a family in the catalogue (`flashinfer_trace.family_for`) becomes that task,
and its workloads become the family's visible shapes (one per distinct shape); the catalogue's hidden shapes,
sanitizer shape, tolerances, baselines and opcodes stay. Families no definition maps onto are left out: the
tree says what is evaluated. A GEMM workload gives M; a paged one its sequences' lengths, read from its page
tables (safetensors), which become the shape's `given:` lengths. Input values are still drawn from the
family's distributions and the pages a sequence occupies from the run's seed: the workload's random and
scalar specs and its page order are not used.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import paged
from .catalogue import AxisValue, Family, Task, TaskFileError, checked_shapes, shape_id
from .flashinfer_trace import SafetensorsInput, TraceFileError, Tree, Workload, family_for, int_tensor


def not_tasks(tree: Tree) -> dict[str, str]:
    """Each definition of `tree` that cannot be a ptxbench task, with why."""
    out = {}
    for name, definition in sorted(tree.definitions.items()):
        mapped = family_for(definition)
        if isinstance(mapped, str):
            out[name] = mapped
        elif not tree.workloads_of(name):
            out[name] = "it has no workloads"
    return out


def tasks_from_tree(families: list[Family], tree: Tree) -> list[Family]:
    """The catalogue's families that definitions of `tree` map onto, with those tasks and the workloads' shapes
    only; TaskFileError (naming the workload's file and line) when a workload does not give a valid shape."""
    by_name = {f.name: f for f in families}
    tasks: dict[str, list[Task]] = {}
    sources: dict[str, list[tuple[Workload, dict[str, Any]]]] = {}  # family → (workload, its shape)
    for name, definition in sorted(tree.definitions.items()):
        mapped = family_for(definition)
        if isinstance(mapped, str) or mapped[0] not in by_name or not tree.workloads_of(name):
            continue
        family, axes = by_name[mapped[0]], mapped[1]
        if sorted(axes) != sorted(family.task_axes):
            raise TaskFileError(
                f"{definition.file or tree.root}: definition {name!r} gives {family.name} the task axes"
                f" {sorted(axes)}; its task axes are {list(family.task_axes)}"
            )
        task = Task(family.name, axes, f"{family.name}-{family.task_id.format(**axes)}")
        if task not in tasks.setdefault(family.name, []):
            tasks[family.name].append(task)
        sources.setdefault(family.name, []).extend(
            (w, workload_shape(family, task, w, tree)) for w in tree.workloads_of(name)
        )
    out = []
    for family in families:
        if family.name not in tasks:
            continue
        with_tasks = replace(family, tasks=tuple(tasks[family.name]))
        shapes: dict[str, dict[str, Any]] = {}
        for workload, raw in sources[family.name]:
            where = f"line {workload.line}: workload {workload.uuid}"
            (shape,) = checked_shapes(with_tasks, [(where, raw)], workload.file or tree.root)
            shapes.setdefault(shape_id(family.shape_id, shape), shape)
        for kept in [*family.hidden, family.sanitizer_shape]:  # the catalogue's, now for the tree's tasks
            checked_shapes(with_tasks, [(f"a shape of {family.file}", dict(kept))], tree.root)
        hidden = tuple(h for h in family.hidden if shape_id(family.shape_id, h) not in shapes)  # now visible
        out.append(replace(with_tasks, visible=tuple(shapes.values()), hidden=hidden))
    if not out:
        raise TaskFileError(f"{tree.root}: no definition is a task of the catalogue's families")
    return out


def workload_shape(family: Family, task: Task, workload: Workload, tree: Tree) -> dict[str, AxisValue]:
    """The shape a workload is: its var axes that are the family's shape axes, or for a paged family the
    batch, mean lengths and `given:` lengths its page tables hold; TraceFileError naming the workload's line
    and input when a table is not in a blob or holds no valid sequences."""
    if family.host_inputs is None:
        return {a: v for a, v in workload.axes.items() if a in family.shape_axes}
    where = f"{workload.file or tree.root}:{workload.line}: workload {workload.uuid}"
    blobs = {i.name: i for i in workload.inputs if isinstance(i, SafetensorsInput)}

    def table(name: str) -> list[int]:
        if name not in blobs:
            raise TraceFileError(f"{where}: field 'workload.inputs.{name}': the page tables must come from a blob")
        return int_tensor(tree.root, blobs[name])

    names = ["kv_indptr", "qo_indptr"] if "Q" in family.shape_axes else ["kv_indptr"]
    page = int(task.axes["P"])
    names += ["kv_last_page_len"] if page != 1 else []
    try:
        return paged.shape_of({name: table(name) for name in names}, page)
    except ValueError as exc:
        raise TraceFileError(f"{where}: {exc}") from None
