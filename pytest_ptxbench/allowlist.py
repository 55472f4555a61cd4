"""What a candidate's host code may import: launching kernels, TMA descriptors, attributes and
errors, plus the C/C++ runtime's plumbing. Everything else (dlopen/dlsym, getenv, files, sockets,
threads, mprotect, fork/exec, device allocation, streams of its own, vendor libraries) is refused.
What it may define: its launcher as the only C-linkage function, and no name of the CUDA, CUPTI,
NVTX or NVML APIs (a definition that could shadow the functions a harness times with)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_CUDA_RUNTIME = {
    # what `<<<...>>>` and module registration compile to
    "__cudaRegisterFatBinary",
    "__cudaRegisterFatBinaryEnd",
    "__cudaUnregisterFatBinary",
    "__cudaRegisterFunction",
    "__cudaRegisterVar",
    "__cudaPushCallConfiguration",
    "__cudaPopCallConfiguration",
    "__cudaLaunchKernel",
    "__cudaLaunchKernel_ptsz",
    "__cudaGetKernel",
    # launching and configuring kernels
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cudaFuncSetAttribute",
    "cudaFuncGetAttributes",
    "cudaFuncSetCacheConfig",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cudaOccupancyMaxActiveClusters",
    "cudaOccupancyMaxPotentialClusterSize",
    # device facts and errors
    "cudaGetDevice",
    "cudaDeviceGetAttribute",
    "cudaGetLastError",
    "cudaPeekAtLastError",
    "cudaGetErrorString",
    "cudaGetErrorName",
    # asynchronous fills and copies on the caller's stream (into the declared workspace)
    "cudaMemsetAsync",
    "cudaMemsetD32Async",
    "cudaMemcpyAsync",
}
_CUDA_DRIVER = {"cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col", "cuTensorMapReplaceAddress"}
_C_RUNTIME = {
    "memcpy",
    "memset",
    "memmove",
    "memcmp",
    "__stack_chk_fail",
    "__cxa_finalize",
    "__cxa_atexit",
    "__cxa_guard_acquire",
    "__cxa_guard_release",
    "__cxa_guard_abort",
    "__cxa_pure_virtual",
    "__cxa_allocate_exception",
    "__cxa_free_exception",
    "__cxa_throw",
    "__cxa_begin_catch",
    "__cxa_end_catch",
    "__cxa_rethrow",
    "__gxx_personality_v0",
    "_Unwind_Resume",
    "_ITM_deregisterTMCloneTable",
    "_ITM_registerTMCloneTable",
    "__gmon_start__",
    "exit",  # exit and abort end only the candidate's own evaluation child
    "abort",
    "_Znwm",
    "_Znam",
    "_ZdlPv",
    "_ZdlPvm",
    "_ZdaPv",
    "_ZdaPvm",
}
_C_MATH = re.compile(r"^(?:sqrt|exp|exp2|log|log2|ceil|floor|fmin|fmax|fabs|pow|round|trunc|ldexp|frexp)f?$")
_CXX_THROW = re.compile(r"^_ZSt\d+__throw_\w+$")

ALLOWED_IMPORTS = frozenset(_CUDA_RUNTIME | _CUDA_DRIVER | _C_RUNTIME)
ALLOWED_LIBRARIES = re.compile(r"^lib(?:cudart|cuda|stdc\+\+|gcc_s|c|m)\.so(?:\.\d+)*$")
# Names of the APIs that launch and measure kernels; C++ names start with `_Z`, and the linker may
# define `_init` and `_fini` itself.
_RESERVED_NAMES = re.compile(r"^(?:_*cuda|cu[A-Z]|cupti|nvtx|nvml)")
_LINKER_FUNCTIONS = frozenset({"_init", "_fini"})
# Host instructions that enter the kernel directly, bypassing every import.
FORBIDDEN_HOST_INSTRUCTIONS = frozenset({"syscall", "sysenter", "int"})


def forbidden_imports(names: Iterable[str]) -> list[str]:
    """The imported symbols not on the allow-list, sorted."""
    return sorted({n for n in names if n not in ALLOWED_IMPORTS and not _C_MATH.match(n) and not _CXX_THROW.match(n)})


def forbidden_libraries(needed: Iterable[str]) -> list[str]:
    return sorted(n for n in needed if not ALLOWED_LIBRARIES.match(n))


def forbidden_definitions(defined: Iterable[tuple[str, bool]], launcher: str) -> list[str]:
    """Of the (name, is a function) symbols a library defines: those in the reserved API namespaces,
    and the C-linkage functions other than the launcher, sorted."""
    return sorted(
        {
            name
            for name, function in defined
            if _RESERVED_NAMES.match(name)
            or (function and not name.startswith("_Z") and name != launcher and name not in _LINKER_FUNCTIONS)
        }
    )
