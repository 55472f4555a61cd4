"""FlashInfer-Trace trees read as data: definitions and workloads, and the ptxbench family a definition is.

A FlashInfer-Trace tree (the format flashinfer-bench exchanges kernels in) holds `definitions/**.json` (one
operator each: axes, tensor specs, a Python reference), `workloads/**.jsonl` (one workload trace a line:
concrete var-axis values and how each input is made), `solutions/` and `traces/`. `load_tree` reads the
first two into frozen dataclasses, checking what flashinfer-bench 0.1.2's models check (and that a workload
names its definition's inputs and axes), and raises `TraceFileError` naming the file, line and field.
Unknown fields are ignored, as flashinfer-bench ignores them. `family_for` says which ptxbench family and
task axes a definition is, or why none; `int_tensor` and `safetensors_int32` read and write the integer
blobs (page tables). Nothing here imports flashinfer-bench, torch or safetensors.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

# flashinfer-bench 0.1.2's DType values
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1")
DTYPES += ("int64", "int32", "int16", "int8", "bool")


class TraceFileError(ValueError):
    """A file of a FlashInfer-Trace tree that does not follow the schema; the message names file, line and field."""


@dataclass(frozen=True)
class Axis:
    name: str
    value: int | None  # a const axis's value; None: a var axis, set by each workload
    description: str | None = None


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[str, ...] | None  # axis names; None: a scalar
    dtype: str  # one of DTYPES
    description: str | None = None


@dataclass(frozen=True)
class Definition:
    name: str
    op_type: str
    axes: tuple[Axis, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    reference: str  # Python source defining `run(*inputs)`
    tags: tuple[str, ...] = ()
    description: str | None = None
    constraints: tuple[str, ...] = ()
    file: Path | None = field(default=None, compare=False)

    @property
    def const_axes(self) -> dict[str, int]:
        return {a.name: a.value for a in self.axes if a.value is not None}

    @property
    def var_axes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes if a.value is None)

    def tensor(self, name: str) -> TensorSpec | None:
        return next((t for t in (*self.inputs, *self.outputs) if t.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """The definition as flashinfer-bench's `Definition` model reads it."""
        out: dict[str, Any] = {
            "name": self.name,
            "op_type": self.op_type,
            "axes": {a.name: _axis_json(a) for a in self.axes},
            "inputs": {t.name: _tensor_json(t) for t in self.inputs},
            "outputs": {t.name: _tensor_json(t) for t in self.outputs},
            "reference": self.reference,
            "tags": list(self.tags),
            "constraints": list(self.constraints),
        }
        if self.description is not None:
            out["description"] = self.description
        return out


@dataclass(frozen=True)
class RandomInput:
    name: str


@dataclass(frozen=True)
class ScalarInput:
    name: str
    value: int | float | bool


@dataclass(frozen=True)
class SafetensorsInput:
    name: str
    path: str  # relative to the tree's root
    tensor_key: str


WorkloadInput = RandomInput | ScalarInput | SafetensorsInput


@dataclass(frozen=True)
class Workload:
    definition: str
    uuid: str
    axes: Mapping[str, int]  # the var axes' values
    inputs: tuple[WorkloadInput, ...]
    file: Path | None = field(default=None, compare=False)
    line: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The `Workload` object of flashinfer-bench (axes, inputs, uuid)."""
        inputs: dict[str, Any] = {}
        for given in self.inputs:
            if isinstance(given, ScalarInput):
                inputs[given.name] = {"type": "scalar", "value": given.value}
            elif isinstance(given, SafetensorsInput):
                inputs[given.name] = {"type": "safetensors", "path": given.path, "tensor_key": given.tensor_key}
            else:
                inputs[given.name] = {"type": "random"}
        return {"axes": dict(self.axes), "inputs": inputs, "uuid": self.uuid}

    def trace_json(self) -> dict[str, Any]:
        """The workload trace (a line of `workloads/*.jsonl`): no solution, no evaluation."""
        return {"definition": self.definition, "workload": self.to_json(), "solution": None, "evaluation": None}


@dataclass(frozen=True)
class Tree:
    root: Path
    definitions: Mapping[str, Definition]
    workloads: tuple[Workload, ...]

    def workloads_of(self, definition: str) -> list[Workload]:
        return [w for w in self.workloads if w.definition == definition]

    @property
    def files(self) -> list[Path]:
        """The definition and workload files read (what a run's task-set hash covers)."""
        found = {d.file for d in self.definitions.values()} | {w.file for w in self.workloads}
        return sorted(f for f in found if f is not None)


def load_tree(path: Path) -> Tree:
    """The definitions and workloads of the FlashInfer-Trace tree at `path`; TraceFileError when one is malformed."""
    if not (path / "definitions").is_dir():
        raise TraceFileError(f"{path}: no definitions/ folder: not a FlashInfer-Trace tree")
    definitions: dict[str, Definition] = {}
    for file in sorted((path / "definitions").rglob("*.json")):
        definition = _definition(_Where(file), _json(file))
        first = definitions.get(definition.name)
        if first is not None:
            raise TraceFileError(
                f"{file}: field 'name': definition {definition.name!r} is also defined in {first.file}"
            )
        definitions[definition.name] = definition
    workloads = []
    for file in sorted((path / "workloads").rglob("*.jsonl")):
        for number, line in enumerate(file.read_bytes().splitlines(), start=1):
            if line.strip():
                where = _Where(file, number)
                try:
                    raw = json.loads(line)
                except ValueError as exc:
                    raise TraceFileError(f"{where}: not valid JSON: {exc}") from None
                workloads.append(_workload(where, raw, definitions))
    return Tree(path, definitions, tuple(workloads))


def family_for(definition: Definition) -> tuple[str, dict[str, int | str]] | str:
    """The ptxbench family and task axes `definition` is, or why it is none (a sentence). A definition ptxbench
    exported names its family in a tag and its task's axes as its const axes and tags (`mask:causal`)."""
    families = [tag.split(":", 1)[1] for tag in definition.tags if tag.startswith("ptxbench_family:")]
    if families:
        words = dict(tag.split(":", 1) for tag in definition.tags if ":" in tag and not tag.startswith(_OURS))
        return families[0], {**definition.const_axes, **words}
    if definition.op_type == "gemm":
        return _gemm(definition)
    if definition.op_type == "gqa_paged":
        return _gqa_paged(definition)
    return f"op_type {definition.op_type!r} has no ptxbench family"


_OURS = ("ptxbench_family:", "source:")  # the tags ptxbench's export adds beside the task's words
GQA_AXES = {"num_qo_heads": "H", "num_kv_heads": "KV", "head_dim": "D", "page_size": "P"}
MASKS = ("causal", "full")


def _gemm(d: Definition) -> tuple[str, dict[str, int | str]] | str:
    """C[M, N] = A[M, K] · B[N, K]ᵀ in bf16, M var, N and K const: ptxbench's gemm task (N, K)."""
    wanted = {"A": ("M", "K"), "B": ("N", "K")}
    got = {t.name: (t.shape, t.dtype) for t in d.inputs}
    if got != {name: (shape, "bfloat16") for name, shape in wanted.items()}:
        return f"gemm definition {d.name!r} is not bf16 A[M, K], B[N, K] (inputs: {_shown(got)})"
    outputs = {t.name: (t.shape, t.dtype) for t in d.outputs}
    if outputs != {"C": (("M", "N"), "bfloat16")}:
        return f"gemm definition {d.name!r} does not output bf16 C[M, N] (outputs: {_shown(outputs)})"
    if "M" not in d.var_axes or not {"N", "K"} <= set(d.const_axes):
        return f"gemm definition {d.name!r} needs M var and N, K const (ptxbench's gemm tasks fix N and K)"
    return "gemm", {"N": d.const_axes["N"], "K": d.const_axes["K"]}


def _gqa_paged(d: Definition) -> tuple[str, dict[str, int | str]] | str:
    """Paged GQA decode (no `qo_indptr`) or prefill (`qo_indptr`; causal unless a `mask:full` tag says not)."""
    missing = [axis for axis in GQA_AXES if axis not in d.const_axes]
    if missing:
        return f"gqa_paged definition {d.name!r} lacks const axes {', '.join(missing)}"
    dtypes = {name: spec.dtype for name in ("q", "k_cache", "v_cache") if (spec := d.tensor(name))}
    if set(dtypes.values()) != {"bfloat16"} or len(dtypes) != 3:
        return f"gqa_paged definition {d.name!r}: ptxbench's families take bf16 q, k_cache, v_cache (got {dtypes})"
    axes: dict[str, int | str] = {key: d.const_axes[axis] for axis, key in GQA_AXES.items()}
    if axes["KV"] == 0 or int(axes["H"]) % int(axes["KV"]):
        return f"gqa_paged definition {d.name!r}: num_qo_heads {axes['H']} is no multiple of num_kv_heads {axes['KV']}"
    tables = ["qo_indptr", "kv_indptr"] if d.tensor("qo_indptr") else ["kv_indptr"]
    if axes["P"] != 1:  # a page of one token is full; longer pages need the last one's fill
        tables.append("kv_last_page_len")
    lacking = [name for name in tables if d.tensor(name) is None]
    if lacking:
        return f"gqa_paged definition {d.name!r} has no {lacking[0]} input: its sequences' lengths are not given"
    if d.tensor("qo_indptr") is None:
        return "gqa_paged_decode", axes
    masks = [tag.split(":", 1)[1] for tag in d.tags if tag.startswith("mask:")]
    mask = masks[0] if masks else "causal"  # flashinfer-bench's prefill definitions are causal
    if mask not in MASKS:
        return f"gqa_paged definition {d.name!r}: tag 'mask:{mask}' is none of {', '.join(MASKS)}"
    return "gqa_paged_prefill", {**axes, "mask": mask}


def int_tensor(root: Path, given: SafetensorsInput) -> list[int]:
    """The integers of tensor `given.tensor_key` (int32 or int64, any shape, flattened) in the safetensors file
    `given.path` under `root`; TraceFileError naming the file when it is missing or malformed."""
    file = root / given.path
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise TraceFileError(f"{file}: cannot read {given.name}'s safetensors file: {exc.strerror}") from None
    size = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    try:
        header = json.loads(data[8 : 8 + size]) if 0 < size <= len(data) - 8 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise TraceFileError(f"{file}: not a safetensors file (no JSON header after its 8-byte length)")
    entry = header.get(given.tensor_key)
    if not isinstance(entry, dict):
        raise TraceFileError(
            f"{file}: no tensor {given.tensor_key!r} (has {sorted(k for k in header if k[:2] != '__')})"
        )
    width = {"I32": 4, "I64": 8}.get(entry.get("dtype"))  # type: ignore[arg-type]
    offsets = entry.get("data_offsets")
    body = len(data) - 8 - size
    if width is None:
        raise TraceFileError(f"{file}: tensor {given.tensor_key!r} is {entry.get('dtype')}, expected I32 or I64")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_count(o) for o in offsets)
        or not offsets[0] <= offsets[1] <= body
        or (offsets[1] - offsets[0]) % width
    ):
        raise TraceFileError(f"{file}: tensor {given.tensor_key!r} has data_offsets {_shown(offsets)} outside its data")
    raw = data[8 + size + offsets[0] : 8 + size + offsets[1]]
    return [int.from_bytes(raw[i : i + width], "little", signed=True) for i in range(0, len(raw), width)]


def safetensors_int32(tensors: Mapping[str, list[int]]) -> bytes:
    """One-dimensional int32 tensors in the safetensors layout: the header's length (8 bytes, little-endian),
    the JSON header (dtype, shape and byte range of each), padded with spaces to 8 bytes, then the data."""
    header: dict[str, Any] = {}
    data = b""
    for name, values in tensors.items():
        raw = b"".join(v.to_bytes(4, "little", signed=True) for v in values)
        header[name] = {"dtype": "I32", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data


# Reading


@dataclass(frozen=True)
class _Where:
    file: Path
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else str(self.file)

    def fail(self, field: str, problem: str) -> TraceFileError:
        return TraceFileError(f"{self}: field {field!r}: {problem}")

    def get(self, raw: Any, key: str, prefix: str = "") -> Any:
        if key not in raw:
            raise self.fail(prefix + key, "missing")
        return raw[key]

    def text(self, raw: Any, key: str, prefix: str = "", optional: bool = False) -> str | None:
        if optional and raw.get(key) is None:
            return None
        value = self.get(raw, key, prefix)
        if not isinstance(value, str) or not value:
            raise self.fail(prefix + key, f"expected a non-empty string, got {_shown(value)}")
        return value

    def mapping(self, raw: Any, key: str, prefix: str = "") -> dict[str, Any]:
        value = self.get(raw, key, prefix)
        if not isinstance(value, dict):
            raise self.fail(prefix + key, f"expected an object, got {_shown(value)}")
        return value

    def texts(self, raw: Any, key: str) -> tuple[str, ...]:
        value = raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, f"expected a list of non-empty strings, got {_shown(value)}")
        return tuple(value)


def _json(file: Path) -> Any:
    try:
        return json.loads(file.read_bytes())
    except json.JSONDecodeError as exc:
        raise TraceFileError(f"{file}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise TraceFileError(f"{file}: not valid JSON: {exc}") from None


def _definition(where: _Where, raw: Any) -> Definition:
    if not isinstance(raw, dict):
        raise TraceFileError(f"{where}: expected a definition object, got {_shown(raw)}")
    axes = tuple(_axis(where, name, spec) for name, spec in where.mapping(raw, "axes").items())
    known = {a.name for a in axes}
    inputs, outputs = (
        tuple(_tensor(where, f"{kind}.{n}", n, s, known) for n, s in where.mapping(raw, kind).items())
        for kind in ("inputs", "outputs")
    )
    both = sorted({t.name for t in inputs} & {t.name for t in outputs})
    if both:
        raise where.fail("outputs", f"{both[0]!r} is also an input; input and output names must differ")
    reference = where.text(raw, "reference")
    assert reference is not None
    try:
        tree = ast.parse(reference)
    except SyntaxError as exc:
        raise where.fail("reference", f"not valid Python: {exc.msg} (line {exc.lineno})") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "run" for node in tree.body):
        raise where.fail("reference", "defines no top-level function 'run'")
    constraints = where.texts(raw, "constraints")
    for i, constraint in enumerate(constraints):
        try:
            ast.parse(constraint, mode="eval")
        except SyntaxError:
            raise where.fail(f"constraints[{i}]", f"not a Python expression: {constraint!r}") from None
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise where.fail("description", f"expected a string, got {_shown(description)}")
    name, op_type = where.text(raw, "name"), where.text(raw, "op_type")
    assert name is not None and op_type is not None
    return Definition(
        name, op_type, axes, inputs, outputs, reference, where.texts(raw, "tags"), description, constraints, where.file
    )


def _axis(where: _Where, name: str, spec: Any) -> Axis:
    field = f"axes.{name}"
    if not isinstance(spec, dict) or spec.get("type") not in ("const", "var"):
        raise where.fail(field, f"expected {{'type': 'const', 'value': N}} or {{'type': 'var'}}, got {_shown(spec)}")
    description = where.text(spec, "description", f"{field}.", optional=True)
    if spec["type"] == "var":
        return Axis(name, None, description)
    value = where.get(spec, "value", f"{field}.")
    if not _count(value):
        raise where.fail(f"{field}.value", f"expected a non-negative integer, got {_shown(value)}")
    return Axis(name, value, description)


def _tensor(where: _Where, field: str, name: str, spec: Any, axes: set[str]) -> TensorSpec:
    if not isinstance(spec, dict):
        raise where.fail(field, f"expected a tensor spec object, got {_shown(spec)}")
    shape = where.get(spec, "shape", f"{field}.")
    if shape is not None:
        if not isinstance(shape, list) or not all(isinstance(a, str) and a for a in shape):
            raise where.fail(f"{field}.shape", f"expected a list of axis names or null, got {_shown(shape)}")
        unknown = [a for a in shape if a not in axes]
        if unknown:
            raise where.fail(f"{field}.shape", f"axis {unknown[0]!r} is not in 'axes' ({', '.join(sorted(axes))})")
    dtype = where.get(spec, "dtype", f"{field}.")
    if dtype not in DTYPES:
        raise where.fail(f"{field}.dtype", f"{_shown(dtype)} is not one of {', '.join(DTYPES)}")
    description = where.text(spec, "description", f"{field}.", optional=True)
    return TensorSpec(name, None if shape is None else tuple(shape), dtype, description)


def _workload(where: _Where, raw: Any, definitions: Mapping[str, Definition]) -> Workload:
    if not isinstance(raw, dict):
        raise TraceFileError(f"{where}: expected a workload trace object, got {_shown(raw)}")
    for key in ("solution", "evaluation"):
        if raw.get(key) is not None:
            raise where.fail(key, "set: a workload trace has none (traces with evaluations belong under traces/)")
    name = where.text(raw, "definition")
    assert name is not None
    definition = definitions.get(name)
    if definition is None:
        raise where.fail("definition", f"{name!r} is not defined under definitions/")
    body = where.mapping(raw, "workload")
    uuid = where.text(body, "uuid", "workload.")
    assert uuid is not None
    axes = where.mapping(body, "axes", "workload.")
    declared = {a.name: a for a in definition.axes}
    for axis, value in axes.items():
        if not _count(value):
            raise where.fail(f"workload.axes.{axis}", f"expected a non-negative integer, got {_shown(value)}")
        if axis not in declared:
            raise where.fail(f"workload.axes.{axis}", f"not an axis of {name!r} ({', '.join(declared)})")
        if declared[axis].value not in (None, value):
            raise where.fail(f"workload.axes.{axis}", f"{value} differs from the const value {declared[axis].value}")
    missing = [a for a in definition.var_axes if a not in axes]
    if missing:
        raise where.fail("workload.axes", f"no value for var axis {missing[0]!r} of {name!r}")
    input_names = [t.name for t in definition.inputs]
    inputs = []
    for key, spec in where.mapping(body, "inputs", "workload.").items():
        if key not in input_names:
            raise where.fail(f"workload.inputs.{key}", f"not an input of {name!r} ({', '.join(input_names)})")
        inputs.append(_input(where, f"workload.inputs.{key}", key, spec))
    return Workload(name, uuid, dict(axes), tuple(inputs), where.file, where.line)


def _input(where: _Where, field: str, name: str, spec: Any) -> WorkloadInput:
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "random":
        return RandomInput(name)
    if kind == "scalar":
        value = where.get(spec, "value", f"{field}.")
        if not isinstance(value, (int, float, bool)):
            raise where.fail(f"{field}.value", f"expected a number or true/false, got {_shown(value)}")
        return ScalarInput(name, value)
    if kind == "safetensors":
        path, key = where.text(spec, "path", f"{field}."), where.text(spec, "tensor_key", f"{field}.")
        assert path is not None and key is not None
        if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
            raise where.fail(f"{field}.path", f"{path!r} leaves the tree: a path relative to its root, without '..'")
        return SafetensorsInput(name, path, key)
    raise where.fail(f"{field}.type", f"expected 'random', 'scalar' or 'safetensors', got {_shown(kind)}")


def _axis_json(axis: Axis) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "var"} if axis.value is None else {"type": "const", "value": axis.value}
    if axis.description is not None:
        out["description"] = axis.description
    return out


def _tensor_json(tensor: TensorSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"shape": None if tensor.shape is None else list(tensor.shape), "dtype": tensor.dtype}
    if tensor.description is not None:
        out["description"] = tensor.description
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
