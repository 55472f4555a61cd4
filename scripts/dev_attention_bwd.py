#!/usr/bin/env python3
"""Development check of the Hopper attention-backward reference kernel, on the GPU machine from a checkout.

Builds tasks/reference/h100/attention_bwd.cu with the harness's build stage, prints its compile figures, then runs the cases in child processes: a kernel fault or a hang ends
the case it happened in, and the next child carries on with the rest. Correctness: dQ, dK, dV against the
project's fp32 reference under the task's element rule, tolerances and matched ratio, for D 64/96/128, causal and not, at
S 200, 1000, 3001 and 4096, each checked on two consecutive calls with a workspace filled with garbage
and poisoned outputs. Timing: B4 H48 S4096 d128, causal and not, timed as bench_reference.py times (CUDA
events, L2 flushed, 10 warm-ups, median of 30), against cuDNN's backward. A table comes last.

Usage: python3 scripts/dev_attention_bwd.py [--source FILE] [--skip-time]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pytest_ptxbench.task.catalogue import load_family  # noqa: E402  (the checkout, without PYTHONPATH)
from pytest_ptxbench.verdict import Verdict  # noqa: E402

FAMILY = load_family(ROOT / "tasks" / "attention_bwd.yaml")
SOURCE = ROOT / "tasks" / "reference" / "h100" / "attention_bwd.cu"
CASE_TIMEOUT_S = 120.0  # per case, after the child has started
START_TIMEOUT_S = 120.0  # torch import and CUDA start-up
# (B, H, S) per sequence length of the correctness cases
CHECK_SHAPES = [(1, 2, 200), (2, 3, 1000), (1, 2, 3001), (1, 8, 4096)]
TIME_SHAPE = (4, 48, 4096)


def figures(built: Verdict) -> list[str]:
    """One line per kernel from the build stage's ptxas figures: registers, spills, stack; then warnings."""
    lines = [
        f"{kernel[:48]:48s} regs {r.get('registers', '?'):>3}  spill st/ld {r.get('spill_store_bytes', '?')}/"
        f"{r.get('spill_load_bytes', '?')} B  stack {r.get('stack_bytes', '?')} B"
        for kernel, r in built.data["resources"].items()
    ]
    return lines + [f"WARNING {w}" for w in built.data["warnings"]]


# ---------------------------------------------------------------- child side


def run_case(lib: ctypes.CDLL, case: dict[str, Any]) -> dict[str, Any]:
    import torch
    from bench_reference import compare, median_ms  # the forward's method: L2 flushed before each run

    from pytest_ptxbench import baselines, references

    B, H, S, D, causal = case["B"], case["H"], case["S"], case["D"], case["causal"]
    values = {"B": B, "H": H, "S": S, "D": D, "mask": "causal" if causal else "full"}
    gen = torch.Generator(device="cuda").manual_seed(1234)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(4))
    fwd = references.attention_fwd({"Q": q, "K": k, "V": v}, values)
    o, lse = fwd["O"].to(torch.bfloat16).contiguous(), fwd["LSE"].contiguous()
    inputs = {"Q": q, "K": k, "V": v, "O": o, "dO": do, "LSE": lse}
    ref = references.attention_bwd(inputs, values)
    outs = {n: torch.empty(B, H, S, D, device="cuda", dtype=torch.bfloat16) for n in ("dQ", "dK", "dV")}
    ws_bytes = int(FAMILY.workspace_bytes(values))
    workspace = torch.empty(ws_bytes, device="cuda", dtype=torch.uint8)
    stream = torch.cuda.current_stream().cuda_stream
    ptr = ctypes.c_void_p

    def call() -> None:
        rc = lib.ptxbench_attention_bwd(
            *(ptr(inputs[n].data_ptr()) for n in ("Q", "K", "V", "O", "dO", "LSE")),
            *(ptr(outs[n].data_ptr()) for n in ("dQ", "dK", "dV")),
            B,
            H,
            S,
            D,
            int(causal),
            ctypes.c_float(D**-0.5),
            ptr(workspace.data_ptr()),
            ctypes.c_size_t(ws_bytes),
            ptr(stream),
        )
        if rc != 0:
            raise RuntimeError(f"ptxbench_attention_bwd returned cudaError {rc}")

    result: dict[str, Any] = {"errors": {}, "bad": {}}
    workspace.fill_(0xFF)  # NaN as fp32: the kernel must initialise what it accumulates into
    for _ in range(2):  # and the second call must not depend on what the first left in the workspace
        for t in outs.values():
            t.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        for n, t in outs.items():
            found = compare(n, t, ref[n], FAMILY)  # the task's rule: beyond atol AND rtol; NaN always wrong
            result["errors"][n] = max(result["errors"].get(n, 0.0), found.max_abs_error)
            result["bad"][n] = max(result["bad"].get(n, 0), found.wrong)
            result["passed"] = result.get("passed", True) and found.passes(FAMILY.matched_ratio)
    if case.get("time"):
        state: dict[str, Any] = {}
        result["ms"] = median_ms(call)
        result["cudnn_ms"] = median_ms(lambda: baselines.attention_bwd_cudnn(inputs, outs, values, state))
    return result


def child(library: str, cases: list[dict[str, Any]]) -> None:
    import torch

    torch.cuda.init()
    lib = ctypes.CDLL(library)
    lib.ptxbench_attention_bwd.restype = ctypes.c_int
    for case in cases:
        print(json.dumps({"start": case["name"]}), flush=True)
        print(json.dumps({"name": case["name"], **run_case(lib, case)}), flush=True)


# ---------------------------------------------------------------- parent side


def pump(stream: IO[str] | None, lines: queue.Queue[str]) -> None:
    """Moves a child's stdout into a queue line by line, then "" at its end (the parent waits with a timeout)."""
    for line in stream or ():
        lines.put(line)
    lines.put("")


def run_all(library: str, cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Runs the cases in children; a child that dies or hangs costs the case it was in, not the rest."""
    results: dict[str, dict[str, Any]] = {}
    todo = list(cases)
    while todo:
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(
                [sys.executable, __file__, "--child", library, json.dumps(todo)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
            lines: queue.Queue[str] = queue.Queue()
            threading.Thread(target=pump, args=(proc.stdout, lines), daemon=True).start()
            current, timeout = None, START_TIMEOUT_S
            while True:
                try:
                    line = lines.get(timeout=timeout)
                except queue.Empty:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    fault = f"no progress within {timeout:.0f} s (hang?)"
                    break
                if not line:  # end of the child's output
                    proc.wait()
                    err.seek(0)
                    fault = f"child exited rc {proc.returncode}: {err.read()[-1500:].strip()}"
                    break
                if not line.startswith("{"):  # not ours (a library's chatter)
                    continue
                msg = json.loads(line)
                if "start" in msg:
                    current, timeout = msg["start"], CASE_TIMEOUT_S
                else:
                    results[msg["name"]] = msg
                    print(f"  {msg['name']}: {'pass' if msg['passed'] else 'FAIL'} {msg['errors']}", flush=True)
            done = {c["name"] for c in todo if c["name"] in results}
            if current is not None and current not in results:
                results[current] = {"name": current, "fault": fault}
                print(f"  {current}: FAULT {fault}", flush=True)
                done.add(current)
            elif not done:
                sys.exit(f"the child failed before any case: {fault}")
            todo = [c for c in todo if c["name"] not in done]
    return results


def cases(skip_time: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    shapes = [(B, H, S, D, causal, False) for D in (64, 96, 128) for causal in (0, 1) for B, H, S in CHECK_SHAPES]
    if not skip_time:
        shapes += [(*TIME_SHAPE, 128, causal, True) for causal in (0, 1)]
    for B, H, S, D, causal, timed in shapes:
        name = f"d{D}-{'causal' if causal else 'full'}-b{B}-h{H}-s{S}"
        out.append({"name": name, "B": B, "H": H, "S": S, "D": D, "causal": causal, "time": timed})
    return out


def table(results: dict[str, dict[str, Any]], compiled: list[str]) -> str:
    rows = ["compile (ptxas -v):", *(f"  {f}" for f in compiled), ""]
    rows.append(
        f"{'case':34s} {'result':6s} {'max|err| dQ':>11s} {'dK':>9s} {'dV':>9s} {'ms':>8s} {'TFLOP/s':>8s} {'cuDNN ms':>9s} {'vs cuDNN':>8s}"
    )
    for name, r in results.items():
        if "fault" in r:
            rows.append(f"{name:34s} FAULT  {r['fault'][:120]}")
            continue
        e = r["errors"]
        line = f"{name:34s} {'pass' if r['passed'] else 'FAIL':6s} {e['dQ']:11.4f} {e['dK']:9.4f} {e['dV']:9.4f}"
        if "ms" in r:
            B, H, S = TIME_SHAPE
            flops = FAMILY.flops({"B": B, "H": H, "S": S, "D": 128, "mask": "causal" if "causal" in name else "full"})
            line += f" {r['ms']:8.3f} {flops / r['ms'] / 1e9:8.1f} {r['cudnn_ms']:9.3f} {r['cudnn_ms'] / r['ms']:7.2f}x"
        rows.append(line)
    return "\n".join(rows)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], json.loads(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=SOURCE, help="the .cu to build (default: the reference)")
    parser.add_argument("--skip-time", action="store_true", help="correctness cases only")
    args = parser.parse_args()
    if not args.source.is_file():
        sys.exit(f"--source: no such file {args.source}")
    from bench_reference import build

    _, built = build(args.source, FAMILY)
    compiled = figures(built)
    print("\n".join(compiled), flush=True)
    results = run_all(built.data["host"], cases(args.skip_time))
    print()
    print(table(results, compiled))
    if not all(r.get("passed") for r in results.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
