#!/usr/bin/env python3
"""The reference kernels on every task and shape of a family, without the harness's other stages: the harness's
build stage, the launcher called with inputs drawn as N(0, 1) (derived and host inputs made by the task file's
functions), every output checked against the fp32 reference under the task's element rule, then timed against
the family's vendor baseline (CUDA events, L2 flushed and the GPU held busy while the call is enqueued before
each run, 10 warm-ups, median of 30). A line per shape as it goes; last, a summary per task with issue 20's goals
marked.

Usage (from the checkout on the GPU machine; the paged families need FlashInfer's wheels, see README):
  PYTHONPATH=. python3 scripts/bench_reference.py table    # gemm, attention_fwd, attention_bwd: the whole table
  PYTHONPATH=. python3 scripts/bench_reference.py FAMILY [KERNEL.cu ...] [-k WORDS ...] [--shapes WHICH]
      [--no-baseline] [--runs N] [--hang SECONDS]
Several kernels (variants of one reference) get a column each; speedups and the summary are of each. A
shape runs when its label "TASK SHAPE " holds every word of one -k (e.g. -k "n7168-k5120 m8192 "; -k d64 -k d96
for either); `--shapes` is visible, hidden or all (the default); `--no-baseline` skips the vendor library
(FlashInfer's first call compiles for minutes on a fresh machine); `--runs` timed runs per shape (30); a step
that runs past `--hang` seconds (60) is named and ends the run (exit status 2). Exit status 1 when a check
failed. The verdicts of record come from the harness: `pytest tasks --ptx-model=reference -k FAMILY`.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.stages import check
from pytest_ptxbench.stages.build import build as build_stage
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family, Shape, Task, load_family, resolved_params
from pytest_ptxbench.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
SEED = 1
TORCH = {"bf16": torch.bfloat16, "fp32": torch.float32, "i32": torch.int32}
TABLE = ("gemm", "attention_fwd", "attention_bwd")
CORE = "gemm-n7168-k5120"
HOLD_MS = 0.5  # the GPU kept busy before each timed window while the host enqueues the call


def build(source: Path, family: Family) -> tuple[ctypes.CDLL, Verdict]:
    """The harness's build stage (its flags, the task's launcher prototype, the driver linked), loaded."""
    candidate = Candidate.from_file(family.name, "h100", source)
    built = build_stage(candidate, family.launcher, TARGETS["h100"], Path(tempfile.mkdtemp()), 600)
    if not built.passed:
        sys.exit(f"build of {source} failed: {built.message}")
    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)  # cuTensorMapEncodeTiled, left undefined by the library
    lib = ctypes.CDLL(built.data["host"])
    getattr(lib, family.launcher.name).restype = ctypes.c_int
    return lib, built


def compare(name: str, got: torch.Tensor, expected: torch.Tensor | np.ndarray, family: Family) -> check.Comparison:
    """The harness's rule for one output (an element is wrong when beyond atol AND rtol; NaN always)."""
    dtype = "bf16" if got.dtype == torch.bfloat16 else "fp32"
    stored = got.contiguous().cpu()
    bits = stored.view(torch.int16).numpy().view(np.uint16) if dtype == "bf16" else stored.numpy()
    reference = expected if isinstance(expected, np.ndarray) else expected.float().cpu().numpy()
    return check.compare(name, "", bits, dtype, reference, family.tolerances[dtype], 0xFF)


def interleaved_ms(
    fns: list[Callable[[], object]], runs: int = 30, warmup: int = 10, tick: Callable[[], None] = lambda: None
) -> list[float]:
    """The median time of each function, run in turn (so that clocks and heat weigh on each alike), the L2
    flushed before every run. The call is enqueued while the GPU still flushes and then spins for HOLD_MS, so
    that the host's time in the launcher (or in torch's dispatch) stays out of the timed window, as it does in
    the harness's kernel span: the flush alone (about 35 us) let a slow dispatch leak into the vendor's times at
    the 0.1 ms shapes."""
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    hold_cycles = int(HOLD_MS * 2e6)  # at up to 2 GHz (H100 and H200 boost to 1.98 GHz); longer at lower clocks
    times: list[list[float]] = [[] for _ in fns]
    for i in range(warmup + runs):
        for fn, kept in zip(fns, times, strict=True):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            torch.cuda._sleep(hold_cycles)
            start.record()
            fn()
            end.record()
            end.synchronize()
            if i >= warmup:
                kept.append(start.elapsed_time(end))
        tick()
    return [float(statistics.median(kept)) for kept in times]


def median_ms(fn: Callable[[], object], runs: int = 30, warmup: int = 10) -> float:
    return interleaved_ms([fn], runs, warmup)[0]


def warm_up(seconds: float = 3.0) -> None:
    """Busy the GPU for a few seconds, so that the first shapes are not timed at idle clocks."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


class Watchdog:
    """Ends the process, naming what ran, when one step (a kernel's check, one round of a shape's timed runs) takes
    longer than `seconds`: a kernel that deadlocks would otherwise hold the call until the device's limit, reporting
    nothing."""

    def __init__(self, seconds: float) -> None:
        self.seconds = self.limit = seconds
        self.what, self.since = "the warm-up", time.monotonic()
        threading.Thread(target=self._watch, daemon=True).start()

    def at(self, what: str, limit: float | None = None) -> None:
        self.what, self.since, self.limit = what, time.monotonic(), limit or self.seconds

    def tick(self) -> None:
        self.since = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(1)
            if time.monotonic() - self.since > self.limit:
                print(f"\n== failures\nhung: {self.what} ran past {self.limit:.0f} s", flush=True)
                os._exit(2)


def nothing() -> None:
    """Stands in, in the timed turn, for a kernel that failed its check."""


def _resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class Case:
    """One task on one shape: inputs (drawn, derived, and host tables), outputs, workspace, and the launcher's
    arguments in its order."""

    def __init__(self, family: Family, task: Task, shape: Shape) -> None:
        self.values = family.values(task, shape.values)
        self.params = resolved_params(family, self.values)
        host = family.host_inputs.tables(self.values, SEED) if family.host_inputs else {}
        derived = family.derived.names if family.derived else ()
        generator = torch.Generator(device="cuda").manual_seed(SEED)
        self.inputs: dict[str, torch.Tensor] = {}
        self.outputs: dict[str, torch.Tensor] = {}
        self.host = {name: (ctypes.c_int32 * len(v))(*v) for name, v in host.items()}
        for p in self.params:
            if p["role"] == "input" and p["name"] in host:
                self.inputs[p["name"]] = torch.tensor(host[p["name"]], dtype=torch.int32, device="cuda")
            elif p["role"] == "input" and p["name"] not in derived:
                drawn = torch.randn(p["shape"], generator=generator, device="cuda")
                self.inputs[p["name"]] = drawn.to(TORCH[p["dtype"]])
            elif p["role"] == "output":
                self.outputs[p["name"]] = torch.empty(p["shape"], device="cuda", dtype=TORCH[p["dtype"]])
        if family.derived:
            self.inputs.update(_resolve(family.derived.function)(self.inputs, self.values, SEED))
        self.workspace = torch.empty(int(family.workspace_bytes(self.values)), dtype=torch.uint8, device="cuda")

    def arguments(self) -> list[Any]:
        out: list[Any] = []
        for p in self.params:
            role, name = p["role"], p["name"]
            if role in ("input", "output"):
                out.append(ctypes.c_void_p({**self.inputs, **self.outputs}[name].data_ptr()))
            elif role == "host":
                out.append(ctypes.cast(self.host[p["of"]], ctypes.c_void_p))
            elif role == "scalar":
                out.append(ctypes.c_float(p["value"]) if p["ctype"] == "float" else ctypes.c_int(p["value"]))
            elif role == "workspace":
                out.append(ctypes.c_void_p(self.workspace.data_ptr()))
            elif role == "workspace_bytes":
                out.append(ctypes.c_size_t(self.workspace.numel()))
            else:
                out.append(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        return out

    def poison(self) -> None:
        """Outputs NaN and the workspace 0xFF, so that a kernel must write and initialise what it uses."""
        for output in self.outputs.values():
            output.fill_(float("nan"))
        self.workspace.fill_(0xFF)


@dataclass(frozen=True)
class Result:
    task: str
    shape: Shape
    ours: tuple[float, ...]  # ms per kernel; NaN where the call failed or the check did
    theirs: float  # ms of the baseline; NaN without one

    def speedups(self) -> list[float]:
        return [self.theirs / t for t in self.ours]


def run_family(
    family: Family, sources: list[Path], words: list[list[str]], which: str, baseline: bool, runs: int, watch: Watchdog
) -> tuple[list[Result], list[str]]:
    """Every kept task x shape, each kernel checked then timed, the baseline timed once. Returns the results
    and the failures."""
    launches = []
    for source in sources:
        watch.at(f"the build of {source}", 900)
        launches.append(getattr(build(source, family)[0], family.launcher.name))
    reference, vendor = _resolve(family.reference), _resolve(family.baseline)
    results, failures = [], []
    for task in family.tasks:
        for shape in family.shapes(which):
            label = f"{task.name} {shape.id} "
            if words and not any(all(w in label for w in group) for group in words):
                continue
            case = Case(family, task, shape)
            arguments = case.arguments()
            expected: dict[str, np.ndarray] = {}
            timed: list[Callable[[], object]] = []
            errors: list[str] = []
            for source, launch in zip(sources, launches, strict=True):
                watch.at(f"the check of {source} on {label}")
                case.poison()
                code = int(launch(*arguments))
                torch.cuda.synchronize()
                if not expected:
                    computed = reference(case.inputs, case.values)
                    expected = {n: t.float().cpu().numpy() for n, t in computed.items()}
                found = [compare(n, case.outputs[n], expected[n], family) for n in case.outputs]
                wrong = [c for c in found if not c.passes(family.matched_ratio)]
                if code or wrong:
                    failures.append(f"{label}{source.name}: code {code}; " + "; ".join(c.summary() for c in wrong))
                    print(failures[-1], flush=True)
                    timed.append(nothing)
                    continue
                timed.append(partial(launch, *arguments))
                errors.append(" ".join(f"{c.output} {c.max_abs_error:.4f}" for c in found))
            if baseline:
                theirs_outputs = {n: torch.empty_like(t) for n, t in case.outputs.items()}
                timed.append(partial(vendor, case.inputs, theirs_outputs, case.values, {}))
            watch.at(f"the timed runs on {label}({', '.join(map(str, sources))})")
            measured = interleaved_ms(timed, runs, tick=watch.tick)
            times = [float("nan") if fn is nothing else t for fn, t in zip(timed, measured, strict=True)][
                : len(sources)
            ]
            theirs = measured[-1] if baseline else float("nan")
            results.append(Result(task.name, shape, tuple(times), theirs))
            flops = family.flops(case.values)
            ours = " ".join(f"{t:8.3f} ms {s:5.2f}x" for t, s in zip(times, results[-1].speedups(), strict=True))
            print(
                f"{label:<56}{ours} {theirs:8.3f} ms {flops / times[0] / 1e9:5.0f} TFLOP/s  max error {errors[:1]}",
                flush=True,
            )
    return results, failures


def geomean(values: list[float]) -> float:
    kept = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, kept)) / len(kept)) if kept and len(kept) == len(values) else float("nan")


def goals(family: str, task: str) -> tuple[str, float, float]:
    """Issue 20's goals: (the shape with one, the speedup there, the geometric mean over the hidden shapes);
    0 where it sets none."""
    if family == "gemm":
        return "m8192", (1.0 if task == CORE else 0.9), 0.8
    if family.startswith("attention"):
        return "b4-h48-s4096", (1.0 if "-d128-" in task else 0.95), 0.0
    return "", 0.0, 0.0


def summary(family: Family, results: list[Result], kernels: int) -> list[str]:
    """Per task and kernel: the speedup at each visible shape, the geometric mean over the hidden ones, the
    least; a mark `<` where a goal is missed. Last, the family's geometric mean over every shape."""
    visible = [s.id for s in family.shapes("visible")]
    head = f"{'task':<34}{'kernel':>7}" + "".join(f"{v:>16}" for v in visible) + f"{'hidden gm':>11}{'least':>8}"
    lines = [f"== {family.name}, speedup over {family.baseline_library}", head]
    for task in family.tasks:
        mine = [r for r in results if r.task == task.name]
        if not mine:
            continue
        goal_shape, shown_goal, hidden_goal = goals(family.name, task.name)
        for k in range(kernels):
            cells = []
            for v in visible:
                s = [r.speedups()[k] for r in mine if r.shape.id == v]
                missed = v == goal_shape and s and s[0] < shown_goal
                cells.append(f"{s[0]:6.2f}x" + ("<" if missed else " ") if s else "")
            hidden = geomean([r.speedups()[k] for r in mine if r.shape.hidden])
            least = min((r.speedups()[k] for r in mine), default=float("nan"))
            mark = "<" if hidden < hidden_goal else " "
            lines.append(
                f"{task.name:<34}{k:>7}" + "".join(f"{c:>16}" for c in cells) + f"{hidden:9.2f}x{mark}{least:7.2f}x"
            )
    for k in range(kernels):
        lines.append(f"geometric mean over every shape, kernel {k}: {geomean([r.speedups()[k] for r in results]):.2f}x")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", help="a task file's family name, or `table` for " + ", ".join(TABLE))
    parser.add_argument("kernels", nargs="*", type=Path, help="the .cu files (default: the family's reference)")
    parser.add_argument("-k", dest="words", action="append", default=[], help="keep labels holding these words")
    parser.add_argument("--shapes", default="all", choices=("visible", "hidden", "all"))
    parser.add_argument("--no-baseline", dest="baseline", action="store_false")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per kernel and shape (a stress test: 1000)")
    parser.add_argument("--hang", type=float, default=60, help="seconds after which one step counts as hung")
    args = parser.parse_args()
    names = TABLE if args.family == "table" else (args.family,)
    if args.family == "table" and args.kernels:
        parser.error("`table` runs the references; name a family to run other kernels")
    words = [group.split() for group in args.words]
    watch = Watchdog(args.hang)
    warm_up()
    lines, failures = [], []
    for name in names:
        family = load_family(ROOT / "tasks" / f"{name}.yaml")
        sources = args.kernels or [ROOT / "tasks" / "reference" / "h100" / f"{name}.cu"]
        results, failed = run_family(family, sources, words, args.shapes, args.baseline, args.runs, watch)
        if not results and not failed:
            parser.error(f"no shape of {name} has a label holding every word of one -k {args.words}")
        failures += failed
        lines += ["", *(f"kernel {k}: {s}" for k, s in enumerate(sources)), *summary(family, results, len(sources))]
    print("\n== failures" if failures else "\n== all checks passed", *failures, *lines, sep="\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
