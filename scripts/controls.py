#!/usr/bin/env python3
"""Controls of the timing method, on the GPU machine from a checkout:

1. A/A: the baseline timed against itself, two trusted children interleaved in blocks exactly as a
   candidate and its baseline are: the ratio of medians must read 1.00 within noise.
2. cuBLAS cross-check at the core GEMM shape, in blocks interleaved with the harness's so that both see
   the same power and clock state: the harness's events against torch's events, and the harness's CUPTI
   span against a CUDA graph replaying (flush, matmul) pairs less a graph of the flushes alone.
3. The attention baselines at d128 B4 H48 S4096 through the trusted child: cuDNN forward and backward,
   FlashInfer forward (with its errors against the reference); cuDNN's backward checked against the
   reference with the task's tolerances on every input distribution (can the vendor meet them?).
4. Stage wall times of a run directory's tests (harness cost), when one is given.
5. The replay's own timing: the reference GEMM through two trusted runners (A/A), and the runner against
   the library called directly in this process (torch events).

Usage: PYTHONPATH=. python3 scripts/controls.py [RUN_DIR]   1, 2, 5, the cuDNN part of 3, and 4 for RUN_DIR
       PYTHONPATH=. python3 scripts/controls.py --replay     5 only
       PYTHONPATH=. python3 scripts/controls.py --baselines  the rest of 3 (FlashInfer compiles: minutes)
       PYTHONPATH=. python3 scripts/controls.py --stages RUN_DIR
       PYTHONPATH=. python3 scripts/controls.py --self-check  cuDNN's backward under the task's check only
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_ptxbench.gpu import TRUSTED_TIMEOUT, GpuStages, compare_saved
from pytest_ptxbench.settings import defaults
from pytest_ptxbench.stages import check
from pytest_ptxbench.task.catalogue import load_family, resolved_params

ROOT = Path(__file__).resolve().parent.parent
BLOCKS, PER_BLOCK, WARMUP = 5, 10, 10


def aa_and_graph() -> list[str]:
    settings = defaults()
    gemm = load_family(ROOT / "tasks" / "gemm.yaml")
    task = next(t for t in gemm.tasks if t.name == "gemm-n7168-k5120")
    stages = GpuStages(settings, Path(tempfile.mkdtemp()))
    second = GpuStages(settings, Path(tempfile.mkdtemp()))  # its own trusted child: the same seed, the same sets
    independent = _cublas()
    try:
        prepared = stages.prepare(gemm, task, {"M": 8192}, "m8192")
        second.prepare(gemm, task, {"M": 8192}, "m8192")
        other = second.trusted()
        runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
        for child in (stages.trusted(), other):
            child.request({"op": "time", "key": prepared.key, "runs": WARMUP, "first": 0}, TRUSTED_TIMEOUT)
        independent.events(WARMUP)
        independent.event_ms.clear()
        for block in range(BLOCKS):
            for name, child in (("A", stages.trusted()), ("B", other)):
                request = {"op": "time", "key": prepared.key, "runs": PER_BLOCK, "first": block * PER_BLOCK}
                runs[name] += child.request(request, TRUSTED_TIMEOUT)["runs"]
            independent.events(PER_BLOCK)
            independent.graph()
    finally:
        stages.close()
        second.close()
    a, b = (statistics.median(r["span_ms"] for r in runs[n]) for n in ("A", "B"))
    # the independent side draws from a normal distribution: compare with the harness's runs on the normal set
    normal = [r for r in runs["A"] if r["index"] % len(gemm.distributions) == 0]
    span, events = statistics.median(r["span_ms"] for r in normal), statistics.median(r["event_ms"] for r in normal)
    torch_events, graph = statistics.median(independent.event_ms), statistics.median(independent.graph_ms)
    return [
        f"A/A (cuBLAS vs itself, 2 children, {BLOCKS}x{PER_BLOCK} interleaved): A {a:.4f} ms, B {b:.4f} ms, ratio {a / b:.4f}",
        "cuBLAS M8192 N7168 K5120, normal inputs, independent blocks interleaved with the harness's:",
        f"  harness CUDA events (device sync inside, L2 flushed) {events:.4f} ms vs torch events (L2 flushed by "
        f"torch, median of {len(independent.event_ms)}) {torch_events:.4f} ms: "
        f"{100 * (events - torch_events) / torch_events:+.2f}%",
        f"  harness CUPTI span {span:.4f} ms vs CUDA-graph replay of 10 (flush, matmul) pairs less 10 flushes "
        f"{graph:.4f} ms/call (median of {len(independent.graph_ms)} replays): {100 * (span - graph) / graph:+.2f}%",
    ]


def replay() -> list[str]:
    """The reference GEMM replayed by the trusted runner at the core shape (M 8192): A/A, two runners of the
    same launch lists interleaved exactly as a candidate and its baseline are; and the runner's CUPTI span
    against the same library called directly in this process and timed by torch (events, and a CUDA graph
    of flush-call pairs), in blocks between the runner's (the replay must add nothing)."""

    from pytest_ptxbench.candidate import Candidate
    from pytest_ptxbench.gpu import Code, Subject
    from pytest_ptxbench.pipeline import Pipeline
    from pytest_ptxbench.replay.timer import interleave
    from pytest_ptxbench.rundir import RunDirectory
    from pytest_ptxbench.targets import TARGETS

    settings = defaults()
    gemm = load_family(ROOT / "tasks" / "gemm.yaml")
    task = next(t for t in gemm.tasks if t.name == "gemm-n7168-k5120")
    source = ROOT / "tasks" / "reference" / "h100" / "gemm.cu"
    candidate = Candidate.from_file(gemm.name, "h100", source)
    pipeline = Pipeline(RunDirectory(Path(tempfile.mkdtemp())), lambda: [], settings)
    static = pipeline.static(candidate, gemm, task, TARGETS["h100"])
    stages = GpuStages(settings, Path(tempfile.mkdtemp()))
    subject = Subject(candidate, gemm, task, TARGETS["h100"], Code.of(static))
    try:
        prepared = stages.prepare(gemm, task, {"M": 8192}, "m8192")
        a = stages.replayer(subject, prepared, stages.private / "a")
        b = stages.replayer(subject, prepared, stages.private / "b")
        aa = interleave(a, lambda count, first: b.time(0, count, first, []).runs, 50, 10, lambda i, f: None)
        direct = _direct(static[0].data["host"], gemm.launcher.name)
        runner_ms: list[float] = []
        runner_events: list[float] = []
        a.time(0, WARMUP, 0, [])
        direct.events(WARMUP)
        direct.event_ms.clear()
        for block in range(BLOCKS):
            timed = a.time(0, PER_BLOCK, WARMUP + block * PER_BLOCK, []).runs
            runner_ms += [r["span_ms"] for r in timed]
            runner_events += [r["event_ms"] for r in timed]
            direct.events(PER_BLOCK)
            direct.graph()
        a.close()
        b.close()
    finally:
        stages.close()
        pipeline.close()
    ma, mb = (statistics.median(r["span_ms"] for r in runs) for runs in (aa.candidate, aa.baseline))
    span, events = statistics.median(runner_ms), statistics.median(direct.event_ms)
    own_events, graph = statistics.median(runner_events), statistics.median(direct.graph_ms)
    return [
        f"A/A through replay (the reference GEMM M8192, two runners, 50 runs interleaved in blocks): "
        f"A {ma:.4f} ms, B {mb:.4f} ms, ratio {ma / mb:.4f}",
        f"  runner CUPTI span {span:.4f} ms vs the library called directly, torch events (L2 flushed, median of "
        f"{len(direct.event_ms)}) {events:.4f} ms: {100 * (span - events) / events:+.2f}%",
        f"  runner events (graph launch, device sync inside) {own_events:.4f} ms vs the direct call's events "
        f"{events:.4f} ms: {100 * (own_events - events) / events:+.2f}%",
        f"  runner CUPTI span {span:.4f} ms vs a torch graph of 10 (flush, direct call) pairs less 10 flushes "
        f"{graph:.4f} ms/call (median of {len(direct.graph_ms)} replays): {100 * (span - graph) / graph:+.2f}%",
    ]


class _Timed:
    """A call timed in this process by torch alone, between the harness's blocks: CUDA events around each
    call (L2 flushed before it), and a CUDA graph of 10 (flush, call) pairs less a graph of the 10 flushes."""

    def __init__(self, call: Any, keep: tuple[Any, ...] = ()) -> None:
        import torch

        self.torch, self.call, self.keep = torch, call, keep  # keep: tensors the call reads by address
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        self.event_ms: list[float] = []
        self.graph_ms: list[float] = []
        self.pairs, self.flushes = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        self.events(3)
        with torch.cuda.graph(self.pairs):
            for _ in range(10):
                self.flush.zero_()
                call()
        with torch.cuda.graph(self.flushes):
            for _ in range(10):
                self.flush.zero_()
        self.event_ms.clear()

    def events(self, runs: int) -> None:
        torch = self.torch
        for _ in range(runs):
            self.flush.zero_()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.call()
            end.record()
            end.synchronize()
            self.event_ms.append(start.elapsed_time(end))

    def graph(self) -> None:
        self.graph_ms.append((self._replay(self.pairs) - self._replay(self.flushes)) / 10)

    def _replay(self, graph: Any) -> float:
        torch = self.torch
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))


def _cublas() -> _Timed:
    """cuBLAS at the core GEMM shape, through torch."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(8192, 5120, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(7168, 5120, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 7168, device="cuda", dtype=torch.bfloat16)
    return _Timed(lambda: torch.matmul(a, b.T, out=c))


def _direct(library: str, launcher: str) -> _Timed:
    """The reference GEMM's library (trusted code) called in this process at the core shape, on torch's
    current stream (so that a torch graph captures it)."""
    import ctypes

    import torch

    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)  # cuTensorMapEncodeTiled
    launch = getattr(ctypes.CDLL(library), launcher)
    launch.restype = ctypes.c_int
    m, n, k = 8192, 7168, 5120
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    workspace = torch.empty(4 * m * n, device="cuda", dtype=torch.uint8)
    vp = ctypes.c_void_p
    operands = (vp(a.data_ptr()), vp(b.data_ptr()), vp(c.data_ptr()), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k))
    scratch = (vp(workspace.data_ptr()), ctypes.c_size_t(workspace.numel()))

    def call() -> None:
        if launch(*operands, *scratch, vp(torch.cuda.current_stream().cuda_stream)) != 0:
            raise RuntimeError("the reference GEMM's launcher failed")

    return _Timed(call, keep=(a, b, c, workspace))


def attention_baselines() -> list[str]:
    """The cuDNN attention baselines through the trusted child at d128 S4096 (device notes: forward 2.69 ms,
    causal 1.46 ms; backward 8.02 ms, causal 4.56 ms)."""
    settings = defaults()
    stages = GpuStages(settings, Path(tempfile.mkdtemp()))
    lines = []
    try:
        for family_name in ("attention_fwd", "attention_bwd"):
            family = load_family(ROOT / "tasks" / f"{family_name}.yaml")
            for mask in ("full", "causal"):
                task = next(t for t in family.tasks if t.name == f"{family_name}-d128-{mask}")
                prepared = stages.prepare(family, task, {"B": 4, "H": 48, "S": 4096}, "b4-h48-s4096")
                trusted = stages.trusted()
                warm = trusted.request({"op": "time", "key": prepared.key, "runs": WARMUP, "first": 0}, TRUSTED_TIMEOUT)
                reply = (
                    warm
                    if not warm["ok"]
                    else trusted.request({"op": "time", "key": prepared.key, "runs": 50, "first": 1}, TRUSTED_TIMEOUT)
                )
                if not reply["ok"]:
                    lines.append(f"{task.name} b4-h48-s4096: the baseline failed: {reply['error']}")
                    continue
                spans = [r["span_ms"] for r in reply["runs"]]
                kernels = sorted({k["name"][:50] for r in reply["runs"] for k in r["kernels"]})
                lines.append(
                    f"{family.baseline.rpartition(':')[2]} {task.name} b4-h48-s4096: median {statistics.median(spans):.3f} ms "
                    f"(IQR {_iqr(spans):.3f}) over {len(spans)} runs; {prepared.libraries}; kernels {kernels}"
                )
    finally:
        stages.close()
    return lines


def flashinfer_forward() -> list[str]:
    """FlashInfer (--ptx-baseline=flashinfer) as the attention_fwd baseline at d128 B4 H48 S4096, timed through
    the trusted child as cuDNN is, and its O and LSE of the last timed run against the fp32 reference (device
    notes: one sequence of 48 heads, causal, 0.42 ms; its first call compiles for ~86 s)."""
    settings = defaults()
    stages = GpuStages(settings, Path(tempfile.mkdtemp()))
    family = load_family(ROOT / "tasks" / "attention_fwd.yaml").with_baseline("flashinfer")
    lines = []
    try:
        for mask in ("full", "causal"):
            task = next(t for t in family.tasks if t.name == f"attention_fwd-d128-{mask}")
            prepared = stages.prepare(family, task, {"B": 4, "H": 48, "S": 4096}, "b4-h48-s4096")
            if prepared.unavailable is not None:
                return [f"FlashInfer {task.name}: not run: {prepared.unavailable}"]
            trusted = stages.trusted()
            started = time.monotonic()
            warm = trusted.request({"op": "time", "key": prepared.key, "runs": WARMUP, "first": 0}, TRUSTED_TIMEOUT)
            warmup_s = time.monotonic() - started
            if not warm["ok"]:
                lines.append(f"FlashInfer {task.name}: warm-up failed after {warmup_s:.0f} s: {warm['error']}")
                continue
            outputs = stages.scratch / "flashinfer" / mask
            reply = trusted.request(
                {"op": "time", "key": prepared.key, "runs": 50, "first": 1, "outputs_dir": str(outputs)},
                TRUSTED_TIMEOUT,
            )
            if not reply["ok"]:
                lines.append(f"FlashInfer {task.name}: timing failed: {reply['error']}")
                continue
            spans = [r["span_ms"] for r in reply["runs"]]
            per_kernel: dict[str, list[float]] = {}
            for k in (k for r in reply["runs"] for k in r["kernels"]):
                per_kernel.setdefault(k["name"][:50], []).append(k["ms"])
            kernels = {name: round(statistics.median(ms), 4) for name, ms in sorted(per_kernel.items())}
            [(index, files)] = reply["saved"].items()
            index = int(index) % len(prepared.sets)
            errors = [
                f"{c.output} max abs error {c.max_abs_error:.3g} ({c.wrong} of {c.elements} outside tolerance)"
                for c in compare_saved(family, prepared, index, files, f"set {index}", 0xFF)
            ]
            lines.append(
                f"FlashInfer {task.name} b4-h48-s4096: median {statistics.median(spans):.3f} ms (IQR {_iqr(spans):.3f}) "
                f"over {len(spans)} runs; warm-up (with compilation) {warmup_s:.0f} s; {'; '.join(errors)}; "
                f"{prepared.libraries}; kernels (median ms) {kernels}"
            )
    finally:
        stages.close()
    return lines


def baseline_self_check() -> list[str]:
    """cuDNN's attention backward against the fp32 reference with the task's own tolerances, on every input
    distribution, B4 H48 S4096 d128: a tolerance the vendor library cannot meet is the task's fault, not a
    candidate's."""
    import numpy as np
    import torch

    from pytest_ptxbench.baselines import cudnn_backward
    from pytest_ptxbench.child.trusted import generate
    from pytest_ptxbench.references import attention_bwd, attention_bwd_inputs

    family = load_family(ROOT / "tasks" / "attention_bwd.yaml")
    lines = []
    for mask in ("full", "causal"):
        task = next(t for t in family.tasks if t.name == f"attention_bwd-d128-{mask}")
        values = {**task.axes, "B": 4, "H": 48, "S": 4096}
        params = resolved_params(family, values)
        for seed, distribution in enumerate(family.distributions):
            drawn = {"name": distribution.name, **distribution.params}
            inputs = {  # a seed of its own for every tensor
                p["name"]: generate(p["shape"], p["dtype"], drawn, 100 * seed + i)
                for i, p in enumerate(params)
                if p["role"] == "input" and p["name"] not in ("O", "LSE")
            }
            inputs.update(attention_bwd_inputs(inputs, values, seed))
            with torch.no_grad():
                expected = attention_bwd(inputs, values)
            got = dict(zip(("dQ", "dK", "dV"), cudnn_backward(inputs, values, {}), strict=True))
            cells = []
            for name, tensor in got.items():
                bits = tensor.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
                c = check.compare(
                    name, distribution.name, bits, "bf16", expected[name].cpu().numpy(), family.tolerances["bf16"], 0xFF
                )
                cells.append(f"{name} {c.wrong} wrong (max abs error {c.max_abs_error:.3g})")
            lines.append(f"cuDNN {task.name} b4-h48-s4096 {distribution.name}: {'; '.join(cells)}")
            print(lines[-1], flush=True)
    return lines


def _iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


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
        data = {v["stage"]: v.get("data", {}) for v in row["verdicts"]}
        timed = data.get("time", {})
        if "idle_median_ms" in timed:  # the GPU idle inside each side's span: gaps between a call's launches
            lines.append(
                f"{'':<40} time {timed['median_ms']:.4f} ms (idle {timed['idle_median_ms']:.4f}), baseline"
                f" {timed['baseline_median_ms']:.4f} ms (idle {timed['baseline_idle_median_ms']:.4f})"
            )
        if "capture_seconds" in data.get("check", {}):  # the replay's own overhead, inside check
            lines.append(
                f"{'':<40} capture {data['check']['capture_seconds']:.1f} s, runner start"
                f" {data['check']['runner_seconds']:.1f} s; rechecks reused {data.get('time', {}).get('rechecks_as_checked')}"
            )
    return lines


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stages"]:  # only the stage wall times of a run directory
        print("\n".join(stage_times(Path(sys.argv[2]))))
        sys.exit(0)
    if sys.argv[1:2] == ["--self-check"]:  # only cuDNN's backward under the task's check
        print("\n".join(baseline_self_check()), flush=True)
        sys.exit(0)
    if sys.argv[1:2] == ["--baselines"]:  # the alternative baseline and the vendor's own check (minutes)
        print("\n".join(flashinfer_forward()), flush=True)
        print("\n".join(baseline_self_check()), flush=True)
        sys.exit(0)
    if sys.argv[1:2] == ["--replay"]:  # only the controls of the trusted runner's timing
        print("\n".join(replay()), flush=True)
        sys.exit(0)
    print("\n".join(aa_and_graph()), flush=True)
    print("\n".join(replay()), flush=True)
    print("\n".join(attention_baselines()), flush=True)
    if len(sys.argv) > 1 and Path(sys.argv[1], "results.jsonl").exists():
        print("\n".join(stage_times(Path(sys.argv[1]))))
