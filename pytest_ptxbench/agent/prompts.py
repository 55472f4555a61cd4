"""What the model is told: a system prompt with our architecture notes for the target, and the task card
built from the family (semantics, the exact launcher, shapes, tolerances, instructions, host rules)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

from ..allowlist import ALLOWED_IMPORTS
from ..languages import Language
from ..targets import Target
from ..task.catalogue import Family, Task
from .feedback import expected

SYSTEM = """\
You write {language} kernels for {label} GPUs ({arch}) that use the architecture's own instructions, are correct
for every shape, and are as fast as possible. Each reply you send is compiled, disassembled, checked and timed
by a harness; you get its findings back and may improve the kernel.

{contract}

{notes}"""
LANGUAGE_NAMES = {"cuda": "CUDA", "triton": "Triton"}

RULES = """\
Host code may call only: {allowed}, plus memcpy/memset-class C functions and libm math.
Forbidden: allocating device memory (use the workspace), streams, events or synchronisation of your
own (launch on `stream`), other libraries (cuBLAS, cuDNN, CUTLASS, torch), dlopen/dlsym, getenv, files,
sockets, threads, fork/exec, raw system calls; defining any extern "C" function but the launcher, or any
cuda*/cu*/cupti*/nvtx*/nvml* name. Do not modify inputs, write every output element on every call, keep no
state between calls, and do not special-case the shapes listed: hidden shapes (including sizes that are
multiples of no natural tile) score the kernel too."""


def system_prompt(target: Target, language: Language) -> str:
    notes = resources.files("pytest_ptxbench.agent").joinpath("notes").joinpath(f"{target.name}.md").read_text()
    return SYSTEM.format(
        language=LANGUAGE_NAMES.get(language.name, language.name),
        label=target.label,
        arch=target.arch,
        contract=language.contract(target),
        notes=notes.strip(),
    )


def task_card(family: Family, task: Task, target: Target, language: Language) -> str:
    """The first user message of a trajectory."""
    fixed = ", ".join(f"{k} = {v}" for k, v in task.axes.items())
    lines = [
        f"# Task {task.name} on {target.label} ({target.arch})",
        "",
        family.description.strip(),
        "",
        f"Fixed for this task: {fixed}.",
        "",
        "## Entry point (exact signature)",
        f"```{language.fences[0]}",
        language.signature(family),
        "```",
        "Parameters:",
    ]
    for p in family.launcher.params:
        if p.role in ("input", "output"):
            dims = ", ".join(d.text for d in p.shape)
            lines.append(f"- {p.name}: {p.role}, {p.dtype} [{dims}], row-major, contiguous")
        elif p.role == "host":
            kind = "a host array" if language.name == "cuda" else "a Python list of int"
            lines.append(f"- {p.name}: the values of {p.of} as {kind}, to plan launches on the host")
        elif p.role == "scalar" and p.value is not None and p.value.text != p.name:
            lines.append(f"- {p.name} = {p.value.text}")
    stream = "stream: launch everything on it" if language.name == "cuda" else "launch on the current stream"
    lines.append(
        f"- workspace: device memory of workspace_bytes = {family.workspace_bytes.text} bytes, garbage on entry"
        f" (clear what you accumulate into); {stream}"
    )
    lines += ["", "## Shapes you are given (more, hidden ones are scored too)"]
    for shape in family.shapes("visible"):
        values = family.values(task, shape.values)
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
        f"The SASS of a kernel you launch must contain {', '.join(o.replace('|', ' or ') for o in opcodes)} and"
        " they must execute on the real "
        "workload (a kernel never launched or a dead branch fails).",
    ]
    if language.name == "cuda":
        allowed = ", ".join(sorted(n for n in ALLOWED_IMPORTS if n.startswith("cu")))
        lines += ["", "## Host rules", RULES.format(allowed=allowed)]
    lines += ["", expected(language, family)]
    return "\n".join(lines)


def _axes(values: Mapping[str, object]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in values.items())
