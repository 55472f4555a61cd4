#!/usr/bin/env python3
"""The paged reference kernels on every task and shape of their family, without the harness's other stages:
the harness's build, the launcher called with the run's page tables (as device inputs and host arrays), the
outputs checked against the fp32 reference under the task's rule, then timed against the family's FlashInfer
baseline (CUDA events, L2 flushed before each run, 10 warm-ups, median of 30). A table comes last.

Usage (on the GPU machine, FlashInfer's wheels installed; see README):
  PYTHONPATH=/tmp/site:. python3 scripts/bench_paged.py gqa_paged_decode|gqa_paged_prefill [KERNEL.cu ...]
      [-k WORD] [--no-baseline]
Several kernels (variants of one reference) get a column each, the first the one the speedup is of;
`-k WORD` keeps the tasks and shapes whose ids contain WORD; `--no-baseline` skips FlashInfer (its first
call compiles for minutes on a fresh machine). The verdicts of record come from the harness:
`pytest tasks --ptx-model=reference -k FAMILY`.
"""

from __future__ import annotations

import ctypes
import importlib
import sys
from pathlib import Path
from typing import Any

import torch

from pytest_ptxbench.task.catalogue import Family, Shape, Task, load_family, resolved_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reference import build, compare, median_ms  # the scripts folder is no package

ROOT = Path(__file__).resolve().parent.parent
SEED = 1
TORCH = {"bf16": torch.bfloat16, "fp32": torch.float32, "i32": torch.int32}


def _resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class Case:
    """One task on one shape: inputs (drawn, and the page tables), outputs, workspace, and the launcher's
    arguments in its order."""

    def __init__(self, family: Family, task: Task, shape: Shape) -> None:
        self.values = family.values(task, shape.values)
        self.params = resolved_params(family, self.values)
        host = family.host_inputs.tables(self.values, SEED) if family.host_inputs else {}
        generator = torch.Generator(device="cuda").manual_seed(SEED)
        self.inputs: dict[str, torch.Tensor] = {}
        self.outputs: dict[str, torch.Tensor] = {}
        self.host = {name: (ctypes.c_int32 * len(v))(*v) for name, v in host.items()}
        for p in self.params:
            if p["role"] == "input" and p["name"] in host:
                self.inputs[p["name"]] = torch.tensor(host[p["name"]], dtype=torch.int32, device="cuda")
            elif p["role"] == "input":
                drawn = torch.randn(p["shape"], generator=generator, device="cuda")
                self.inputs[p["name"]] = drawn.to(TORCH[p["dtype"]])
            elif p["role"] == "output":
                self.outputs[p["name"]] = torch.full(p["shape"], float("nan"), device="cuda").to(TORCH[p["dtype"]])
        self.workspace = torch.zeros(int(family.workspace_bytes(self.values)), dtype=torch.uint8, device="cuda")

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


def main() -> int:
    name = sys.argv[1]
    rest = sys.argv[2:]
    word = rest[rest.index("-k") + 1] if "-k" in rest else ""
    with_baseline = "--no-baseline" not in rest
    sources = [Path(a) for a in rest if a.endswith(".cu")]
    family = load_family(ROOT / "tasks" / f"{name}.yaml")
    sources = sources or [ROOT / "tasks" / "reference" / "h100" / f"{name}.cu"]
    launches = [getattr(build(source, family)[0], family.launcher.name) for source in sources]
    reference, baseline = _resolve(family.reference), _resolve(family.baseline)
    rows, failures = [], []
    for task in family.tasks:
        for shape in family.shapes("all"):
            label = f"{task.name} {shape.id}"
            if word not in label:
                continue
            case = Case(family, task, shape)
            arguments = case.arguments()
            expected: dict[str, torch.Tensor] | None = None
            times, errors = [], []
            for source, launch in zip(sources, launches, strict=True):
                for output in case.outputs.values():
                    output.fill_(float("nan"))
                code = int(launch(*arguments))
                torch.cuda.synchronize()
                expected = expected or reference(case.inputs, case.values)
                found = [compare(n, case.outputs[n], expected[n], family) for n in case.outputs]
                wrong = [c for c in found if not c.passes(family.matched_ratio)]
                if code or wrong:
                    failures.append(f"{label} {source.name}: code {code}; " + "; ".join(c.summary() for c in wrong))
                    print(failures[-1], flush=True)
                    times.append(float("nan"))
                    continue
                times.append(median_ms(lambda: launch(*arguments)))  # noqa: B023 (called before the next one)
                errors.append(" ".join(f"{c.output} {c.max_abs_error:.4f}" for c in found))
            theirs = float("nan")
            if with_baseline:
                theirs_outputs = {n: torch.empty_like(t) for n, t in case.outputs.items()}
                state: dict[str, Any] = {}
                theirs = median_ms(lambda: baseline(case.inputs, theirs_outputs, case.values, state))  # noqa: B023
            ours = " ".join(f"{t:8.3f} ms" for t in times)
            rows.append(f"{label:<64} {ours} {theirs:8.3f} ms {theirs / times[0]:6.2f}x  max error {errors[:1]}")
            print(rows[-1], flush=True)
    print("\n== failures" if failures else "\n== all checks passed", *failures, sep="\n")
    kernels = " ".join(f"{source.stem[:11]:>11}" for source in sources)
    print(f"{'task and shape':<64} {kernels} {'FlashInfer':>11} speedup", *rows, sep="\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
