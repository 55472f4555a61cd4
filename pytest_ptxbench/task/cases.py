"""The test cases: one per (task, target, shape, trajectory), with stable, readable ids."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..languages import Language
from ..targets import Target
from .catalogue import Family, Shape, Task

SLOW_FLOPS = 4e12  # shapes of at least this many FLOPs carry the `slow` marker


@dataclass(frozen=True)
class Case:
    family: Family
    task: Task
    target: Target
    language: Language
    shape: Shape
    trajectory: int  # 1-based
    trajectories: int

    @property
    def id(self) -> str:
        """`gemm-n7168-k5120-h100-m8192` (CUDA), `gemm-n7168-k5120-h100-triton-m8192`, with `-t2` when there
        are several trajectories."""
        suffix = f"-t{self.trajectory}" if self.trajectories > 1 else ""
        return f"{self.task.name}-{self.target.name}{self._lang}-{self.shape.id}{suffix}"

    @property
    def group(self) -> str:
        """Tests that share one kernel (one trajectory of one task on one target in one language)."""
        return f"{self.task.name}-{self.target.name}{self._lang}-t{self.trajectory}"

    @property
    def _lang(self) -> str:
        return "" if self.language.name == "cuda" else f"-{self.language.name}"

    @property
    def flops(self) -> float:
        return self.family.flops(self.family.values(self.task, self.shape.values))

    @property
    def slow(self) -> bool:
        return self.flops >= SLOW_FLOPS


def make_cases(
    families: list[Family], targets: list[Target], languages: list[Language], shapes: str, trajectories: int
) -> list[Case]:
    """In catalogue order (families by name, tasks and shapes as the files list them): stable ids."""
    return [
        Case(family, task, target, language, shape, n, trajectories)
        for family in families
        for task in family.tasks
        for target in targets
        for language in languages
        for shape in family.shapes(shapes)
        for n in range(1, trajectories + 1)
    ]


def natural(text: str) -> tuple[str | int, ...]:
    """A sort key that orders the numbers inside ids by value: m70 < m952 < m8192, s1000 < s2048."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))
