"""The task catalogue: families of tasks read from `*.yaml`, validated field by field.

A *family* (gemm, attention_fwd, ...) declares everything a kernel must satisfy; a *task* fixes some
of its axes (`gemm-n7168-k5120`); a *shape* sets the rest (`m8192`). A malformed file raises
`TaskFileError` naming the file, the field and the bad value.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..dtypes import DTYPES
from ..targets import TARGETS
from .formula import Formula, FormulaError
from .yaml_file import YAMLFileError, read_yaml

ROLES = ("input", "output", "scalar", "host", "workspace", "workspace_bytes", "stream")
DISTRIBUTIONS = {"normal": {"std"}, "uniform": {"low", "high"}, "spiky": {"std", "outlier_fraction", "outlier_scale"}}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBERED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*:[0-9][0-9,/]*$")  # a word with numbers: `given:4096,17`
_CALLABLE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
FAMILY_FIELDS = (
    "family",
    "description",
    "axes",
    "task_id",
    "shape_id",
    "tasks",
    "shapes",
    "sanitizer_shape",
    "launcher",
    "workspace_bytes",
    "reference",
    "derived_inputs",
    "host_inputs",
    "counts",
    "baseline",
    "baselines",
    "flops",
    "bytes",
    "tolerances",
    "matched_ratio",
    "min_tensor_share",
    "max_simt_share",
    "inputs",
    "opcodes",
    "not_run_on_hardware",
)
AXES_FIELDS = ("task", "shape")
SHAPES_FIELDS = ("visible", "hidden")
LAUNCHER_FIELDS = ("name", "returns", "params")
PARAM_FIELDS = ("name", "type", "role", "dtype", "shape", "value", "of")
BASELINE_FIELDS = ("library", "function", "requires")
DERIVED_FIELDS = ("function", "names")
TOLERANCE_FIELDS = ("atol", "rtol")

AxisValue = int | str


class TaskFileError(ValueError):
    """A task file does not follow the schema; the message names file, field and value."""


class UnknownBaseline(ValueError):
    """A baseline was chosen (option or marker) that no task file in scope declares."""


DEFAULT_BASELINE = "default"  # the name of the task file's `baseline:` among its `baselines:`


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str
    role: str
    dtype: str | None = None
    shape: tuple[Formula, ...] = ()
    value: Formula | None = None  # scalars: evaluated from the task's axes
    of: str | None = None  # a host parameter: the input whose values it holds, as a host array


@dataclass(frozen=True)
class Launcher:
    name: str
    returns: str
    params: tuple[Param, ...]

    def declaration(self) -> str:
        """The exact C prototype a candidate must define."""
        args = ", ".join(f"{p.ctype} {p.name}" for p in self.params)
        return f'extern "C" {self.returns} {self.name}({args});'


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class Distribution:
    name: str
    params: Mapping[str, float]


@dataclass(frozen=True)
class Baseline:
    library: str  # as reports name it: "cuDNN"
    function: str  # "module:function", run in the trusted child
    requires: tuple[str, ...] = ()  # modules it imports beyond torch: where one is missing, timing is skipped


@dataclass(frozen=True)
class Derived:
    """Inputs computed from the drawn ones, never drawn themselves (the forward's O and LSE for a backward,
    page tables from sequence lengths): `function(inputs, values, seed)` returns exactly `names`."""

    function: str  # "module:function", run in the trusted child
    names: tuple[str, ...]


@dataclass(frozen=True)
class HostInputs:
    """Integer inputs the launcher also gets as host arrays (page tables, to plan its launches on the host):
    `function(values, seed)`, plain Python (no torch), returns exactly `names` as lists of ints, the same for
    every input set of a shape."""

    function: str  # "module:function", run by the harness
    names: tuple[str, ...]

    def tables(self, values: Mapping[str, AxisValue], seed: int) -> dict[str, list[int]]:
        made: dict[str, list[int]] = _call(self.function, self.names, values, seed)
        return made


@dataclass(frozen=True)
class Counts:
    """Numbers the formulas use that follow from a shape but are no formula of its axes (the (query, key) pairs
    attended over ragged sequences): `function(values)`, plain Python, returns exactly `names`."""

    function: str  # "module:function", run by the harness
    names: tuple[str, ...]

    def __call__(self, values: Mapping[str, AxisValue]) -> dict[str, int]:
        made: dict[str, int] = _call(self.function, self.names, values)
        return made


def _call(function: str, names: Sequence[str], *args: Any) -> Any:
    """`module:function` called with `args`; its mapping must hold exactly `names`."""
    module, _, name = function.partition(":")
    made = getattr(importlib.import_module(module), name)(*args)
    if set(made) != set(names):
        raise ValueError(f"{function} returned {sorted(made)}, expected {list(names)}")
    return made


def shape_id(template: str, shape: Mapping[str, AxisValue]) -> str:
    """A shape's part of the test id: `template` filled in, a word with numbers shown as the word and a digest
    of them (`given:4096,17` → `given1f0c2a9b`)."""
    shown = {
        axis: f"{v.split(':')[0]}{hashlib.sha256(v.encode()).hexdigest()[:8]}" if isinstance(v, str) and ":" in v else v
        for axis, v in shape.items()
    }
    return template.format(**shown)


@dataclass(frozen=True)
class Shape:
    values: Mapping[str, AxisValue]
    id: str
    hidden: bool


@dataclass(frozen=True)
class Family:
    name: str
    file: Path
    description: str
    task_axes: tuple[str, ...]
    shape_axes: tuple[str, ...]
    launcher: Launcher
    reference: str
    derived: Derived | None
    host_inputs: HostInputs | None
    counts: Counts | None
    baselines: Mapping[str, Baseline]  # "default" (the task file's `baseline:`) and each of `baselines:`
    baseline_name: str  # the one the family is timed against
    flops: Formula
    bytes: Formula
    workspace_bytes: Formula
    tolerances: Mapping[str, Tolerance]
    matched_ratio: float
    min_tensor_share: float  # the share of the task's FLOPs the required MMA instructions must execute
    max_simt_share: float  # the share of the task's FLOPs CUDA-core arithmetic may carry (decoy work above)
    distributions: tuple[Distribution, ...]
    sanitizer_shape: Mapping[str, AxisValue]
    opcodes: Mapping[str, tuple[str, ...]]
    not_run_on_hardware: frozenset[str]
    tasks: tuple[Task, ...]
    visible: tuple[Mapping[str, AxisValue], ...]
    hidden: tuple[Mapping[str, AxisValue], ...]
    task_id: str
    shape_id: str

    def shapes(self, which: str) -> list[Shape]:
        """`visible`, `hidden` or `all` shapes, with their test-id parts."""
        chosen = [(s, False) for s in self.visible if which in ("visible", "all")]
        chosen += [(s, True) for s in self.hidden if which in ("hidden", "all")]
        return [Shape(dict(s), shape_id(self.shape_id, s), hidden) for s, hidden in chosen]

    def values(self, task: Task, shape: Mapping[str, AxisValue]) -> dict[str, AxisValue]:
        """What formulas, references and baselines see for a task on a shape: its axes, the shape's, the counts."""
        values = {**task.axes, **shape}
        return {**values, **self.counts(values)} if self.counts else values

    def formulas(self) -> dict[str, Formula]:
        """Every formula of the family, by its field in the task file."""
        out = {"flops": self.flops, "bytes": self.bytes, "workspace_bytes": self.workspace_bytes}
        for i, param in enumerate(self.launcher.params):
            out |= {f"launcher.params[{i}].shape[{j}]": dim for j, dim in enumerate(param.shape)}
            if param.value is not None:
                out[f"launcher.params[{i}].value"] = param.value
        return out

    def tolerance(self, dtype: str) -> Tolerance:
        """The task file's tolerance for outputs of `dtype`; integer outputs must match exactly."""
        return self.tolerances[dtype] if DTYPES[dtype].floating else Tolerance(0.0, 0.0)

    @property
    def timed_against(self) -> Baseline:
        return self.baselines[self.baseline_name]

    @property
    def baseline(self) -> str:
        return self.timed_against.function

    @property
    def baseline_library(self) -> str:
        return self.timed_against.library

    def with_baseline(self, name: str) -> Family:
        """The family timed against its baseline `name`; UnknownBaseline if its file declares none so named."""
        if name not in self.baselines:
            raise UnknownBaseline(
                f"{self.file}: baselines: no baseline {name!r} (declared: {', '.join(self.baselines)})"
            )
        return replace(self, baseline_name=name)


@dataclass(frozen=True)
class Task:
    family_name: str
    axes: Mapping[str, AxisValue]
    name: str  # "gemm-n7168-k5120"


def load_catalogue(directory: Path) -> list[Family]:
    """Every `*.yaml` family in `directory`, sorted by name."""
    families = [load_family(path) for path in sorted(directory.glob("*.yaml"))]
    seen: dict[str, Path] = {}
    for family in families:
        if family.name in seen:
            raise TaskFileError(f"{family.file}: family: {family.name!r} is also defined in {seen[family.name]}")
        seen[family.name] = family.file
    return sorted(families, key=lambda f: f.name)


def load_family(path: Path) -> Family:
    return _Reader(path).family(_read(path))


def _read(path: Path) -> Any:
    try:
        return read_yaml(path)
    except YAMLFileError as exc:
        raise TaskFileError(str(exc)) from None


class _Reader:
    """Reads one file; every accessor names the field it checks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> TaskFileError:
        return TaskFileError(f"{self.path}: {where}: {message}")

    def fields(self, raw: Any, known: Collection[str], where: str) -> Mapping[str, Any]:
        """`raw`, a mapping whose every key is one of `known`; a misspelt key is named with the closest."""
        if not isinstance(raw, Mapping):
            raise self.fail(where or "top level", f"expected a mapping, got {raw!r}")
        for key in raw:
            if key not in known:
                field = f"{where}.{key}" if where else str(key)
                raise self.fail(field, f"unknown field (known: {', '.join(known)}){_did_you_mean(key, known)}")
        return raw

    def unique(self, entries: Iterable[tuple[str, str]], what: str) -> None:
        """No two `(where, id)` entries share an id; the second is named, with where the first was."""
        first: dict[str, str] = {}
        for where, name in entries:
            if name in first:
                raise self.fail(where, f"{what} {name!r} is listed twice (first at {first[name]})")
            first[name] = where

    def get(self, data: Any, key: str, kind: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
        field = f"{where}.{key}" if where else key
        if not isinstance(data, Mapping):
            raise self.fail(where or "top level", f"expected a mapping, got {data!r}")
        if key not in data:
            if default is ...:
                raise self.fail(field, "missing")
            return default
        value = data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            raise self.fail(field, f"expected {_kind_name(kind)}, got {value!r}")
        return value

    def formula(self, text: Any, names: set[str], where: str) -> Formula:
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise self.fail(where, f"expected a formula, got {text!r}")
        try:
            return Formula(str(text), names)
        except FormulaError as exc:
            raise self.fail(where, str(exc)) from exc

    def family(self, raw: Any) -> Family:
        raw = self.fields(raw, FAMILY_FIELDS, "")
        name = self.get(raw, "family", str, "")
        if not _IDENT.match(name):
            raise self.fail("family", f"not an identifier: {name!r}")
        axes = self.fields(self.get(raw, "axes", Mapping, ""), AXES_FIELDS, "axes")
        task_axes = tuple(self.names(self.get(axes, "task", list, "axes"), "axes.task"))
        shape_axes = tuple(self.names(self.get(axes, "shape", list, "axes"), "axes.shape"))
        if set(task_axes) & set(shape_axes):
            raise self.fail("axes", f"axes {sorted(set(task_axes) & set(shape_axes))} are both task and shape axes")
        counts = self.counts(raw["counts"], set(task_axes) | set(shape_axes)) if "counts" in raw else None
        names = set(task_axes) | set(shape_axes) | set(counts.names if counts else ())
        task_id = self.id_format(raw, "task_id", task_axes)
        shape_template = self.id_format(raw, "shape_id", shape_axes)
        tasks = tuple(
            self.task(name, entry, task_axes, task_id, f"tasks[{i}]")
            for i, entry in enumerate(self.get(raw, "tasks", list, ""))
        )
        if not tasks:
            raise self.fail("tasks", "empty")
        self.unique(((f"tasks[{i}]", t.name) for i, t in enumerate(tasks)), "task")
        shapes = self.fields(self.get(raw, "shapes", Mapping, ""), SHAPES_FIELDS, "shapes")
        visible = tuple(
            self.shape(s, shape_axes, f"shapes.visible[{i}]")
            for i, s in enumerate(self.get(shapes, "visible", list, "shapes"))
        )
        hidden = tuple(
            self.shape(s, shape_axes, f"shapes.hidden[{i}]")
            for i, s in enumerate(self.get(shapes, "hidden", list, "shapes"))
        )
        if not visible:
            raise self.fail("shapes.visible", "empty: the model needs at least one shape for feedback")
        every_shape = [(f"shapes.visible[{i}]", s) for i, s in enumerate(visible)]
        every_shape += [(f"shapes.hidden[{i}]", s) for i, s in enumerate(hidden)]
        self.unique(((where, shape_id(shape_template, s)) for where, s in every_shape), "shape")
        baselines = {DEFAULT_BASELINE: self.baseline(self.get(raw, "baseline", Mapping, ""), "baseline")}
        for key, entry in self.get(raw, "baselines", Mapping, "", default={}).items():
            if not isinstance(key, str) or not _IDENT.match(key) or key == DEFAULT_BASELINE:
                raise self.fail("baselines", f"not a baseline name: {key!r} ({DEFAULT_BASELINE!r} is `baseline:`)")
            baselines[key] = self.baseline(entry, f"baselines.{key}")
        opcodes = self.get(raw, "opcodes", Mapping, "")
        for target, patterns in opcodes.items():
            if target not in TARGETS:
                raise self.fail(
                    f"opcodes.{target}", f"unknown target (known: {', '.join(TARGETS)}){_did_you_mean(target, TARGETS)}"
                )
            if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
                raise self.fail(f"opcodes.{target}", f"expected a non-empty list of opcode patterns, got {patterns!r}")
        not_run = self.get(raw, "not_run_on_hardware", list, "", default=[])
        for target in not_run:
            if target not in TARGETS:
                raise self.fail(
                    "not_run_on_hardware",
                    f"unknown target {target!r} (known: {', '.join(TARGETS)}){_did_you_mean(target, TARGETS)}",
                )
        sanitizer_shape = self.shape(self.get(raw, "sanitizer_shape", Mapping, ""), shape_axes, "sanitizer_shape")
        launcher = self.launcher(self.get(raw, "launcher", Mapping, ""), names)
        derived = self.derived(raw["derived_inputs"], launcher) if "derived_inputs" in raw else None
        host_inputs = self.host_inputs(raw["host_inputs"], launcher) if "host_inputs" in raw else None
        made = (derived.names if derived else ()) + (host_inputs.names if host_inputs else ())
        twice = sorted({n for n in made if made.count(n) > 1})
        if twice:
            raise self.fail("host_inputs.names", f"{twice[0]!r} is also in derived_inputs.names")
        drawn_integers = [
            p.name
            for p in launcher.params
            if p.role == "input" and p.dtype and not DTYPES[p.dtype].floating and p.name not in made
        ]
        if drawn_integers:
            raise self.fail(
                "launcher.params",
                f"integer input {drawn_integers[0]!r} is drawn from no distribution: "
                "list it in derived_inputs.names or host_inputs.names",
            )
        for i, p in enumerate(launcher.params):
            if p.role == "host" and (host_inputs is None or p.of not in host_inputs.names):
                known = list(host_inputs.names) if host_inputs else []
                raise self.fail(f"launcher.params[{i}].of", f"{p.of!r} is not one of host_inputs.names {known}")
        tolerances = self.tolerances(self.get(raw, "tolerances", Mapping, ""))
        for p in launcher.params:
            if p.role == "output" and p.dtype and DTYPES[p.dtype].floating and p.dtype not in tolerances:
                raise self.fail("tolerances", f"no tolerance for {p.dtype}, the dtype of output {p.name!r}")
        family = Family(
            name=name,
            file=self.path,
            description=self.get(raw, "description", str, ""),
            task_axes=task_axes,
            shape_axes=shape_axes,
            launcher=launcher,
            reference=self.callable_path(raw, "reference", ""),
            derived=derived,
            host_inputs=host_inputs,
            counts=counts,
            baselines=baselines,
            baseline_name=DEFAULT_BASELINE,
            flops=self.formula(self.get(raw, "flops", (str, int), ""), names, "flops"),
            bytes=self.formula(self.get(raw, "bytes", (str, int), ""), names, "bytes"),
            workspace_bytes=self.formula(self.get(raw, "workspace_bytes", (str, int), ""), names, "workspace_bytes"),
            tolerances=tolerances,
            matched_ratio=self.fraction(raw, "matched_ratio"),
            min_tensor_share=self.share(raw, "min_tensor_share") if "min_tensor_share" in raw else 0.5,
            max_simt_share=self.number(raw, "max_simt_share", "") if "max_simt_share" in raw else 0.25,
            distributions=tuple(
                self.distribution(d, f"inputs[{i}]") for i, d in enumerate(self.get(raw, "inputs", list, ""))
            ),
            sanitizer_shape=sanitizer_shape,
            opcodes={t: tuple(p) for t, p in opcodes.items()},
            not_run_on_hardware=frozenset(not_run),
            tasks=tasks,
            visible=visible,
            hidden=hidden,
            task_id=task_id,
            shape_id=shape_template,
        )
        for where, shape in [*every_shape, ("sanitizer_shape", sanitizer_shape)]:
            failure = _formula_failure(family, shape)
            if failure:
                raise self.fail(failure.field, f"{failure.why}, on {where} ({shape_id(shape_template, shape)})")
        return family

    def names(self, values: list[Any], where: str) -> list[str]:
        for i, value in enumerate(values):
            if not isinstance(value, str) or not _IDENT.match(value):
                raise self.fail(f"{where}[{i}]", f"not an axis name: {value!r}")
        if not values:
            raise self.fail(where, "empty")
        return values

    def id_format(self, raw: Any, key: str, axes: tuple[str, ...]) -> str:
        text: str = self.get(raw, key, str, "")
        used = set(re.findall(r"{(\w+)}", text))
        if used != set(axes):
            raise self.fail(key, f"{text!r} must name each of the axes {list(axes)} once")
        if not re.fullmatch(r"[a-z0-9_{}A-Z-]+", text):
            raise self.fail(key, f"{text!r}: test ids take letters, digits, '_' and '-' only")
        return text

    def task(self, family: str, entry: Any, axes: tuple[str, ...], id_format: str, where: str) -> Task:
        values = self.axis_values(entry, axes, where)
        return Task(family, values, f"{family}-{id_format.format(**values)}")

    def shape(self, entry: Any, axes: tuple[str, ...], where: str) -> dict[str, AxisValue]:
        return self.axis_values(entry, axes, where)

    def axis_values(self, entry: Any, axes: tuple[str, ...], where: str) -> dict[str, AxisValue]:
        if not isinstance(entry, Mapping):
            raise self.fail(where, f"expected a mapping of {list(axes)}, got {entry!r}")
        extra = sorted(set(entry) - set(axes), key=str)
        if extra:
            raise self.fail(where, f"unknown axis {extra[0]!r} (axes: {list(axes)}){_did_you_mean(extra[0], axes)}")
        values: dict[str, AxisValue] = {}
        for axis in axes:
            value = self.get(entry, axis, (int, str), where)
            if isinstance(value, int) and value <= 0:
                raise self.fail(f"{where}.{axis}", f"must be positive, got {value!r}")
            if isinstance(value, str) and not (_IDENT.match(value) or _NUMBERED.match(value)):
                raise self.fail(f"{where}.{axis}", f"not a word: {value!r}")
            values[axis] = value
        return values

    def launcher(self, raw: Mapping[str, Any], names: set[str]) -> Launcher:
        self.fields(raw, LAUNCHER_FIELDS, "launcher")
        name = self.get(raw, "name", str, "launcher")
        if not _IDENT.match(name):
            raise self.fail("launcher.name", f"not a C identifier: {name!r}")
        params = []
        for i, entry in enumerate(self.get(raw, "params", list, "launcher")):
            where = f"launcher.params[{i}]"
            self.fields(entry, PARAM_FIELDS, where)
            role = self.get(entry, "role", str, where)
            if role not in ROLES:
                raise self.fail(f"{where}.role", f"{role!r} is not one of {', '.join(ROLES)}")
            if role != "scalar" and "value" in entry:
                raise self.fail(f"{where}.value", f"only a scalar takes a value, this parameter is {role!r}")
            if (role == "host") != ("of" in entry):
                raise self.fail(f"{where}.of", "a host parameter names the input it mirrors (`of`), no other does")
            dtype = self.get(entry, "dtype", str, where, default=None)
            if role in ("input", "output") and dtype not in DTYPES:
                raise self.fail(f"{where}.dtype", f"{dtype!r} is not one of {', '.join(DTYPES)}")
            shape = tuple(
                self.formula(d, names, f"{where}.shape[{j}]")
                for j, d in enumerate(self.get(entry, "shape", list, where, default=[]))
            )
            if role in ("input", "output") and not shape:
                raise self.fail(f"{where}.shape", "inputs and outputs need a shape")
            value = entry.get("value")
            params.append(
                Param(
                    name=self.get(entry, "name", str, where),
                    ctype=self.get(entry, "type", str, where),
                    role=role,
                    dtype=dtype,
                    shape=shape,
                    value=self.formula(value, names, f"{where}.value") if role == "scalar" else None,
                    of=self.get(entry, "of", str, where) if role == "host" else None,
                )
            )
        self.unique(((f"launcher.params[{i}]", p.name) for i, p in enumerate(params)), "parameter")
        for role in ("output", "stream", "workspace", "workspace_bytes"):
            if not any(p.role == role for p in params):
                raise self.fail("launcher.params", f"no parameter has role {role!r}")
        return Launcher(name, self.get(raw, "returns", str, "launcher"), tuple(params))

    def callable_path(self, raw: Any, key: str, where: str) -> str:
        text: str = self.get(raw, key, str, where)
        if not _CALLABLE.match(text):
            raise self.fail(f"{where}.{key}" if where else key, f"expected 'module:function', got {text!r}")
        return text

    def baseline(self, raw: Any, where: str) -> Baseline:
        self.fields(raw, BASELINE_FIELDS, where)
        requires = self.get(raw, "requires", list, where, default=[])
        for i, module in enumerate(requires):
            if not isinstance(module, str) or not _MODULE.match(module):
                raise self.fail(f"{where}.requires[{i}]", f"not a module name: {module!r}")
        return Baseline(
            self.get(raw, "library", str, where), self.callable_path(raw, "function", where), tuple(requires)
        )

    def derived(self, raw: Any, launcher: Launcher) -> Derived:
        inputs = [p.name for p in launcher.params if p.role == "input"]
        function, names = self.made_inputs(raw, "derived_inputs", inputs, "input")
        if set(names) == set(inputs):
            raise self.fail("derived_inputs.names", f"expected some of the inputs, each once, not all: {list(names)!r}")
        return Derived(function, names)

    def host_inputs(self, raw: Any, launcher: Launcher) -> HostInputs:
        integers = [p.name for p in launcher.params if p.role == "input" and p.dtype == "i32"]
        return HostInputs(*self.made_inputs(raw, "host_inputs", integers, "i32 input"))

    def made_inputs(self, raw: Any, where: str, allowed: list[str], what: str) -> tuple[str, tuple[str, ...]]:
        """`{function, names}`: the function's path and the inputs it makes, each one of `allowed`, once."""
        self.fields(raw, DERIVED_FIELDS, where)
        names = self.get(raw, "names", list, where)
        for i, name in enumerate(names):
            if name not in allowed:
                raise self.fail(
                    f"{where}.names[{i}]",
                    f"{name!r} is not an {what} ({what}s: {allowed}){_did_you_mean(name, allowed)}",
                )
        if not names or len(set(names)) != len(names):
            raise self.fail(f"{where}.names", f"expected {what}s, each once: {names!r}")
        return self.callable_path(raw, "function", where), tuple(names)

    def counts(self, raw: Any, axes: set[str]) -> Counts:
        self.fields(raw, DERIVED_FIELDS, "counts")
        names = self.get(raw, "names", list, "counts")
        for i, name in enumerate(names):
            if not isinstance(name, str) or not _IDENT.match(name) or name in axes:
                raise self.fail(f"counts.names[{i}]", f"not a name apart from the axes {sorted(axes)}: {name!r}")
        if not names or len(set(names)) != len(names):
            raise self.fail("counts.names", f"expected names, each once: {names!r}")
        return Counts(self.callable_path(raw, "function", "counts"), tuple(names))

    def tolerances(self, raw: Mapping[str, Any]) -> dict[str, Tolerance]:
        out = {}
        for dtype, entry in raw.items():
            if dtype not in DTYPES:
                known = f"(known: {', '.join(DTYPES)}){_did_you_mean(dtype, DTYPES)}"
                raise self.fail(f"tolerances.{dtype}", f"unknown dtype {known}")
            self.fields(entry, TOLERANCE_FIELDS, f"tolerances.{dtype}")
            atol = self.number(entry, "atol", f"tolerances.{dtype}")
            rtol = self.number(entry, "rtol", f"tolerances.{dtype}")
            out[dtype] = Tolerance(atol, rtol)
        return out

    def number(self, raw: Any, key: str, where: str) -> float:
        value = self.get(raw, key, (int, float), where)
        if value < 0:
            raise self.fail(f"{where}.{key}", f"must not be negative, got {value!r}")
        return float(value)

    def fraction(self, raw: Any, key: str) -> float:
        value = self.number(raw, key, "")
        if not 0 < value <= 1:
            raise self.fail(key, f"must be in (0, 1], got {value!r}")
        return value

    def share(self, raw: Any, key: str) -> float:
        value = self.number(raw, key, "")
        if not value <= 1:
            raise self.fail(key, f"must be in [0, 1], got {value!r}")
        return value

    def distribution(self, raw: Any, where: str) -> Distribution:
        name = self.get(raw, "name", str, where)
        if name not in DISTRIBUTIONS:
            raise self.fail(f"{where}.name", f"{name!r} is not one of {', '.join(DISTRIBUTIONS)}")
        unknown = sorted(set(raw) - {"name"} - DISTRIBUTIONS[name], key=str)
        if unknown:
            known = sorted(DISTRIBUTIONS[name])
            raise self.fail(
                f"{where}.{unknown[0]}",
                f"not a parameter of {name!r} (known: {known}){_did_you_mean(unknown[0], known)}",
            )
        return Distribution(name, {k: float(self.get(raw, k, (int, float), where)) for k in raw if k != "name"})


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    words = {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "a list",
        Mapping: "a mapping",
        bool: "true/false",
    }
    return " or ".join(words.get(k, k.__name__) for k in _as_tuple(kind))


def _did_you_mean(word: Any, choices: Collection[str]) -> str:
    """`; did you mean 'min_tensor_share'?` for the choice closest to a misspelt `word`, or nothing."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


@dataclass(frozen=True)
class _FormulaFailure:
    field: str  # where the formula is in the task file
    why: str  # "'2 * M * N * K' for gemm-n128-k2048: '2 * M' exceeds 1e+30 in magnitude"


def _formula_failure(family: Family, shape: Mapping[str, AxisValue]) -> _FormulaFailure | None:
    """The first formula of `family` that cannot be evaluated, within its bounds, for a task on `shape`."""
    formulas = family.formulas()
    for task in family.tasks:
        try:
            values = family.values(task, shape)
        except (ValueError, TypeError, KeyError, ImportError, AttributeError) as exc:
            return _FormulaFailure("counts.function", f"{type(exc).__name__}: {exc}, for {task.name}")
        for field, formula in formulas.items():
            try:
                formula(values)
            except FormulaError as exc:
                return _FormulaFailure(field, f"{formula.text!r} for {task.name}: {exc}")
    return None


def choose_baseline(families: list[Family], name: str | None) -> list[Family]:
    """The families that declare baseline `name` timed against it, the others against their default;
    UnknownBaseline when none declares it. `None` keeps every family's default."""
    if name is None:
        return families
    if not any(name in f.baselines for f in families):
        declared = sorted({f"{n} in {f.file.name}" for f in families for n in f.baselines if n != DEFAULT_BASELINE})
        raise UnknownBaseline(
            f"no task file declares a baseline {name!r} (declared under `baselines:`: {', '.join(declared) or 'none'}; "
            f"{DEFAULT_BASELINE!r} is each file's `baseline:`)"
        )
    return [f.with_baseline(name) if name in f.baselines else f for f in families]


def replace_hidden(families: list[Family], path: Path) -> list[Family]:
    """Hidden shapes from a file given at run time (`{family: [shape, ...]}`) replace the catalogue's;
    each must be new to the family and keep its formulas within bounds."""
    raw = _read(path)
    reader = _Reader(path)
    if not isinstance(raw, Mapping):
        raise reader.fail("top level", f"expected a mapping of family → shapes, got {raw!r}")
    by_name = {f.name: f for f in families}
    for name in raw:
        if name not in by_name:
            known = f"(known: {', '.join(by_name)}){_did_you_mean(name, by_name)}"
            raise reader.fail(str(name), f"unknown family {known}")
    out = []
    for family in families:
        if family.name in raw:
            entries = reader.get(raw, family.name, list, "")
            hidden = [(f"{family.name}[{i}]", s) for i, s in enumerate(entries)]
            shapes = checked_shapes(family, hidden, path)
            visible = [(f"shapes.visible[{i}] of {family.file}", s) for i, s in enumerate(family.visible)]
            named = [(where, s) for (where, _), s in zip(hidden, shapes, strict=True)]
            reader.unique(((where, shape_id(family.shape_id, s)) for where, s in visible + named), "shape")
            family = replace(family, hidden=tuple(shapes))
        out.append(family)
    return out


def checked_shapes(family: Family, entries: Sequence[tuple[str, Any]], path: Path) -> list[dict[str, AxisValue]]:
    """Shapes given outside the family's file (a shapes file, a FlashInfer-Trace tree), each `(where, raw)`
    checked: the family's shape axes, positive integers or words, every formula within bounds for every task;
    TaskFileError names `path`, `where` and the value."""
    reader = _Reader(path)
    shapes = [(where, reader.shape(raw, family.shape_axes, where)) for where, raw in entries]
    for where, shape in shapes:
        failure = _formula_failure(family, shape)
        if failure:
            raise reader.fail(where, f"makes {failure.field} of {family.file} fail: {failure.why}")
    return [shape for _, shape in shapes]


def resolved_params(family: Family, values: dict[str, AxisValue]) -> list[dict[str, Any]]:
    """The launcher's parameters with shapes and scalar values computed for one shape."""
    out = []
    for p in family.launcher.params:
        entry: dict[str, Any] = {"name": p.name, "role": p.role, "ctype": p.ctype, "dtype": p.dtype}
        if p.shape:
            entry["shape"] = [int(d(values)) for d in p.shape]
        if p.of is not None:
            entry["of"] = p.of
        if p.value is not None:
            value = p.value(values)
            entry["value"] = float(value) if p.ctype in ("float", "double") else int(value)
        out.append(entry)
    return out
