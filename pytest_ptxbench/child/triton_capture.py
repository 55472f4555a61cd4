"""The Triton capture child (untrusted, sandboxed): the twin of `capture` for a Triton candidate. It imports
the candidate's file and calls its `run` under CUDA stream capture, once per buffer placement, with torch
tensors over the mapped buffers (poison, never task data). What leaves is data: the launch list, each kernel
tagged with the sha256 of the cubin Triton launched it from, which must be one the build produced.

Triton starts from a copy of the build's cache, so it loads the build's own cubins instead of compiling; one
call of `run` before the captures (on poison) lets it load modules and compile its launch stubs, which stream
capture does not allow. Triton's allocator (global scratch, device-side descriptors) hands out nothing unless
the candidate sets one, from the workspace.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..dtypes import DTYPES
from ..languages import NOT_RUN_PARAMS
from ..replay.launches import LaunchList
from ..replay.placement import Buffer, Placement
from .serving import main


class Refused(RuntimeError):
    """`run` failed, or did something a launch list cannot describe; the message says what."""


class _Memory:
    """A buffer's bytes as CUDA array interface, for torch.as_tensor (no copy, no allocation)."""

    def __init__(self, buffer: Buffer) -> None:
        self.__cuda_array_interface__ = {
            "shape": (buffer.nbytes,),
            "typestr": "|u1",
            "data": (buffer.pointer, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


def _no_allocation(size: int, alignment: int, stream: Any) -> Any:
    raise RuntimeError(
        f"a kernel asked Triton's allocator for {size} bytes (global scratch or a device-side tensor descriptor):"
        " give it slices of `workspace` with triton.set_allocator"
    )


class TritonCapture:
    def __init__(self, request: dict[str, Any]) -> None:
        host = Path(request["host"])
        cache = Path.cwd().parent / "triton-cache"  # one per candidate and task: its launch stubs compile once
        if not cache.is_dir() and (host.parent / "triton-cache").is_dir():
            shutil.copytree(host.parent / "triton-cache", cache)
        os.environ["TRITON_CACHE_DIR"] = str(cache)
        import torch
        import triton
        from triton.runtime.jit import JITFunction

        from . import driver
        from .triton_compile import explain, load

        self.torch, self.host, self.explain = torch, host, explain
        device = driver.use_primary_context()  # the runtime's, which torch and Triton use too
        self.placements = [Placement.from_json(p) for p in request["placements"]]
        for placement in self.placements:
            driver.map_placement(placement, device, int(request["poison"]))
            driver.write_host_inputs(placement, request.get("host_inputs", {}))
        self.stream = driver.stream()
        self.current = torch.cuda.ExternalStream(int(self.stream))
        self.params: list[dict[str, Any]] = [p for p in request["params"] if p["role"] not in NOT_RUN_PARAMS]
        self.host_inputs: dict[str, list[int]] = request.get("host_inputs", {})  # page tables, as lists of ints
        self.origins: dict[int, str] = {}  # function handle → the sha256 of its cubin
        triton.set_allocator(_no_allocation)
        launch = JITFunction.run

        def recorded(jit: Any, *args: Any, **kwargs: Any) -> Any:
            kernel = launch(jit, *args, **kwargs)
            if getattr(kernel, "function", None):
                self.origins[int(kernel.function)] = hashlib.sha256(kernel.asm["cubin"]).hexdigest()
            return kernel

        JITFunction.run = recorded
        try:
            self.run: Callable[..., Any] = load(host).run
        except (Exception, SystemExit) as exc:
            raise Refused(f"importing {host.name} failed:\n{explain(exc, host)}") from None

    def tensor(self, buffer: Buffer, p: dict[str, Any]) -> Any:
        torch = self.torch
        raw = torch.as_tensor(_Memory(buffer), device="cuda")
        if p["role"] == "workspace":
            return raw
        return raw.view(getattr(torch, DTYPES[p["dtype"]].long_name)).view(tuple(p["shape"]))

    def arguments(self, placement: Placement) -> list[Any]:
        return [self.argument(placement, p) for p in self.params]

    def argument(self, placement: Placement, p: dict[str, Any]) -> Any:
        if p["role"] == "scalar":
            return p["value"]
        if p["role"] == "host":
            return list(self.host_inputs[p["of"]])  # a copy per call
        return self.tensor(placement.buffers[p["name"]], p)

    def call(self, placement: Placement, when: str) -> None:
        try:
            with self.torch.cuda.stream(self.current):
                self.run(*self.arguments(placement))
        except (Exception, SystemExit) as exc:
            raise Refused(f"run failed {when}:\n{self.explain(exc, self.host)}") from None

    def capture(self) -> list[LaunchList]:
        from cuda.bindings import driver as cu

        from . import driver, graph

        self.call(self.placements[0], "before the capture (Triton loading its kernels)")
        driver.ok("cuStreamSynchronize", cu.cuStreamSynchronize(self.stream))
        lists = []
        for placement in self.placements:
            graph.begin(self.stream)
            try:
                self.call(placement, "under stream capture")
            except Refused:
                with contextlib.suppress(Exception):  # what run raised is the reason, not the unfinished capture
                    graph.end(self.stream, placement.index)
                raise
            captured = graph.end(self.stream, placement.index, self.origins)
            if isinstance(captured, str):
                raise Refused(
                    f"the launch could not be captured ({captured}): run made a call that is not allowed while its"
                    " stream is captured (a synchronisation, an allocation, a copy to the host, another stream)"
                )
            lists.append(captured)
        return lists


def handle(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("op") != "capture":
        raise ValueError(f"unknown request {request.get('op')!r}")
    return {"launches": [launches.to_json() for launches in TritonCapture(request).capture()]}


if __name__ == "__main__":
    main(handle, fatal=(RuntimeError,))  # refused runs, the driver's errors: the context is suspect
