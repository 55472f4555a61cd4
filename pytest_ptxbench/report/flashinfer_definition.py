"""A ptxbench task as a FlashInfer-Trace definition, and one of its shapes as a workload.

The definition is named after the task (`gemm-n7168-k5120` → `gemm_n7168_k5120`, flashinfer-bench's own name
for that GEMM); its op_type is the family (`gqa_paged_*` → `gqa_paged`). Integer task axes are const axes,
shape axes var axes; a string task axis (attention's `mask`) is in the name, a tag and the description. A
launcher dimension that is an expression becomes an axis of its own, named by the expression. Inputs and
outputs are the launcher's `input`/`output` parameters in its order, then its scalars, except those that only
repeat an axis (M, N, K); workspace and stream belong to the harness. The reference is the family's torch
reference read from its module's source (with the module's imports and the top-level names it uses) and a
`run` that takes the inputs in definition order and returns the outputs in their declared dtypes.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import keyword
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..dtypes import DTYPES
from ..task.catalogue import AxisValue, Family, Param, Task
from ..task.flashinfer_trace import DTYPES as TRACE_DTYPES
from ..task.flashinfer_trace import (
    Axis,
    Definition,
    RandomInput,
    SafetensorsInput,
    ScalarInput,
    TensorSpec,
    Workload,
    WorkloadInput,
)
from ..task.formula import Formula

OP_TYPES = {"gqa_paged_decode": "gqa_paged", "gqa_paged_prefill": "gqa_paged"}  # flashinfer-bench's names
SCALAR_DTYPES = {"int": "int32", "int32_t": "int32", "int64_t": "int64", "size_t": "int64", "float": "float32"}
SCALAR_DTYPES |= {"bool": "bool"}


class Inexpressible(ValueError):
    """A family that FlashInfer-Trace cannot express; the message says why."""


@dataclass(frozen=True)
class TaskDefinition:
    family: Family
    task: Task
    definition: Definition
    derived: Mapping[str, Formula]  # var axes that are launcher expressions over the shape axes
    scalars: tuple[Param, ...]  # the scalar inputs

    def workload(self, shape: Mapping[str, AxisValue], seed: int) -> Workload:
        """The workload of one shape: var axes set, scalars their values, the host-visible inputs (page
        tables) the run's own from a safetensors blob (`blob_path`), the other tensors random."""
        values = self.family.values(self.task, shape)
        host = self.family.host_inputs.names if self.family.host_inputs else ()
        axes: dict[str, int] = {}
        for name in self.definition.var_axes:
            value = self.derived[name](values) if name in self.derived else shape[name]
            if isinstance(value, str) or int(value) != value or value < 0:
                raise Inexpressible(f"{self.family.file}: axis {name!r} is {value!r} on {dict(shape)}, not a count")
            axes[name] = int(value)
        scalars: dict[str, int | float | bool] = {}
        for param in self.scalars:
            spec = self.definition.tensor(param.name)
            if param.value is not None and spec is not None:
                number = param.value(values)
                dtype = spec.dtype
                scalars[param.name] = (
                    float(number) if dtype == "float32" else bool(number) if dtype == "bool" else int(number)
                )
        # the page tables depend on the run's seed (which pages), the rest on the shape alone
        # the page tables follow from the whole shape (the pattern of lengths) and the run's seed (which pages)
        extra = [seed, sorted((k, str(v)) for k, v in shape.items())] if host else []
        key = json.dumps([self.definition.name, axes, list(scalars.values()), *extra])
        made = str(uuid.uuid5(uuid.NAMESPACE_URL, f"ptxbench:{key}"))
        inputs: list[WorkloadInput] = []
        for spec in self.definition.inputs:
            if spec.name in host:
                inputs.append(SafetensorsInput(spec.name, self.blob_path(made), spec.name))
            elif spec.name in scalars:
                inputs.append(ScalarInput(spec.name, scalars[spec.name]))
            else:
                inputs.append(RandomInput(spec.name))
        return Workload(self.definition.name, made, axes, tuple(inputs))

    def blob_path(self, workload: str) -> str:
        """Where a workload's host-visible inputs are, relative to the tree's root."""
        return f"blob/workloads/{self.definition.op_type}/{self.definition.name}/{workload}.safetensors"

    def host_tables(self, shape: Mapping[str, AxisValue], seed: int) -> dict[str, list[int]]:
        """The host-visible inputs of one shape as the run made them (its seed), or nothing."""
        host = self.family.host_inputs
        return host.tables(self.family.values(self.task, shape), seed) if host else {}


def definition_name(task: Task) -> str:
    return task.name.replace("-", "_")


def task_definition(family: Family, task: Task) -> TaskDefinition:
    """The task's definition; Inexpressible when FlashInfer-Trace has no way to say it."""
    axes = {name: Axis(name, value) for name, value in task.axes.items() if isinstance(value, int)}
    axes |= {name: Axis(name, None) for name in family.shape_axes}
    derived: dict[str, Formula] = {}
    tensors: dict[str, list[TensorSpec]] = {"input": [], "output": []}
    for p in family.launcher.params:
        if p.role not in tensors:
            continue
        dtype = DTYPES[p.dtype].long_name if p.dtype in DTYPES else str(p.dtype)
        if dtype not in TRACE_DTYPES:
            raise Inexpressible(
                f"{family.file}: {p.role} {p.name!r} is {p.dtype}, which FlashInfer-Trace has no name for"
            )
        shape = tuple(_dim_axis(dim, family, task, axes, derived) for dim in p.shape)
        tensors[p.role].append(TensorSpec(p.name, shape, dtype))
    scalars = tuple(
        p for p in family.launcher.params if p.role == "scalar" and p.value is not None and not _repeats_axis(p, family)
    )
    for p in scalars:
        if p.ctype not in SCALAR_DTYPES:
            raise Inexpressible(f"{family.file}: scalar {p.name!r} has C type {p.ctype!r}, no FlashInfer-Trace dtype")
        tensors["input"].append(
            TensorSpec(p.name, None, SCALAR_DTYPES[p.ctype], f"= {p.value.text}" if p.value else None)
        )
    words = {k: v for k, v in task.axes.items() if isinstance(v, str)}
    # a shape axis no tensor is sized by (a paged shape's mean length and its pattern) is no axis of the definition
    sized = {a for t in (*tensors["input"], *tensors["output"]) for a in t.shape or ()}
    kept = [a for a in axes.values() if a.value is not None or a.name in sized]
    draft = Definition(
        name=definition_name(task),
        op_type=OP_TYPES.get(family.name, family.name),
        axes=tuple(kept),
        inputs=tuple(tensors["input"]),
        outputs=tuple(tensors["output"]),
        reference="",
        tags=("source:ptxbench", f"ptxbench_family:{family.name}", *(f"{k}:{v}" for k, v in words.items())),
        description=_description(family, task, words),
    )
    definition = replace(draft, reference=reference_source(family, task, draft))
    return TaskDefinition(family, task, definition, derived, scalars)


def reference_source(family: Family, task: Task, definition: Definition) -> str:
    """The family's reference function with what it uses from its module, and `run` around it."""
    module, _, function = family.reference.partition(":")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise Inexpressible(f"{family.file}: reference {family.reference!r}: no Python source for {module!r}")
    source = Path(spec.origin).read_text()
    body = ast.parse(source).body
    named = {name: node for node in body for name in _binds(node)}
    if not isinstance(named.get(function), ast.FunctionDef):
        raise Inexpressible(f"{family.file}: reference {family.reference!r}: no top-level function {function!r}")
    needed, todo = set(), [function]
    while todo:
        name = todo.pop()
        if name in named and name not in needed:
            needed.add(name)
            todo += [n.id for n in ast.walk(named[name]) if isinstance(n, ast.Name)]
    kept = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom)) or set(_binds(n)) & needed]
    names = [t.name for t in definition.inputs]
    clash = [n for n in names if not n.isidentifier() or keyword.iskeyword(n) or n in named or n == "torch"]
    if clash:
        raise Inexpressible(f"{family.file}: input {clash[0]!r} cannot be a parameter of the reference's run")
    lines = source.splitlines()
    text = {id(n): "\n".join(lines[_first_line(n) - 1 : n.end_lineno]) for n in kept}
    imports = [text[id(n)] for n in kept if isinstance(n, (ast.Import, ast.ImportFrom))]
    if "torch" not in {name for n in kept for name in _binds(n)}:
        imports.append("import torch")  # for run's casts
    header = f"# ptxbench's reference for {task.name}: {family.reference} and what it uses, from {module}'s source."
    blocks = [text[id(n)] for n in kept if not isinstance(n, (ast.Import, ast.ImportFrom))]
    words = {
        n.value for node in kept for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    run = _run(family, task, definition, function, words)
    return "\n\n\n".join(["\n".join([header, *imports]), *blocks, run]) + "\n"


def _run(family: Family, task: Task, definition: Definition, function: str, words: set[str]) -> str:
    """`run`: the task's axes, and each shape axis the reference names (`words`: its string constants), read
    from the dimension of an input that it is."""
    values = [f"{k!r}: {v!r}" for k, v in task.axes.items()]
    for axis in family.shape_axes:
        bound = next(
            ((t.name, i) for t in definition.inputs for i, a in enumerate(t.shape or ()) if a == axis),
            None,
        )
        if bound is None and axis not in words:
            continue  # the reference never reads it (a paged shape's mean length: the page tables hold it)
        if bound is None:
            raise Inexpressible(f"{family.file}: shape axis {axis!r} is no dimension of an input: run cannot find it")
        values.append(f"{axis!r}: {bound[0]}.shape[{bound[1]}]")
    names = [t.name for t in definition.inputs]
    outputs = ", ".join(f"{t.name!r}: _outputs[{t.name!r}].to(torch.{t.dtype})" for t in definition.outputs)
    return (
        f"def run({', '.join(names)}):\n"
        f'    """FlashInfer-Trace\'s calling convention: inputs in definition order, outputs returned."""\n'
        f"    _values = {{{', '.join(values)}}}\n"
        f"    _outputs = {function}({{{', '.join(f'{n!r}: {n}' for n in names)}}}, _values)\n"
        f"    return {{{outputs}}}"
    )


def _dim_axis(dim: Formula, family: Family, task: Task, axes: dict[str, Axis], derived: dict[str, Formula]) -> str:
    """The axis a launcher dimension is: a family axis by name, else an axis named by the expression (const
    when it uses task axes only)."""
    text = dim.text.strip()
    if text in axes:
        return text
    name = "".join(text.split())
    if name not in axes:
        used = {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)}
        if used <= set(task.axes):
            value = dim(task.axes)
            if isinstance(value, str) or int(value) != value or value < 0:
                raise Inexpressible(f"{family.file}: dimension {text!r} is {value!r} for {task.name}, not a count")
            axes[name] = Axis(name, int(value), f"= {text}")
        else:
            axes[name] = Axis(name, None, f"= {text}")
            derived[name] = dim
    return name


def _repeats_axis(param: Param, family: Family) -> bool:
    return param.value is not None and param.value.text.strip() in (*family.task_axes, *family.shape_axes)


def _description(family: Family, task: Task, words: Mapping[str, str]) -> str:
    text = f"ptxbench {family.name} task {task.name}. {' '.join(family.description.split())}"
    if words:
        text += f" Fixed by this definition: {', '.join(f'{k} = {v}' for k, v in words.items())}."
    if family.derived:
        text += (
            f" In ptxbench {', '.join(family.derived.names)} are computed from the other inputs "
            f"({family.derived.function}); these workloads draw them at random."
        )
    if family.host_inputs:
        text += (
            f" {', '.join(family.host_inputs.names)} are the run's own ({family.host_inputs.function}, from the"
            " shape and the run's seed), each workload's in a safetensors blob."
        )
    return text


def _binds(node: ast.stmt) -> list[str]:
    """The top-level names a statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _first_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])
