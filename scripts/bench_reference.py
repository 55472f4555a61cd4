#!/usr/bin/env python3
"""Benchmark the Hopper reference kernels on the GPU machine without the harness's other stages: the
harness's build stage, a check against torch under the task's element rule and tolerances, then time
against the vendor library (CUDA events, L2 flushed before each run, 10 warm-ups, median of 30). A short
table comes last.

  attention_fwd: O and LSE checked on small and ragged shapes for every D, causal and not; timed at
                 B4 H48 S4096 against cuDNN.
  gemm:          every (N, K) pair of tasks/gemm.yaml at its largest M (or at each M given after the kernel;
                 words there such as n128-k2048 keep only those tasks), checked and timed against cuBLAS, the
                 task's workspace handed over.

Usage (from the checkout on the GPU machine):
  PYTHONPATH=. python3 scripts/bench_reference.py FAMILY [KERNEL.cu [M ...]]
The verdicts of record come from the harness: `pytest tasks --ptx-model=reference -k FAMILY`.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch

from pytest_ptxbench.baselines import attention_fwd_cudnn
from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.references import attention_fwd, gemm
from pytest_ptxbench.stages import check
from pytest_ptxbench.stages.build import build as build_stage
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family, load_family
from pytest_ptxbench.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
DIMS = (64, 96, 128, 256)
SMALL = ((1, 1, 1), (1, 2, 200), (2, 3, 129), (1, 2, 1000), (1, 1, 3001))


def build(source: Path, family: Family) -> tuple[ctypes.CDLL, Verdict]:
    """The harness's build stage (its flags, the task's launcher prototype, the driver linked), loaded."""
    candidate = Candidate.from_file(family.name, "h100", source)
    built = build_stage(candidate, family.launcher, TARGETS["h100"], Path(tempfile.mkdtemp()), 600)
    if not built.passed:
        sys.exit(f"build failed: {built.message}")
    ctypes.CDLL(
        "libcuda.so.1", mode=ctypes.RTLD_GLOBAL
    )  # for cuTensorMapEncodeTiled, which the library leaves undefined
    lib = ctypes.CDLL(built.data["host"])
    getattr(lib, family.launcher.name).restype = ctypes.c_int
    return lib, built


def compare(name: str, got: torch.Tensor, expected: torch.Tensor, family: Family) -> check.Comparison:
    """The harness's rule for one output (an element is wrong when beyond atol AND rtol; NaN always)."""
    dtype = "bf16" if got.dtype == torch.bfloat16 else "fp32"
    stored = got.contiguous().cpu()
    bits = stored.view(torch.int16).numpy().view(np.uint16) if dtype == "bf16" else stored.numpy()
    reference = expected.float().cpu().numpy()
    return check.compare(name, "", bits, dtype, reference, family.tolerances[dtype], 0xFF)


def call(
    lib: ctypes.CDLL,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    workspace: torch.Tensor,
) -> int:
    b, h, s, d = q.shape
    ptr = ctypes.c_void_p
    return int(
        lib.ptxbench_attention_fwd(
            ptr(q.data_ptr()),
            ptr(k.data_ptr()),
            ptr(v.data_ptr()),
            ptr(o.data_ptr()),
            ptr(lse.data_ptr()),
            b,
            h,
            s,
            d,
            int(causal),
            ctypes.c_float(d**-0.5),
            ptr(workspace.data_ptr()),
            ctypes.c_size_t(workspace.numel()),
            ptr(torch.cuda.current_stream().cuda_stream),
        )
    )


def inputs(b: int, h: int, s: int, d: int) -> list[torch.Tensor]:
    return [torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]


def workspace(family: Family, values: dict[str, object]) -> torch.Tensor:
    """The task's workspace, zeroed as the harness hands it over."""
    return torch.zeros(int(family.workspace_bytes(values)), dtype=torch.uint8, device="cuda")


def check_cases(lib: ctypes.CDLL, family: Family) -> list[str]:
    failures = []
    for d in DIMS:
        for causal in (False, True):
            for b, h, s in SMALL:
                q, k, v = inputs(b, h, s, d)
                o = torch.full_like(q, float("nan"))
                lse = torch.full((b, h, s), float("nan"), device="cuda")
                values = {"B": b, "H": h, "S": s, "D": d, "mask": "causal" if causal else "full"}
                code = call(lib, q, k, v, o, lse, causal, workspace(family, values))
                torch.cuda.synchronize()
                expected = attention_fwd({"Q": q, "K": k, "V": v}, values)
                found = [compare(n, got, expected[n], family) for n, got in (("O", o), ("LSE", lse))]
                ok = code == 0 and all(c.passes(family.matched_ratio) for c in found)
                errors = " ".join(f"max|d{c.output}| {c.max_abs_error:.5f} ({c.wrong} wrong)" for c in found)
                line = f"check d{d} {'causal' if causal else 'full'} b{b} h{h} s{s}: code {code} {errors}"
                print(line + ("" if ok else "  FAILED"), flush=True)
                if not ok:
                    failures.append(line)
    return failures


def median_ms(fn: Callable[[], object], runs: int = 30, warmup: int = 10) -> float:
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(warmup + runs):
        flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def timing(lib: ctypes.CDLL, family: Family) -> tuple[list[str], list[str]]:
    """B4 H48 S4096 for every D, full and causal; a call that returns an error is a failure, not a time."""
    rows, failures = [], []
    b, h, s = 4, 48, 4096
    for d in DIMS:
        for causal in (False, True):
            q, k, v = inputs(b, h, s, d)
            o, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda")
            values = {"B": b, "H": h, "S": s, "D": d, "mask": "causal" if causal else "full"}
            ours_call = partial(call, lib, q, k, v, o, lse, causal, workspace(family, values))
            code = ours_call()
            if code:
                failures.append(f"timing d{d} {values['mask']}: the call returned {code}")
                continue
            ours = median_ms(ours_call)
            cudnn = median_ms(partial(attention_fwd_cudnn, {"Q": q, "K": k, "V": v}, {}, values, {}))
            flops = family.flops(values)
            rows.append(
                f"d{d:<4} {values['mask']:<7} {ours:8.3f} ms {cudnn:8.3f} ms {cudnn / ours:6.2f}x {flops / ours / 1e9:6.0f} TFLOP/s"
            )
            print(rows[-1], flush=True)
    return rows, failures


def gemm_call(lib: ctypes.CDLL, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, workspace: torch.Tensor) -> int:
    (m, k), n = a.shape, b.shape[0]
    ptr = ctypes.c_void_p
    stream = ptr(torch.cuda.current_stream().cuda_stream)
    return int(
        lib.ptxbench_gemm(
            ptr(a.data_ptr()),
            ptr(b.data_ptr()),
            ptr(c.data_ptr()),
            m,
            n,
            k,
            ptr(workspace.data_ptr()),
            ctypes.c_size_t(workspace.numel()),
            stream,
        )
    )


def gemm_table(lib: ctypes.CDLL, family: Family, ms: list[int], words: list[str]) -> tuple[list[str], list[str]]:
    """Every (N, K) pair (or those whose task id holds one of `words`) at each M: checked under the task's
    rule (the workspace handed over full of 0xFF, as garbage), then timed against cuBLAS. Returns the rows
    and the failures."""
    rows, failures = [], []
    for task in family.tasks:
        if words and not any(w in task.name for w in words):
            continue
        n, k = int(task.axes["N"]), int(task.axes["K"])
        for m in ms:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            size = int(family.workspace_bytes({"M": m, "N": n, "K": k}))
            workspace = torch.full((size,), 0xFF, dtype=torch.uint8, device="cuda")
            code = gemm_call(lib, a, b, c, workspace)
            torch.cuda.synchronize()
            found = compare("C", c, gemm({"A": a, "B": b}, {})["C"], family)
            if code or not found.passes(family.matched_ratio):
                failures.append(f"{task.name} m{m}: code {code}; {found.summary() or 'wrong'}")
            t_ours = median_ms(partial(gemm_call, lib, a, b, c, workspace))
            out = torch.empty_like(c)
            t_cublas = median_ms(partial(torch.matmul, a, b.T, out=out))
            rows.append(
                f"{task.name:<18} m{m:<6} {t_ours:8.3f} ms {t_cublas:8.3f} ms {t_cublas / t_ours:6.2f}x "
                f"{family.flops({'M': m, 'N': n, 'K': k}) / t_ours / 1e9:6.0f} TFLOP/s  code {code} wrong {found.wrong}"
            )
            print(rows[-1], flush=True)
    return rows, failures


if __name__ == "__main__":
    name = sys.argv[1]
    default = ROOT / "tasks" / "reference" / "h100" / f"{name}.cu"
    source = Path(sys.argv[2]) if len(sys.argv) > 2 else default
    family = load_family(ROOT / "tasks" / f"{name}.yaml")
    lib, _ = build(source, family)
    if name == "gemm":
        shown = sorted({int(shape.values["M"]) for shape in family.shapes("all")})
        ms = [int(a) for a in sys.argv[3:] if a.isdigit()] or [shown[-1]]  # the largest M by default
        words = [a for a in sys.argv[3:] if not a.isdigit()]  # task ids' parts (n128-k2048): only those tasks
        rows, failures = gemm_table(lib, family, ms, words)
        print("\n== failures" if failures else "\n== all checks passed", *failures, sep="\n")
        print("task               shape    ours         cuBLAS       speedup  ours", *rows, sep="\n")
        sys.exit(1 if failures else 0)
    failures = check_cases(lib, family)
    rows, failed_timing = timing(lib, family) if not failures else ([], [])
    failures += failed_timing
    print("\n== failures" if failures else "\n== all checks passed", *failures, sep="\n")
    print("task        ours        cuDNN      speedup  ours", *rows, sep="\n")
    sys.exit(1 if failures else 0)
