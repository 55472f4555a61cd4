"""Reading a captured CUDA graph back as a launch list (the capture child's side; needs cuda-python)."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

from cuda.bindings import driver as cu

from ..replay.launches import Copy, Kernel, LaunchList, Memset, Operation, Upload
from . import driver

_REFUSED = {
    "HOST": "a host function (cudaLaunchHostFunc or a stream callback)",
    "GRAPH": "a child graph",
    "EMPTY": "a join of several streams",
    "WAIT_EVENT": "a wait on an event",
    "EVENT_RECORD": "an event record",
    "EXT_SEMAS_SIGNAL": "an external semaphore",
    "EXT_SEMAS_WAIT": "an external semaphore",
    "MEM_ALLOC": "a stream-ordered allocation",
    "MEM_FREE": "a stream-ordered free",
    "BATCH_MEM_OP": "a batch of stream memory operations",
    "CONDITIONAL": "a conditional node",
}
_A = cu.CUlaunchAttributeID
_DEPENDENCY = cu.CUgraphDependencyType


class Refused(RuntimeError):
    """The launcher failed or did something a launch list cannot describe."""


def begin(stream: Any) -> None:
    mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL  # unsafe calls from any thread fail the capture
    driver.ok("cuStreamBeginCapture", cu.cuStreamBeginCapture(stream, mode))


def end(stream: Any, placement: int, origins: Mapping[int, str] | None = None) -> LaunchList | str:
    """The launch list of the capture on `stream`, or why the capture failed. `origins`: the sha256 of the
    cubin each loaded function (by handle) came from, where the capture child knows it."""
    status, graph = cu.cuStreamEndCapture(stream)
    if status != cu.CUresult.CUDA_SUCCESS:
        return str(driver.DriverError("cuStreamEndCapture", status))
    return LaunchList(placement, tuple(_operation(node, early, origins or {}) for node, early in chain(graph)))


def chain(graph: Any) -> list[tuple[Any, bool]]:
    """The graph's nodes in order, each with whether it may start before its predecessor ends (a programmatic
    edge: the launch asked for programmatic stream serialisation); refused unless they form one chain
    (everything on the given stream)."""
    count = driver.ok("cuGraphGetNodes", cu.cuGraphGetNodes(graph, 0))[1]
    nodes = list(driver.ok("cuGraphGetNodes", cu.cuGraphGetNodes(graph, count))[0]) if count else []
    edges = cu.cuGraphGetEdges(graph, 0)
    driver.ok("cuGraphGetEdges", edges[:1])
    after: dict[int, int] = {}
    programmatic: set[int] = set()
    if edges[-1]:
        sources, targets, data, _ = driver.ok("cuGraphGetEdges", cu.cuGraphGetEdges(graph, edges[-1]))
        for a, b, kind in zip(sources, targets, data, strict=True):
            if int(b) in after.values() or int(a) in after:
                raise Refused("the launch is not one chain of operations: work was forked onto other streams")
            after[int(a)] = int(b)
            if _programmatic(kind):
                programmatic.add(int(b))
    by_handle = {int(n): n for n in nodes}
    roots = set(by_handle) - set(after.values())
    if len(roots) > 1:
        raise Refused("the launch is not one chain of operations: work was forked onto other streams")
    ordered = []
    current = next(iter(roots), None)
    while current is not None:
        ordered.append((by_handle[current], current in programmatic))
        current = after.get(current)
    return ordered


def _programmatic(edge: Any) -> bool:
    """Whether an edge lets its target start early (programmatic dependent launch); refused for any other kind
    than that or a full dependency."""
    kind, port = int(edge.type), int(edge.from_port)
    if kind == 0 and port == 0:
        return False
    if (
        kind == int(_DEPENDENCY.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
        and port == cu.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
    ):
        return True
    raise Refused(
        f"the launch has a dependency of type {kind} from port {port}; only full dependencies and programmatic"
        " stream serialisation may be captured"
    )


def _operation(node: Any, early: bool, origins: Mapping[int, str]) -> Operation:
    kind = driver.ok("cuGraphNodeGetType", cu.cuGraphNodeGetType(node))
    name = kind.name.removeprefix("CU_GRAPH_NODE_TYPE_")
    if name == "KERNEL":
        return _kernel(node, early, origins)
    if name == "MEMSET":
        p = driver.ok("cuGraphMemsetNodeGetParams", cu.cuGraphMemsetNodeGetParams(node))
        return Memset(int(p.dst), int(p.value), int(p.elementSize), int(p.width), int(p.height), int(p.pitch))
    if name == "MEMCPY":
        return _copy(driver.ok("cuGraphMemcpyNodeGetParams", cu.cuGraphMemcpyNodeGetParams(node)))
    raise Refused(
        f"the launcher put {_REFUSED.get(name, name.lower())} on its stream; only kernels, memsets and copies may be"
    )


def _kernel(node: Any, early: bool, origins: Mapping[int, str]) -> Kernel:
    p = driver.ok("cuGraphKernelNodeGetParams", cu.cuGraphKernelNodeGetParams(node))
    function = p.func
    if int(function) == 0 and int(p.kern) != 0:
        function = driver.ok("cuKernelGetFunction", cu.cuKernelGetFunction(p.kern))
    name = driver.ok("cuFuncGetName", cu.cuFuncGetName(function))
    layout = driver.param_layout(function)
    size = max((offset + n for offset, n in layout), default=0)
    buffer = bytearray(size)
    if int(p.kernelParams):
        for (offset, n), address in zip(layout, driver.read_pointers(int(p.kernelParams), len(layout)), strict=True):
            buffer[offset : offset + n] = ctypes.string_at(address, n)
    elif int(p.extra):
        buffer[:] = _extra_buffer(int(p.extra), size)
    return Kernel(
        name.decode() if isinstance(name, bytes) else str(name),
        (int(p.gridDimX), int(p.gridDimY), int(p.gridDimZ)),
        (int(p.blockDimX), int(p.blockDimY), int(p.blockDimZ)),
        int(p.sharedMemBytes),
        bytes(buffer),
        _attributes(node, function) | ({"programmatic": 1} if early else {}),
        origins.get(int(function), ""),
    )


def _extra_buffer(address: int, size: int) -> bytes:
    """The parameter buffer of a launch given through `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE)."""
    pointer, n = 0, 0
    words = driver.read_pointers(address, 8)
    for key, value in zip(words[::2], words[1::2], strict=True):  # (key, value) pairs
        if key == 0:  # CU_LAUNCH_PARAM_END
            break
        if key == 1:
            pointer = value
        elif key == 2:
            n = ctypes.c_size_t.from_address(value).value
    if not pointer or n != size:
        raise Refused(f"a launch's parameter buffer holds {n} bytes, its kernel takes {size}")
    return ctypes.string_at(pointer, n)


def _attributes(node: Any, function: Any) -> dict[str, Any]:
    """The launch attributes and function attributes that change how the kernel runs, where set."""
    found: dict[str, Any] = {}
    value = driver.ok(
        "cuGraphKernelNodeGetAttribute",
        cu.cuGraphKernelNodeGetAttribute(node, _A.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION),
    )
    cluster = [int(value.clusterDim.x), int(value.clusterDim.y), int(value.clusterDim.z)]
    if cluster[0] * cluster[1] * cluster[2] > 1:
        found["cluster"] = cluster
    for key, attribute, field in (
        ("priority", _A.CU_LAUNCH_ATTRIBUTE_PRIORITY, "priority"),
        ("cooperative", _A.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, "cooperative"),
        (
            "cluster_scheduling",
            _A.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
            "clusterSchedulingPolicyPreference",
        ),
    ):
        value = driver.ok("cuGraphKernelNodeGetAttribute", cu.cuGraphKernelNodeGetAttribute(node, attribute))
        if int(getattr(value, field)):
            found[key] = int(getattr(value, field))
    a = cu.CUfunction_attribute
    carveout = driver.ok(
        "cuFuncGetAttribute", cu.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, function)
    )
    if int(carveout) >= 0:
        found["carveout"] = int(carveout)
    if driver.ok(
        "cuFuncGetAttribute", cu.cuFuncGetAttribute(a.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, function)
    ):
        found["non_portable_cluster"] = 1
    return found


def _copy(p: Any) -> Operation:
    memory = cu.CUmemorytype
    if int(p.Height) > 1 or int(p.Depth) > 1:
        raise Refused("the launcher made a 2D or 3D copy; only 1D copies may be captured")
    if p.dstMemoryType not in (memory.CU_MEMORYTYPE_DEVICE, memory.CU_MEMORYTYPE_UNIFIED):
        raise Refused("the launcher copied into host memory")
    dst = int(p.dstDevice) + int(p.dstXInBytes)
    n = int(p.WidthInBytes)
    if p.srcMemoryType == memory.CU_MEMORYTYPE_HOST:
        return Upload(dst, ctypes.string_at(int(p.srcHost) + int(p.srcXInBytes), n))
    return Copy(dst, int(p.srcDevice) + int(p.srcXInBytes), n)
