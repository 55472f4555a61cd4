#!/usr/bin/env python3
"""What the H100 reference GEMM's launcher launches at each shape, on the CPU: no GPU, no driver.

Compiles tasks/reference/h100/gemm.cu with nvcc into a host program in which the CUDA calls the launcher makes
(the device and its SM count, the kernels' attributes, the occupancy query behind its cluster plans, the tensor
maps, memsets and kernel launches) are stand-ins that answer for a chosen GPU and record what would be launched,
then calls `ptxbench_gemm` at each shape and prints its launches: `memset`, or a kernel (`large` for the 128x256
kernel, `wide` for the 256x160 one, `narrow<1, 8>` and `narrow<2, 5>` for the BN = 128 kernel's two tile heights)
with its grid and cluster size. The defaults are a 132-SM H100's: clusters of S = 2..8 that fit at once as its occupancy query answers
(MEASUREMENTS.md, twenty-eighth session).

Usage: `python3 scripts/gemm_plans.py [--kernel FILE] [--sms N] [--clusters C2,...,C8] [NxKxM ...]`; no shapes:
every task and shape of tasks/gemm.yaml; `--kernel`: a variant of the reference (its launcher's names kept).
Output: one line per shape, `n{N}-k{K} m{M}: launch; launch; ...`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_ptxbench.toolchain import Tool, find_tool

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "tasks" / "reference" / "h100" / "gemm.cu"
SMS = 132
CLUSTERS = (66, 39, 30, 22, 17, 15, 15)  # clusters of 2..8 resident at once on a 132-SM H100

# The launcher's kernels: the printed name, the host stub, and the name that defines it (a kernel file from before one
# existed is printed without it).
KERNELS = (
    ("large", "large::gemm_bf16_tn_kernel", "gemm_bf16_tn_kernel"),
    ("wide", "wide::gemm_wide_kernel", "gemm_wide_kernel"),
    ("narrow<1, 8>", "narrow::PathA::kernel()", "PathA"),
    ("narrow<2, 5>", "narrow::PathB::kernel()", "PathB"),
)

# The stand-ins come first, so that the launcher's calls resolve to them (macros over the runtime's names).
PROGRAM = """\
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>
static int g_sms = 132, g_clusters[9] = {};
static std::string g_launches;
static std::vector<std::pair<const void*, const char*>> g_kernels;   // each kernel's host stub and printed name
static cudaError_t stub_device(int* dev) { *dev = 0; return cudaSuccess; }
static cudaError_t stub_attribute(int* value, cudaDeviceAttr, int) { *value = g_sms; return cudaSuccess; }
template <class F> static cudaError_t stub_func_attribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
template <class F> static cudaError_t stub_clusters(int* n, F, const cudaLaunchConfig_t* c) {
    *n = g_clusters[c->gridDim.x];
    return cudaSuccess;
}
static cudaError_t stub_memset(void*, int, size_t, cudaStream_t) { g_launches += "memset; "; return cudaSuccess; }
template <class F, class... Args> static cudaError_t stub_launch(const cudaLaunchConfig_t* c, F kernel, Args...) {
    const char* name = "unknown";
    for (const auto& k : g_kernels)
        if (k.first == reinterpret_cast<const void*>(kernel)) name = k.second;
    int cluster = 1;
    for (unsigned i = 0; i < c->numAttrs; ++i)
        if (c->attrs[i].id == cudaLaunchAttributeClusterDimension) cluster = (int)c->attrs[i].val.clusterDim.x;
    g_launches += std::string(name) + " grid " + std::to_string(c->gridDim.x) + " cluster " + std::to_string(cluster) + "; ";
    return cudaSuccess;
}
extern "C" CUresult cuTensorMapEncodeTiled(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                           const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                           CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
    return CUDA_SUCCESS;
}
#define cudaGetDevice stub_device
#define cudaDeviceGetAttribute stub_attribute
#define cudaFuncSetAttribute stub_func_attribute
#define cudaOccupancyMaxActiveClusters stub_clusters
#define cudaMemsetAsync stub_memset
#define cudaLaunchKernelEx stub_launch
#include "@KERNEL_FILE@"
int main(int argc, char** argv) {  // SMS C2 .. C8, then N K M triples
    g_sms = atoi(argv[1]);
    for (int s = 2; s <= 8; ++s) g_clusters[s] = atoi(argv[s]);
@KERNELS@
    for (int i = 9; i + 2 < argc; i += 3) {
        const int N = atoi(argv[i]), K = atoi(argv[i + 1]), M = atoi(argv[i + 2]);
        const uintptr_t at = 1u << 20;   // 16 B aligned stand-ins: the launcher only checks and offsets them
        const auto* a = reinterpret_cast<const __nv_bfloat16*>(at);
        g_launches.clear();
        const cudaError_t err = ptxbench_gemm(a, a, reinterpret_cast<__nv_bfloat16*>(at), M, N, K,
                                              reinterpret_cast<void*>(at), (size_t)4 * M * N, nullptr);
        if (err != cudaSuccess) g_launches = "error " + std::to_string((int)err) + "  ";
        printf("n%d-k%d m%d: %s\\n", N, K, M, g_launches.substr(0, g_launches.size() - 2).c_str());
    }
}
"""


def build(folder: Path, nvcc: Tool, kernel: Path = KERNEL) -> Path:
    """The printer for `kernel`, compiled in `folder`. Raises RuntimeError with nvcc's output if it does not compile."""
    source = kernel.read_text()
    known = "\n".join(
        f'    g_kernels.push_back({{(const void*)({stub}), "{name}"}});'
        for name, stub, defined_by in KERNELS
        if defined_by in source
    )
    (folder / "plans.cu").write_text(
        PROGRAM.replace("@KERNELS@", known).replace("@KERNEL_FILE@", str(kernel.resolve()))
    )
    binary = folder / "plans"
    done = subprocess.run(
        [str(nvcc.path), "-std=c++17", "-w", "-gencode=arch=compute_90a,code=sm_90a", "-o", str(binary), "plans.cu"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=nvcc.env(),
    )
    if done.returncode != 0:
        raise RuntimeError(f"nvcc could not build the plan printer:\n{done.stdout}{done.stderr}")
    return binary


def plans(
    binary: Path, shapes: list[tuple[int, int, int]], sms: int = SMS, clusters: tuple[int, ...] = CLUSTERS
) -> dict[str, str]:
    """Each (N, K, M)'s launches, keyed `n{N}-k{K} m{M}`."""
    args = [str(sms), *map(str, clusters), *(str(v) for shape in shapes for v in shape)]
    out = subprocess.run([str(binary), *args], capture_output=True, text=True, check=True).stdout
    return dict(line.split(": ", 1) for line in out.splitlines())


def plans_of(
    kernel: Path, shapes: list[tuple[int, int, int]], sms: int = SMS, clusters: tuple[int, ...] = CLUSTERS
) -> dict[str, str]:
    """`kernel`'s launches at each (N, K, M), keyed `n{N}-k{K} m{M}`. Raises RuntimeError where there is no nvcc or
    the printer does not compile."""
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise RuntimeError("no nvcc found (see pytest_ptxbench/toolchain.py)")
    with tempfile.TemporaryDirectory() as folder:
        return plans(build(Path(folder), nvcc, kernel), shapes, sms, clusters)


def task_shapes() -> list[tuple[int, int, int]]:
    """Every (N, K, M) of tasks/gemm.yaml."""
    from pytest_ptxbench.task.catalogue import load_family

    family = load_family(ROOT / "tasks" / "gemm.yaml")
    return [
        (int(t.axes["N"]), int(t.axes["K"]), int(s.values["M"])) for t in family.tasks for s in family.shapes("all")
    ]


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NxKxM, e.g. 5376x4096x232")
    return int(parts[0]), int(parts[1]), int(parts[2])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="*", type=_shape, help="NxKxM, e.g. 5376x4096x232")
    parser.add_argument("--kernel", type=Path, default=KERNEL, help="the kernel file (default: the H100 reference)")
    parser.add_argument("--sms", type=int, default=SMS)
    parser.add_argument("--clusters", default=",".join(map(str, CLUSTERS)), help="clusters of 2..8 resident at once")
    args = parser.parse_args()
    clusters = tuple(int(c) for c in args.clusters.split(","))
    if len(clusters) != 7:
        parser.error(f"--clusters {args.clusters}: expected seven counts, for clusters of 2 to 8")
    if not args.kernel.is_file():
        parser.error(f"--kernel {args.kernel}: no such file")
    try:
        printed = plans_of(args.kernel, args.shapes or task_shapes(), args.sms, clusters)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    for label, launches in printed.items():
        print(f"{label}: {launches}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
