"""Every `--ptx-*` option, with its ini key and environment variable, resolved in one place:
a `@pytest.mark.ptxbench(...)` marker, then the command line, then `PTXBENCH_*`, then the ini file,
then the default."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from .languages import LANGUAGES
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


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be greater than 0")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError("must not be negative")
    return value


def _pairs(text: str) -> dict[str, str]:
    """`a=x, b=y` (commas or whitespace between pairs) → {a: x, b: y}."""
    out = {}
    for item in text.replace(",", " ").split():
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"expected name=value pairs, got {item!r}")
        out[key] = value
    return out


def _aliases(text: str) -> dict[str, str]:
    """`claude=anthropic:claude-opus-4-5 qwen=openai-compatible:Qwen/Qwen3-Coder` → alias → spec."""
    pairs = _pairs(text)
    for alias, spec in pairs.items():
        if ":" not in spec:
            raise ValueError(f"{alias}={spec}: expected provider:model")
    return pairs


def _prices(text: str) -> dict[str, list[float]]:
    """`gpt-5=1.25/10` → model → [USD per million input tokens, per million output tokens]."""
    out = {}
    for model, value in _pairs(text).items():
        parts = value.split("/")
        try:
            numbers = [float(p) for p in parts]
        except ValueError:
            numbers = []
        if len(numbers) != 2 or min(numbers) < 0:
            raise ValueError(f"{model}={value}: expected <USD per 1M input tokens>/<USD per 1M output tokens>")
        out[model] = numbers
    return out


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _name(text: str) -> str:
    if not text.isidentifier():
        raise ValueError("expected a name (letters, digits, '_')")
    return text


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
    Option(
        "model",
        str,
        "reference",
        "the agent: reference, file:<dir>, replay:<run dir>, gemini, claude, gpt, qwen, or provider:model "
        "(openai, openai-compatible, anthropic, gemini)",
    ),
    Option(
        "gpu", _choice(*TARGETS, "all"), "h100", "target: h100 (any compute capability 9.0 device), b200 (10.0) or all"
    ),
    Option("lang", _choice(*LANGUAGES, "all"), "cuda", "the candidates' language: cuda, triton or all"),
    Option("turns", _positive_int, 8, "model calls per trajectory"),
    Option("runs", _positive_int, 50, "timed runs per shape"),
    Option("warmup", _non_negative_int, 10, "warm-up runs before timing"),
    Option(
        "baseline",
        _name,
        None,
        "time against this alternative baseline where a task file declares it under `baselines:` "
        "(e.g. flashinfer for attention_fwd); unset or 'default': each file's `baseline:`",
    ),
    Option("trajectories", _positive_int, 1, "independent trajectories per task"),
    Option("shapes", _choice("visible", "hidden", "all"), "all", "which shapes become tests: visible, hidden or all"),
    Option(
        "shapes_file", str, None, "a YAML file whose hidden shapes replace the catalogue's ({family: [shape, ...]})"
    ),
    Option(
        "tasks",
        str,
        None,
        "a FlashInfer-Trace tree: its definitions that are tasks of a family become the tasks, its workloads"
        " their visible shapes",
    ),
    Option("seed", _non_negative_int, 0, "seed of every generated input"),
    Option("out", str, None, "run directory (default: runs/<UTC time>-<model>)"),
    Option("require_gpu", _flag, False, "fail, rather than skip, tests whose GPU stages cannot run", flag=True),
    Option("build_timeout", _positive_int, 300, "seconds nvcc may take per candidate"),
    Option(
        "sandbox",
        _choice("auto", "namespaces", "off"),
        "auto",
        "confine the evaluation child (no network, read-only checkout, hidden references): auto = where the OS "
        "allows (root, unshare), else none and the verdict says why; namespaces = required; off = never",
    ),
    Option("call_timeout", _positive_int, 120, "seconds one request to an evaluation child may take (a hang fails)"),
    Option("base_url", str, None, "base URL of the model API, e.g. a local vLLM's http://127.0.0.1:8000/v1"),
    Option("aliases", _aliases, None, "model aliases overriding the defaults: 'claude=anthropic:<model> qwen=...'"),
    Option("prices", _prices, None, "USD per million input/output tokens overriding the table: 'gpt-5=1.25/10'"),
    Option("request_timeout", _positive_float, 600.0, "seconds one model call may take"),
    Option("max_retries", _non_negative_int, 4, "retries of a model call on 429, 5xx, timeouts and connection errors"),
    Option("retry_delay", _non_negative_float, 2.0, "seconds before the first retry; doubles each retry, at most 60"),
    Option("reply_tokens", _positive_int, 32768, "most output tokens per model reply"),
    Option("spend_cap", _positive_float, None, "USD the model calls of one run may cost; no call starts beyond it"),
    Option("token_cap", _positive_int, None, "tokens (input + output) the model calls of one run may use"),
    Option("target_speedup", _positive_float, None, "end a trajectory once its best kernel reaches this speedup"),
    Option("resume", _flag, False, "continue the interrupted trajectories of the run directory --ptx-out", flag=True),
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


def defaults() -> dict[str, Any]:
    """Every setting at its default (scripts and tests that run stages without a pytest session)."""
    return {option.name: option.default for option in OPTIONS}


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


# What a `@pytest.mark.ptxbench(...)` marker may set: the settings applied per test. The others (the model,
# the shapes, the run directory, ...) hold for the whole session.
PER_TEST = ("require_gpu", "baseline", "runs", "warmup", "call_timeout")
# The per-test settings the GPU stages read (the judged-verdict cache is keyed on them).
STAGE_SETTINGS = ("runs", "warmup", "call_timeout")


def resolve_all(config: pytest.Config, marker: Mapping[str, Any] | None = None) -> dict[str, Any]:
    unknown = set(marker or {}) - set(BY_NAME)
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.ptxbench: unknown setting {sorted(unknown)[0]!r} (known: {', '.join(BY_NAME)})"
        )
    session_wide = set(marker or {}) - set(PER_TEST)
    if session_wide:
        raise pytest.UsageError(
            f"@pytest.mark.ptxbench: {sorted(session_wide)[0]!r} holds for the whole session; set it on the command"
            f" line, environment or ini file (a marker may set: {', '.join(PER_TEST)})"
        )
    return {name: resolve(config, name, marker) for name in BY_NAME}
