"""The languages a candidate may be written in: the one extension point for a new one.

A language says what its file is (suffix, the fence a model's reply puts it in, what it must define), what
the model is told about it, and how the static stages turn it into cubins and judge them. The GPU stages
that follow see only cubins and launch lists, whatever the language; its capture child is the one place its
host code runs on a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .candidate import Candidate
from .targets import Target
from .task.catalogue import Family, Task
from .verdict import Verdict


class Language(Protocol):
    @property
    def name(self) -> str:
        """ "cuda": the --ptx-lang value, the test-id part and the marker."""
        ...

    @property
    def suffix(self) -> str:
        """Of the candidate's file: ".cu"."""
        ...

    @property
    def fences(self) -> tuple[str, ...]:
        """Info words of the Markdown fences a model may put the file in."""
        ...

    @property
    def capture_child(self) -> str:
        """The module under `child/` that runs the candidate's host code under stream capture."""
        ...

    @property
    def per_task(self) -> bool:
        """Whether a build holds code for one task only (Triton compiles for the task's fixed axes; one CUDA
        library serves every task of its family)."""
        ...

    def entry(self, family: Family) -> str:
        """The name the file must define (the launcher, `run`)."""
        ...

    def defines(self, code: str, entry: str) -> bool:
        """Whether `code` defines (not only mentions) `entry`."""
        ...

    def signature(self, family: Family) -> str:
        """The entry point's exact signature, as the task card shows it."""
        ...

    def contract(self, target: Target) -> str:
        """The system prompt's paragraph on what the file is and how the harness builds it."""
        ...

    def static(
        self,
        candidate: Candidate,
        family: Family,
        task: Task,
        target: Target,
        workdir: Path,
        timeout: float,
        sandbox: str,
    ) -> list[Verdict]:
        """build, then inspect where the build passed."""
        ...


@dataclass(frozen=True)
class Cuda:
    name: str = "cuda"
    suffix: str = ".cu"
    fences: tuple[str, ...] = ("cuda", "cu", "cpp", "c++")
    capture_child: str = "capture"
    per_task: bool = False

    def entry(self, family: Family) -> str:
        return family.launcher.name

    def defines(self, code: str, entry: str) -> bool:
        for match in re.finditer(rf"\b{re.escape(entry)}\s*\(", code):
            depth, j = 1, match.end()
            while j < len(code) and depth:
                depth += {"(": 1, ")": -1}.get(code[j], 0)
                j += 1
            if code[j:].lstrip().startswith("{"):
                return True
        return False

    def signature(self, family: Family) -> str:
        return family.launcher.declaration()

    def contract(self, target: Target) -> str:
        from .stages.build import flags

        return (
            "The candidate is one .cu file: device code (inline PTX welcome; CUDA toolkit headers such as\n"
            '<cuda/barrier>, <cuda/ptx>, <cudaTypedefs.h> allowed) and the one extern "C" host launcher the task\n'
            f"declares. The harness builds it itself ({' '.join(flags(target))}) with the launcher's\n"
            "prototype force-included, so another signature does not compile."
        )

    def static(
        self,
        candidate: Candidate,
        family: Family,
        task: Task,
        target: Target,
        workdir: Path,
        timeout: float,
        sandbox: str,
    ) -> list[Verdict]:
        from .stages.build import build
        from .stages.inspect import inspect

        built = build(candidate, family.launcher, target, workdir, timeout, sandbox=sandbox)
        if not built.passed:
            return [built]
        required = family.opcodes.get(target.name, ())
        host, cubins = Path(built.data["host"]), built.data["cubins"]
        return [built, inspect(host, cubins, target, required, family.launcher.name, timeout=120)]


@dataclass(frozen=True)
class Triton:
    name: str = "triton"
    suffix: str = ".py"
    fences: tuple[str, ...] = ("python", "py")
    capture_child: str = "triton_capture"
    per_task: bool = True

    def entry(self, family: Family) -> str:
        return "run"

    def defines(self, code: str, entry: str) -> bool:
        return re.search(rf"^def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE) is not None

    def signature(self, family: Family) -> str:
        return f"def run({', '.join(run_params(family))}) -> None"

    def contract(self, target: Target) -> str:
        return (
            "The candidate is one .py file of Triton: its `@triton.jit` kernels and a module-level `run(...)` that\n"
            "launches only those kernels, on the current stream, writing into the output tensors it is given\n"
            "(destination-passing). Inputs and outputs are contiguous torch tensors on the GPU, scalars are Python\n"
            "numbers, `workspace` is a uint8 tensor holding garbage: scratch memory (Triton's own allocator\n"
            "included) comes from it, never from torch. No torch or vendor kernels, no autotuning over several\n"
            "configurations (choose the configuration in `run`).\n"
            f"The harness compiles it with Triton for {target.arch} itself."
        )

    def static(
        self,
        candidate: Candidate,
        family: Family,
        task: Task,
        target: Target,
        workdir: Path,
        timeout: float,
        sandbox: str,
    ) -> list[Verdict]:
        from .stages.inspect import inspect_cubins
        from .stages.triton_build import build_triton

        built = build_triton(candidate.source, family, task, target, workdir, timeout, sandbox)
        if not built.passed:
            return [built]
        required = family.opcodes.get(target.name, ())
        return [built, inspect_cubins(built.data["cubins"], target, required, timeout=120)]


# roles `run` does not take: the workspace tensor knows its size, and the stream is the current one
NOT_RUN_PARAMS = ("workspace_bytes", "stream")


def run_params(family: Family) -> list[str]:
    """`run`'s parameters: the launcher's, less `NOT_RUN_PARAMS`."""
    return [p.name for p in family.launcher.params if p.role not in NOT_RUN_PARAMS]


CUDA = Cuda()
LANGUAGES: dict[str, Language] = {language.name: language for language in (CUDA, Triton())}


def select_languages(option: str) -> list[Language]:
    """`--ptx-lang`: one language or `all`."""
    return list(LANGUAGES.values()) if option == "all" else [LANGUAGES[option]]
