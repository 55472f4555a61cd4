"""Agents hand over one kernel per (task, target, trajectory).

`reference` serves the expert kernels kept beside the task files (`reference/<target>/<family>.cu`, `.py` for
Triton); `file:<dir>` serves a user's own kernels (`<dir>/<task>.cu`, else `<dir>/<family>.cu`; without either the
test skips naming both, or fails under `--ptx-require-gpu`);
`replay:<run dir>` judges an earlier run's saved kernels again (replay.py); a model alias or
`provider:model` runs the multi-turn model loop (loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..candidate import Candidate
from ..languages import CUDA, Language
from ..pipeline import Evaluate
from ..targets import Target
from ..task.catalogue import Family, Task
from .models.prices import price
from .models.specs import check_sdk, parse_spec


@dataclass(frozen=True)
class NoKernel:
    """The agent has no kernel for this task: says why. `failed` when that is the agent's fault (a model
    that used its turns without producing a kernel), not a kernel nobody wrote or a key that is missing."""

    reason: str
    failed: bool = False


class Agent(Protocol):
    @property
    def name(self) -> str: ...

    def kernel(
        self,
        family: Family,
        task: Task,
        target: Target,
        trajectory: int,
        evaluate: Evaluate,
        language: Language = CUDA,
    ) -> Candidate | NoKernel:
        """The kernel for one trajectory of `task` on `target` in `language`. A model agent calls `evaluate`
        on each reply's kernel (the pipeline on the visible shapes) to feed verdicts back."""
        ...


@dataclass(frozen=True)
class FolderAgent:
    """Kernels read from a folder: the first existing of `paths` wins."""

    name: str
    folder: Path
    by_target: bool  # reference kernels sit in one subfolder per target
    missing_fails: bool = False  # a missing kernel fails the test (a user's folder under --ptx-require-gpu)

    def kernel(
        self,
        family: Family,
        task: Task,
        target: Target,
        trajectory: int,
        evaluate: Evaluate,
        language: Language = CUDA,
    ) -> Candidate | NoKernel:
        base = self.folder / target.name if self.by_target else self.folder
        paths = [base / f"{task.name}{language.suffix}", base / f"{task.family_name}{language.suffix}"]
        for path in paths:
            if path.is_file():
                return Candidate.from_file(task.name, target.name, path, language.name)
        return NoKernel(
            f"{self.name} has no kernel for {task.name} on {target.name} (looked for {', '.join(map(str, paths))})",
            failed=self.missing_fails,
        )


def builtin_agent(spec: str, catalogue: Path, settings: dict[str, Any], run_dir: Path) -> Agent | None:
    if spec == "reference":
        return FolderAgent("reference", catalogue / "reference", by_target=True)
    if spec.startswith("file:"):
        folder = Path(spec.removeprefix("file:")).expanduser()
        if not folder.is_dir():
            raise ValueError(f"--ptx-model={spec}: {folder} is not a folder")
        return FolderAgent(spec, folder.resolve(), by_target=False, missing_fails=settings["require_gpu"])
    # Imported here: both modules build on this one.
    from .loop import ModelAgent
    from .replay import ReplayAgent

    if spec.startswith("replay:"):
        return ReplayAgent.open(spec, run_dir)
    model = parse_spec(spec, settings)
    if model is None:
        return None
    check_sdk(model)
    if settings["spend_cap"] is not None and price(model.model, settings["prices"]) is None:
        raise ValueError(
            f"--ptx-model={spec}: a spend cap needs the price of {model.model}: give it with --ptx-prices='{model.model}=<in>/<out>'"
        )
    if settings["resume"] and not settings["out"]:
        raise ValueError("--ptx-resume needs --ptx-out=<the interrupted run's directory>")
    return ModelAgent(model, settings, run_dir)
