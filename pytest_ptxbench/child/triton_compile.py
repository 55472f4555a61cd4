"""The Triton compile child (untrusted, sandboxed): compiles a Triton candidate for an explicit GPU, no GPU needed.

`python -m pytest_ptxbench.child.triton_compile PLAN.json`. A compile-only driver stands in for CUDA's (the
plan's target, device 0, stream 0); every launch of a `@triton.jit` kernel compiles it (Triton's warmup) and is
recorded instead of run. The candidate's `run` is called once per shape of the plan, with torch "meta" tensors
where torch is importable, else stand-ins that Triton's binder takes for tensors, so each specialisation a
shape launches (alignment, divisibility of its integers) is built. Each distinct cubin is written to the plan's
cubin folder as `<kernel>-<sha256[:12]>.<arch>.cubin`, beside the Triton IR (`.ttir`) and options (`.json`) it
was compiled from (`triton_ir.py` compiles them again); the result file says, per shape, what was launched, or
the error, cut to the candidate's own frames.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.backends.nvidia.driver import ty_to_cpp
from triton.runtime.autotuner import Autotuner
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

from ..dtypes import DTYPES

MODULE = "candidate"  # the name the candidate's file is loaded under
ALIGNMENT = 1 << 20  # stand-in tensors lie this far apart, so every base is as aligned as a real allocation


class Refused(Exception):
    """Something the build does not allow (autotuning, a kernel from elsewhere); the message says what."""


class CompileOnlyDriver(DriverBase):  # type: ignore[misc]  # triton ships no type information
    """Triton's driver for a GPU that is not there: enough to specialise and compile, nothing to launch."""

    def __init__(self, capability: int) -> None:
        super().__init__()
        self.target = GPUTarget("cuda", capability, 32)

    @classmethod
    def is_active(cls) -> bool:
        return False  # never chosen by Triton itself: made active by `set_active`

    def map_python_to_cpp_type(self, ty: str) -> str:
        return str(ty_to_cpp(ty))

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("meta")

    def get_benchmarker(self) -> Any:
        raise Refused("benchmarking needs a GPU; the build compiles without one")


class TorchDtype(NamedTuple):
    """What Triton reads of a torch dtype: its name (`torch.bfloat16` → bf16) and its size."""

    name: str
    itemsize: int
    is_floating_point: bool

    def __str__(self) -> str:
        return f"torch.{self.name}"


@dataclass(frozen=True)
class Device:
    type: str
    index: int


STAND_IN_DTYPES = {name: TorchDtype(d.long_name, d.itemsize, d.floating) for name, d in DTYPES.items()}


class StandIn:
    """A contiguous tensor on device 0 that holds no memory: what Triton's binder and host-side tensor
    descriptors read of a torch tensor, where torch is not importable."""

    def __init__(self, shape: tuple[int, ...], dtype: TorchDtype, address: int) -> None:
        self.shape, self.dtype, self._address = shape, dtype, address
        self.device = Device("cuda", 0)

    def data_ptr(self) -> int:
        return self._address

    def stride(self) -> tuple[int, ...]:
        strides, step = [], 1
        for dim in reversed(self.shape):
            strides.append(step)
            step *= dim
        return tuple(reversed(strides))

    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    def element_size(self) -> int:
        return self.dtype.itemsize

    def is_contiguous(self) -> bool:
        return True


def tensor_factory() -> tuple[str, Callable[[tuple[int, ...], str, int], Any]]:
    """("meta", torch's meta tensors) where torch is importable, else ("stand-in", `StandIn`). The callable
    takes a shape, a task dtype (bf16, fp16, fp32, u8) and the tensor's index among the arguments."""
    try:
        import torch
    except ImportError:
        return "stand-in", lambda shape, dtype, index: StandIn(shape, STAND_IN_DTYPES[dtype], (index + 1) * ALIGNMENT)
    dtypes = {name: getattr(torch, d.long_name) for name, d in DTYPES.items()}
    return "meta", lambda shape, dtype, index: torch.empty(shape, dtype=dtypes[dtype], device="meta")


@dataclass
class Recorder:
    """The launches of the shape being compiled; each distinct cubin written once to `folder`."""

    candidate: Path
    folder: Path
    arch: str
    launches: list[dict[str, Any]]

    def record(self, jit: Any, kernel: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        cubin: bytes = kernel.asm["cubin"]
        digest = hashlib.sha256(cubin).hexdigest()
        path = self.folder / f"{kernel.name}-{digest[:12]}.{self.arch}.cubin"
        if not path.exists():  # with the IR and options it came from, which the build compiles again
            path.write_bytes(cubin)
            path.with_suffix(".ttir").write_text(kernel.asm["ttir"])
            metadata = {k: v for k, v in kernel.metadata._asdict().items() if k != "target"}
            path.with_suffix(".json").write_text(json.dumps(metadata, default=str))
        self.launches.append(
            {
                "kernel": kernel.name,
                "cubin": path.name,
                "grid": _grid(jit, grid, args, kwargs),
                "num_warps": kernel.metadata.num_warps,
                "shared": kernel.metadata.shared,
            }
        )

    def check_origin(self, jit: Any) -> None:
        source = Path(jit.fn.__code__.co_filename)
        if source != self.candidate:
            raise Refused(
                f"kernel {jit.fn.__name__} comes from {jit.fn.__module__}, not the candidate's file: launch only"
                " the candidate's own kernels"
            )


def _grid(jit: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int] | None:
    """The launch grid; a callable grid is called as Triton does, with the kernel's arguments by name.
    None where it is not a sequence of integers (computed from tensor values)."""
    if callable(grid):
        bound = inspect.signature(jit.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in jit.arg_names})
        bound.apply_defaults()
        grid = grid(dict(bound.arguments))
    try:
        return [int(g) for g in grid]
    except (TypeError, ValueError, RuntimeError):
        return None


def install(recorder: Recorder, capability: int) -> None:
    """The compile-only driver made active; launches compiled and recorded, never run; autotuning over
    more than one configuration refused (it times each on a GPU)."""
    driver.set_active(CompileOnlyDriver(capability))
    compile_and_launch = JITFunction.run
    tune = Autotuner.run

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if warmup:
            return compile_and_launch(self, *args, grid=grid, warmup=True, **kwargs)
        recorder.check_origin(self)
        kernel = compile_and_launch(self, *args, grid=grid, warmup=True, **kwargs)
        recorder.record(self, kernel, grid, args, kwargs)
        return kernel

    def one_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(self.configs) > 1:
            raise Refused(
                f"triton.autotune with {len(self.configs)} configs for {self.base_fn.__name__}: autotuning times"
                " each on a GPU and the harness compiles without one; give one triton.Config, or choose in run"
            )
        return tune(self, *args, **kwargs)

    JITFunction.run = compile_only
    Autotuner.run = one_config


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    spec.loader.exec_module(module)
    return module


def explain(exc: BaseException, candidate: Path) -> str:
    """The traceback cut to the candidate's own frames, its path shortened to the file's name."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(candidate)]
    last = str(exc) if isinstance(exc, Refused) else "".join(traceback.format_exception_only(type(exc), exc))
    text = "".join(traceback.format_list(frames)) + last
    return text.replace(str(candidate), candidate.name).strip()


def compile_plan(plan: dict[str, Any]) -> dict[str, Any]:
    candidate = Path(plan["candidate"]).resolve()
    folder = Path(plan["cubins"])
    folder.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(candidate, folder, plan["arch"], [])
    install(recorder, int(plan["capability"]))
    tensors, make = tensor_factory()
    result: dict[str, Any] = {"tensors": tensors, "error": None, "shapes": []}
    try:
        module = load(candidate)
    except (Exception, SystemExit) as exc:
        result["error"] = explain(exc, candidate)
        return result
    run = getattr(module, "run", None)
    if not callable(run):
        result["error"] = f"{candidate.name} defines no function run(...)"
        return result
    for shape in plan["shapes"]:
        args = []
        for index, p in enumerate(shape["params"]):
            if p["role"] in ("input", "output"):
                args.append(make(tuple(p["shape"]), p["dtype"], index))
            elif p["role"] == "workspace":
                args.append(make((shape["workspace_bytes"],), "u8", index))
            elif p["role"] == "host":
                args.append(list(shape["host"][p["of"]]))
            else:
                args.append(p["value"])
        recorder.launches = []
        error = None
        try:
            run(*args)
        except (Exception, SystemExit) as exc:
            error = explain(exc, candidate)
        result["shapes"].append({"label": shape["label"], "error": error, "launches": recorder.launches})
    return result


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    result = compile_plan(plan)
    Path(plan["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
