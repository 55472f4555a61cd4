"""Alternative baselines (`baselines:` in a task file, `--ptx-baseline`): how they are declared, chosen
and recorded, and what decides the skip when the library one needs cannot be imported."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_ptxbench.child import libraries
from pytest_ptxbench.gpu import baseline_unavailable
from pytest_ptxbench.summary import render, summary_row
from pytest_ptxbench.task.catalogue import (
    TaskFileError,
    UnknownBaseline,
    choose_baseline,
    load_catalogue,
    load_family,
)
from pytest_ptxbench.verdict import STAGES, Outcome, Status, Verdict, decide

from .conftest import TASKS, results

FLASHINFER = "pytest_ptxbench.baselines:attention_fwd_flashinfer"


def test_attention_fwd_declares_flashinfer() -> None:
    family = load_family(TASKS / "attention_fwd.yaml")
    assert list(family.baselines) == ["default", "flashinfer"]
    assert (family.baseline_name, family.baseline_library) == ("default", "cuDNN")
    assert family.baseline == "pytest_ptxbench.baselines:attention_fwd_cudnn" and family.timed_against.requires == ()
    chosen = family.with_baseline("flashinfer")
    assert (chosen.baseline_name, chosen.baseline_library, chosen.baseline) == ("flashinfer", "FlashInfer", FLASHINFER)
    assert chosen.timed_against.requires == ("flashinfer",)
    assert chosen.with_baseline("default").baseline_library == "cuDNN"
    with pytest.raises(
        UnknownBaseline, match=r"attention_fwd\.yaml: baselines: no baseline 'fa3' \(declared: default, flashinfer\)"
    ):
        family.with_baseline("fa3")


def _with_baselines(tmp_path: Path, baselines: Any) -> Path:
    data = yaml.safe_load((TASKS / "attention_fwd.yaml").read_text())
    data["baselines"] = copy.deepcopy(baselines)
    target = tmp_path / "attention_fwd.yaml"
    target.write_text(yaml.safe_dump(data))
    return target


FI = {"library": "FlashInfer", "function": FLASHINFER}
BROKEN = [
    ([FI], "baselines: expected a mapping, got"),
    ({"default": FI}, "baselines: not a baseline name: 'default'"),
    ({"flash-infer": FI}, "baselines: not a baseline name: 'flash-infer'"),
    ({"fi": {"library": "FlashInfer"}}, "baselines.fi.function: missing"),
    (
        {"fi": {**FI, "function": "baselines.fi"}},
        "baselines.fi.function: expected 'module:function', got 'baselines.fi'",
    ),
    ({"fi": {**FI, "requires": "flashinfer"}}, "baselines.fi.requires: expected a list, got 'flashinfer'"),
    ({"fi": {**FI, "requires": ["flash infer"]}}, "baselines.fi.requires[0]: not a module name: 'flash infer'"),
    (
        {"fi": {**FI, "require": ["flashinfer"]}},
        "baselines.fi.require: unknown field (known: library, function, requires)",
    ),
]


@pytest.mark.parametrize(
    ("baselines", "message"), BROKEN, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BROKEN)]
)
def test_malformed_baselines_name_file_field_and_value(tmp_path: Path, baselines: Any, message: str) -> None:
    target = _with_baselines(tmp_path, baselines)
    with pytest.raises(TaskFileError) as caught:
        load_family(target)
    assert str(caught.value).startswith(f"{target}: ") and message in str(caught.value)


def test_choose_baseline_applies_where_declared() -> None:
    families = load_catalogue(TASKS)
    assert choose_baseline(families, None) is families
    chosen = {f.name: f.baseline_library for f in choose_baseline(families, "flashinfer")}
    assert chosen == {
        "attention_bwd": "cuDNN",
        "attention_fwd": "FlashInfer",
        "gemm": "cuBLAS",
        "gqa_paged_decode": "FlashInfer",
        "gqa_paged_prefill": "FlashInfer",
    }
    assert {f.baseline_name for f in choose_baseline(families, "default")} == {"default"}
    with pytest.raises(
        UnknownBaseline,
        match=r"no task file declares a baseline 'flashinfr' \(declared under `baselines:`: flashinfer in attention_fwd\.yaml",
    ):
        choose_baseline(families, "flashinfr")


def test_a_missing_library_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # what Python does for a module that cannot be imported
    with pytest.raises(libraries.Unavailable) as caught:
        libraries.versions(["yaml", "flashinfer"])
    assert str(caught.value).startswith("flashinfer cannot be imported (ModuleNotFoundError: ")
    assert "pip install flashinfer-python==0.6.14" in str(caught.value) and "README" in str(caught.value)
    assert libraries.versions(["yaml"]) == {"yaml": yaml.__version__}


def test_an_unavailable_baseline_skips_the_test_with_the_reason() -> None:
    family = load_family(TASKS / "attention_fwd.yaml").with_baseline("flashinfer")
    reason = "flashinfer cannot be imported (ImportError: no flashinfer); pip install flashinfer-python==0.6.14"
    time = baseline_unavailable(family, reason, 0.1)
    assert time.status is Status.SKIPPED and time.data == {"baseline": "FlashInfer"}
    passed = [Verdict(stage, Status.PASSED, "ok") for stage in STAGES[:-1]]
    decision = decide([*passed, time])
    assert decision.outcome is Outcome.SKIPPED
    assert decision.reason == (
        "passed: build, inspect, check, profile, sanitize; baseline flashinfer (FlashInfer) cannot run here: " + reason
    )
    assert decide([*passed, time], require_gpu=True).outcome is Outcome.FAILED


def test_the_summary_names_the_baseline() -> None:
    data = {"median_ms": 0.5, "baseline_median_ms": 1.7, "baseline": "FlashInfer", "speedup": 3.4, "tflops": 600.0}
    row = {
        "id": "attention_fwd-d128-causal-h100-b4-h48-s4096",
        "family": "attention_fwd",
        "task": "attention_fwd-d128-causal",
        "target": "h100",
        "outcome": "passed",
        "verdicts": [Verdict(s, Status.PASSED, "ok", data if s == "time" else {}).to_json() for s in STAGES],
    }
    _, line = render([summary_row(row)])
    assert "0.500 ms  1.700 ms FlashInfer  3.40x" in line


RUN = ("tasks", "-k", "attention_fwd-d128-causal or gemm-n128-k2048", "--ptx-shapes=visible")


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in results(out)}


def test_the_option_chooses_and_the_rows_record_it(project: pytest.Pytester) -> None:
    out = project.path / "run"
    result = project.runpytest_subprocess(*RUN, "--ptx-baseline=flashinfer", f"--ptx-out={out}")
    result.assert_outcomes(skipped=4)  # no GPU here
    rows = _rows(out)
    fwd = rows["attention_fwd-d128-causal-h100-b4-h48-s4096"]["baseline"]
    assert fwd == {"name": "flashinfer", "library": "FlashInfer", "function": FLASHINFER}
    assert rows["gemm-n128-k2048-h100-m8192"]["baseline"]["library"] == "cuBLAS"


def test_an_unknown_baseline_stops_collection(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTXBENCH_BASELINE", "flashinfr")
    result = project.runpytest_subprocess("tasks", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*--ptx-baseline=flashinfr: no task file declares a baseline 'flashinfr'*"])


def test_a_marker_chooses_for_its_tests(project: pytest.Pytester) -> None:
    (project.path / "tasks" / "test_marked.py").write_text(
        "import pytest\n\n@pytest.mark.ptxbench(baseline='flashinfer')\n"
        "def test_marked(ptx_case, ptx_bench):\n    ptx_bench.evaluate(ptx_case)\n"
    )
    out = project.path / "run"
    result = project.runpytest_subprocess("tasks/test_marked.py", *RUN[1:], f"--ptx-out={out}")
    result.assert_outcomes(skipped=2, failed=2)  # gemm declares no flashinfer: its tests fail, naming it
    result.stdout.fnmatch_lines(
        ["*ptxbench marker: *gemm.yaml: baselines: no baseline 'flashinfer' (declared: default)"]
    )
    assert {r["baseline"]["name"] for r in _rows(out).values()} == {"flashinfer"}
