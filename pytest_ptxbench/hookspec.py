"""pytest-ptxbench's own hooks, added to pytest through `pytest_addhooks`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from .agent import Agent


@pytest.hookspec(firstresult=True)
def pytest_ptxbench_make_agent(
    spec: str, catalogue: Path, settings: dict[str, Any], run_dir: Path, config: pytest.Config
) -> Agent | None:
    """Return the agent that `--ptx-model=spec` names, or None when this plugin does not know it.
    `catalogue` is the folder of the task files (reference kernels live under it), `settings` the
    resolved `--ptx-*` settings, `run_dir` the run directory (trajectories are saved under it).
    Raise ValueError with a message naming the problem for a spec it knows but cannot serve."""
