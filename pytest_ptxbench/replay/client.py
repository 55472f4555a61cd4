"""The pytest process's side of the trusted runner: typed requests and replies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..workers import Child, ChildFailed, child_environment
from .placement import Relocated


class RunnerFailed(Exception):
    """A replay failed: the device faulted, the runner died or hung, or it refused the launch list;
    `relocated`: the driver would not map the captured addresses (capture again at others)."""

    def __init__(self, message: str, relocated: bool = False) -> None:
        super().__init__(message)
        self.relocated = relocated


@dataclass(frozen=True)
class Checked:
    inputs_changed: list[str]
    overruns: list[str]
    outputs: dict[str, Path]


@dataclass(frozen=True)
class Timed:
    runs: list[dict[str, Any]]  # per run: index, event_ms, span_ms, kernels (name, ms)
    saved: dict[int, dict[str, Path]]  # outputs of the rechecked runs
    overruns: list[str]


class Runner:
    """One runner process for one candidate on one shape."""

    def __init__(self, folder: Path, load: dict[str, Any], sets: list[dict[str, str]], timeout: float) -> None:
        self.folder, self.timeout = folder, timeout
        self.child = Child("runner", folder, child_environment(folder))
        self._ask({"op": "load", **load})
        self._ask({"op": "sets", "sets": sets})

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = self.child.request(request, self.timeout)
        except ChildFailed as exc:
            raise RunnerFailed(str(exc)) from None
        if not reply["ok"]:
            message = f"{request['op']}: {reply['error']}" if request["op"] in ("load", "sets") else reply["error"]
            raise RunnerFailed(message, relocated=reply.get("error_type") == Relocated.__name__)
        return reply

    def check(self, placement: int, index: int, poison: int) -> Checked:
        out = self.folder / f"check-{placement}-{index}-{poison:02x}"
        reply = self._ask(
            {"op": "check", "placement": placement, "set": index, "poison": poison, "outputs_dir": str(out)}
        )
        return Checked(reply["inputs_changed"], reply["overruns"], {k: Path(v) for k, v in reply["outputs"].items()})

    def reload(self) -> None:
        """The cubins loaded anew: device globals start fresh."""
        self._ask({"op": "reload"})

    def time(self, placement: int, runs: int, first: int, save: list[int]) -> Timed:
        request = {
            "op": "time",
            "placement": placement,
            "runs": runs,
            "first": first,
            "save": save,
            "outputs_dir": str(self.folder / "timed"),
        }
        reply = self._ask(request)
        saved = {int(i): {k: Path(v) for k, v in files.items()} for i, files in reply["saved"].items()}
        return Timed(reply["runs"], saved, reply["overruns"])

    def close(self) -> None:
        self.child.close()
