"""The CUDA driver calls the capture child and the runner share (cuda-python's bindings; children only).

Every call's status is checked: a wrong assumption reads as an error that names the call, never as silence.
"""

from __future__ import annotations

import array
import ctypes
from typing import Any

from cuda.bindings import driver as cu

from ..replay.placement import GRANULE, RESERVE_ALIGN, Placement, Relocated


class DriverError(RuntimeError):
    def __init__(self, call: str, code: Any) -> None:
        _, name = cu.cuGetErrorName(code)
        text = name.decode() if isinstance(name, bytes) else str(code)
        super().__init__(f"{call} failed: {text}")
        self.code = code


def ok(call: str, result: Any) -> Any:
    """The values of a binding's (status, *values) result; DriverError unless the status is success."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != cu.CUresult.CUDA_SUCCESS:
        raise DriverError(call, status)
    return values[0] if len(values) == 1 else tuple(values)


def use_primary_context() -> Any:
    """The device's primary context (the one the CUDA runtime uses), made current; returns the device."""
    ok("cuInit", cu.cuInit(0))
    device = ok("cuDeviceGet", cu.cuDeviceGet(0))
    context = ok("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(device))
    ok("cuCtxSetCurrent", cu.cuCtxSetCurrent(context))
    return device


def map_placement(placement: Placement, device: Any, fill: int) -> None:
    """Every buffer of `placement` mapped at its own addresses (never elsewhere) and filled with `fill`."""
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = int(device)
    granularity = ok(
        "cuMemGetAllocationGranularity",
        cu.cuMemGetAllocationGranularity(prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
    )
    if GRANULE % int(granularity):
        raise DriverError(f"the allocation granularity ({granularity} B) does not divide {GRANULE}", 0)
    access = cu.CUmemAccessDesc()
    access.location = prop.location
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    for buffer in placement.buffers.values():
        given = ok(
            "cuMemAddressReserve", cu.cuMemAddressReserve(buffer.reserve_bytes, RESERVE_ALIGN, buffer.reserve, 0)
        )
        if int(given) != buffer.reserve:
            raise Relocated(
                f"the driver reserved {int(given):#x} instead of {buffer.reserve:#x} for {buffer.name}:"
                " the buffers cannot be mapped where the capture put them"
            )
        handle = ok("cuMemCreate", cu.cuMemCreate(buffer.mapped_bytes, prop, 0))
        ok("cuMemMap", cu.cuMemMap(buffer.mapped, buffer.mapped_bytes, 0, handle, 0))
        ok("cuMemSetAccess", cu.cuMemSetAccess(buffer.mapped, buffer.mapped_bytes, [access], 1))
        ok("cuMemsetD8", cu.cuMemsetD8(buffer.mapped, fill, buffer.mapped_bytes))
    ok("cuCtxSynchronize", cu.cuCtxSynchronize())


def write_host_inputs(placement: Placement, host_inputs: dict[str, list[int]]) -> None:
    """The host-visible inputs (int32 page tables, which the launcher gets as host arrays anyway) into their
    buffers, where the rest stays poison: a kernel run before the capture (Triton loading its kernels) then
    indexes the cache with real page numbers, not poison."""
    for name, values in host_inputs.items():
        data = array.array("i", values).tobytes()
        ok("cuMemcpyHtoD", cu.cuMemcpyHtoD(placement.buffers[name].pointer, data, len(data)))


def stream() -> Any:
    return ok("cuStreamCreate", cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))


def read_pointers(address: int, count: int) -> list[int]:
    """`count` pointers stored at a host address (a `void**` the driver handed back)."""
    return [int(p or 0) for p in (ctypes.c_void_p * count).from_address(address)]


def param_layout(function: Any) -> list[tuple[int, int]]:
    """(offset, size) of each of a kernel's parameters, from the driver."""
    layout: list[tuple[int, int]] = []
    while True:
        status, offset, size = cu.cuFuncGetParamInfo(function, len(layout))
        if status == cu.CUresult.CUDA_ERROR_INVALID_VALUE:
            return layout
        if status != cu.CUresult.CUDA_SUCCESS:
            raise DriverError("cuFuncGetParamInfo", status)
        layout.append((int(offset), int(size)))
