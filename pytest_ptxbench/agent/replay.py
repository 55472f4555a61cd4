"""`replay:<run dir>`: every saved kernel of an earlier run judged again (on this machine, with these
shapes and settings) without calling a model. Each trajectory is recorded anew in this run, linked to
the old one; the kernel handed over for a task is the best under the new verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..candidate import Candidate
from ..languages import CUDA, Language
from ..pipeline import Evaluate
from ..targets import Target
from ..task.catalogue import Family, Task
from . import NoKernel
from .loop import judge, judge_kernel, result
from .trajectory import Trajectory, TrajectoryError, file_name


@dataclass(frozen=True)
class ReplayAgent:
    source: Path  # the earlier run directory
    run_dir: Path

    @classmethod
    def open(cls, spec: str, run_dir: Path) -> ReplayAgent:
        source = Path(spec.removeprefix("replay:")).expanduser().resolve()
        if not (source / "trajectories").is_dir():
            raise ValueError(f"--ptx-model={spec}: {source} has no trajectories/ folder (not a model agent's run)")
        if source == run_dir.resolve():
            raise ValueError(f"--ptx-model={spec}: the replay must be recorded in another run directory than {source}")
        return cls(source, run_dir)

    @property
    def name(self) -> str:
        return f"replay:{self.source}"

    def kernel(
        self,
        family: Family,
        task: Task,
        target: Target,
        trajectory: int,
        evaluate: Evaluate,
        language: Language = CUDA,
    ) -> Candidate | NoKernel:
        old_path = self.source / "trajectories" / file_name(task.name, target.name, trajectory, language.name)
        if not old_path.is_file():
            return NoKernel(f"{self.name}: no trajectory for {task.name} on {target.name} (looked for {old_path})")
        try:
            old = Trajectory.load(old_path, self.source)
        except TrajectoryError as exc:
            return NoKernel(f"{self.name}: {exc}")
        info: dict[str, Any] = {
            "config": old.info["config"],
            "ptxbench": {**old.info["ptxbench"], "replay_of": {"run": str(self.source), "trajectory": str(old_path)}},
        }
        new_path = self.run_dir / "trajectories" / old_path.name
        record = Trajectory.start(new_path, self.run_dir, old.system, old.card, info)
        try:
            for turn in old.turns:
                replayed = {
                    **turn,
                    "replayed": True,
                    "kernel": None,
                    "sha256": None,
                    "verdicts": None,
                    "feedback": None,
                }
                record.turns.append(replayed)
                if turn["kernel"] is not None:  # the saved file, checked against its recorded digest
                    judge_kernel(record, replayed, old.kernel_source(turn), family, task, evaluate, self.name)
                elif turn["feedback"] is None:  # interrupted before its reply was looked at
                    judge(record, replayed, family, task, evaluate, self.name)
                else:  # the reply held no kernel: nothing to judge again
                    record.judge(replayed, [], turn["feedback"], 0.0)
            record.finish(old.info["exit_status"])
        except Exception as exc:  # one failing trajectory never takes down the session
            record.finish("error", f"{type(exc).__name__}: {exc}")
        return result(record, task, target, self.name)
