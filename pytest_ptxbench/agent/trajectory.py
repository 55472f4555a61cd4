"""One trajectory of a model agent on one (task, target, trajectory number), saved as JSON after every step.

The file follows mini-swe-agent's trajectory format (`trajectory_format`, `info`, `messages`) and adds
`turns`: per turn the reply, tokens, cost, timing, the kernel file (its own version under
`<run dir>/kernels/`) and the structured verdicts. `messages` and the summary in `info` are derived from
`turns` on every save, which replaces the file atomically.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__
from ..candidate import Candidate
from ..languages import LANGUAGES
from ..rundir import write_atomic
from ..verdict import GPU_STAGES, Outcome, Status, Verdict, decide
from .models import Message, Reply

FORMAT = "ptxbench-trajectory/1"
MINI_SWE_AGENT_FORMAT = "mini-swe-agent-1"
BUDGETS = (1, 4, 8)  # turn budgets whose best kernel is recorded for hidden-shape scoring


class TrajectoryError(ValueError):
    """A trajectory file that cannot be read back; the message names the file and the field."""


def file_name(task: str, target: str, trajectory: int, lang: str = "cuda") -> str:
    """`gemm-n7168-k5120-h100-t1.json`; another language than CUDA is named: `...-h100-triton-t1.json`."""
    named = "" if lang == "cuda" else f"-{lang}"
    return f"{task}-{target}{named}-t{trajectory}.json"


def standing(turn: dict[str, Any]) -> tuple[int, float]:
    """How good a turn's kernel is: (3, geometric-mean speedup) when every stage passed, (2, 0) when no
    stage failed (stages that could not run here), (1, 0) when a stage failed, (0, 0) without a judged kernel."""
    if turn["kernel"] is None or turn["verdicts"] is None:
        return (0, 0.0)
    verdicts = [Verdict.from_json(v) for v in turn["verdicts"]]
    if any(v.status is Status.FAILED for v in verdicts):
        return (1, 0.0)
    if decide(verdicts).outcome is not Outcome.PASSED:
        return (2, 0.0)
    speedups = [
        float(v.data["speedup"])
        for v in verdicts
        if v.stage == "time" and isinstance(v.data.get("speedup"), (int, float)) and v.data["speedup"] > 0
    ]
    return (3, math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else 0.0)


def failed_stages(turn: dict[str, Any]) -> list[str]:
    """The stages a turn's kernel failed."""
    return [v.stage for v in map(Verdict.from_json, turn["verdicts"] or []) if v.status is Status.FAILED]


def judged_no_further(turn: dict[str, Any]) -> Verdict | None:
    """For a kernel that failed no stage while no GPU stage could run here (no device of the target's
    architecture): the first stage that did not pass, which says why. None where a GPU stage ran or a stage
    failed: another kernel could be judged further."""
    if standing(turn)[0] != 2:
        return None
    verdicts = [Verdict.from_json(v) for v in turn["verdicts"]]
    if any(v.stage in GPU_STAGES and v.status is not Status.SKIPPED for v in verdicts):
        return None
    return next((v for v in verdicts if not v.passed), None)


@dataclass
class Trajectory:
    path: Path
    run_dir: Path
    system: str
    card: str
    info: dict[str, Any]
    turns: list[dict[str, Any]]

    @classmethod
    def start(cls, path: Path, run_dir: Path, system: str, card: str, info: dict[str, Any]) -> Trajectory:
        """A new trajectory; `info` holds `config` and the `ptxbench` facts (task, target, ...)."""
        record = {
            "exit_status": "running",
            "submission": "",
            "model_stats": {"instance_cost": 0.0, "api_calls": 0},
            **info,
        }
        record["ptxbench"] = {"format": FORMAT, "harness_version": __version__, "error": None, **info["ptxbench"]}
        return cls(path, run_dir, system, card, record, [])

    @classmethod
    def load(cls, path: Path, run_dir: Path) -> Trajectory:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise TrajectoryError(f"{path}: cannot read: {exc}") from exc
        try:
            if raw["trajectory_format"] != MINI_SWE_AGENT_FORMAT or raw["info"]["ptxbench"]["format"] != FORMAT:
                raise TrajectoryError(f"{path}: not a {FORMAT} trajectory")
            messages = raw["messages"]
            turns = raw["turns"]
            for i, turn in enumerate(turns):
                if turn["turn"] != i + 1:
                    raise TrajectoryError(f"{path}: turns[{i}].turn: expected {i + 1}, got {turn['turn']!r}")
                for verdict in turn["verdicts"] or []:
                    Verdict.from_json(verdict)
            return cls(path, run_dir, messages[0]["content"], messages[1]["content"], raw["info"], turns)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            if isinstance(exc, TrajectoryError):
                raise
            raise TrajectoryError(f"{path}: malformed ({type(exc).__name__}: {exc})") from exc

    @property
    def turn_limit(self) -> int:
        return int(self.info["config"]["agent"]["turns"])

    def add_turn(self, reply: Reply, cost: float | None, seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
        """Record a reply (not judged yet) and save."""
        turn = {
            "turn": len(self.turns) + 1,
            "reply": {
                "text": reply.text,
                "reasoning": reply.reasoning,
                "refusal": reply.refusal,
                "truncated": reply.truncated,
                "stop": reply.stop,
            },
            "tokens": {"input": reply.input_tokens, "output": reply.output_tokens},
            "cost": cost,
            "model_seconds": round(seconds, 3),
            "kernel": None,
            "sha256": None,
            "problem": None,
            "verdicts": None,
            "feedback": None,
            "judge_seconds": 0.0,
            **extra,
        }
        self.turns.append(turn)
        self.save()
        return turn

    def save_kernel(self, turn: dict[str, Any], candidate: Candidate) -> None:
        """The turn's kernel as its own file under `<run dir>/kernels/`."""
        suffix = LANGUAGES[candidate.lang].suffix
        relative = Path("kernels") / f"{self.path.stem}-turn{turn['turn']}-{candidate.digest}{suffix}"
        target = self.run_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(candidate.source)
        turn["kernel"], turn["sha256"] = relative.as_posix(), candidate.digest
        self.save()

    def judge(self, turn: dict[str, Any], verdicts: list[Verdict], feedback: str, seconds: float) -> None:
        """Record the verdicts on a turn's kernel (none when the reply held no kernel) and save."""
        turn["verdicts"] = [v.to_json() for v in verdicts]
        turn["feedback"] = feedback
        turn["judge_seconds"] = round(seconds, 3)
        self.save()

    @property
    def lang(self) -> str:
        """The language of the trajectory's kernels (older trajectories: CUDA)."""
        return str(self.info["ptxbench"].get("lang", "cuda"))

    def kernel_source(self, turn: dict[str, Any]) -> str:
        """The saved source of a turn's kernel, checked against its recorded digest."""
        path = self.run_dir / str(turn["kernel"])
        source = path.read_text()
        candidate = Candidate("", "", source, str(path))
        if candidate.digest != turn["sha256"]:
            raise TrajectoryError(f"{path}: sha256 {candidate.digest} differs from the recorded {turn['sha256']}")
        return source

    def best(self, limit: int | None = None) -> dict[str, Any] | None:
        """The best judged kernel among the first `limit` turns (all turns when None); later wins ties."""
        judged = [t for t in self.turns[:limit] if standing(t)[0] > 0]
        return max(judged, key=lambda t: (*standing(t), t["turn"]), default=None)

    def conversation(self) -> list[Message]:
        """What the model sees: the task card, then each judged turn's reply and feedback."""
        messages: list[Message] = [{"role": "user", "content": self.card}]
        for turn in self.turns:
            if turn["feedback"] is None:
                break
            messages.append({"role": "assistant", "content": turn["reply"]["text"] or "(no text)"})
            messages.append({"role": "user", "content": turn["feedback"]})
        return messages

    def finish(self, status: str, error: str | None = None) -> None:
        self.info["exit_status"] = status
        self.info["ptxbench"]["error"] = error
        self.save()

    def save(self) -> None:
        calls = [t for t in self.turns if not t.get("replayed")]
        costs = [t["cost"] for t in calls]
        best = self.best()
        self.info["submission"] = self.kernel_source(best) if best else ""
        self.info["model_stats"] = {
            "instance_cost": None if None in costs else round(sum(costs), 6),
            "api_calls": len(calls),
        }
        self.info["ptxbench"].update(
            tokens={
                "input": sum(t["tokens"]["input"] for t in calls),
                "output": sum(t["tokens"]["output"] for t in calls),
            },
            best_turn=best["turn"] if best else None,
            budgets={str(k): _turn(self.best(k)) for k in BUDGETS if k <= self.turn_limit},
            updated=datetime.now(timezone.utc).isoformat(),
        )
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.card},
        ]
        for turn in self.turns:
            messages.append({"role": "assistant", "content": turn["reply"]["text"], "extra": {"turn": turn["turn"]}})
            if turn["feedback"] is not None:
                messages.append({"role": "user", "content": turn["feedback"], "extra": {"turn": turn["turn"]}})
        record = {
            "trajectory_format": MINI_SWE_AGENT_FORMAT,
            "info": self.info,
            "messages": messages,
            "turns": self.turns,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(record, indent=1))


def _turn(turn: dict[str, Any] | None) -> int | None:
    return turn["turn"] if turn else None


def budget_kernels(run_dir: Path, task: str, target: str, trajectory: int, lang: str = "cuda") -> dict[int, Candidate]:
    """The best kernel within each turn budget of a saved trajectory, for scoring on hidden shapes;
    empty when the agent keeps no trajectory (reference and file agents)."""
    path = run_dir / "trajectories" / file_name(task, target, trajectory, lang)
    if not path.is_file():
        return {}
    record = Trajectory.load(path, run_dir)
    by_turn = {t["turn"]: t for t in record.turns}
    out = {}
    for budget, number in record.info["ptxbench"].get("budgets", {}).items():
        if number is not None:
            origin = f"{path.stem} turn {number} (best within {budget} turns)"
            out[int(budget)] = Candidate(task, target, record.kernel_source(by_turn[number]), origin, record.lang)
    return out
