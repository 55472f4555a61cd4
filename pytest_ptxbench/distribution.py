"""pytest-xdist's distribution mode for a ptxbench run: the tests of one task share one kernel (one model
trajectory), so they must run on one worker. `--dist loadgroup` and each test's `xdist_group` mark ensure it.

The controller turns `-n N` alone (or `--dist load`) into `loadgroup`. Workers parse the command line again
and decide from it whether to tag their tests with their group, so the controller tells them in their
`workerinput`."""

from __future__ import annotations

from typing import Any

import pytest

from .agent.models.specs import parse_spec

SPLITTING = ("each", "worksteal")  # modes that run one task's tests on several workers
GROUPED = "ptxbench_loadgroup"  # the workerinput key: the controller distributes by group


def keep_tasks_together(config: pytest.Config, settings: dict[str, Any]) -> str | None:
    """On the controller, `load` becomes `loadgroup` (tests without an `xdist_group` mark are spread as
    before) and a note says so; a mode that splits a task's tests is refused for an agent that calls a model:
    every worker would ask for the same trajectory and write the same file. On a worker, the controller's
    grouping is applied."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        if workerinput.get(GROUPED):
            config.option.loadgroup = True  # read by xdist's worker when it collects
        return None
    dist = getattr(config.option, "dist", "no")  # absent where xdist is not installed
    if dist == "load":
        config.option.dist = "loadgroup"
        return "xdist ran with --dist loadgroup: each task's tests share one kernel, so they run on one worker"
    if dist in SPLITTING and _calls_a_model(settings):
        raise pytest.UsageError(
            f"--dist {dist} with --ptx-model={settings['model']}: the tests of one task would run on several "
            "workers, each asking the model for the same trajectory; use --dist loadgroup (what -n alone gives)"
        )
    return None


def tell_worker(node: Any) -> None:
    """Before an xdist worker starts: whether the controller distributes by group."""
    node.workerinput[GROUPED] = getattr(node.config.option, "dist", "no") == "loadgroup"


def _calls_a_model(settings: dict[str, Any]) -> bool:
    try:
        return parse_spec(settings["model"], settings) is not None
    except ValueError:  # a malformed model stops collection, with its own message
        return False
