"""pytest wiring only: options, markers, parametrization, fixtures, header and summary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from . import hookspec, settings
from .agent import Agent, builtin_agent
from .agent.loop import cap_reached
from .benchmarking import ReplayClock, record
from .device import detect_devices
from .distribution import keep_tasks_together, tell_worker
from .languages import LANGUAGES
from .pinning import pin_worker
from .runkeeper import RunKeeper
from .session import Harness
from .summary import PROPERTY, family_means, render, summary_row
from .targets import TARGETS
from .task.cases import Case
from .toolchain import RELEASE_TOOLS, describe, release_warning
from .verdict import Outcome

HARNESS = pytest.StashKey[Harness]()
_OUT_SET_HERE = pytest.StashKey[bool]()
MARKERS = {
    "gpu": "needs a GPU to pass (skips with a reason elsewhere)",
    "hidden": "a hidden shape: scored only, never shown to the model",
    "slow": "a shape of at least 4 TFLOP",
    "ptxbench(**settings)": "override ptxbench settings for one test (e.g. runs=10)",
    "xdist_group(name)": "keep tests that share one kernel on one xdist worker",
    **{name: f"target {t.label} ({t.arch})" for name, t in TARGETS.items()},
    **{name: f"candidates written in {name}" for name in LANGUAGES},
}


def pytest_addoption(parser: pytest.Parser) -> None:
    settings.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    worker = getattr(config, "workerinput", {}).get("workerid")  # set by xdist in its workers only
    if worker is not None:
        pin_worker(worker, detect_devices())  # before anything starts CUDA
    harness = Harness(config)
    config.stash[HARNESS] = harness
    note = keep_tasks_together(config, harness.settings)
    config.pluginmanager.register(Recorder(harness, note), "ptxbench-recorder")
    config.pluginmanager.register(RunKeeper(config, harness.run, harness.settings), "ptxbench-run")
    # xdist workers inherit the environment: they must all write into the controller's run directory.
    config.stash[_OUT_SET_HERE] = "PTXBENCH_OUT" not in os.environ
    os.environ.setdefault("PTXBENCH_OUT", str(harness.run.path))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, before each worker starts."""
    tell_worker(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker per visible GPU (xdist's own default where there is none)."""
    return len(detect_devices()) or None


def pytest_unconfigure(config: pytest.Config) -> None:
    if HARNESS in config.stash:
        config.stash[HARNESS].close()
    if config.stash.get(_OUT_SET_HERE, False):
        os.environ.pop("PTXBENCH_OUT", None)


def pytest_ptxbench_make_agent(
    spec: str, catalogue: Path, settings: dict[str, Any], run_dir: Path, config: pytest.Config
) -> Agent | None:
    return builtin_agent(spec, catalogue, settings, run_dir)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ptx_case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    cases = config.stash[HARNESS].cases(metafunc.definition.path.parent)
    for family in {c.family.name: c.family for c in cases}.values():
        config.addinivalue_line("markers", f"{family.name}: task family {family.name}")
    metafunc.parametrize("ptx_case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in cases])


def _marks(case: Case) -> list[pytest.MarkDecorator]:
    marks = [
        pytest.mark.benchmark(timer=ReplayClock(), group=case.task.name),
        getattr(pytest.mark, case.family.name),
        getattr(pytest.mark, case.target.name),
        getattr(pytest.mark, case.language.name),
        pytest.mark.gpu,
        pytest.mark.xdist_group(case.group),
    ]
    if case.shape.hidden:
        marks.append(pytest.mark.hidden)
    if case.slow:
        marks.append(pytest.mark.slow)
    return marks


class Bench:
    """The `ptx_bench` fixture: evaluates a case and turns the decision into the test's outcome."""

    def __init__(self, harness: Harness, item: pytest.Item, benchmark: Any) -> None:
        self.harness, self.item, self.benchmark = harness, item, benchmark

    def evaluate(self, case: Case) -> None:
        marker = self.item.get_closest_marker("ptxbench")
        resolved = settings.resolve_all(self.item.config, marker.kwargs if marker else None)
        evaluation = self.harness.evaluate(case, resolved)
        self.item.user_properties.append((PROPERTY, summary_row(evaluation.row(resolved["model"]))))
        timed = [v for v in evaluation.verdicts if v.stage == "time" and v.passed]
        clock = self.item.get_closest_marker("benchmark")
        if timed and clock is not None and isinstance(clock.kwargs.get("timer"), ReplayClock):
            record(self.benchmark, clock.kwargs["timer"], timed[-1])
        decision = evaluation.decision
        if decision.outcome is Outcome.FAILED:
            pytest.fail(decision.reason, pytrace=False)
        if decision.outcome is Outcome.SKIPPED:
            pytest.skip(decision.reason)


@pytest.fixture
def ptx_bench(request: pytest.FixtureRequest, benchmark: Any) -> Bench:
    return Bench(request.config.stash[HARNESS], request.node, benchmark)


def pytest_report_header(config: pytest.Config) -> list[str]:
    harness = config.stash[HARNESS]
    s = harness.settings
    devices = ", ".join(f"{d.index}: {d.name} ({d.arch}, driver {d.driver})" for d in harness.devices) or "none"
    tools = harness.tools
    mixed = release_warning({n: t.version for n, t in tools.items() if t and n in RELEASE_TOOLS})
    return [
        f"ptxbench: model={s['model']} target={s['gpu']} lang={s['lang']} shapes={s['shapes']} seed={s['seed']} out={harness.run.path}",
        f"ptxbench devices: {devices}",
        f"ptxbench tools: {describe(tools)}",
        *harness.tree_header(),
        *([f"ptxbench WARNING: {mixed}"] if mixed else []),
    ]


class Recorder:
    """Collects each benchmark test's row from its report (on the xdist controller too) and prints at the
    end the table, a cap the model calls reached, how xdist distributed and the run directory."""

    def __init__(self, harness: Harness, note: str | None) -> None:
        self.harness, self.note = harness, note
        self.rows: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.rows += [
                value for name, value in report.user_properties if name == PROPERTY and isinstance(value, dict)
            ]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.rows:
            return
        terminalreporter.write_sep("=", "ptxbench")
        for line in render(self.rows):
            terminalreporter.write_line(line)
        for line in family_means(self.rows):
            terminalreporter.write_line(f"ptxbench: {line}")
        run = self.harness.run.path
        cap = cap_reached(run, self.harness.settings)
        if cap:
            terminalreporter.write_line(f"ptxbench: {cap}: no model call started after it", yellow=True, bold=True)
        if self.note:
            terminalreporter.write_line(f"ptxbench: {self.note}")
        terminalreporter.write_line(f"ptxbench run directory: {run}")
