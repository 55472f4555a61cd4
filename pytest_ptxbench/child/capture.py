"""The capture child (untrusted, sandboxed): loads the candidate's library and calls its launcher under
CUDA stream capture, once per buffer placement, in one process (a launcher that caches pointers or TMA
descriptors from its first call shows it at the second placement). What leaves is data: the launch list.

The buffers hold poison, never task data, so no launch can depend on input values; only a task's
host-visible inputs (page tables), which the launcher also gets as host arrays, hold their values. Anything but kernel
launches, memsets and copies on the given stream is refused, naming what was found.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from ..replay.launches import LaunchList
from ..replay.placement import Placement
from .cudart import Runtime
from .serving import main

_CTYPES = {
    "int": ctypes.c_int,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "int64_t": ctypes.c_int64,
    "long": ctypes.c_long,
    "cudaStream_t": ctypes.c_void_p,
}


def _ctype(declared: str) -> Any:
    return ctypes.c_void_p if "*" in declared else _CTYPES[declared.replace("const ", "").strip()]


class Capture:
    def __init__(self, request: dict[str, Any]) -> None:
        self.runtime = Runtime(Path(request["cudart"]))  # the copy the candidate's library resolves to
        library = ctypes.CDLL(request["host"])  # the candidate's host code runs from here on
        self.params: list[dict[str, Any]] = request["params"]
        # host-visible inputs (page tables): int32 arrays the launcher may read to plan its launches
        self.host_inputs = {name: (ctypes.c_int32 * len(v))(*v) for name, v in request.get("host_inputs", {}).items()}
        self.launch = getattr(library, request["entry"])
        self.launch.argtypes = [_ctype(p["ctype"]) for p in self.params]
        self.launch.restype = ctypes.c_int
        from . import driver  # cuda-python: only once a library is loaded (CPU tests load without a GPU)

        self.runtime.synchronize()  # starts the runtime on the device's primary context
        device = driver.use_primary_context()
        self.placements = [Placement.from_json(p) for p in request["placements"]]
        for placement in self.placements:
            driver.map_placement(placement, device, int(request["poison"]))
            driver.write_host_inputs(placement, request.get("host_inputs", {}))
        self.stream = driver.stream()

    def arguments(self, placement: Placement) -> list[Any]:
        workspace = placement.buffers["workspace"]
        fixed = {"workspace": workspace.pointer, "workspace_bytes": workspace.nbytes, "stream": int(self.stream)}
        args = []
        for p in self.params:
            role = p["role"]
            if role in ("input", "output"):
                args.append(placement.buffers[p["name"]].pointer)
            elif role == "host":
                args.append(ctypes.addressof(self.host_inputs[p["of"]]))
            else:
                args.append(p["value"] if role == "scalar" else fixed[role])
        return args

    def capture(self, placement: Placement) -> LaunchList:
        from . import graph

        graph.begin(self.stream)
        code = int(self.launch(*self.arguments(placement)))
        captured = graph.end(self.stream, placement.index)
        if code != 0:
            raise graph.Refused(f"the launcher returned {self.runtime.error_name(code)} ({code})")
        if isinstance(captured, str):
            raise graph.Refused(
                f"the launch could not be captured ({captured}): the launcher made a call that is not allowed while"
                " its stream is captured (a synchronisation, a blocking copy, work on the legacy stream)"
            )
        return captured


def handle(request: dict[str, Any]) -> dict[str, Any]:
    if request.get("op") != "capture":
        raise ValueError(f"unknown request {request.get('op')!r}")
    capture = Capture(request)
    return {"launches": [capture.capture(p).to_json() for p in capture.placements]}


if __name__ == "__main__":
    main(handle, fatal=(RuntimeError,))  # refused launches, the driver's errors: the context is suspect
