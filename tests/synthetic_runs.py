"""Run directories with GPU numbers, written through the project's own writers (RunDirectory, Trajectory,
Evaluation.row) so that their format is the plugin's: the reports are tested on known speedups."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_ptxbench.agent.models import Reply
from pytest_ptxbench.agent.trajectory import Trajectory, file_name
from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.languages import LANGUAGES
from pytest_ptxbench.rundir import RunDirectory
from pytest_ptxbench.session import Evaluation
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.cases import Case
from pytest_ptxbench.task.catalogue import Family, Shape
from pytest_ptxbench.verdict import Decision, Outcome, Status, Verdict, decide

H100 = TARGETS["h100"]
TASK_SET = "0123456789abcdef"
GPU = ("check", "profile", "sanitize", "time")
NO_DEVICE = "needs an sm_90 device (H100-class), found none"


def speed_of_light(shape: str, speedup: float) -> float:
    """The synthetic share of the roofline: half the speedup on the largest shape, an eighth elsewhere."""
    return speedup / 2 if shape == "m8192" else speedup / 8


def static(inspect: Status = Status.PASSED) -> list[Verdict]:
    return [Verdict("build", Status.PASSED, "built"), Verdict("inspect", inspect, "opcodes")]


def on_shape(shape: str, speedup: float, failing: str | None = None) -> list[Verdict]:
    """The GPU stages on one shape: all pass (time with `speedup`) but `failing`."""
    timed = {"speedup": speedup, "median_ms": 1.0 / speedup, "speed_of_light": speed_of_light(shape, speedup)}
    return [
        Verdict(
            stage,
            Status.FAILED if stage == failing else Status.PASSED,
            stage,
            {"shape": shape, **(timed if stage == "time" else {})},
        )
        for stage in GPU
    ]


def kernel(n: int) -> str:
    """A distinct kernel source per number (never built: these runs stand for a GPU run)."""
    return f'extern "C" int ptxbench_gemm() {{ return {n}; }}\n'


@dataclass(frozen=True)
class Turn:
    """A synthetic turn: its kernel number (None: a reply without a kernel) and how it fared."""

    kernel: int | None
    speedup: float = 1.0
    failing: str | None = None  # a stage that fails ("build" and "inspect" end the pipeline there)
    gpu: bool = True  # False: judged where no GPU of the target is (the pipeline skips every GPU stage)
    no_reference: str | None = None  # a shape whose reference could not be made: check tool-unavailable

    def verdicts(self, shapes: list[Shape]) -> list[Verdict]:
        if self.failing == "build":
            return [Verdict("build", Status.FAILED, "candidate.cu(3): error: expected a ';'")]
        if self.failing == "inspect":
            return static(Status.FAILED)
        if not self.gpu:
            return static() + [Verdict(stage, Status.SKIPPED, NO_DEVICE) for stage in GPU]
        unavailable = [Verdict("check", Status.TOOL_UNAVAILABLE, "no reference: out of memory")]
        return static() + [
            v
            for s in shapes
            for v in (unavailable if s.id == self.no_reference else on_shape(s.id, self.speedup, self.failing))
        ]


def write_run(
    path: Path,
    family: Family,
    model: str,
    trajectories: list[list[Turn]],
    turns: int = 4,
    task_set: str = TASK_SET,
    cost: float | None = 0.01,
    lang: str = "cuda",
) -> Path:
    """A run of `model` on the family's first task: one trajectory per list of turns (no trajectory files
    when `turns` is 0: a `reference`-like agent); the last turn with the best standing is handed over and
    evaluated on every shape. Its kernels are in `lang`; writing to `path` again adds another language's."""
    task = family.tasks[0]
    run = RunDirectory(path)
    settings = {"model": model, "trajectories": len(trajectories), "turns": turns}
    run.start(lambda: {"settings": settings, "task_set": task_set, "tools": {}, "devices": []})
    for number, script in enumerate(trajectories, start=1):
        handed = script[-1]
        if turns:
            record = Trajectory.start(
                path / "trajectories" / file_name(task.name, "h100", number, lang),
                path,
                "system prompt",
                f"task card of {task.name}",
                {
                    "config": {"model": {"spec": model}, "agent": {"turns": turns}},
                    "ptxbench": {
                        "family": family.name,
                        "task": task.name,
                        "target": "h100",
                        "lang": lang,
                        "trajectory": number,
                    },
                },
            )
            for step in script:
                turn = record.add_turn(Reply("reply", None, None, False, "stop", 100, 50), cost, 1.0, {})
                if step.kernel is None:
                    record.judge(turn, [], "No kernel was evaluated.", 0.0)
                    continue
                record.save_kernel(turn, Candidate(task.name, "h100", kernel(step.kernel), "synthetic", lang))
                verdicts = step.verdicts(family.shapes("visible"))
                record.judge(turn, verdicts, f"feedback on kernel {step.kernel}", 1.0)
            record.finish("turns used")
            best = record.best()
            handed = next(
                (s for s in script if best and s.kernel is not None and kernel(s.kernel) == record.kernel_source(best)),
                Turn(None),
            )
        for shape in family.shapes("all"):
            case = Case(family, task, H100, LANGUAGES[lang], shape, number, len(trajectories))
            if handed.kernel is None:
                evaluation = Evaluation(case, None, [], Decision(Outcome.FAILED, "no kernel"), None)
            else:
                candidate = Candidate(task.name, "h100", kernel(handed.kernel), "synthetic", lang)
                verdicts = Turn(handed.kernel, handed.speedup, handed.failing, handed.gpu).verdicts([shape])
                evaluation = Evaluation(case, candidate, verdicts, decide(verdicts), None)
            run.append_result(evaluation.row(model))
    return path
