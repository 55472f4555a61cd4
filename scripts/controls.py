#!/usr/bin/env python3
"""Controls of the timing method, on the GPU machine from a checkout:

1. A/A: the baseline timed against itself, two trusted children interleaved in blocks exactly as a
   candidate and its baseline are: the ratio of medians must read 1.00 within noise.
2. cuBLAS cross-check: the harness's baseline latency at the core GEMM shape against an independent
   measurement (a CUDA graph replaying 20 calls, L2 not flushed, time per call).
3. Stage wall times of a run directory's tests (harness cost), when one is given.

Usage: PYTHONPATH=. python3 scripts/controls.py [RUN_DIR]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_ptxbench.gpu import TRUSTED_TIMEOUT, GpuStages
from pytest_ptxbench.settings import OPTIONS
from pytest_ptxbench.task.catalogue import load_family
from pytest_ptxbench.toolchain import find_library
from pytest_ptxbench.workers import Child, child_environment

ROOT = Path(__file__).resolve().parent.parent
BLOCKS, PER_BLOCK, WARMUP = 5, 10, 10


def aa_and_graph() -> list[str]:
    settings = {o.name: o.default for o in OPTIONS}
    gemm = load_family(ROOT / "tasks" / "gemm.yaml")
    task = next(t for t in gemm.tasks if t.name == "gemm-n7168-k5120")
    stages = GpuStages(settings, Path(tempfile.mkdtemp()))
    try:
        prepared = stages.prepare(gemm, task, {"M": 8192}, "m8192")
        folder = stages.scratch / "trusted-b"
        cudart = {"PTXBENCH_CUDART": str(find_library("libcudart.so.13") or "")}
        other = Child("trusted", folder, child_environment(folder, cudart))
        request = {
            "op": "prepare",
            "key": prepared.key,
            "family": gemm.name,
            "reference": gemm.reference,
            "baseline": gemm.baseline,
            "params": prepared.params,
            "values": prepared.values,
            "seed": settings["seed"],
            "folder": str(stages.scratch / "sets-b"),
            "distributions": [{"name": d.name, **d.params} for d in gemm.distributions],
        }
        assert other.request(request, TRUSTED_TIMEOUT)["ok"]
        series: dict[str, list[float]] = {"A": [], "B": []}
        events: dict[str, list[float]] = {"A": [], "B": []}
        for child in (stages.trusted(), other):
            child.request({"op": "time", "key": prepared.key, "runs": WARMUP, "first": 0}, TRUSTED_TIMEOUT)
        for block in range(BLOCKS):
            for name, child in (("A", stages.trusted()), ("B", other)):
                reply = child.request(
                    {"op": "time", "key": prepared.key, "runs": PER_BLOCK, "first": block}, TRUSTED_TIMEOUT
                )
                series[name] += [r["span_ms"] for r in reply["runs"]]
                events[name] += [r["event_ms"] for r in reply["runs"]]
        other.close()
    finally:
        stages.close()
    a, b = statistics.median(series["A"]), statistics.median(series["B"])
    a_events = statistics.median(events["A"])
    graph, flushed = _graph_ms(), _events_flushed_ms()
    return [
        f"A/A (cuBLAS vs itself, 2 children, {BLOCKS}x{PER_BLOCK} interleaved): A {a:.4f} ms, B {b:.4f} ms, ratio {a / b:.4f}",
        f"cuBLAS M8192 N7168 K5120: harness (CUPTI span, L2 flushed, median of {len(series['A'])}) {a:.4f} ms; "
        f"CUDA-graph replay of 20 calls {graph:.4f} ms/call; difference {100 * (a - graph) / graph:+.2f}%",
        f"cuBLAS M8192 N7168 K5120: harness CUDA events (device sync inside) {a_events:.4f} ms; independent torch "
        f"events, L2 flushed by torch, median of 50: {flushed:.4f} ms; difference {100 * (a_events - flushed) / flushed:+.2f}%",
    ]


def _events_flushed_ms() -> float:
    import torch

    a = torch.randn(8192, 5120, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(7168, 5120, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 7168, device="cuda", dtype=torch.bfloat16)
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(60):
        flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b.T, out=c)
        end.record()
        end.synchronize()
        if i >= 10:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def _graph_ms() -> float:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(8192, 5120, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(7168, 5120, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 7168, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):
        torch.matmul(a, b.T, out=c)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            torch.matmul(a, b.T, out=c)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 20)
    return statistics.median(times)


def stage_times(run: Path) -> list[str]:
    lines = [
        "stage seconds per test: "
        + "  ".join(f"{s:>8}" for s in ("build", "inspect", "check", "profile", "sanitize", "time"))
    ]
    for line in (run / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        seconds = {v["stage"]: v["seconds"] for v in row["verdicts"]}
        cells = "  ".join(
            f"{seconds.get(s, 0.0):8.1f}" for s in ("build", "inspect", "check", "profile", "sanitize", "time")
        )
        lines.append(f"{row['id']:<40} {cells}  total {sum(seconds.values()):.1f}")
    return lines


if __name__ == "__main__":
    print("\n".join(aa_and_graph()), flush=True)
    if len(sys.argv) > 1 and Path(sys.argv[1], "results.jsonl").exists():
        print("\n".join(stage_times(Path(sys.argv[1]))))
