#!/usr/bin/env python3
"""Per-CTA timelines of the H100 reference GEMM's kernels, on the GPU machine (nvcc and libcuda there).

Builds a copy of tasks/reference/h100/gemm.cu whose kernels store `%globaltimer` per CTA (the producer's start, the
first full barrier, every 8th k-step of the CTA's first unit, the end of its last main loop, its exit, and its SM),
launches one kernel directly at each shape (five warm-up calls, then once with L2 cold after a 256 MB memset, once
warm), and prints one line per run: how many CTAs, the median time per 8 k-steps, the spread of the main loops (first
data to the last unit's last k-step) and of what follows them (stores, a split's reduction), the span, and the SMs
of the four slowest main loops. A spec is KIND:MxNxK, KIND one of
  narrow        the BN = 128 kernel with 128-row tiles, as its cost model splits it
  narrow-whole  the same, whole tiles only (no split-K, no multicast pairs)
  narrow-pairs  whole tiles in clusters of two that multicast their shared A rows (where they apply)
  large         the 128x256 kernel, as its cost model plans it with the task's 4*M*N bytes of workspace
  large-whole   the same with no workspace (whole tiles only)
e.g. `python3 scripts/gemm_timeline.py narrow:901x2048x4096 large:901x2048x4096 large-whole:901x2048x4096`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

KERNEL = Path(__file__).resolve().parent.parent / "tasks" / "reference" / "h100" / "gemm.cu"
NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")

PROBES = """\
__device__ unsigned long long g_stamp[1024][5];   // start, first data, loop end, exit, SM
__device__ unsigned long long g_kstamp[1024][16];  // every 8th k-step of the first unit
__device__ __forceinline__ unsigned long long probe_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
struct ExitProbe {   // the consumer's exit, whichever way it leaves the kernel
    __device__ ~ExitProbe() { if (threadIdx.x == 128) g_stamp[blockIdx.x][3] = probe_now(); }
};
"""

# (the line after which a probe goes in each kernel, the probe). `FIRST` is the kernel's test for the CTA's first unit.
HOOKS = (
    ("extern __shared__ uint8_t smem_raw[];", "    ExitProbe exit_probe;"),
    (
        "    if (wg == 0) {",
        '        if (threadIdx.x == 0) { unsigned r; asm volatile("mov.u32 %0, %%smid;" : "=r"(r));'
        " g_stamp[blockIdx.x][0] = probe_now(); g_stamp[blockIdx.x][4] = r; }",
    ),
    (
        "mbar_wait(full_bar + 8 * s, phase);",
        "if (threadIdx.x == 128 && FIRST) { if (k == k_begin) g_stamp[blockIdx.x][1] = probe_now();"
        " if ((k - k_begin) % 8 == 0 && (k - k_begin) < 128) g_kstamp[blockIdx.x][(k - k_begin) / 8] = probe_now(); }",
    ),
    ("wgmma_wait<0>();", "if (threadIdx.x == 128) g_stamp[blockIdx.x][2] = probe_now();"),
)
FIRST = {"large": "u == (int)blockIdx.x", "narrow": "t == first"}

DRIVER = r"""
#include "stamped.cu"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__global__ void fill(__nv_bfloat16* p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16(((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
}

static double at(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[(size_t)(q * (v.size() - 1))];
}

int main(int argc, char** argv) {
    int dev = 0, sms = 0;
    if (prepare(dev, sms) != cudaSuccess) return 1;
    char* flush = nullptr;
    cudaMalloc(&flush, 256 << 20);
    printf("%-30s %-6s %5s %12s %24s %16s %8s  %s\n", "run", "L2", "CTAs", "us/8 k-steps", "main loop min/p50/max us",
           "stores p50/max", "span us", "SMs of the slowest loops");
    for (int a = 1; a < argc; ++a) {
        char kind[32];
        int M, N, K;
        if (sscanf(argv[a], "%31[^:]:%dx%dx%d", kind, &M, &N, &K) != 4) return 2;
        const bool large_kernel = !strncmp(kind, "large", 5), whole = strstr(kind, "whole") != nullptr;
        const bool pairs = !strcmp(kind, "narrow-pairs");
        __nv_bfloat16 *A, *B, *C;
        void* ws = nullptr;
        const size_t ws_bytes = whole ? 0 : 4ull * M * N;
        cudaMalloc(&A, (size_t)M * K * 2);
        cudaMalloc(&B, (size_t)N * K * 2);
        cudaMalloc(&C, (size_t)M * N * 2);
        if (ws_bytes) cudaMalloc(&ws, ws_bytes);
        fill<<<1024, 256>>>(A, (size_t)M * K);
        fill<<<1024, 256>>>(B, (size_t)N * K);
        narrow::Plan np = narrow::PathB::plan(dev, sms, M, N, K, STEP_CLK_B, RED_CLK_B);
        if (whole || pairs) {
            const int tiles = ((M + 127) / 128) * ((N + 127) / 128);
            np = narrow::Plan{};
            np.head_tiles = tiles;
            np.head_grid = tiles < sms ? tiles : sms;
            np.pair = pairs && narrow::PathB::pairs(dev, sms, tiles, (N + 127) / 128, np.head_grid);
            if (pairs && !np.pair) {
                printf("%s: no multicast pairs at this shape\n", argv[a]);
                continue;
            }
        }
        if (!large_kernel && np.tail_tiles) {   // two launches would write the same CTAs' stamps
            printf("%s: the BN = 128 plan here is two launches; time narrow-whole instead\n", argv[a]);
            continue;
        }
        const large::Plan lp = large::plan(dev, M, N, K, sms, ws, ws_bytes);
        const long long units = lp.whole + (large::tile_count(M, N) - lp.whole) * lp.splits;
        const int grid = large_kernel ? (int)(units < sms ? units : sms)
                                      : (np.tail_tiles ? np.tail_tiles * np.tail_splits : np.head_grid);
        auto run = [&] {
            return large_kernel ? large::launch(dev, A, B, C, M, N, K, ws, ws_bytes, sms, 0)
                                : narrow::PathB::run(np, A, B, C, M, N, K, 0);
        };
        for (int i = 0; i < 5; ++i) run();
        for (int warm = 0; warm < 2; ++warm) {
            if (!warm) cudaMemsetAsync(flush, 1, 256 << 20);
            static unsigned long long st[1024][5], ks[1024][16];
            memset(st, 0, sizeof(st));
            memset(ks, 0, sizeof(ks));
            cudaMemcpyToSymbol(g_stamp, st, sizeof(st));
            cudaMemcpyToSymbol(g_kstamp, ks, sizeof(ks));
            const cudaError_t err = run();
            if (err != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
                printf("%s: %s\n", argv[a], cudaGetErrorString(cudaGetLastError()));
                return 3;
            }
            cudaMemcpyFromSymbol(st, g_stamp, sizeof(st));
            cudaMemcpyFromSymbol(ks, g_kstamp, sizeof(ks));
            unsigned long long t0 = ~0ull, t1 = 0;
            std::vector<double> loop, stores, per8;
            std::vector<std::pair<double, int>> slowest;
            for (int b = 0; b < grid; ++b) {
                t0 = std::min(t0, st[b][0]);
                t1 = std::max(t1, st[b][3]);
                loop.push_back((st[b][2] - st[b][1]) / 1e3);
                stores.push_back((st[b][3] - st[b][2]) / 1e3);
                slowest.push_back({-loop.back(), (int)st[b][4]});
                for (int i = 0; i + 1 < 16 && ks[b][i + 1]; ++i) per8.push_back((ks[b][i + 1] - ks[b][i]) / 1e3);
            }
            std::sort(slowest.begin(), slowest.end());
            printf("%-30s %-6s %5d %12.2f %8.1f/%6.1f/%6.1f %8.1f/%6.1f %8.1f ", argv[a], warm ? "warm" : "cold",
                   grid, per8.empty() ? 0.0 : at(per8, 0.5), at(loop, 0), at(loop, 0.5), at(loop, 1), at(stores, 0.5),
                   at(stores, 1), (t1 - t0) / 1e3);
            for (size_t i = 0; i < slowest.size() && i < 4; ++i) printf(" %d", slowest[i].second);
            printf("\n");
        }
        cudaFree(A);
        cudaFree(B);
        cudaFree(C);
        if (ws) cudaFree(ws);
    }
    return 0;
}
"""


def stamped(source: str) -> str:
    """The kernel file with the probes in both kernels; a hook's line missing from either is an error."""
    start_large, start_narrow = source.index("namespace large {"), source.index("namespace narrow {")
    parts = {"large": source[start_large:start_narrow], "narrow": source[start_narrow:]}
    for name, text in parts.items():
        for anchor, probe in HOOKS:
            line = re.search(r"[^\n]*" + re.escape(anchor) + r"[^\n]*\n", text)
            if not line:
                raise SystemExit(f"{KERNEL}: no line with {anchor!r} in namespace {name}")
            probe_line = probe.replace("FIRST", FIRST[name]) + "\n"
            text = text[: line.end()] + probe_line + text[line.end() :]
        parts[name] = text
    return source[:start_large] + PROBES + parts["large"] + parts["narrow"]


def main(specs: list[str]) -> int:
    if not specs:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "stamped.cu").write_text(stamped(KERNEL.read_text()))
        (work / "driver.cu").write_text(DRIVER)
        binary = work / "timeline"
        subprocess.run(
            [
                NVCC,
                "-std=c++17",
                "-gencode=arch=compute_90a,code=sm_90a",
                "-w",
                str(work / "driver.cu"),
                "-o",
                str(binary),
                "-lcuda",
            ],
            check=True,
        )
        return subprocess.run([str(binary), *specs]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
