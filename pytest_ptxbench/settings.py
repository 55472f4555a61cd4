"""Every `--ptx-*` option, with its ini key and environment variable, resolved in one place:
a `@pytest.mark.ptxbench(...)` marker, then the command line, then `PTXBENCH_*`, then the ini file,
then the default."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from .targets import TARGETS


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return text

    return parse


@dataclass(frozen=True)
class Option:
    name: str  # "model" → --ptx-model, ini ptx_model, PTXBENCH_MODEL
    parse: Callable[[str], Any]
    default: Any
    help: str
    flag: bool = False  # a command-line switch without a value

    @property
    def cli(self) -> str:
        return "--ptx-" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        return "ptx_" + self.name

    @property
    def env(self) -> str:
        return "PTXBENCH_" + self.name.upper()


OPTIONS = (
    Option("model", str, "reference", "the agent: reference, file:<dir>"),
    Option(
        "gpu", _choice(*TARGETS, "all"), "h100", "target: h100 (any compute capability 9.0 device), b200 (10.0) or all"
    ),
    Option("turns", _positive_int, 8, "model calls per trajectory"),
    Option("runs", _positive_int, 50, "timed runs per shape"),
    Option("warmup", _non_negative_int, 10, "warm-up runs before timing"),
    Option("trajectories", _positive_int, 1, "independent trajectories per task"),
    Option("shapes", _choice("visible", "hidden", "all"), "all", "which shapes become tests: visible, hidden or all"),
    Option(
        "shapes_file", str, None, "a YAML file whose hidden shapes replace the catalogue's ({family: [shape, ...]})"
    ),
    Option("seed", _non_negative_int, 0, "seed of every generated input"),
    Option("out", str, None, "run directory (default: runs/<UTC time>-<model>)"),
    Option("require_gpu", _flag, False, "fail, rather than skip, tests whose GPU stages cannot run", flag=True),
    Option("build_timeout", _positive_int, 300, "seconds nvcc may take per candidate"),
)
BY_NAME = {option.name: option for option in OPTIONS}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("ptxbench", "GPU kernel benchmark (pytest-ptxbench)")
    for option in OPTIONS:
        text = f"{option.help} (env {option.env}, ini {option.dest}; default: {option.default})"
        if option.flag:
            group.addoption(option.cli, action="store_true", default=None, dest=option.dest, help=text)
        else:
            group.addoption(option.cli, action="store", default=None, dest=option.dest, help=text)
        parser.addini(option.dest, option.help, default="")


def resolve(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None) -> Any:
    """The value of option `name` from the first source that sets it."""
    option = BY_NAME[name]
    sources: list[tuple[str, Any]] = [
        ("marker ptxbench", (marker or {}).get(name)),
        (option.cli, config.getoption(option.dest)),
        (option.env, os.environ.get(option.env)),
        (f"ini {option.dest}", config.getini(option.dest) or None),
    ]
    for where, raw in sources:
        if raw is None:
            continue
        if not isinstance(raw, str):
            raw = str(raw)
        try:
            return option.parse(raw)
        except ValueError as exc:
            raise pytest.UsageError(f"{where}={raw!r}: {exc}") from None
    return option.default


def resolve_all(config: pytest.Config, marker: Mapping[str, Any] | None = None) -> dict[str, Any]:
    unknown = set(marker or {}) - set(BY_NAME)
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.ptxbench: unknown setting {sorted(unknown)[0]!r} (known: {', '.join(BY_NAME)})"
        )
    return {name: resolve(config, name, marker) for name in BY_NAME}
