"""The harness of one pytest session: settings, catalogue, agent, and the pipeline run per case.
The agent is asked once per (task, target, trajectory); every shape test of that task judges its kernel."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from .agent import Agent, NoKernel
from .agent.trajectory import budget_kernels
from .candidate import Candidate
from .device import Device, detect_devices, device_for, read_clocks
from .gpu import flashinfer_base
from .languages import select_languages
from .pipeline import Pipeline
from .rundir import RunDirectory, default_path, task_set_hash
from .runkeeper import session_id
from .settings import STAGE_SETTINGS, resolve_all
from .targets import select_targets
from .task.cases import Case, make_cases
from .task.catalogue import (
    DEFAULT_BASELINE,
    Family,
    TaskFileError,
    UnknownBaseline,
    choose_baseline,
    load_catalogue,
    replace_hidden,
)
from .task.flashinfer_trace import TraceFileError, Tree, family_for, load_tree
from .task.from_trace import not_tasks, tasks_from_tree
from .toolchain import TOOLS, Tool, find_tool
from .verdict import Decision, Outcome, Verdict, decide


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
            "shape_id": self.case.shape.id,
            "family": self.case.family.name,
            "task": self.case.task.name,
            "target": self.case.target.name,
            "lang": self.case.language.name,
            "shape": dict(self.case.shape.values),
            "hidden": self.case.shape.hidden,
            "trajectory": self.case.trajectory,
            "budget": None,
            "model": model,
            "baseline": {
                "name": self.case.family.baseline_name,
                "library": self.case.family.baseline_library,
                "function": self.case.family.baseline,
            },
            "outcome": self.decision.outcome.value,
            "reason": self.decision.reason,
            "worker": os.environ.get("PYTEST_XDIST_WORKER"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu": self.device.uuid if self.device else None,
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
            Path(out) if out else default_path(config.invocation_params.dir, self.settings["model"]),
            session_id(config),
        )
        self._catalogues: dict[Path, list[Family]] = {}
        self._agents: dict[Path, Agent] = {}
        self._kernels: dict[tuple[str, str, int, str], Candidate | NoKernel] = {}
        self._budgets: dict[tuple[str, str, int, str], dict[int, Candidate]] = {}
        self.pipeline = Pipeline(self.run, lambda: self.devices, self.settings)
        self._started = False

    @functools.cached_property
    def devices(self) -> list[Device]:
        return detect_devices()

    @functools.cached_property
    def tools(self) -> dict[str, Tool | None]:
        return {name: find_tool(name) for name in TOOLS}

    @functools.cached_property
    def tree(self) -> Tree | None:
        """--ptx-tasks's FlashInfer-Trace tree, read once; TraceFileError when it is malformed."""
        return load_tree(Path(self.settings["tasks"])) if self.settings["tasks"] else None

    def tree_header(self) -> list[str]:
        """What --ptx-tasks's FlashInfer-Trace tree holds: how many definitions are tasks, and why the others
        are not."""
        try:
            tree = self.tree
        except TraceFileError as exc:
            return [f"ptxbench tasks: {exc}"]
        if tree is None:
            return []
        refused = not_tasks(tree)
        tasks = [f"{name} ({family_for(d)[0]})" for name, d in sorted(tree.definitions.items()) if name not in refused]
        return [
            f"ptxbench tasks: FlashInfer-Trace {tree.root}: tasks of a family: {', '.join(tasks) or 'none'}",
            *(f"ptxbench tasks: not loadable: {name}: {why}" for name, why in refused.items()),
        ]

    def catalogue(self, directory: Path) -> list[Family]:
        """The families in `directory`, hidden shapes replaced when a shapes file is given."""
        if directory not in self._catalogues:
            families = load_catalogue(directory)
            if self.tree is not None:
                families = tasks_from_tree(families, self.tree)
            if self.settings["shapes_file"]:
                families = replace_hidden(families, Path(self.settings["shapes_file"]))
            self._catalogues[directory] = choose_baseline(families, self.settings["baseline"])
        return self._catalogues[directory]

    def cases(self, directory: Path) -> list[Case]:
        """The cases of the catalogue in `directory`; a bad task file or model stops collection."""
        try:
            families = self.catalogue(directory)
        except (TaskFileError, TraceFileError) as exc:
            raise pytest.Collector.CollectError(f"bad task file: {exc}") from None
        except UnknownBaseline as exc:
            raise pytest.Collector.CollectError(f"--ptx-baseline={self.settings['baseline']}: {exc}") from None
        self.agent(directory)
        targets, languages = select_targets(self.settings["gpu"]), select_languages(self.settings["lang"])
        return make_cases(families, targets, languages, self.settings["shapes"], self.settings["trajectories"])

    def agent(self, directory: Path) -> Agent:
        if directory not in self._agents:
            spec = self.settings["model"]
            try:
                made = self.config.hook.pytest_ptxbench_make_agent(
                    spec=spec, catalogue=directory, settings=self.settings, run_dir=self.run.path, config=self.config
                )
            except ValueError as exc:
                raise pytest.Collector.CollectError(str(exc)) from None
            if made is None:
                raise pytest.Collector.CollectError(
                    f"--ptx-model={spec}: unknown model (known: reference, file:<dir>, replay:<run dir>, gemini, claude, gpt, qwen, provider:model)"
                )
            self._agents[directory] = made
        return self._agents[directory]

    def evaluate(self, case: Case, settings: dict[str, Any]) -> Evaluation:
        """Run the pipeline for one case and record the result in the run directory."""
        self._start()
        if settings["baseline"] != self.settings["baseline"]:  # a marker chose another baseline for this test
            try:
                case = replace(case, family=case.family.with_baseline(settings["baseline"] or DEFAULT_BASELINE))
            except UnknownBaseline as exc:
                pytest.fail(f"ptxbench marker: {exc}", pytrace=False)
        candidate = self._kernel(case)
        device = device_for(case.target, self.devices)
        if isinstance(candidate, NoKernel):
            outcome = Outcome.FAILED if candidate.failed else Outcome.SKIPPED
            evaluation = Evaluation(case, None, [], Decision(outcome, candidate.reason), device)
        else:
            stage_settings = {name: settings[name] for name in STAGE_SETTINGS}
            verdicts = self.pipeline.evaluate(
                candidate, case.family, case.task, case.target, [case.shape], stage_settings
            )
            evaluation = Evaluation(case, candidate, verdicts, decide(verdicts, settings["require_gpu"]), device)
            if case.shape.hidden:
                self._score_budgets(case, candidate, device, stage_settings)
        self.run.append_result(evaluation.row(self.settings["model"]))
        return evaluation

    def _score_budgets(
        self, case: Case, final: Candidate, device: Device | None, stage_settings: dict[str, Any]
    ) -> None:
        """DESIGN §5: the best kernel within each turn budget (1, 4, 8) is scored on the hidden shapes too.
        Rows carry `budget`; they are records for the report, not test outcomes."""
        key = (case.task.name, case.target.name, case.trajectory, case.language.name)
        if key not in self._budgets:  # the trajectory is read once; every hidden shape scores the same kernels
            self._budgets[key] = budget_kernels(self.run.path, *key)
        for budget, kernel in sorted(self._budgets[key].items()):
            if kernel.digest == final.digest:
                continue  # the final kernel's own row scores this budget
            verdicts = self.pipeline.evaluate(kernel, case.family, case.task, case.target, [case.shape], stage_settings)
            scored = Evaluation(case, kernel, verdicts, decide(verdicts), device)
            self.run.append_result({**scored.row(self.settings["model"]), "budget": budget})

    def _kernel(self, case: Case) -> Candidate | NoKernel:
        """The agent's kernel for the case's task and trajectory, asked for once (every shape test shares it)."""
        key = (case.task.name, case.target.name, case.trajectory, case.language.name)
        if key not in self._kernels:
            visible = case.family.shapes("visible")

            def judge(candidate: Candidate) -> list[Verdict]:
                return self.pipeline.evaluate(candidate, case.family, case.task, case.target, visible)

            agent = self.agent(case.family.file.parent)
            self._kernels[key] = agent.kernel(
                case.family, case.task, case.target, case.trajectory, judge, language=case.language
            )
        return self._kernels[key]

    def close(self) -> None:
        self.pipeline.close()

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        families = [f for families in self._catalogues.values() for f in families]
        self.run.start(
            lambda: {
                "settings": self.settings,
                "task_set": task_set_hash([f.file for f in families] + (self.tree.files if self.tree else [])),
                "tools": {
                    n: {"path": str(t.path), "origin": t.origin, "version": t.version} if t else None
                    for n, t in self.tools.items()
                },
                "devices": [vars(d) for d in self.devices],
                "clocks": read_clocks(),
                # FlashInfer's compiled kernels, kept across runs (its baselines compile at first use)
                "flashinfer_cache": str(flashinfer_base() / ".cache" / "flashinfer"),
            }
        )
