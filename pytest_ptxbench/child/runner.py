"""The trusted runner: harness code only. It maps the call's buffers at the addresses the capture child
used, loads the candidate's device code from the cubins the harness extracted and hashed at build time
(never the candidate's host code), and replays the launch lists as CUDA graphs for check and time.

It never holds reference outputs: it saves outputs to files and the pytest process compares them.
"""

from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path
from typing import Any

from cuda.bindings import driver as cu

from ..replay.launches import Copy, Kernel, LaunchList, Memset, Upload
from ..replay.placement import CANARY, Placement, Relocated
from . import driver
from .cudart import CudaError, Runtime
from .graph import chain
from .serving import main
from .timing import Clock, RunFailed
from .tracing import Tracer

_A = cu.CUlaunchAttributeID
_F = cu.CUfunction_attribute
_MEMSETS = {1: cu.cuMemsetD8Async, 2: cu.cuMemsetD16Async, 4: cu.cuMemsetD32Async}
_MEMSETS_2D = {1: cu.cuMemsetD2D8Async, 2: cu.cuMemsetD2D16Async, 4: cu.cuMemsetD2D32Async}


class ReplayError(RuntimeError):
    """The launch list cannot be replayed from the candidate's own cubins."""


class Runner:
    def __init__(self, request: dict[str, Any]) -> None:
        self.rt = Runtime(Path(request["cudart"]))
        self.rt.synchronize()
        device = driver.use_primary_context()
        self.params: list[dict[str, Any]] = request["params"]
        self.placements = [Placement.from_json(p) for p in request["placements"]]
        for placement in self.placements:
            driver.map_placement(placement, device, CANARY)
        self.lists = [LaunchList.from_json(raw) for raw in request["launches"]]
        self.images = {c["sha256"]: _verified(Path(c["path"]), c["sha256"]) for c in request["cubins"]}
        self.stream = driver.stream()
        self.modules: dict[str, Any] = {}  # by the sha256 of the cubin
        self.graphs: list[Any] = []
        self._keep: list[Any] = []  # parameter and upload storage the graphs point into
        self.sets: list[dict[str, int]] = []
        self.set_hashes: list[dict[str, str]] = []
        self._clock: Clock | None = None
        self.kernels: set[str] = set()  # the names the graphs' kernel nodes launch
        self.load()

    # device code ---------------------------------------------------------------------------------
    def load(self) -> dict[str, Any]:
        """(Re)load the cubins, so device globals start fresh, and rebuild every placement's graph."""
        for module in self.modules.values():
            driver.ok("cuModuleUnload", cu.cuModuleUnload(module))
        self.modules = {
            sha: driver.ok("cuModuleLoadData", cu.cuModuleLoadData(image)) for sha, image in self.images.items()
        }
        self._keep = []
        functions = {(op.module, op.name): self._function(op) for launches in self.lists for op in launches.kernels}
        self.graphs = [self._graph(launches, functions) for launches in self.lists]
        self.kernels = {name for _, name in functions}
        return {"kernels": sorted(self.kernels)}

    def _function(self, op: Kernel) -> Any:
        if op.module and op.module not in self.modules:
            raise ReplayError(
                f"the launch list names {op.name} from a cubin the build did not produce (a foreign kernel)"
            )
        for module in [self.modules[op.module]] if op.module else self.modules.values():
            status, function = cu.cuModuleGetFunction(module, op.name.encode())
            if status == cu.CUresult.CUDA_SUCCESS:
                if op.shared_bytes > 48 * 1024:
                    self._set(function, _F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, op.shared_bytes)
                if "carveout" in op.attributes:
                    self._set(
                        function, _F.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, op.attributes["carveout"]
                    )
                if op.attributes.get("non_portable_cluster"):
                    self._set(function, _F.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                return function
        raise ReplayError(f"the launch list names {op.name}, which is not in the candidate's cubins (a foreign kernel)")

    @staticmethod
    def _set(function: Any, attribute: Any, value: int) -> None:
        driver.ok("cuFuncSetAttribute", cu.cuFuncSetAttribute(function, attribute, int(value)))

    def _graph(self, launches: LaunchList, functions: dict[tuple[str, str], Any]) -> Any:
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        driver.ok("cuStreamBeginCapture", cu.cuStreamBeginCapture(self.stream, mode))
        try:
            for op in launches.operations:
                self._replay(op, functions)
        finally:
            graph = driver.ok("cuStreamEndCapture", cu.cuStreamEndCapture(self.stream))
        asked = [isinstance(op, Kernel) and "programmatic" in op.attributes for op in launches.operations]
        if [early for _, early in chain(graph)] != asked:
            raise ReplayError("the replayed graph does not overlap the kernels the launch list overlaps")
        return driver.ok("cuGraphInstantiate", cu.cuGraphInstantiate(graph, 0))

    def _replay(self, op: Kernel | Memset | Copy | Upload, functions: dict[tuple[str, str], Any]) -> None:
        s = self.stream
        if isinstance(op, Kernel):
            self._launch(op, functions[(op.module, op.name)])
        elif isinstance(op, Memset) and op.height == 1:
            driver.ok("cuMemsetAsync", _MEMSETS[op.element_size](op.dst, op.value, op.width, s))
        elif isinstance(op, Memset):
            driver.ok(
                "cuMemsetD2DAsync", _MEMSETS_2D[op.element_size](op.dst, op.pitch, op.value, op.width, op.height, s)
            )
        elif isinstance(op, Copy):
            driver.ok("cuMemcpyDtoDAsync", cu.cuMemcpyDtoDAsync(op.dst, op.src, op.nbytes, s))
        else:
            host = driver.ok("cuMemHostAlloc", cu.cuMemHostAlloc(max(op.nbytes, 1), 0))
            ctypes.memmove(int(host), op.data, op.nbytes)
            self._keep.append(host)
            driver.ok("cuMemcpyHtoDAsync", cu.cuMemcpyHtoDAsync(op.dst, host, op.nbytes, s))

    def _launch(self, op: Kernel, function: Any) -> None:
        layout = driver.param_layout(function)
        size = max((offset + n for offset, n in layout), default=0)
        if size != len(op.params):
            raise ReplayError(f"{op.name} takes {size} bytes of parameters; {len(op.params)} were captured")
        storage = ctypes.create_string_buffer(op.params, max(size, 1))
        pointers = (ctypes.c_void_p * max(len(layout), 1))(*[ctypes.addressof(storage) + o for o, _ in layout])
        self._keep += [storage, pointers]
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = op.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = op.block
        config.sharedMemBytes = op.shared_bytes
        config.hStream = self.stream
        attributes = []
        for key, value in op.attributes.items():
            attribute = cu.CUlaunchAttribute()
            if key == "cluster":
                attribute.id = _A.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = value
            elif key == "priority":
                attribute.id, attribute.value.priority = _A.CU_LAUNCH_ATTRIBUTE_PRIORITY, int(value)
            elif key == "cooperative":
                attribute.id, attribute.value.cooperative = _A.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, int(value)
            elif key == "cluster_scheduling":
                attribute.id = _A.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
                attribute.value.clusterSchedulingPolicyPreference = int(value)
            elif key == "programmatic":  # may start before the previous kernel ends (griddepcontrol)
                attribute.id = _A.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                attribute.value.programmaticStreamSerializationAllowed = 1
            else:
                continue  # function attributes, set on the function itself
            attributes.append(attribute)
        config.attrs = attributes
        config.numAttrs = len(attributes)
        driver.ok("cuLaunchKernelEx", cu.cuLaunchKernelEx(config, function, ctypes.addressof(pointers), 0))

    # buffers -------------------------------------------------------------------------------------
    def inputs(self) -> list[dict[str, Any]]:
        return [p for p in self.params if p["role"] == "input"]

    def outputs(self) -> list[dict[str, Any]]:
        return [p for p in self.params if p["role"] == "output"]

    def load_sets(self, sets: list[dict[str, str]]) -> dict[str, Any]:
        """Input sets from files into device memory, one copy each; they are copied in place per run."""
        sizes = self.placements[0].buffers
        for files in sets:
            pointers, hashes = {}, {}
            for p in self.inputs():
                data = Path(files[p["name"]]).read_bytes()
                if len(data) != sizes[p["name"]].nbytes:
                    raise ValueError(f"{files[p['name']]}: {len(data)} bytes, expected {sizes[p['name']].nbytes}")
                pointers[p["name"]] = self.rt.malloc(len(data))
                self.rt.copy_to_device(pointers[p["name"]], data)
                hashes[p["name"]] = hashlib.sha256(data).hexdigest()
            self.sets.append(pointers)
            self.set_hashes.append(hashes)
        return {"sets": len(self.sets)}

    def prepare(self, placement: Placement, index: int, poison: int = 0xFF) -> None:
        """Fresh inputs (set `index` modulo the count) copied in place, outputs and workspace poisoned: a candidate
        clears what it accumulates into inside its own call, where the time stage sees the cost."""
        chosen = self.sets[index % len(self.sets)]
        for p in self.inputs():
            buffer = placement.buffers[p["name"]]
            self.rt.copy_on_device(buffer.pointer, chosen[p["name"]], buffer.nbytes)
        for p in self.outputs():
            buffer = placement.buffers[p["name"]]
            self.rt.memset(buffer.pointer, poison, buffer.nbytes)
        workspace = placement.buffers["workspace"]
        self.rt.memset(workspace.pointer, poison, workspace.nbytes)

    def overruns(self, placement: Placement) -> list[str]:
        """The buffers whose canaries (the mapped bytes before and after them) were written."""
        spoiled = []
        for b in placement.buffers.values():
            before = self.rt.copy_to_host(b.mapped, b.slack_before)
            after = self.rt.copy_to_host(b.end, b.slack_after)
            if before.count(CANARY) != len(before) or after.count(CANARY) != len(after):
                spoiled.append(b.name)
        return spoiled

    def call(self, placement: Placement) -> int:
        driver.ok("cuGraphLaunch", cu.cuGraphLaunch(self.graphs[placement.index], self.stream))
        return 0

    def save_outputs(self, placement: Placement, folder: Path) -> dict[str, str]:
        saved = {}
        for p in self.outputs():
            buffer = placement.buffers[p["name"]]
            path = folder / f"{p['name']}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.rt.copy_to_host(buffer.pointer, buffer.nbytes))
            saved[p["name"]] = str(path)
        return saved

    # requests ------------------------------------------------------------------------------------
    def check(self, request: dict[str, Any]) -> dict[str, Any]:
        """One replay at a placement on input set `set`, outputs poisoned by `poison`; outputs saved;
        inputs rehashed; canaries read."""
        placement = self.placements[int(request["placement"])]
        index = int(request["set"])
        self.prepare(placement, index, int(request["poison"]))
        for other in self.placements:  # launches that reach another placement's inputs read poison
            if other is not placement:
                for p in self.inputs():
                    self.rt.memset(
                        other.buffers[p["name"]].pointer, int(request["poison"]), other.buffers[p["name"]].nbytes
                    )
        fault = self.rt.synchronize()
        if fault != 0:
            raise RunFailed(f"the device reported {self.rt.error_name(fault)} ({fault}) while preparing the inputs")
        self.call(placement)
        fault = self.rt.synchronize()
        if fault != 0:
            raise RunFailed(
                f"the device reported {self.rt.error_name(fault)} ({fault}) during the call"
                " (a fault: memory outside the buffers, or a trap)"
            )
        changed = []
        for p in self.inputs():
            buffer = placement.buffers[p["name"]]
            data = self.rt.copy_to_host(buffer.pointer, buffer.nbytes)
            if hashlib.sha256(data).hexdigest() != self.set_hashes[index % len(self.sets)][p["name"]]:
                changed.append(p["name"])
        return {
            "inputs_changed": changed,
            "overruns": self.overruns(placement),
            "outputs": self.save_outputs(placement, Path(request["outputs_dir"])),
        }

    def time(self, request: dict[str, Any]) -> dict[str, Any]:
        """A block of timed replays; the outputs of the runs listed in `save` are kept for a recheck."""
        placement = self.placements[int(request["placement"])]
        if self._clock is None:
            self._clock = Clock(self.rt, Tracer(), int(self.stream))
        wanted = {int(i) for i in request.get("save", ())}
        folder = Path(request.get("outputs_dir", "."))
        saved: dict[str, dict[str, str]] = {}

        def keep(i: int) -> None:
            if i in wanted:
                saved[str(i)] = self.save_outputs(placement, folder / str(i))

        runs = self._clock.runs(
            int(request["runs"]),
            int(request["first"]),
            lambda i: self.prepare(placement, i),
            lambda: self.call(placement),
            keep,
            self.kernels,
        )
        return {"runs": runs, "saved": saved, "overruns": self.overruns(placement), "idle": self.rt.synchronize() == 0}


def _verified(path: Path, sha256: str) -> bytes:
    image = path.read_bytes()
    if hashlib.sha256(image).hexdigest() != sha256:
        raise ReplayError(f"{path} changed since the harness extracted it")
    return image


_runner: Runner | None = None


def handle(request: dict[str, Any]) -> dict[str, Any]:
    global _runner
    op = request.get("op")
    if op == "load":
        _runner = Runner(request)
        return {"loaded": True}
    if _runner is None:
        raise ValueError(f"{op!r} before 'load'")
    if op == "sets":
        return _runner.load_sets(request["sets"])
    if op == "reload":
        return _runner.load()
    if op == "check":
        return _runner.check(request)
    if op == "time":
        return _runner.time(request)
    raise ValueError(f"unknown request {op!r}")


if __name__ == "__main__":
    main(handle, fatal=(driver.DriverError, CudaError, RunFailed, ReplayError, Relocated))
