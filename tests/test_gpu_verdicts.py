"""How the GPU stages decide, on recorded real output (ncu on the H200) and on constructed runs:
the parts that need no GPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from pytest_ptxbench.agent import feedback
from pytest_ptxbench.child import tracing, wire
from pytest_ptxbench.gpu import Prepared, compare_saved
from pytest_ptxbench.languages import CUDA, LANGUAGES
from pytest_ptxbench.parsers import ncu, sass
from pytest_ptxbench.stages import check, profile, timing
from pytest_ptxbench.task.catalogue import Family, Tolerance
from pytest_ptxbench.verdict import Status
from pytest_ptxbench.workers import NONCE_CHECKED, Child, ChildFailed, child_environment

from .conftest import DATA, ROOT

CORE = profile.Work(2 * 8192 * 7168 * 5120, 0.5)


def test_ncu_raw_csv_of_the_reference_gemm() -> None:
    [launch] = ncu.parse_raw_csv((DATA / "reference_gemm_core.ncu.csv").read_text())
    assert launch.kernel.startswith("_ZN45_GLOBAL__N_") and launch.kernel.endswith(
        "gemm_bf16_tn_kernelE14CUtensorMap_stS0_P13__nv_bfloat16iii"
    )
    assert launch.executed["HGMMA.64x256x16.F32.BF16"] == 4587520
    assert launch.executed["UTMALDG.2D"] == 286720
    assert 0.5 < launch.time_ms < 2.0
    # useful work: 4 warps per warpgroup instruction, 64*256*16*2 FLOPs each = 2*M*N*K at M8192 N7168 K5120
    assert launch.executed["HGMMA.64x256x16.F32.BF16"] // 4 * 64 * 256 * 16 * 2 == 2 * 8192 * 7168 * 5120


def test_profile_judgement() -> None:
    launches = ncu.parse_raw_csv((DATA / "reference_gemm_core.ncu.csv").read_text())
    own = {launches[0].kernel: "gemm_bf16_tn_kernel"}
    passed = profile._judge(launches, own, ("HGMMA.*.F32.BF16", "UTMALDG"), CORE, "2025.3.1", 1.0)
    assert passed.status is Status.PASSED and passed.data["executed"] == {
        "HGMMA.*.F32.BF16": 4587520,
        "UTMALDG": 286720,
    }
    assert passed.data["tensor_flops"] == CORE.flops and passed.data["simt_flops"] == 0
    assert passed.message.endswith("tensor cores did 100% of the FLOPs, CUDA cores 0%")
    foreign = profile._judge(launches, {}, ("HGMMA.*.F32.BF16",), CORE, "2025.3.1", 1.0)
    assert foreign.status is Status.FAILED and "kernels outside the candidate's module ran" in foreign.message
    assert foreign.data["foreign"] == [launches[0].kernel]
    simt = ncu.parse_raw_csv((DATA / "simt_gemm.ncu.csv").read_text())
    never = profile._judge(simt, {simt[0].kernel: "simt_gemm"}, ("HGMMA.*.F32.BF16", "UTMALDG"), CORE, "2025.3.1", 1.0)
    assert never.message == "HGMMA.*.F32.BF16, UTMALDG never executed in the candidate's kernels"


def test_useful_work_attribution() -> None:
    """The same recorded launch judged against a task 8x larger: the tensor cores did a token share."""
    launches = ncu.parse_raw_csv((DATA / "reference_gemm_core.ncu.csv").read_text())
    own = {launches[0].kernel: "gemm_bf16_tn_kernel"}
    token = profile._judge(launches, own, ("HGMMA.*.F32.BF16",), profile.Work(8 * CORE.flops, 0.5), "2025.3.1", 1.0)
    assert token.status is Status.FAILED
    assert (
        token.message == "the tensor cores did 12% of the task's FLOPs (6.01e+11 of 4.81e+12); at least 50% is required"
    )
    executed = {"HGMMA.64x8x16.F32.BF16": 8, "QGMMA.64x128x32.F32.E4M3.E4M3": 4, "LDG": 9}
    assert sass.tensor_flops(executed) == 2 * 2 * 64 * 8 * 16 + 1 * 2 * 64 * 128 * 32
    assert sass.tensor_flops({"UTCHMMA": 4, "FFMA": 100}) is None  # Blackwell: the shape is in a descriptor


def test_useful_work_both_ways() -> None:
    """Recorded on the H200: a SIMT GEMM at m256 n128 k2048 (2,097,152 warp-level FFMA = 2·M·N·K FLOPs). With no
    tensor-core requirement at all, the CUDA cores' share of the task's FLOPs still fails it."""
    launches = ncu.parse_raw_csv((DATA / "simt_gemm.ncu.csv").read_text())
    task = 2 * 256 * 128 * 2048
    assert sass.simt_flops(launches[0].executed) == task  # its HFMA2.MMA moves are not arithmetic
    judged = profile._judge(launches, {launches[0].kernel: "simt_gemm"}, (), profile.Work(task, 0.0), "2025.3.1", 1.0)
    assert judged.status is Status.FAILED
    assert judged.message == (
        "the CUDA cores' arithmetic 100% of the task's FLOPs (1.34e+08 of 1.34e+08); at most 25% may be CUDA-core work"
    )
    assert sass.simt_flops({"FFMA.FTZ": 1, "FADD": 2, "HFMA2": 1, "DFMA": 1, "MUFU.EX2": 9}) == 32 * (2 + 2 + 4 + 2)


def test_an_empty_capture_fails_whatever_the_exit_status() -> None:
    """Recorded on the H200 (ncu 2025.3.1): a program with no kernel, and one that printed `==ERROR==` lines
    itself and exited 3; only ncu's lines reach its log. A candidate can set the exit status, so neither is
    a tool failure; only ncu's own permission error is."""
    quiet = profile._empty((DATA / "ncu-no-kernel.log").read_text(), 0, "2025.3.1", 1.0)
    assert quiet.status is Status.FAILED and quiet.message == "empty ncu capture: no kernel was profiled"
    assert quiet.data["ncu_exit"] == 0 and quiet.data["ncu_errors"] == []
    exited = profile._empty((DATA / "ncu-exits-3.log").read_text(), 3, "2025.3.1", 1.0)
    assert exited.status is Status.FAILED
    assert exited.message == (
        "empty ncu capture: no kernel was profiled; ncu exited 3; The application returned an error code (3)."
    )
    assert exited.data["ncu_errors"] == ["The application returned an error code (3)."]
    assert exited.data["ncu_exit"] == 3
    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    unavailable = profile._empty(denied, 1, "2025.3.1", 1.0)
    assert unavailable.status is Status.TOOL_UNAVAILABLE and unavailable.message.startswith("ncu cannot run here")


@pytest.mark.parametrize(
    ("cell", "error"),
    [
        ("12 (HGMMA: nan; LDG: 12)", "NaN in the capture"),
        ("12 (HGMMA 12)", "unreadable opcode count"),
        ("13 (LDG: 12)", "add up to 12, not the total 13"),
    ],
)
def test_partial_or_nan_captures_are_errors(cell: str, error: str) -> None:
    with pytest.raises(ncu.NcuParseError, match=error):
        ncu.parse_instances(cell)


def test_an_empty_capture_has_no_launch() -> None:
    assert ncu.parse_raw_csv("==PROF== Disconnected from process 1\n") == []
    with pytest.raises(ncu.NcuParseError, match="column 'Kernel Name' missing"):
        ncu.parse_raw_csv('"ID","Process ID"\n"0","1"\n')


def _bf16(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_check_comparison() -> None:
    expected = np.random.default_rng(0).normal(size=(64, 32)).astype(np.float32) * 10
    tolerance = Tolerance(0.0625, 0.02)
    good = check.compare("C", "normal", _bf16(expected), "bf16", expected, tolerance, 0xFF)
    assert good.ok and good.wrong == 0
    got = _bf16(expected)
    got[3, 4] = 0xFFFF  # left poisoned
    got[5, 6] = _bf16(np.array([99.0]))[0]
    bad = check.compare("C", "normal", got, "bf16", expected, tolerance, 0xFF)
    assert (bad.unwritten, bad.wrong) == (1, 2)
    assert bad.worst[0].startswith("C[3, 4] = nan") and bad.worst[1].startswith("C[5, 6] = 99")
    zeros = check.compare("C", "normal", np.zeros_like(got), "bf16", expected, tolerance, 0xFF)
    assert zeros.all_zero
    verdict = check.verdict([good, bad], 1.0, ["A"], ["C"], 1.0)
    assert verdict.status is Status.FAILED
    assert verdict.message.startswith(
        "the call wrote past the end of C; the call changed its inputs: A; 1 of 2048 elements of C never written"
    )
    assert check.verdict([good], 1.0, [], [], 1.0).passed


def test_check_comparison_of_fp32_outputs() -> None:
    """fp32 outputs (attention's LSE) are compared by value; their bits only find the poison. (A version
    that cast the bits to float read 9.21299 as 1.09179e9 and failed every LSE on the H200.)"""
    expected = np.random.default_rng(2).normal(size=(3, 5000)).astype(np.float32) * 10
    tolerance = Tolerance(0.001, 0.001)
    good = check.compare("LSE", "normal", expected.copy(), "fp32", expected, tolerance, 0xFF)
    assert good.ok and (good.wrong, good.unwritten) == (0, 0) and good.max_abs_error == 0.0
    got = expected.copy()
    got.view(np.uint32)[1, 4321] = 0xFFFFFFFF  # left poisoned
    got[2, 7] += 1.0
    bad = check.compare("LSE", "normal", got, "fp32", expected, tolerance, 0xFF)
    assert (bad.unwritten, bad.wrong, bad.nonfinite) == (1, 2, 0)
    assert bad.worst[0].startswith("LSE[1, 4321] = nan") and bad.worst[1] == (
        f"LSE[2, 7] = {got[2, 7]:.6g}, expected {expected[2, 7]:.6g}"
    )


def test_a_matched_ratio_forgives_a_few_wrong_elements_never_a_nan() -> None:
    expected = np.random.default_rng(1).normal(size=(100, 100)).astype(np.float32)
    tolerance = Tolerance(0.03, 0.03)
    got = _bf16(expected)
    got[0, 0] = _bf16(np.array([expected[0, 0] + 1.0]))[0]
    one_off = check.compare("dQ", "spiky", got, "bf16", expected, tolerance, 0xFF)
    assert (one_off.wrong, one_off.nonfinite) == (1, 0)
    assert check.verdict([one_off], 0.9999, [], [], 1.0).passed
    assert not check.verdict([one_off], 1.0, [], [], 1.0).passed
    got[0, 0] = 0x7FC0  # a NaN the kernel wrote (not the poison)
    nan = check.compare("dQ", "spiky", got, "bf16", expected, tolerance, 0xFF)
    assert (nan.wrong, nan.nonfinite, nan.unwritten) == (1, 1, 0)
    verdict = check.verdict([nan], 0.5, [], [], 1.0)
    assert not verdict.passed
    assert verdict.data["comparisons"][0]["nonfinite"] == 1
    assert "1 of 10000 elements of dQ not finite" in verdict.message


def _run(index: int, span: float, kernels: list[str], event: float | None = None) -> dict[str, object]:
    return {
        "index": index,
        "span_ms": span,
        "event_ms": event if event is not None else span + 0.01,
        "kernels": [{"name": n, "ms": span} for n in kernels],
    }


def test_timing_problems() -> None:
    own = {"mine"}
    assert timing.problems_in([_run(0, 1.0, ["mine"])], own) == []
    found = timing.problems_in(
        [
            _run(0, 1.0, ["cublasGemm"]),
            _run(1, 0.0, []),
            _run(2, 2.0, ["mine"], event=1.0),
        ],
        own,
    )
    assert found == [
        "kernels not in the candidate's module ran while timing: cublasGemm",
        "no kernel ran in timed runs [1]",
        "kernels outlasted the timed region in runs [2]",
    ]
    named_like_the_hold = timing.problems_in([_run(0, 1.0, [tracing.HOLD])], {tracing.HOLD})
    assert named_like_the_hold == [f"a kernel is named {tracing.HOLD}, the name the harness reserves for its own"]


def _activity(kind: str, start_us: float, end_us: float, name: str = "") -> tracing.Activity:
    return tracing.Activity(kind, name or kind, int(start_us * 1000), int(end_us * 1000))


def test_the_span_holds_memsets_and_copies_at_either_end() -> None:
    """A call's memsets and copies are its work: the span runs from the first activity of any kind to the
    last, and the idle time is what none of them covers."""
    call = [
        _activity("memset", 0, 10),
        _activity("kernel", 12, 50, "gemm"),
        _activity("kernel", 20, 30, "gemm"),
        _activity("memcpy", 55, 60),
    ]
    assert tracing.span_ms(call) == pytest.approx(0.060)
    assert tracing.idle_ms(call) == pytest.approx(0.007)  # 10-12 and 50-55
    assert tracing.span_ms(call[1:3]) == pytest.approx(0.038) and tracing.idle_ms(call[1:3]) == 0


def test_kernels_no_kernel_node_launched_are_the_drivers() -> None:
    """In the runner, a kernel its graphs' kernel nodes do not name is the driver's (a memset or copy node run
    as a kernel): it stays in the span, off the list of the candidate's kernels."""
    call = [_activity("kernel", 0, 5, "memset32"), _activity("kernel", 5, 40, "gemm"), _activity("memcpy", 40, 42)]
    marked = tracing.driver_kernels(call, {"gemm"})
    assert [(a.kind, a.name) for a in marked] == [("driver", "memset32"), ("kernel", "gemm"), ("memcpy", "memcpy")]
    assert tracing.span_ms(marked) == pytest.approx(0.042)


def test_the_hold_is_never_the_calls_work() -> None:
    """Only the earliest kernel named like the hold is taken out: a later one counts, work that overlaps the
    hold counts from its own start, and a trace without the hold is refused."""
    hold = _activity("kernel", 0, 500, tracing.HOLD)
    early = _activity("kernel", 100, 700, "gemm")  # another stream's work that began during the hold
    late = _activity("kernel", 800, 900, tracing.HOLD)
    kept = tracing.without_hold([early, late, hold])
    assert kept == [early, late]
    assert tracing.span_ms(kept) == pytest.approx(0.8)
    with pytest.raises(LookupError, match=tracing.HOLD):
        tracing.without_hold([early, _activity("memset", 0, 500)])


def test_timing_verdict_and_the_speed_of_light_floor() -> None:
    flops, nbytes = 2 * 8192 * 7168 * 5120, 2 * (8192 * 5120 + 7168 * 5120 + 8192 * 7168)
    baseline = timing.Series([0.75] * 10, [0.8] * 10, [0.0] * 10)
    fair = timing.verdict(
        timing.Series([0.82] * 10, [0.9] * 10, [0.01] * 10), baseline, "cuBLAS", "h100", flops, nbytes, [], {}, 1.0
    )
    assert fair.passed and fair.data["speedup"] == pytest.approx(0.75 / 0.82)
    assert (fair.data["idle_median_ms"], fair.data["baseline_idle_median_ms"]) == (0.01, 0.0)
    impossible = timing.verdict(
        timing.Series([0.3] * 10, [0.4] * 10, [0.0] * 10), baseline, "cuBLAS", "h100", flops, nbytes, [], {}, 1.0
    )
    assert impossible.status is Status.FAILED and "under the speed-of-light floor 0.6080 ms" in impossible.message
    assert impossible.data["floor_ms"] == pytest.approx(flops / 989e12 * 1e3) and impossible.data["median_ms"] == 0.3


def test_the_time_verdict_carries_the_share_of_the_speed_of_light(gemm: Family) -> None:
    """The roofline's time (FLOPs at the tensor peak, or bytes at the bandwidth, whichever is longer) over the
    measured median, in the verdict's data only, and in the model's feedback."""
    flops, nbytes = 2 * 8192 * 7168 * 5120, 2 * (8192 * 5120 + 7168 * 5120 + 8192 * 7168)
    baseline = timing.Series([0.75] * 10, [0.8] * 10, [0.0] * 10)
    fair = timing.verdict(
        timing.Series([0.82] * 10, [0.9] * 10, [0.0] * 10), baseline, "cuBLAS", "h100", flops, nbytes, [], {}, 1.0
    )
    assert fair.data["speed_of_light"] == pytest.approx(flops / 989e12 * 1e3 / 0.82)  # compute-bound: 74.1%
    assert fair.message == "0.8200 ms (IQR 0.0000) against cuBLAS 0.7500 ms: 0.915x"  # the message is unchanged
    memory_bound = timing.verdict(
        timing.Series([0.02] * 10, [0.03] * 10, [0.0] * 10), baseline, "cuBLAS", "h100", 1e6, 48e6, [], {}, 1.0
    )
    assert memory_bound.data["speed_of_light"] == pytest.approx(48e6 / 4.8e12 * 1e3 / 0.02)  # 50%
    assert "  speed of light: 74.1% of the roofline" in feedback.render([fair], CUDA, gemm).splitlines()


def test_children_never_see_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "HF_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
    ):
        monkeypatch.setenv(name, "secret-value")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    env = child_environment(tmp_path)
    assert "secret-value" not in env.values()
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["HOME"] == str(tmp_path) and env["TMPDIR"] == str(tmp_path)


def test_a_child_answers_errors_and_dies_cleanly(tmp_path: Path) -> None:
    child = Child("capture", tmp_path, child_environment(tmp_path))
    try:
        reply = child.request({"op": "sets", "sets": []}, timeout=60)
        assert reply == {
            "ok": False,
            "error": "ValueError: unknown request 'sets'",
            "error_type": "ValueError",
            "fatal": False,
        }
        request = {"op": "capture", "cudart": str(tmp_path / "libcudart.so.13"), "host": "x.so", "entry": "f"}
        reply = child.request({**request, "params": [], "placements": [], "poison": 0xFF}, timeout=60)
        assert not reply["ok"] and reply["error"].startswith("OSError:")
        child.process.stdin.close()  # type: ignore[union-attr]
        child.process.wait(timeout=30)
        with pytest.raises(ChildFailed, match=r"the capture child died before the request \(exit code 0\)"):
            child.request({"op": "sets", "sets": []}, timeout=5)
    finally:
        child.close()


def test_raw_arrays_round_trip(tmp_path: Path) -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    wire.save(tmp_path / "x.bin", values)
    assert np.array_equal(wire.load(tmp_path / "x.bin", "fp32", (3, 4)), values)
    with pytest.raises(ValueError, match="48 bytes, expected 24 for bf16"):
        wire.load(tmp_path / "x.bin", "bf16", (3, 4))
    assert np.array_equal(wire.bf16_to_float(_bf16(values)), values)


def test_a_recheck_with_the_checked_bytes_reuses_that_comparison_and_any_other_is_compared(
    tmp_path: Path, gemm: Family
) -> None:
    """The time stage's rechecks: an output whose bytes are those the check compared for the same set gets the
    check's comparison (identical bytes, identical verdict); one differing bit is compared in full."""
    expected = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    wire.save(tmp_path / "ref" / "C.bin", expected)
    output = {"name": "C", "role": "output", "shape": [4, 8], "dtype": "bf16"}
    sets = [{"inputs": {}, "reference": {"C": str(tmp_path / "ref" / "C.bin")}}]
    prepared = Prepared("t/s", {}, [output], sets, ["normal"], {}, None, {})

    def saved(values: np.ndarray) -> dict[str, Path]:
        wire.save(tmp_path / "out" / "C.bin", values)
        return {"C": tmp_path / "out" / "C.bin"}

    [checked] = compare_saved(gemm, prepared, 0, saved(_bf16(expected)), "check", 0xFF)
    assert checked.passes(1.0) and len(checked.digest) == 64
    (tmp_path / "ref" / "C.bin").rename(tmp_path / "kept.bin")  # reused: the reference is not read again
    [again] = compare_saved(gemm, prepared, 0, saved(_bf16(expected)), "timed run 12", 0xFF, {"C": checked})
    assert again == dataclasses.replace(checked, label="timed run 12")
    (tmp_path / "kept.bin").rename(tmp_path / "ref" / "C.bin")
    off = _bf16(expected)
    off[2, 3] ^= 0x4000  # one element far off
    [compared] = compare_saved(gemm, prepared, 0, saved(off), "timed run 13", 0xFF, {"C": checked})
    assert compared.digest != checked.digest and compared.wrong == 1 and not compared.passes(1.0)
    assert not (tmp_path / "out" / "C.bin").exists()  # read once, then deleted


def test_pytest_benchmark_records_the_replayed_latencies(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark switches itself off under xdist
    pytester.makepyfile(
        """
        import pytest
        from pytest_ptxbench.benchmarking import ReplayClock, record
        from pytest_ptxbench.verdict import Status, Verdict

        CLOCK = ReplayClock()

        @pytest.mark.benchmark(timer=CLOCK)
        def test_timed(benchmark):
            data = {"spans_ms": [1.0, 3.0, 2.0], "baseline": "cuBLAS", "baseline_median_ms": 1.5,
                    "baseline_iqr_ms": 0.1, "speedup": 0.75, "tflops": 10.0, "floor_ms": 0.1}
            record(benchmark, CLOCK, Verdict("time", Status.PASSED, "ok", data))
        """
    )
    result = pytester.runpytest_subprocess("--benchmark-json=out.json")
    result.assert_outcomes(passed=1)
    [bench] = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    assert bench["stats"]["rounds"] == 3
    assert (bench["stats"]["min"], bench["stats"]["median"], bench["stats"]["max"]) == pytest.approx(
        (0.001, 0.002, 0.003)
    )
    assert bench["extra_info"]["speedup"] == 0.75 and bench["extra_info"]["baseline"] == "cuBLAS"


def test_the_triton_capture_child_answers_what_it_does_not_know_without_dying(tmp_path: Path) -> None:
    """The protocol of `child/triton_capture.py` on CPU: an unknown request is a non-fatal error (capturing
    itself needs torch and a GPU: tests/test_gpu.py), and every reply must echo the request's nonce, as for
    any child that runs candidate code."""
    assert {language.capture_child for language in LANGUAGES.values()} <= NONCE_CHECKED
    child = Child("triton_capture", tmp_path, child_environment(tmp_path))
    try:
        reply = child.request({"op": "load"}, timeout=60)
        assert reply == {
            "ok": False,
            "error": "ValueError: unknown request 'load'",
            "error_type": "ValueError",
            "fatal": False,
        }
        assert child.alive
    finally:
        child.close()
