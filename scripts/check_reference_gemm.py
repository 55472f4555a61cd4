#!/usr/bin/env python3
"""Build tasks/reference/h100/gemm.cu with the harness's build and inspect stages, check it against torch
and time it: a stand-alone check until the harness has its own check and time stages.

Run on a Hopper GPU machine from the repo root:  PYTHONPATH=. python3 scripts/check_reference_gemm.py
Correctness: random normal bf16 inputs, C poisoned with NaN before the call, reference A.float() @ B.float().T;
pass = every element written, relative Frobenius error < 1e-2, max abs error < 0.05 * max|ref| + 0.05.
Timing: M8192 N7168 K5120, 10 warm-ups, 50 runs each timed with CUDA events, median, vs torch.matmul(A, B.T).
"""

import ctypes
import sys
import tempfile
from pathlib import Path

import torch

from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.catalogue import load_family
from pytest_ptxbench.stages.build import build as harness_build
from pytest_ptxbench.stages.inspect import inspect
from pytest_ptxbench.targets import TARGETS

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tasks" / "reference" / "h100" / "gemm.cu"
GEMM = load_family(ROOT / "tasks" / "gemm.yaml")
NK_PAIRS = [(t.axes["N"], t.axes["K"]) for t in GEMM.tasks]
FIRST = [(128, 2048), (7168, 5120), (256, 7168)]

# (M, N, K): three pairs at small, ragged and core M; every other (N, K) pair at two ragged M; odd edge cases.
CASES = [(m, n, k) for (n, k) in FIRST for m in (70, 952, 8192)]
CASES += [(m, n, k) for (n, k) in NK_PAIRS for m in (93, 969) if (n, k) not in FIRST]
CASES += [(8828, 34816, 5120), (2379, 4096, 14336), (289, 5376, 21504), (1, 8, 8), (130, 264, 72), (1000, 1000, 1000)]


def build():
    """The harness's own build and inspect stages (so the same flags and contract header)."""
    target = TARGETS["h100"]
    workdir = Path(tempfile.mkdtemp(prefix="refgemm_"))
    built = harness_build(Candidate.from_file("gemm", "h100", SRC), GEMM.launcher, target, workdir, timeout=600)
    if not built.passed:
        sys.exit(f"build failed: {built.message}")
    for kernel, figures in built.data["resources"].items():
        print("ptxas:", kernel, figures)
    if built.data["warnings"]:
        sys.exit(f"ptxas warnings: {built.data['warnings']}")
    inspected = inspect(Path(built.data["library"]), target, GEMM.opcodes["h100"], GEMM.launcher.name, timeout=120)
    print("inspect:", inspected.status.value, inspected.message)
    if not inspected.passed:
        sys.exit(1)
    return str(built.data["library"])


def load(path):
    lib = ctypes.CDLL(path)
    fn = lib.ptxbench_gemm
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def call(fn, A, B, C, ws):
    M, K = A.shape
    N = B.shape[0]
    return fn(
        A.data_ptr(),
        B.data_ptr(),
        C.data_ptr(),
        M,
        N,
        K,
        ws.data_ptr(),
        ws.numel(),
        torch.cuda.current_stream().cuda_stream,
    )


def check(fn):
    rows, ok_all = [], True
    gen = torch.Generator(device="cuda")
    cache = {}
    for M, N, K in CASES:
        gen.manual_seed(M * 1000003 + N * 101 + K)
        A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=gen)
        if (N, K) not in cache:
            cache = {(N, K): torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen)}
        B = cache[(N, K)]
        C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        ws = torch.zeros(4 * M * N, device="cuda", dtype=torch.uint8)
        A0, B0 = A.clone(), B.clone()
        rc = call(fn, A, B, C, ws)
        torch.cuda.synchronize()
        ref = A.float() @ B.float().T
        unwritten = int(torch.isnan(C).sum())
        diff = C.float() - ref
        rel = float(diff.norm() / ref.norm().clamp_min(1e-30))
        mx = float(diff.abs().nan_to_num(float("inf")).max())
        inputs_ok = torch.equal(A, A0) and torch.equal(B, B0)
        ok = rc == 0 and unwritten == 0 and rel < 1e-2 and mx < 0.05 * float(ref.abs().max()) + 0.05 and inputs_ok
        ok_all &= ok
        rows.append((f"M{M} N{N} K{K}", rc, unwritten, rel, mx, "ok" if ok else "FAIL"))
        print("checked", *rows[-1], flush=True)
        del A, C, ws, ref, diff, A0
    # Unsupported arguments must be refused with cudaErrorInvalidValue (1) and launch nothing.
    t = torch.zeros(64, 64, device="cuda", dtype=torch.bfloat16)
    for M, N, K in [(0, 64, 64), (64, 60, 64), (64, 64, 60), (64, -8, 64)]:
        rc = fn(t.data_ptr(), t.data_ptr(), t.data_ptr(), M, N, K, 0, 0, torch.cuda.current_stream().cuda_stream)
        ok = rc == 1
        ok_all &= ok
        rows.append((f"invalid M{M} N{N} K{K}", rc, 0, 0.0, 0.0, "ok" if ok else "FAIL"))
    return rows, ok_all


def median_ms(run, warm=10, iters=50):
    for _ in range(warm):
        run()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def bench(fn, M=8192, N=7168, K=5120):
    A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ws = torch.zeros(4 * M * N, device="cuda", dtype=torch.uint8)
    ours = median_ms(lambda: call(fn, A, B, C, ws))
    cublas = median_ms(lambda: torch.matmul(A, B.T))
    return ours, cublas, 2.0 * M * N * K


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print("device:", torch.cuda.get_device_name(), "| torch", torch.__version__)
    fn = load(build())
    rows, ok = check(fn)
    ours, cublas, flops = bench(fn)
    print()
    print(f"{'case':<24} {'rc':>3} {'unwritten':>9} {'rel_fro':>9} {'max_abs':>9}  result")
    for name, rc, unw, rel, mx, res in rows:
        print(f"{name:<24} {rc:>3} {unw:>9} {rel:>9.2e} {mx:>9.3g}  {res}")
    print()
    print(f"{'M8192 N7168 K5120':<24} {'median ms':>10} {'TFLOP/s':>9}")
    print(f"{'reference gemm.cu':<24} {ours:>10.4f} {flops / ours / 1e9:>9.1f}")
    print(f"{'cuBLAS torch.matmul':<24} {cublas:>10.4f} {flops / cublas / 1e9:>9.1f}")
    print(f"speedup vs cuBLAS: {cublas / ours:.3f}   correctness: {'ALL PASS' if ok else 'FAILURES'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
