"""The model agent: a trajectory of at most `turns` model calls per (task, target, trajectory number).

Each reply's kernel goes through the pipeline on the visible shapes and the model gets feedback rendered
from the verdicts. The trajectory is saved after every reply and every judgement, so `--ptx-resume`
continues without losing or repeating a turn. The result is the best kernel (see `trajectory.standing`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..candidate import Candidate
from ..pipeline import Evaluate
from ..targets import Target
from ..task.catalogue import Family, Task
from . import NoKernel, feedback, prompts
from .extract import extract_kernel
from .ledger import Ledger
from .models import MissingKey, ModelClient, ModelError
from .models.prices import cost
from .models.specs import ModelSpec, connect
from .trajectory import Trajectory, file_name, standing


@dataclass(frozen=True)
class ModelAgent:
    spec: ModelSpec
    settings: dict[str, Any]
    run_dir: Path

    @property
    def name(self) -> str:
        return self.spec.spec

    def kernel(
        self, family: Family, task: Task, target: Target, trajectory: int, evaluate: Evaluate
    ) -> Candidate | NoKernel:
        try:
            client = connect(self.spec, self.settings)
        except MissingKey as exc:
            return NoKernel(str(exc))
        path = self.run_dir / "trajectories" / file_name(task.name, target.name, trajectory)
        if self.settings["resume"] and path.exists():
            record = Trajectory.load(path, self.run_dir)
            record.info["config"]["agent"]["turns"] = self.settings["turns"]
        else:
            record = Trajectory.start(
                path,
                self.run_dir,
                prompts.system_prompt(target),
                prompts.task_card(family, task, target),
                self._info(family, task, target, trajectory),
            )
        try:
            self._run(record, client, family, task, evaluate)
        except Exception as exc:  # one failing trajectory never takes down the session
            record.finish("error", f"{type(exc).__name__}: {exc}")
        return result(record, task, target, self.name)

    def _info(self, family: Family, task: Task, target: Target, trajectory: int) -> dict[str, Any]:
        s = self.settings
        return {
            "config": {
                "model": {
                    "spec": self.spec.spec,
                    "provider": self.spec.provider,
                    "model_name": self.spec.model,
                    "base_url": self.spec.base_url,
                },
                "agent": {
                    "turns": s["turns"],
                    "target_speedup": s["target_speedup"],
                    "reply_tokens": s["reply_tokens"],
                    "request_timeout": s["request_timeout"],
                    "max_retries": s["max_retries"],
                },
            },
            "ptxbench": {
                "family": family.name,
                "task": task.name,
                "target": target.name,
                "trajectory": trajectory,
                "replay_of": None,
            },
        }

    def _run(self, record: Trajectory, client: ModelClient, family: Family, task: Task, evaluate: Evaluate) -> None:
        ledger = Ledger(self.run_dir / "model-usage.jsonl")
        for turn in record.turns:  # replies saved before an interruption, not judged yet
            if turn["feedback"] is None:
                judge(record, turn, family, task, evaluate, self.name)
        while True:
            stop = self._stop(record, ledger)
            if stop:
                record.finish(stop)
                return
            started = time.monotonic()
            try:
                reply = client.complete(record.system, record.conversation())
            except ModelError as exc:
                record.finish("model error", str(exc))
                return
            price = cost(self.spec.model, reply.input_tokens, reply.output_tokens, self.settings["prices"])
            ledger.add(record.path.stem, reply.input_tokens + reply.output_tokens, price)
            turn = record.add_turn(reply, price, time.monotonic() - started, {})
            judge(record, turn, family, task, evaluate, self.name)

    def _stop(self, record: Trajectory, ledger: Ledger) -> str | None:
        """Why the trajectory ends before another model call, or None."""
        goal, best = self.settings["target_speedup"], record.best()
        if goal is not None and best is not None and standing(best) >= (3, goal):
            return "target speedup reached"
        if len(record.turns) >= self.settings["turns"]:
            return "turns used"
        return ledger.exceeded(self.settings["spend_cap"], self.settings["token_cap"])


def judge(record: Trajectory, turn: dict[str, Any], family: Family, task: Task, evaluate: Evaluate, agent: str) -> None:
    """Take the kernel out of a turn's reply and judge it, or tell the model why there was none."""
    reply = turn["reply"]
    extraction = extract_kernel(reply["text"], family.launcher.name, reply["refusal"], reply["truncated"])
    if extraction.source is None:
        turn["problem"] = extraction.problem
        record.judge(turn, [], feedback.no_kernel(str(extraction.problem), family.launcher.declaration()), 0.0)
        return
    judge_kernel(record, turn, extraction.source, family, task, evaluate, agent)


def judge_kernel(
    record: Trajectory, turn: dict[str, Any], source: str, family: Family, task: Task, evaluate: Evaluate, agent: str
) -> None:
    """Save a turn's kernel as its own file, run the pipeline on it and record verdicts and feedback."""
    target = record.info["ptxbench"]["target"]
    candidate = Candidate(task.name, target, source, f"{agent} {record.path.stem} turn {turn['turn']}")
    record.save_kernel(turn, candidate)
    started = time.monotonic()
    verdicts = evaluate(candidate)
    record.judge(turn, verdicts, feedback.render(verdicts, family.launcher.declaration()), time.monotonic() - started)


def result(record: Trajectory, task: Task, target: Target, agent: str) -> Candidate | NoKernel:
    """The trajectory's best kernel, or why there is none."""
    best = record.best()
    if best is None:
        status = record.info["exit_status"]
        error = record.info["ptxbench"]["error"]
        why = f"{status}: {error}" if error else status
        return NoKernel(f"{agent}: no kernel after {len(record.turns)} turn(s) ({why}); see {record.path}", failed=True)
    origin = f"{agent} {record.path.stem} turn {best['turn']}"
    return Candidate(task.name, target.name, record.kernel_source(best), origin)
