"""The pipeline of one candidate: build → inspect → check → profile → sanitize → time.

Static stages run once per (family, target, source); GPU stages need a device of the target's
architecture and run per shape.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .candidate import Candidate
from .device import Device, device_for, missing_device
from .languages import LANGUAGES
from .locks import locked
from .pinning import exclusive
from .rundir import RunDirectory, write_atomic
from .settings import STAGE_SETTINGS
from .targets import Target
from .task.catalogue import Family, Shape, Task
from .verdict import GPU_STAGES, Status, Verdict

if TYPE_CHECKING:
    from .gpu import GpuStages

# What an agent calls to have a kernel judged on the task's visible shapes.
Evaluate = Callable[[Candidate], list[Verdict]]
STATIC_RECORD = "static.json"  # build and inspect verdicts, for the other xdist workers of the run
XDIST_RUN = "PYTEST_XDIST_TESTRUNUID"  # one value for every worker of one xdist run


def shared_static(workdir: Path) -> list[Verdict] | None:
    """The verdicts another worker of this xdist run recorded for the same source, or None. A record of
    another run (an older harness, another toolchain) is never reused: that run builds again."""
    run = os.environ.get(XDIST_RUN)
    path = workdir / STATIC_RECORD
    if run is None or not path.is_file():
        return None
    record = json.loads(path.read_text())
    return [Verdict.from_json(v) for v in record["verdicts"]] if record.get("run") == run else None


class Pipeline:
    def __init__(self, run: RunDirectory, devices: Callable[[], list[Device]], settings: dict[str, Any]) -> None:
        self.run = run
        self._devices = devices
        self.settings = settings
        self._static: dict[tuple[str, str, str], list[Verdict]] = {}
        self._gpu: GpuStages | None = None
        self._judged: dict[tuple[Any, ...], list[Verdict]] = {}

    def evaluate(
        self,
        candidate: Candidate,
        family: Family,
        task: Task,
        target: Target,
        shapes: Sequence[Shape],
        overrides: Mapping[str, Any] | None = None,
    ) -> list[Verdict]:
        """Every stage's verdict for `candidate` on `shapes`; `overrides`: a test's own GPU-stage settings."""
        static = self.static(candidate, family, task, target)
        if not all(v.passed for v in static):
            return static
        return static + self.gpu(candidate, family, task, target, shapes, overrides or {})

    def static(self, candidate: Candidate, family: Family, task: Task, target: Target) -> list[Verdict]:
        """build and inspect (by the candidate's language), once per (family, target, source), and per task
        where the language builds for the task's fixed axes."""
        scope = task.name if LANGUAGES[candidate.lang].per_task else family.name
        key = (scope, target.name, candidate.digest)
        if key not in self._static:
            workdir = self.run.build_dir(f"{scope}-{target.name}", candidate.digest)
            with locked(workdir / "static.lock"):  # xdist workers share the folder
                self._static[key] = shared_static(workdir) or self._build_and_inspect(
                    candidate, family, task, target, workdir
                )
        return self._static[key]

    def _build_and_inspect(
        self, candidate: Candidate, family: Family, task: Task, target: Target, workdir: Path
    ) -> list[Verdict]:
        language = LANGUAGES[candidate.lang]
        timeout, sandbox = self.settings["build_timeout"], self.settings["sandbox"]
        verdicts = language.static(candidate, family, task, target, workdir, timeout, sandbox)
        record = {"run": os.environ.get(XDIST_RUN), "verdicts": [v.to_json() for v in verdicts]}
        write_atomic(workdir / STATIC_RECORD, json.dumps(record))
        return verdicts

    def gpu(
        self,
        candidate: Candidate,
        family: Family,
        task: Task,
        target: Target,
        shapes: Sequence[Shape],
        overrides: Mapping[str, Any],
    ) -> list[Verdict]:
        """check, profile, sanitize and time on each shape, on a device of the target's architecture."""
        devices = self._devices()
        device = device_for(target, devices)
        if device is None:
            message = missing_device(target, devices)
            if self.settings["model"] == "reference" and target.name in family.not_run_on_hardware:
                message += f"; the {target.name} reference kernel is not run on hardware"
            return [Verdict(stage, Status.SKIPPED, message) for stage in GPU_STAGES]
        if self._gpu is None:
            from .gpu import GpuStages  # numpy and the children only where a GPU is

            self._gpu = GpuStages(self.settings, self.run.path)
        static = self.static(candidate, family, task, target)
        resolved = tuple({**self.settings, **overrides}[name] for name in STAGE_SETTINGS)
        verdicts = []
        for shape in shapes:
            # a model's final kernel was judged on the visible shapes already, under the same stage settings
            key = (candidate.digest, task.name, target.name, shape.id, family.baseline, *resolved)
            judged = self._judged.get(key)
            if judged is None:
                with exclusive(device):
                    judged = self._gpu.evaluate(candidate, family, task, target, shape, static, overrides)
                for verdict in judged:
                    verdict.data.setdefault("shape", shape.id)
                # the trusted child's failure (no reference, the baseline) may pass on a retry; profile and
                # sanitize verdicts, unavailable tools included, are kept by GpuStages once per candidate
                retried = (v for v in judged if v.stage in ("check", "time"))
                if all(v.status is not Status.TOOL_UNAVAILABLE for v in retried):
                    self._judged[key] = judged
            verdicts += judged
        return verdicts

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()
