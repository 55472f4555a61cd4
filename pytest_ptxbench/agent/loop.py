"""The model agent: a trajectory of at most `turns` model calls per (task, target, trajectory number).

Each reply's kernel goes through the pipeline on the visible shapes and the model gets feedback rendered
from the verdicts. The trajectory is saved after every reply and every judgement, so `--ptx-resume`
continues without losing or repeating a turn. The result is the best kernel (see `trajectory.standing`).
A trajectory also ends once its best kernel passed every stage that can run here (no GPU of the target's
architecture): further turns could not be judged any further.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..candidate import Candidate
from ..languages import CUDA, LANGUAGES, Language
from ..pipeline import Evaluate
from ..targets import Target
from ..task.catalogue import Family, Task
from . import NoKernel, feedback, prompts
from .extract import extract_kernel
from .ledger import Ledger
from .models import MissingKey, ModelClient, ModelError
from .models.prices import cost
from .models.specs import ModelSpec, connect
from .trajectory import Trajectory, failed_stages, file_name, judged_no_further, standing

PROVIDER_ERROR = "provider error"  # exit statuses of a trajectory cut short: by the model's provider
HARNESS_ERROR = "error"  # ... and by the harness itself


def usage(run_dir: Path) -> Ledger:
    """What the model calls of the run in `run_dir` have used."""
    return Ledger(run_dir / "model-usage.jsonl")


def cap_reached(run_dir: Path, settings: dict[str, Any]) -> str | None:
    """Which of the run's caps (--ptx-spend-cap, --ptx-token-cap) its model calls have reached, or None."""
    return usage(run_dir).exceeded(settings["spend_cap"], settings["token_cap"])


@dataclass(frozen=True)
class ModelAgent:
    spec: ModelSpec
    settings: dict[str, Any]
    run_dir: Path

    @property
    def name(self) -> str:
        return self.spec.spec

    def kernel(
        self,
        family: Family,
        task: Task,
        target: Target,
        trajectory: int,
        evaluate: Evaluate,
        language: Language = CUDA,
    ) -> Candidate | NoKernel:
        try:
            client = connect(self.spec, self.settings)
        except MissingKey as exc:
            return NoKernel(str(exc))
        path = self.run_dir / "trajectories" / file_name(task.name, target.name, trajectory, language.name)
        if self.settings["resume"] and path.exists():
            record = Trajectory.load(path, self.run_dir)
            record.info["config"]["agent"]["turns"] = self.settings["turns"]
        else:
            record = Trajectory.start(
                path,
                self.run_dir,
                prompts.system_prompt(target, language),
                prompts.task_card(family, task, target, language),
                self._info(family, task, target, trajectory, language),
            )
        cap = cap_reached(self.run_dir, self.settings)
        if cap and not record.turns:  # never tried: no trajectory is written, the task's tests skip
            return NoKernel(f"{self.name}: not tried: {cap}")
        try:
            self._run(record, client, family, task, evaluate)
        except Exception as exc:  # one failing trajectory never takes down the session
            record.finish(HARNESS_ERROR, f"{type(exc).__name__}: {exc}")
        return result(record, task, target, self.name)

    def _info(self, family: Family, task: Task, target: Target, trajectory: int, language: Language) -> dict[str, Any]:
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
                "lang": language.name,
                "trajectory": trajectory,
                "replay_of": None,
            },
        }

    def _run(self, record: Trajectory, client: ModelClient, family: Family, task: Task, evaluate: Evaluate) -> None:
        ledger = usage(self.run_dir)
        for turn in record.turns:  # replies saved before an interruption, not judged yet
            if turn["feedback"] is None:
                judge(record, turn, family, task, evaluate, self.name)
        while True:
            stop = self._stop(record)
            if stop:
                record.finish(stop)
                return
            started = time.monotonic()
            try:
                reply = client.complete(record.system, record.conversation())
            except ModelError as exc:
                record.finish(PROVIDER_ERROR, str(exc))
                return
            price = cost(self.spec.model, reply.input_tokens, reply.output_tokens, self.settings["prices"])
            ledger.add(record.path.stem, reply.input_tokens + reply.output_tokens, price)
            turn = record.add_turn(reply, price, time.monotonic() - started, {})
            judge(record, turn, family, task, evaluate, self.name)

    def _stop(self, record: Trajectory) -> str | None:
        """Why the trajectory ends before another model call, or None."""
        goal, best = self.settings["target_speedup"], record.best()
        if goal is not None and best is not None and standing(best) >= (3, goal):
            return "target speedup reached"
        if len(record.turns) >= self.settings["turns"]:
            return "turns used"
        stuck = judged_no_further(best) if best is not None else None
        if stuck is not None:
            return f"passed every stage that can run here ({stuck.stage} {stuck.status.value}: {stuck.message})"
        return cap_reached(self.run_dir, self.settings)


def judge(record: Trajectory, turn: dict[str, Any], family: Family, task: Task, evaluate: Evaluate, agent: str) -> None:
    """Take the kernel out of a turn's reply and judge it, or tell the model why there was none."""
    reply = turn["reply"]
    language = LANGUAGES[record.lang]
    entry = language.entry(family)
    extraction = extract_kernel(reply["text"], language, entry, reply["refusal"], reply["truncated"])
    if extraction.source is None:
        turn["problem"] = extraction.problem
        record.judge(turn, [], feedback.no_kernel(str(extraction.problem), language, family), 0.0)
        return
    judge_kernel(record, turn, extraction.source, family, task, evaluate, agent)


def judge_kernel(
    record: Trajectory, turn: dict[str, Any], source: str, family: Family, task: Task, evaluate: Evaluate, agent: str
) -> None:
    """Save a turn's kernel as its own file, run the pipeline on it and record verdicts and feedback."""
    target = record.info["ptxbench"]["target"]
    origin = f"{agent} {record.path.stem} turn {turn['turn']}"
    candidate = Candidate(task.name, target, source, origin, record.lang)
    record.save_kernel(turn, candidate)
    started = time.monotonic()
    verdicts = evaluate(candidate)
    said = feedback.render(verdicts, LANGUAGES[record.lang], family)
    record.judge(turn, verdicts, said, time.monotonic() - started)


def result(record: Trajectory, task: Task, target: Target, agent: str) -> Candidate | NoKernel:
    """The trajectory's best kernel, or why there is none. A trajectory that a provider or harness error cut
    short ends in that error unless its best kernel so far failed no stage: an earlier turn's build error
    is not what stopped it."""
    best, turns = record.best(), len(record.turns)
    status, error = record.info["exit_status"], record.info["ptxbench"]["error"]
    if status in (PROVIDER_ERROR, HARNESS_ERROR) and (best is None or standing(best)[0] < 2):
        what = (
            f"provider error at turn {turns + 1}"
            if status == PROVIDER_ERROR
            else f"harness error after {turns} turn(s)"
        )
        before = (
            f"; the best kernel before it (turn {best['turn']}) failed {', '.join(failed_stages(best))}" if best else ""
        )
        return NoKernel(f"{agent}: {what}: {error}{before}; see {record.path}", failed=True)
    if best is None:
        last = record.turns[-1]["problem"] if record.turns else None
        why = f"{status}; last: {last}" if last else status
        return NoKernel(f"{agent}: the model gave no kernel in {turns} turn(s) ({why}); see {record.path}", failed=True)
    origin = f"{agent} {record.path.stem} turn {best['turn']}"
    return Candidate(task.name, target.name, record.kernel_source(best), origin, record.lang)
