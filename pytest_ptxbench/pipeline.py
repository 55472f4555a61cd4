"""The pipeline of one candidate: build → inspect → check → profile → sanitize → time.

Static stages run once per (family, target, source); GPU stages need a device of the target's
architecture and run per shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .candidate import Candidate
from .catalogue import Family, Shape, Task
from .device import Device, device_for, missing_device
from .rundir import RunDirectory
from .stages.build import build
from .stages.inspect import inspect
from .targets import Target
from .verdict import GPU_STAGES, Status, Verdict

# What an agent calls to have a kernel judged on the task's visible shapes.
Evaluate = Callable[[Candidate], list[Verdict]]


class Pipeline:
    def __init__(self, run: RunDirectory, devices: Callable[[], list[Device]], settings: dict[str, Any]) -> None:
        self.run = run
        self._devices = devices
        self.settings = settings
        self._static: dict[tuple[str, str, str], list[Verdict]] = {}

    def evaluate(
        self, candidate: Candidate, family: Family, task: Task, target: Target, shapes: Sequence[Shape]
    ) -> list[Verdict]:
        """Every stage's verdict for `candidate` on `shapes`."""
        static = self.static(candidate, family, target)
        if not all(v.passed for v in static):
            return static
        return static + self.gpu(candidate, family, task, target, shapes)

    def static(self, candidate: Candidate, family: Family, target: Target) -> list[Verdict]:
        """build and inspect, once per (family, target, source)."""
        key = (family.name, target.name, candidate.digest)
        if key not in self._static:
            workdir = self.run.build_dir(f"{family.name}-{target.name}", candidate.digest)
            built = build(candidate, family.launcher, target, workdir, self.settings["build_timeout"])
            verdicts = [built]
            if built.passed:
                required = family.opcodes.get(target.name, ())
                library = Path(built.data["library"])
                verdicts.append(inspect(library, target, required, family.launcher.name, timeout=120))
            self._static[key] = verdicts
        return self._static[key]

    def gpu(
        self, candidate: Candidate, family: Family, task: Task, target: Target, shapes: Sequence[Shape]
    ) -> list[Verdict]:
        devices = self._devices()
        device = device_for(target, devices)
        if device is None:
            message = missing_device(target, devices)
            if self.settings["model"] == "reference" and target.name in family.not_run_on_hardware:
                message += f"; the {target.name} reference kernel is not run on hardware"
        else:
            message = (
                f"the GPU stages are not part of pytest-ptxbench {__version__} yet (device {device.name} is present)"
            )
        return [Verdict(stage, Status.SKIPPED, message) for stage in GPU_STAGES]
