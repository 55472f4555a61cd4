"""The trusted child: torch. It generates every input set from the seed, computes the references and
times the baseline under the same protocol as the candidate. It never loads a candidate's code."""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..dtypes import DTYPES
from . import libraries, wire
from .cudart import Runtime
from .timing import Clock, RunFailed
from .tracing import Tracer

KEPT = 2  # shapes whose sets stay made
TORCH_DTYPES = {name: getattr(torch, d.long_name) for name, d in DTYPES.items()}


def _resolve(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


def generate(shape: list[int], dtype: str, distribution: dict[str, Any], seed: int) -> torch.Tensor:
    """Seeded values on the GPU: normal, uniform, or normal with a fraction of large outliers."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    name = distribution["name"]
    if name == "uniform":
        low, high = distribution.get("low", -1.0), distribution.get("high", 1.0)
        values = torch.rand(shape, generator=generator, device="cuda") * (high - low) + low
    else:
        values = torch.randn(shape, generator=generator, device="cuda") * distribution.get("std", 1.0)
        if name == "spiky":
            outliers = torch.rand(shape, generator=generator, device="cuda") < distribution["outlier_fraction"]
            values = torch.where(outliers, values * distribution["outlier_scale"], values)
    return values.to(TORCH_DTYPES[dtype])


def _raw(tensor: torch.Tensor) -> bytes:
    flat = tensor.contiguous().view(-1)
    if flat.dtype == torch.bfloat16:
        flat = flat.view(torch.int16)
    return bytes(flat.cpu().numpy().tobytes())


class Shape:
    """Input sets, references and the baseline for one (task, shape)."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.params: list[dict[str, Any]] = request["params"]
        self.values: dict[str, Any] = request["values"]
        folder = Path(request["folder"])  # input sets, which candidates read
        hidden = Path(request["references"])  # references, which a sandboxed candidate cannot see
        self.folders = (folder, hidden)
        reference = _resolve(request["reference"])
        derived = request["derived"]  # inputs computed from the drawn ones: {function, names}, or None
        derive = None if derived is None else _resolve(derived["function"])
        host: dict[str, list[int]] = request["host"]  # page tables: made by the harness, the same in every set
        not_drawn = {*(derived or {}).get("names", ()), *host}
        drawn = [p for p in self.params if p["role"] == "input" and p["name"] not in not_drawn]
        shapes = {p["name"]: p["shape"] for p in self.params if "shape" in p}
        self.baseline: Callable[..., Any] | None = None
        self.baseline_path: str | None = None
        self.sets: list[dict[str, torch.Tensor]] = []
        self.files: list[dict[str, dict[str, str]]] = []
        for index, distribution in enumerate(request["distributions"]):
            tensors = {
                p["name"]: generate(
                    p["shape"], p["dtype"], distribution, _seed(request["seed"], request["key"], index, p["name"])
                )
                for p in drawn
            }
            for name, values in host.items():
                tensors[name] = torch.tensor(values, dtype=torch.int32, device="cuda")
                if list(tensors[name].shape) != shapes[name]:
                    raise ValueError(f"host input {name}: {len(values)} values, its shape is {shapes[name]}")
            if derived is not None and derive is not None:
                made = derive(tensors, self.values, _seed(request["seed"], request["key"], index, "derived"))
                if set(made) != set(derived["names"]):
                    raise ValueError(f"{derived['function']} returned {sorted(made)}, expected {derived['names']}")
                tensors.update(made)
            with torch.no_grad():
                expected = reference(tensors, self.values)
            files: dict[str, dict[str, str]] = {"inputs": {}, "reference": {}}
            for name, tensor in tensors.items():
                path = folder / str(index) / "inputs" / f"{name}.bin"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(_raw(tensor))
                files["inputs"][name] = str(path)
            for name, tensor in expected.items():
                path = hidden / str(index) / f"{name}.bin"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(_raw(tensor.float()))
                files["reference"][name] = str(path)
            self.sets.append(tensors)
            self.files.append(files)
        self.current = {n: t.clone() for n, t in self.sets[0].items()}
        self.outputs = {
            p["name"]: torch.empty(p["shape"], dtype=TORCH_DTYPES[p["dtype"]], device="cuda")
            for p in self.params
            if p["role"] == "output"
        }
        self.state: dict[str, Any] = {}

    def use(self, baseline: str | None) -> None:
        """Time `baseline` from now on (None: nothing); the state of the one before is dropped."""
        if baseline != self.baseline_path:
            self.baseline = None if baseline is None else _resolve(baseline)
            self.baseline_path = baseline
            self.state = {}

    def prepare(self, index: int) -> None:
        for name, tensor in self.sets[index % len(self.sets)].items():
            self.current[name].copy_(tensor)
        for tensor in self.outputs.values():
            tensor.fill_(float("nan"))

    def call(self) -> int:
        if self.baseline is None:
            raise libraries.Unavailable("the baseline's library could not be imported when this shape was prepared")
        self.baseline(self.current, self.outputs, self.values, self.state)
        return 0

    def save_outputs(self, folder: Path) -> dict[str, str]:
        """The outputs as the last call left them, as raw files (bf16 as its bits)."""
        folder.mkdir(parents=True, exist_ok=True)
        saved = {}
        for name, tensor in self.outputs.items():
            path = folder / f"{name}.bin"
            path.write_bytes(_raw(tensor))
            saved[name] = str(path)
        return saved


class Trusted:
    def __init__(self) -> None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        library = Path(torch.__file__).parent.parent / "nvidia" / "cu13" / "lib" / "libcudart.so.13"
        self.rt = Runtime(library if library.exists() else Path(os.environ["PTXBENCH_CUDART"]))
        self.shapes: dict[str, Shape] = {}
        self.clock: Clock | None = None

    def _shape(self, request: dict[str, Any]) -> Shape:
        """The shape's sets, made once while it stays among the last KEPT used: a candidate's evaluation moves
        to the sanitizer's shape and back (each shape's files reach gigabytes in /dev/shm)."""
        key = request["key"]
        shape = self.shapes.pop(key, None)
        if shape is None:
            while len(self.shapes) >= KEPT:  # room first: the GPU holds every kept shape's sets too
                oldest = self.shapes.pop(next(iter(self.shapes)))
                for folder in oldest.folders:
                    shutil.rmtree(folder, ignore_errors=True)
            shape = Shape(request)
        self.shapes[key] = shape  # the most recently used last
        return shape

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "prepare":
            try:  # before the sets: a missing library is reported, the references are still made
                versions, unavailable = libraries.versions(request.get("requires", [])), None
            except libraries.Unavailable as exc:
                versions, unavailable = {}, str(exc)
            shape = self._shape(request)
            shape.use(request["baseline"] if unavailable is None else None)
            return {
                "sets": shape.files,
                "libraries": {
                    "torch": torch.__version__,
                    "cudnn": torch.backends.cudnn.version(),
                    "device": torch.cuda.get_device_name(),
                    **versions,
                },
                "unavailable": unavailable,
            }
        if op == "time":
            shape = self.shapes[request["key"]]
            if self.clock is None:
                self.clock = Clock(self.rt, Tracer(), torch.cuda.current_stream().cuda_stream)
            runs = self.clock.runs(int(request["runs"]), int(request["first"]), shape.prepare, shape.call)
            saved = {}
            if request.get("outputs_dir"):  # the last run's outputs, for a check of the baseline itself
                last = runs[-1]["index"]
                saved[str(last)] = shape.save_outputs(Path(request["outputs_dir"]) / str(last))
            return {"runs": runs, "saved": saved, "idle": self.rt.synchronize() == 0}
        raise ValueError(f"unknown request {op!r}")


def serve() -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    trusted = Trusted()
    while (request := wire.receive(sys.stdin)) is not None:
        if request.get("op") == "exit":
            break
        try:
            wire.send(replies, {"ok": True, **trusted.handle(request)})
        except (RunFailed, RuntimeError, ValueError, KeyError, OSError) as exc:
            wire.send(replies, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    serve()
