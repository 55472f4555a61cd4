"""The harness of one pytest session: settings, catalogue, agent, and the pipeline run per case.

Static stages (build, inspect) run once per kernel and are shared by every shape test of it; the
GPU stages need a device of the target's architecture.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import __version__
from .agents import Agent, NoKernel
from .candidate import Candidate
from .cases import Case, make_cases
from .catalogue import Family, TaskFileError, load_catalogue, replace_hidden
from .device import Device, detect_devices, device_for, missing_device
from .rundir import RunDirectory, default_path, task_set_hash
from .settings import resolve_all
from .stages.build import build
from .stages.inspect import inspect
from .targets import select_targets
from .toolchain import TOOLS, Tool, find_tool
from .verdict import GPU_STAGES, Decision, Outcome, Status, Verdict, decide


@dataclass(frozen=True)
class Evaluation:
    """What the pipeline decided for one case."""

    case: Case
    candidate: Candidate | None
    verdicts: list[Verdict]
    decision: Decision
    device: Device | None

    def row(self, model: str) -> dict[str, Any]:
        return {
            "id": self.case.id,
            "family": self.case.family.name,
            "task": self.case.task.name,
            "target": self.case.target.name,
            "shape": dict(self.case.shape.values),
            "hidden": self.case.shape.hidden,
            "trajectory": self.case.trajectory,
            "model": model,
            "outcome": self.decision.outcome.value,
            "reason": self.decision.reason,
            "device": self.device.name if self.device else None,
            "candidate": {"origin": self.candidate.origin, "sha256": self.candidate.digest} if self.candidate else None,
            "verdicts": [v.to_json() for v in self.verdicts],
        }


class Harness:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings = resolve_all(config)
        out = self.settings["out"]
        self.run = RunDirectory(
            Path(out) if out else default_path(config.invocation_params.dir, self.settings["model"])
        )
        self._catalogues: dict[Path, list[Family]] = {}
        self._agents: dict[Path, Agent] = {}
        self._kernels: dict[tuple[str, str, int], Candidate | NoKernel] = {}
        self._static: dict[tuple[str, str, str], list[Verdict]] = {}
        self._started = False

    @functools.cached_property
    def devices(self) -> list[Device]:
        return detect_devices()

    @functools.cached_property
    def tools(self) -> dict[str, Tool | None]:
        return {name: find_tool(name) for name in TOOLS}

    def catalogue(self, directory: Path) -> list[Family]:
        """The families in `directory`, hidden shapes replaced when a shapes file is given."""
        if directory not in self._catalogues:
            families = load_catalogue(directory)
            if self.settings["shapes_file"]:
                families = replace_hidden(families, Path(self.settings["shapes_file"]))
            self._catalogues[directory] = families
        return self._catalogues[directory]

    def cases(self, directory: Path) -> list[Case]:
        """The cases of the catalogue in `directory`; a bad task file or model stops collection."""
        try:
            families = self.catalogue(directory)
        except TaskFileError as exc:
            raise pytest.Collector.CollectError(f"bad task file: {exc}") from None
        self.agent(directory)
        return make_cases(
            families, select_targets(self.settings["gpu"]), self.settings["shapes"], self.settings["trajectories"]
        )

    def agent(self, directory: Path) -> Agent:
        if directory not in self._agents:
            spec = self.settings["model"]
            try:
                made = self.config.hook.pytest_ptxbench_make_agent(spec=spec, catalogue=directory, config=self.config)
            except ValueError as exc:
                raise pytest.Collector.CollectError(str(exc)) from None
            if made is None:
                raise pytest.Collector.CollectError(
                    f"--ptx-model={spec}: unknown model (known here: reference, file:<dir>)"
                )
            self._agents[directory] = made
        return self._agents[directory]

    def evaluate(self, case: Case, settings: dict[str, Any]) -> Evaluation:
        """Run the pipeline for one case and record the result in the run directory."""
        self._start()
        candidate, static = self._static_stages(case, settings)
        device = device_for(case.target, self.devices)
        if isinstance(candidate, NoKernel):
            decision = Decision(Outcome.SKIPPED, candidate.reason)
            evaluation = Evaluation(case, None, [], decision, device)
        else:
            verdicts = static + self._gpu_stages(case, static, device)
            evaluation = Evaluation(case, candidate, verdicts, decide(verdicts, settings["require_gpu"]), device)
        self.run.append_result(evaluation.row(self.settings["model"]))
        return evaluation

    def _static_stages(self, case: Case, settings: dict[str, Any]) -> tuple[Candidate | NoKernel, list[Verdict]]:
        """The agent's kernel for the case's task, built and inspected once per (family, target, source)."""
        key = (case.task.name, case.target.name, case.trajectory)
        if key not in self._kernels:
            self._kernels[key] = self.agent(case.family.file.parent).kernel(case.task, case.target, case.trajectory)
        candidate = self._kernels[key]
        if isinstance(candidate, NoKernel):
            return candidate, []
        built_key = (case.family.name, case.target.name, candidate.digest)
        if built_key not in self._static:
            workdir = self.run.build_dir(f"{case.family.name}-{case.target.name}", candidate.digest)
            built = build(candidate, case.family.launcher, case.target, workdir, settings["build_timeout"])
            verdicts = [built]
            if built.passed:
                required = case.family.opcodes.get(case.target.name, ())
                verdicts.append(
                    inspect(Path(built.data["library"]), case.target, required, case.family.launcher.name, timeout=120)
                )
            self._static[built_key] = verdicts
        return candidate, self._static[built_key]

    def _gpu_stages(self, case: Case, static: list[Verdict], device: Device | None) -> list[Verdict]:
        if not all(v.passed for v in static):
            return []
        if device is None:
            message = missing_device(case.target, self.devices)
            if self.settings["model"] == "reference" and case.target.name in case.family.not_run_on_hardware:
                message += f"; the {case.target.name} reference kernel is not run on hardware"
        else:
            message = (
                f"the GPU stages are not part of pytest-ptxbench {__version__} yet (device {device.name} is present)"
            )
        return [Verdict(stage, Status.SKIPPED, message) for stage in GPU_STAGES]

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        families = [f for families in self._catalogues.values() for f in families]
        self.run.start(
            {
                "settings": self.settings,
                "task_set": task_set_hash([f.file for f in families]),
                "tools": {n: {"path": str(t.path), "version": t.version} if t else None for n, t in self.tools.items()},
                "devices": [vars(d) for d in self.devices],
                "worker": os.environ.get("PYTEST_XDIST_WORKER"),
            }
        )
