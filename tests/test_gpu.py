"""The GPU stages on a real H100-class device: the reference GEMM passes every stage, planted
candidates fail for the stated reason. Skipped with the reason on machines without such a device."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.device import detect_devices, device_for, missing_device, read_clocks
from pytest_ptxbench.pipeline import Pipeline
from pytest_ptxbench.rundir import RunDirectory
from pytest_ptxbench.settings import defaults
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family, Shape, Task
from pytest_ptxbench.verdict import Outcome, Status, Verdict, decide

from .conftest import PLANTED, REFERENCE_GEMM, TASKS

H100 = TARGETS["h100"]
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    devices = detect_devices()
    if device_for(H100, devices) is None:
        pytest.skip(missing_device(H100, devices))
    settings: dict[str, Any] = defaults()
    settings.update(runs=20, warmup=3, call_timeout=30, model="tests")
    made = Pipeline(RunDirectory(tmp_path_factory.mktemp("run")), lambda: devices, settings)
    yield made
    made.close()


def _task(family: Family, name: str) -> Task:
    return next(t for t in family.tasks if t.name == name)


def _run(
    pipeline: Pipeline, family: Family, source: str, task: str = "gemm-n128-k2048", m: int = 256
) -> dict[str, Verdict]:
    candidate = Candidate(task, "h100", source, "planted")
    shape = Shape({"M": m}, f"m{m}", hidden=False)
    verdicts = pipeline.evaluate(candidate, family, _task(family, task), H100, [shape])
    return {v.stage: v for v in verdicts}


def _no_opcodes(family: Family) -> Family:
    """The family with no required opcode, so SIMT-only planted kernels reach the GPU stages."""
    return dataclasses.replace(family, opcodes={"h100": ()})


def test_reference_gemm_passes_every_stage(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, gemm, REFERENCE_GEMM, task="gemm-n7168-k5120", m=8192)
    assert {s: v.status for s, v in verdicts.items()} == dict.fromkeys(
        ("build", "inspect", "check", "profile", "sanitize", "time"), Status.PASSED
    ), {s: v.message for s, v in verdicts.items()}
    assert verdicts["profile"].data["executed"]["HGMMA.*.F32.BF16"] > 0
    assert verdicts["time"].data["speedup"] > 0.5


def test_ragged_m_is_correct(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, gemm, REFERENCE_GEMM, task="gemm-n256-k7168", m=70)
    assert verdicts["check"].passed, verdicts["check"].message


@pytest.mark.parametrize("planted", ["never_launched_wgmma.cu", "dead_branch_wgmma.cu"])
def test_tensor_core_code_that_never_runs_fails_profile(pipeline: Pipeline, gemm: Family, planted: str) -> None:
    verdicts = _run(pipeline, gemm, (PLANTED / planted).read_text())
    assert verdicts["inspect"].passed and verdicts["check"].passed
    assert verdicts["profile"].status is Status.FAILED
    assert "HGMMA.*.F32.BF16, UTMALDG never executed in the candidate's kernels" in verdicts["profile"].message


def test_a_token_share_of_tensor_core_work_fails_profile(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, gemm, (PLANTED / "token_wgmma.cu").read_text())
    assert verdicts["inspect"].passed and verdicts["check"].passed, verdicts["check"].message
    profile = verdicts["profile"]
    assert profile.status is Status.FAILED
    assert all(n > 0 for n in profile.data["executed"].values()), profile.data["executed"]  # HGMMA and UTMALDG ran
    assert 0 < profile.data["tensor_flops"] < 1e-3 * profile.data["task_flops"]
    assert "of the task's FLOPs" in profile.message and "at least 50% is required" in profile.message
    assert "never executed" not in profile.message


def test_an_empty_profiler_capture_fails_profile(pipeline: Pipeline, gemm: Family) -> None:
    """No kernel at all, and no opcode required: only the empty capture itself can fail profile."""
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "computes_on_the_host.cu").read_text())
    assert verdicts["check"].passed, verdicts["check"].message
    profile = verdicts["profile"]
    assert profile.status is Status.FAILED, profile.message
    assert profile.message.startswith("empty ncu capture: no kernel was profiled")
    assert profile.data["ncu_errors"] == []  # not a tool error
    assert verdicts["time"].status is Status.FAILED
    assert "no kernel ran in timed runs" in verdicts["time"].message
    assert verdicts["time"].data["kernels"] == []
    assert decide(list(verdicts.values())).outcome is Outcome.FAILED


def test_work_on_another_stream_fails_time(pipeline: Pipeline, gemm: Family) -> None:
    escaped = REFERENCE_GEMM.replace("SMEM_BYTES, stream>>>", "SMEM_BYTES, cudaStreamPerThread>>>")
    assert escaped != REFERENCE_GEMM, "the reference's launch line changed: update this planted variant"
    verdicts = _run(pipeline, gemm, escaped)
    assert verdicts["check"].passed and verdicts["profile"].passed
    assert verdicts["time"].status is Status.FAILED
    assert "kernels ran on a stream other than the one the launcher is given" in verdicts["time"].message


def test_wrong_error_code_fails_check(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "wrong_error_code.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert "the call returned cudaErrorInvalidValue" in verdicts["check"].message


def test_out_of_bounds_write_fails_check(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "out_of_bounds_write.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert verdicts["check"].message == "the call wrote past the end of C"
    assert verdicts["check"].data["overruns"] == ["C"]


def test_a_hang_fails_that_candidate_only(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "infinite_loop.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert "no answer to 'check' within 30 s" in verdicts["check"].message
    after = _run(
        pipeline,
        _no_opcodes(gemm),
        (PLANTED / "wrong_error_code.cu").read_text().replace("return cudaErrorInvalidValue;", "return cudaSuccess;"),
    )
    assert after["check"].passed, after["check"].message


def test_clocks_are_read_as_found(pipeline: Pipeline) -> None:
    clocks = read_clocks()
    assert clocks, "nvidia-smi reported no clocks"
    first = next(iter(clocks.values()))
    maxima = [value for name, value in first.items() if name.startswith("clocks.max")]
    assert maxima and all(int(value.split()[0]) > 0 for value in maxima), first


def test_stage_logs_are_kept(pipeline: Pipeline) -> None:
    logs = Path(pipeline.run.path, "logs")
    assert list(logs.glob("*/*/profile/plan.ncu.csv")), "ncu's CSV is kept in the run directory"


@pytest.mark.parametrize(
    ("planted", "message", "unwritten", "changed"),
    [
        ("writes_nothing.cu", "elements of C never written", True, []),
        ("caches_by_pointer.cu", "elements of C never written", True, []),
        ("mutates_input.cu", "the call changed its inputs: A", False, ["A"]),
    ],
)
def test_output_and_input_cheats_fail_check(
    pipeline: Pipeline, gemm: Family, planted: str, message: str, unwritten: bool, changed: list[str]
) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / planted).read_text())
    assert verdicts["check"].status is Status.FAILED
    assert message in verdicts["check"].message
    assert any(c["unwritten"] for c in verdicts["check"].data["comparisons"]) is unwritten
    assert verdicts["check"].data["changed_inputs"] == changed


def test_all_zero_outputs_fail_check(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "writes_zeros.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert all(c["all_zero"] for c in verdicts["check"].data["comparisons"])
    assert "C is all zeros" in verdicts["check"].message


def test_a_kernel_special_cased_to_the_shapes_shown_fails_on_a_hidden_one(pipeline: Pipeline, gemm: Family) -> None:
    source = (PLANTED / "whole_tiles_only.cu").read_text()
    assert _run(pipeline, _no_opcodes(gemm), source, m=256)["check"].passed
    hidden = _run(pipeline, _no_opcodes(gemm), source, m=70)["check"]
    assert hidden.status is Status.FAILED
    assert all(c["unwritten"] == c["elements"] for c in hidden.data["comparisons"])  # M 70: no whole tile at all
    assert "elements of C never written" in hidden.message


def test_a_kernel_left_running_costs_the_candidate_not_the_baseline(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "heats_after_return.cu").read_text())
    time = verdicts["time"]
    assert time.passed, time.message
    assert time.data["median_ms"] > 10, time.data["median_ms"]  # the ~20 ms heater is in the candidate's span
    assert time.data["baseline_median_ms"] < 1, time.data["baseline_median_ms"]  # cuBLAS at M256: microseconds


def test_drifting_after_the_check_fails_time(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "drifts_after_checking.cu").read_text())
    assert verdicts["check"].passed, verdicts["check"].message
    assert verdicts["time"].status is Status.FAILED
    assert "outputs of timed runs are wrong" in verdicts["time"].message


def test_outputs_remembered_by_content_fail_time_under_the_floor(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(
        pipeline, _no_opcodes(gemm), (PLANTED / "caches_by_content.cu").read_text(), "gemm-n7168-k5120", 972
    )
    assert verdicts["check"].passed, verdicts["check"].message  # the fourth call's C is remembered, and right
    time = verdicts["time"]
    assert time.status is Status.FAILED
    assert "under the speed-of-light floor" in time.message
    assert "outputs of timed runs are wrong" not in time.message  # right, only impossibly fast
    assert time.data["median_ms"] < 0.9 * time.data["floor_ms"]


@pytest.mark.parametrize(
    ("planted", "wrong_on"),
    [
        ("packs_weights_once.cu", {"uniform", "spiky"}),  # B of the first set, reused
        ("clamps_inputs.cu", {"spiky"}),  # outliers saturate
    ],
)
def test_cheats_right_on_some_input_sets_fail_check_on_the_others(
    pipeline: Pipeline, gemm: Family, planted: str, wrong_on: set[str]
) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / planted).read_text())
    check = verdicts["check"]
    assert check.status is Status.FAILED
    comparisons = check.data["comparisons"]
    assert {c["label"] for c in comparisons if c["wrong"]} == {f"{name}, poison 0xFF" for name in wrong_on}
    assert not any(c["unwritten"] for c in comparisons), check.message
    assert "elements of C wrong; worst: C[" in check.message
    assert all(f"({name}, poison 0xFF)" in check.message for name in wrong_on), check.message


def test_a_write_into_the_checkout_fails_check_without_a_sandbox(
    pipeline: Pipeline, gemm: Family, tmp_path: Path
) -> None:
    """The allow-list bypassed (inspect's refusal of getenv and fopen set aside) and no sandbox: the guard
    sees the file the candidate left in the task catalogue."""
    from pytest_ptxbench.gpu import GpuStages
    from pytest_ptxbench.stages.build import build
    from pytest_ptxbench.stages.inspect import inspect

    candidate = Candidate("gemm-n128-k2048", "h100", (PLANTED / "writes_into_checkout.cu").read_text(), "planted")
    built = build(candidate, gemm.launcher, H100, tmp_path / "build", 300)
    refused = inspect(Path(built.data["library"]), H100, (), gemm.launcher.name, timeout=120)
    assert refused.status is Status.FAILED and {"getenv", "fopen"} <= set(refused.data["forbidden_imports"])
    stages = GpuStages({**pipeline.settings, "sandbox": "off"}, tmp_path / "run")
    planted = TASKS / "planted-by-a-candidate.txt"
    shape = Shape({"M": 256}, "m256", hidden=False)
    allowed = Verdict("inspect", Status.PASSED, "", refused.data)
    try:
        verdicts = stages.evaluate(candidate, gemm, _task(gemm, "gemm-n128-k2048"), H100, shape, [built, allowed])
        written = planted.is_file()
        planted.unlink(missing_ok=True)
        # judged again (cached profile and sanitize verdicts would not run it): the kernel stays rejected
        again = stages.evaluate(candidate, gemm, _task(gemm, "gemm-n128-k2048"), H100, shape, [built, allowed])
        ran_again = planted.is_file()
    finally:
        stages.close()
        planted.unlink(missing_ok=True)
    assert written
    assert [(v.stage, v.status) for v in verdicts] == [("check", Status.FAILED)]
    assert verdicts[0].data["checkout_changed"] == [str(planted)]
    assert verdicts[0].message == f"the checkout changed while the candidate ran: {planted}"
    assert again == verdicts and not ran_again  # rejected from memory, not by running it again
