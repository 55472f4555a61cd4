"""The few CUDA runtime calls the candidate child needs, through ctypes on the same libcudart the
candidate links: no CUDA Python package, no vendor library."""

from __future__ import annotations

import ctypes
from pathlib import Path

MEMCPY_HOST_TO_DEVICE, MEMCPY_DEVICE_TO_HOST, MEMCPY_DEVICE_TO_DEVICE = 1, 2, 3
ATTRIBUTE_L2_CACHE_SIZE = 38  # cudaDevAttrL2CacheSize
LIMIT_PERSISTING_L2_CACHE_SIZE = 6


class CudaError(RuntimeError):
    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})")
        self.code, self.name = code, name


class Runtime:
    def __init__(self, library: Path) -> None:
        # RTLD_GLOBAL: the candidate's own `libcudart.so.13` dependency resolves to this very copy.
        self.lib = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        self.lib.cudaGetErrorName.restype = ctypes.c_char_p

    def error_name(self, code: int) -> str:
        return (self.lib.cudaGetErrorName(code) or b"?").decode()

    def check(self, call: str, code: int) -> None:
        if code != 0:
            raise CudaError(call, code, self.error_name(code))

    def _call(self, name: str, *args: object) -> None:
        self.check(name, getattr(self.lib, name)(*args))

    def malloc(self, nbytes: int) -> int:
        pointer = ctypes.c_void_p()
        self._call("cudaMalloc", ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1)))
        return int(pointer.value or 0)

    def memset(self, pointer: int, byte: int, nbytes: int) -> None:
        self._call("cudaMemset", ctypes.c_void_p(pointer), ctypes.c_int(byte), ctypes.c_size_t(nbytes))

    def copy_to_device(self, pointer: int, data: bytes | memoryview) -> None:
        buffer = (ctypes.c_char * len(data)).from_buffer_copy(data)
        self._call("cudaMemcpy", ctypes.c_void_p(pointer), buffer, ctypes.c_size_t(len(data)), MEMCPY_HOST_TO_DEVICE)

    def copy_to_host(self, pointer: int, nbytes: int) -> bytearray:
        out = bytearray(nbytes)
        buffer = (ctypes.c_char * nbytes).from_buffer(out)
        self._call("cudaMemcpy", buffer, ctypes.c_void_p(pointer), ctypes.c_size_t(nbytes), MEMCPY_DEVICE_TO_HOST)
        return out

    def copy_on_device(self, target: int, source: int, nbytes: int) -> None:
        self._call(
            "cudaMemcpy",
            ctypes.c_void_p(target),
            ctypes.c_void_p(source),
            ctypes.c_size_t(nbytes),
            MEMCPY_DEVICE_TO_DEVICE,
        )

    def synchronize(self) -> int:
        """cudaDeviceSynchronize's code (a sticky kernel fault shows here)."""
        return int(self.lib.cudaDeviceSynchronize())

    def stream(self) -> int:
        handle = ctypes.c_void_p()
        self._call("cudaStreamCreateWithFlags", ctypes.byref(handle), ctypes.c_uint(1))  # non-blocking
        return int(handle.value or 0)

    def event(self) -> int:
        handle = ctypes.c_void_p()
        self._call("cudaEventCreate", ctypes.byref(handle))
        return int(handle.value or 0)

    def record(self, event: int, stream: int) -> None:
        self._call("cudaEventRecord", ctypes.c_void_p(event), ctypes.c_void_p(stream))

    def elapsed_ms(self, start: int, end: int) -> float:
        out = ctypes.c_float()
        self._call("cudaEventSynchronize", ctypes.c_void_p(end))
        self._call("cudaEventElapsedTime", ctypes.byref(out), ctypes.c_void_p(start), ctypes.c_void_p(end))
        return float(out.value)

    def l2_bytes(self) -> int:
        value, device = ctypes.c_int(), ctypes.c_int()
        self._call("cudaGetDevice", ctypes.byref(device))
        self._call("cudaDeviceGetAttribute", ctypes.byref(value), ATTRIBUTE_L2_CACHE_SIZE, device)
        return int(value.value)

    def reset_persisting_l2(self) -> None:
        """No persisting-L2 carve-out survives into a timed run (a candidate cannot pin its inputs)."""
        self._call("cudaDeviceSetLimit", LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(0))
        self._call("cudaCtxResetPersistingL2Cache")
