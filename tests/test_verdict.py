"""How stage verdicts combine into a test outcome (DESIGN §3)."""

from __future__ import annotations

from pytest_ptxbench.verdict import GPU_STAGES, STAGES, Outcome, Status, Verdict, decide


def _all(status: Status, **overrides: Status) -> list[Verdict]:
    return [Verdict(s, overrides.get(s, status), f"{s} message") for s in STAGES]


def test_passes_only_when_every_stage_passed() -> None:
    assert decide(_all(Status.PASSED)).outcome is Outcome.PASSED
    assert decide(_all(Status.PASSED)[:-1]).outcome is Outcome.SKIPPED  # the time stage did not run


def test_any_failure_fails() -> None:
    decision = decide(_all(Status.PASSED, profile=Status.FAILED, sanitize=Status.TOOL_UNAVAILABLE))
    assert decision.outcome is Outcome.FAILED
    assert decision.reason == "profile failed: profile message"


def test_a_stage_that_could_not_run_skips_and_says_what_passed() -> None:
    static = [
        Verdict("build", Status.PASSED, "built"),
        Verdict("inspect", Status.PASSED, "ok", {"summary": "HGMMA.64x256x16.F32.BF16, UTMALDG.2D in gemm"}),
    ]
    gpu = [Verdict(s, Status.SKIPPED, "needs an sm_90 device (H100-class), found none") for s in GPU_STAGES]
    decision = decide(static + gpu)
    assert decision.outcome is Outcome.SKIPPED
    assert decision.reason == (
        "passed: build, inspect (HGMMA.64x256x16.F32.BF16, UTMALDG.2D in gemm); "
        "needs an sm_90 device (H100-class), found none"
    )
    assert decide(static + gpu, require_gpu=True).outcome is Outcome.FAILED


def test_tool_unavailable_never_counts_as_passed() -> None:
    decision = decide(_all(Status.PASSED, profile=Status.TOOL_UNAVAILABLE))
    assert decision.outcome is Outcome.SKIPPED
    assert "profile message" in decision.reason


def test_missing_stages_are_named() -> None:
    decision = decide([Verdict("build", Status.PASSED, "built")])
    assert decision.reason == "passed: build; inspect, check, profile, sanitize, time did not run"


def test_summary_table_shows_the_time_stage_figures() -> None:
    from pytest_ptxbench.summary import render, summary_row

    time = Verdict(
        "time",
        Status.PASSED,
        "ok",
        {"median_ms": 0.8112, "baseline_median_ms": 0.7415, "speedup": 0.914, "tflops": 741.3},
    )
    row = {
        "id": "gemm-n7168-k5120-h100-m8192",
        "task": "gemm-n7168-k5120",
        "target": "h100",
        "outcome": "passed",
        "verdicts": [v.to_json() for v in _all(Status.PASSED)[:-1]] + [time.to_json()],
    }
    header, line = render([summary_row(row)])
    assert header.split() == [
        "task",
        "target",
        "shape",
        *STAGES,
        "latency",
        "baseline",
        "speedup",
        "TFLOP/s",
        "outcome",
    ]
    assert line.split() == [
        "gemm-n7168-k5120",
        "h100",
        "m8192",
        *["ok"] * 6,
        "0.811",
        "ms",
        "0.742",
        "ms",
        "0.91x",
        "741",
        "passed",
    ]
