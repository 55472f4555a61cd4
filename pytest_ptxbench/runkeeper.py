"""The run directory's side of one pytest session: claimed (checked and locked) at the start by the
controlling process when `--ptx-out` names it, the benchmark tests collected recorded, the end marked.
xdist workers learn the session's id from their controller and never claim: they write into its claim."""

from __future__ import annotations

import sys
import uuid
from typing import IO, Any

import pytest

from .rundir import RunDirectory, RunDirectoryError
from .task.cases import Case

SESSION_KEY = "ptxbench_session"  # the controller's session id in an xdist worker's `workerinput`


def session_id(config: pytest.Config) -> str:
    """The controller's session id in an xdist worker, a new one elsewhere."""
    inherited = getattr(config, "workerinput", {}).get(SESSION_KEY)
    return str(inherited) if inherited else uuid.uuid4().hex


class RunKeeper:
    def __init__(self, config: pytest.Config, run: RunDirectory, settings: dict[str, Any]) -> None:
        self.run = run
        self.model: str = settings["model"]
        self.named = settings["out"] is not None  # --ptx-out (or PTXBENCH_OUT, ptx_out) names the folder
        self.controller = not hasattr(config, "workerinput")
        self.writes = not config.option.collectonly
        self._claim: IO[str] | None = None

    def _error(self, exc: RunDirectoryError) -> pytest.UsageError:
        named = f"--ptx-out={self.run.path}" if self.named else f"run directory {self.run.path}"
        return pytest.UsageError(f"{named}: {exc}")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.controller and self.named and self.writes:
            try:
                self._claim = self.run.claim(self.model)
            except RunDirectoryError as exc:
                raise self._error(exc) from None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[SESSION_KEY] = self.run.session

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        cases = [getattr(item, "callspec", None) for item in session.items]
        ids = [c.params["ptx_case"].id for c in cases if c and isinstance(c.params.get("ptx_case"), Case)]
        if ids and self.writes:
            try:
                self.run.record_collected(ids)
            except RunDirectoryError as exc:
                raise self._error(exc) from None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.controller and self.writes:
            try:
                self.run.record_end(int(exitstatus))
            except (OSError, RunDirectoryError) as exc:
                print(f"ptxbench: could not mark the end of the session in {self.run.path}: {exc}", file=sys.stderr)

    def pytest_unconfigure(self) -> None:
        if self._claim is not None:
            self._claim.close()
            self._claim = None
