"""How stage verdicts combine into a test outcome (DESIGN §3)."""

from __future__ import annotations

import re

import pytest

from pytest_ptxbench.agent.trajectory import standing
from pytest_ptxbench.verdict import GPU_STAGES, STAGES, Outcome, Status, Verdict, decide, stage_statuses


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


def _on_shape(shape: str, check: Status = Status.PASSED) -> list[Verdict]:
    """The GPU stages on one shape as the pipeline leaves them: nothing after a check that did not pass."""
    if check is not Status.PASSED:
        return [Verdict("check", check, f"no reference for {shape}", {"shape": shape})]
    return [Verdict(s, Status.PASSED, s, {"shape": shape, "speedup": 1.5} if s == "time" else {}) for s in GPU_STAGES]


STATIC = [Verdict("build", Status.PASSED, "built"), Verdict("inspect", Status.PASSED, "opcodes found")]


@pytest.mark.parametrize("first", [True, False])
def test_a_stage_passes_only_when_it_passed_on_every_shape(first: bool) -> None:
    """A check that could not run on one shape and passed on another has not passed, whichever came last."""
    shapes = [_on_shape("m70", Status.TOOL_UNAVAILABLE), _on_shape("m8192")]
    verdicts = STATIC + [v for shape in (shapes if first else shapes[::-1]) for v in shape]
    assert stage_statuses(verdicts)["check"] is Status.TOOL_UNAVAILABLE
    assert stage_statuses(verdicts)["time"] is Status.PASSED
    decision = decide(verdicts)
    assert decision.outcome is Outcome.SKIPPED
    assert decision.reason == "passed: build, inspect, profile, sanitize, time; no reference for m70"
    assert decide(verdicts, require_gpu=True).outcome is Outcome.FAILED
    assert decide(STATIC + _on_shape("m70") + _on_shape("m8192")).outcome is Outcome.PASSED


def test_a_failure_on_any_shape_fails_the_stage() -> None:
    verdicts = STATIC + _on_shape("m70", Status.FAILED) + _on_shape("m8192")
    assert stage_statuses(verdicts)["check"] is Status.FAILED
    assert decide(verdicts) == decide(STATIC + _on_shape("m8192") + _on_shape("m70", Status.FAILED))
    assert decide(verdicts).outcome is Outcome.FAILED
    skipped = STATIC + [Verdict(s, Status.SKIPPED, "no GPU") for s in GPU_STAGES]
    assert stage_statuses([*skipped, Verdict("check", Status.FAILED, "wrong")])["check"] is Status.FAILED


def test_the_agent_never_ranks_a_kernel_whose_check_could_not_run_on_a_shape() -> None:
    """The trajectory's ranking goes through the same rule: such a kernel stands with the unjudged ones,
    below a kernel that passed every stage on every shape, however fast it was where it ran."""
    partly = STATIC + _on_shape("m70", Status.TOOL_UNAVAILABLE) + _on_shape("m8192")
    fully = STATIC + _on_shape("m70") + _on_shape("m8192")
    assert standing({"kernel": "a.cu", "verdicts": [v.to_json() for v in partly]}) == (2, 0.0)
    assert standing({"kernel": "b.cu", "verdicts": [v.to_json() for v in fully]}) == (3, pytest.approx(1.5))


def test_missing_stages_are_named() -> None:
    decision = decide([Verdict("build", Status.PASSED, "built")])
    assert decision.reason == "passed: build; inspect, check, profile, sanitize, time did not run"


def test_summary_table_shows_the_time_stage_figures() -> None:
    """Latency, baseline, speedup, the share of the speed of light reached (SOL) and TFLOP/s."""
    from pytest_ptxbench.summary import render, summary_row

    time = Verdict(
        "time",
        Status.PASSED,
        "ok",
        {
            "median_ms": 0.8112,
            "baseline_median_ms": 0.7415,
            "speedup": 0.914,
            "speed_of_light": 0.7496,
            "tflops": 741.3,
        },
    )
    row = {
        "id": "gemm-n7168-k5120-h100-m8192",
        "family": "gemm",
        "task": "gemm-n7168-k5120",
        "target": "h100",
        "outcome": "passed",
        "verdicts": [v.to_json() for v in _all(Status.PASSED)[:-1]] + [time.to_json()],
    }
    header, line = render([summary_row(row)])
    columns = {m.group(): m.start() for m in re.finditer(r"\S+", header)}  # name → where its cells start
    ends = [*list(columns.values())[1:], None]
    cells = {name: line[start:end].strip() for (name, start), end in zip(columns.items(), ends, strict=True)}
    assert list(columns)[: len(STAGES) + 10] == [
        "task", "target", "lang", "shape", *STAGES, "latency", "baseline", "speedup", "SOL", "TFLOP/s", "outcome",
    ]  # fmt: skip
    assert {name: cells[name] for name in ("task", "lang", "shape", *STAGES)} == {
        "task": "gemm-n7168-k5120", "lang": "cuda", "shape": "m8192", **dict.fromkeys(STAGES, "ok"),
    }  # fmt: skip
    triton = summary_row({**row, "id": "gemm-n7168-k5120-h100-triton-m8192", "lang": "triton"})
    assert (triton["lang"], triton["shape"]) == ("triton", "m8192")
    assert [cells[name] for name in ("latency", "baseline", "speedup", "SOL", "TFLOP/s", "outcome")] == [
        "0.811 ms", "0.742 ms", "0.91x", "75.0%", "741", "passed",
    ]  # fmt: skip


def test_the_summary_gives_each_familys_geometric_mean_over_the_tests_that_passed() -> None:
    from pytest_ptxbench.summary import family_means

    def row(family: str, shape: str, speedup: float | None, outcome: str = "passed", lang: str = "cuda") -> dict:
        return {"family": family, "task": f"{family}-x", "target": "h100", "lang": lang, "outcome": outcome,
                "speedup": speedup, "id": f"{family}-x-h100-{shape}"}  # fmt: skip

    rows = [row("gemm", "m1", 0.5), row("gemm", "m2", 2.0), row("gemm", "m3", 0.8), row("gemm", "m4", None, "failed")]
    rows += [row("gemm", "m1", 0.7, lang="triton"), row("attention_fwd", "s1", None, "skipped")]
    assert family_means(rows) == [
        "geometric-mean speedup gemm h100 cuda: 0.93x over 3 of 4 tests",
        "geometric-mean speedup gemm h100 triton: 0.70x over 1 of 1 tests",
    ]
