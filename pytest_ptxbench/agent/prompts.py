"""What the model is told: a system prompt with our architecture notes for the target, and the task card
built from the family (semantics, the exact launcher, shapes, tolerances, instructions, host rules)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

from ..allowlist import ALLOWED_IMPORTS
from ..stages.build import flags
from ..targets import Target
from ..task.catalogue import Family, Task, shape_values
from .feedback import expected

SYSTEM = """\
You write CUDA kernels for {label} GPUs ({arch}) that use the architecture's own instructions, are correct
for every shape, and are as fast as possible. Each reply you send is compiled, disassembled, checked and timed
by a harness; you get its findings back and may improve the kernel.

The candidate is one .cu file: device code (inline PTX welcome; CUDA toolkit headers such as <cuda/barrier>,
<cuda/ptx>, <cudaTypedefs.h> allowed) and the one extern "C" host launcher the task declares. The harness
builds it itself ({flags}) with the launcher's prototype force-included, so another signature does not compile.

{notes}"""

RULES = """\
Host code may call only: {allowed}, plus memcpy/memset-class C functions and libm math.
Forbidden: allocating device memory (use the zeroed workspace), streams, events or synchronisation of your
own (launch on `stream`), other libraries (cuBLAS, cuDNN, CUTLASS, torch), dlopen/dlsym, getenv, files,
sockets, threads, fork/exec, raw system calls; defining any extern "C" function but the launcher, or any
cuda*/cu*/cupti*/nvtx*/nvml* name. Do not modify inputs, write every output element on every call, keep no
state between calls, and do not special-case the shapes listed: hidden shapes (including sizes that are
multiples of no natural tile) score the kernel too."""


def system_prompt(target: Target) -> str:
    notes = resources.files("pytest_ptxbench.agent").joinpath("notes").joinpath(f"{target.name}.md").read_text()
    return SYSTEM.format(label=target.label, arch=target.arch, flags=" ".join(flags(target)), notes=notes.strip())


def task_card(family: Family, task: Task, target: Target) -> str:
    """The first user message of a trajectory."""
    fixed = ", ".join(f"{k} = {v}" for k, v in task.axes.items())
    lines = [
        f"# Task {task.name} on {target.label} ({target.arch})",
        "",
        family.description.strip(),
        "",
        f"Fixed for this task: {fixed}.",
        "",
        "## Launcher (exact prototype)",
        "```cuda",
        family.launcher.declaration(),
        "```",
        "Parameters:",
    ]
    for p in family.launcher.params:
        if p.role in ("input", "output"):
            dims = ", ".join(d.text for d in p.shape)
            lines.append(f"- {p.name}: {p.role}, {p.dtype} [{dims}], row-major, contiguous")
        elif p.role == "scalar" and p.value is not None and p.value.text != p.name:
            lines.append(f"- {p.name} = {p.value.text}")
    lines.append(
        f"- workspace: zeroed device memory of workspace_bytes = {family.workspace_bytes.text} bytes; "
        "stream: launch everything on it"
    )
    lines += ["", "## Shapes you are given (more, hidden ones are scored too)"]
    for shape in family.shapes("visible"):
        values = shape_values(task, shape.values)
        workspace = int(family.workspace_bytes(values))
        lines.append(f"- {shape.id}: {_axes(shape.values)} (workspace {workspace} bytes)")
    lines += ["", "## Correctness"]
    for dtype, tol in family.tolerances.items():
        lines.append(
            f"- {dtype} outputs: an element is wrong when |out - ref| exceeds both {tol.atol} and {tol.rtol}·|ref|"
        )
    if family.matched_ratio < 1:
        lines.append(
            f"- at least {100 * family.matched_ratio:g}% of the elements of each output must be right; "
            "a NaN or infinity is always wrong"
        )
    inputs = "; ".join(f"{d.name} ({_axes(d.params)})" for d in family.distributions)
    lines.append(f"- inputs are drawn from: {inputs}")
    opcodes = family.opcodes.get(target.name, ())
    lines += [
        "",
        "## Required instructions",
        f"The SASS of a kernel you launch must contain {', '.join(opcodes)} and they must execute on the real "
        "workload (a kernel never launched or a dead branch fails).",
        "",
        "## Host rules",
        RULES.format(allowed=", ".join(sorted(n for n in ALLOWED_IMPORTS if n.startswith("cu")))),
        "",
        expected(family.launcher.declaration()),
    ]
    return "\n".join(lines)


def _axes(values: Mapping[str, object]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in values.items())
