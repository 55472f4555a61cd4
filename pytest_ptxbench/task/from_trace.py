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

import itertools
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

    page = int(task.axes["P"])
    indptr = table("kv_indptr")
    last = table("kv_last_page_len") if page != 1 else [1] * (len(indptr) - 1)
    counts = [b - a for a, b in itertools.pairwise(indptr)]
    if not counts or len(last) != len(counts) or min(counts) < 1 or not all(1 <= n <= page for n in last):
        raise TraceFileError(
            f"{where}: kv_indptr {_head(indptr)} and kv_last_page_len {_head(last)} give no sequences of at least"
            f" one page whose last page holds 1..{page} tokens"
        )
    lengths = [(n - 1) * page + n_last for n, n_last in zip(counts, last, strict=True)]
    batch = len(lengths)
    if "Q" not in family.shape_axes:
        return {"B": batch, "L": -(-sum(lengths) // batch), "lens": paged.given(lengths)}
    starts = table("qo_indptr")
    queries = [b - a for a, b in itertools.pairwise(starts)]
    if len(queries) != batch or min(queries) < 1 or any(q > n for q, n in zip(queries, lengths, strict=True)):
        raise TraceFileError(
            f"{where}: qo_indptr {_head(starts)} does not give each of {batch} sequences 1 to its length new tokens"
        )
    pairs = list(zip(queries, lengths, strict=True))
    return {"B": batch, "Q": -(-sum(queries) // batch), "L": -(-sum(lengths) // batch), "lens": paged.given(pairs)}


def _head(numbers: list[int]) -> str:
    return str(numbers) if len(numbers) <= 6 else f"[{', '.join(map(str, numbers[:5]))}, ... ({len(numbers)})]"
