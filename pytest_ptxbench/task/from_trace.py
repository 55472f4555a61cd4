"""Tasks from a FlashInfer-Trace tree (`--ptx-tasks=DIR`).

Each definition that is a task of a family in the catalogue (`flashinfer_trace.family_for`) becomes that task,
and its workloads become the family's visible shapes (one per distinct shape); the catalogue's hidden shapes,
sanitizer shape, tolerances, baselines and opcodes stay. Families no definition maps onto are left out: the
tree says what is evaluated. Input values are still drawn from the family's distributions: a workload's
input specs (random, scalar, safetensors) are not used.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .catalogue import Family, Task, TaskFileError, checked_shapes
from .flashinfer_trace import Tree, family_for


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
    sources: dict[str, list[tuple[Any, dict[str, Any]]]] = {}  # family → (workload, its shape axes)
    for name, definition in sorted(tree.definitions.items()):
        mapped = family_for(definition)
        if isinstance(mapped, str) or mapped[0] not in by_name or not tree.workloads_of(name):
            continue
        family, axes = by_name[mapped[0]], mapped[1]
        task = Task(family.name, axes, f"{family.name}-{family.task_id.format(**axes)}")
        if task not in tasks.setdefault(family.name, []):
            tasks[family.name].append(task)
        sources.setdefault(family.name, []).extend(
            (w, {a: v for a, v in w.axes.items() if a in family.shape_axes}) for w in tree.workloads_of(name)
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
            shapes.setdefault(family.shape_id.format(**shape), shape)
        for kept in [*family.hidden, family.sanitizer_shape]:  # the catalogue's, now for the tree's tasks
            checked_shapes(with_tasks, [(f"a shape of {family.file}", dict(kept))], tree.root)
        hidden = tuple(h for h in family.hidden if family.shape_id.format(**h) not in shapes)  # now visible
        out.append(replace(with_tasks, visible=tuple(shapes.values()), hidden=hidden))
    if not out:
        raise TaskFileError(f"{tree.root}: no definition is a task of the catalogue's families")
    return out
