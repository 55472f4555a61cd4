"""The GPU stages on a real H100-class device: the reference GEMM passes every stage, planted
candidates fail for the stated reason. Skipped with the reason on machines without such a device."""

from __future__ import annotations

import ctypes
import dataclasses
import statistics
from collections.abc import Iterator
from pathlib import Path
from time import sleep
from typing import Any

import pytest

from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.child.tracing import Tracer
from pytest_ptxbench.device import detect_devices, device_for, missing_device, read_clocks
from pytest_ptxbench.pipeline import Pipeline
from pytest_ptxbench.rundir import RunDirectory
from pytest_ptxbench.settings import defaults
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family, Shape, Task, load_family
from pytest_ptxbench.toolchain import find_library
from pytest_ptxbench.verdict import Outcome, Status, Verdict, decide

from .conftest import DESCRIPTORS_CACHED_ON_M, ON_ANOTHER_STREAM, PLANTED, REFERENCE_GEMM, TASKS, planted_variant
from .gemm_plans import PAIRS, SPLITS, WIDE, Case

H100 = TARGETS["h100"]
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def devices() -> list[Any]:
    found = detect_devices()
    if device_for(H100, found) is None:
        pytest.skip(missing_device(H100, found))
    return found


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, devices: list[Any]) -> Iterator[Pipeline]:
    settings: dict[str, Any] = defaults()
    settings.update(runs=20, warmup=3, call_timeout=30, model="tests")
    made = Pipeline(RunDirectory(tmp_path_factory.mktemp("run")), lambda: devices, settings)
    yield made
    made.close()


def _task(family: Family, name: str) -> Task:
    return next(t for t in family.tasks if t.name == name)


def _run(
    pipeline: Pipeline, family: Family, source: str, task: str = "gemm-n128-k2048", m: int = 256, lang: str = "cuda"
) -> dict[str, Verdict]:
    return _evaluate(pipeline, family, source, task, Shape({"M": m}, f"m{m}", hidden=False), lang)


def _evaluate(
    pipeline: Pipeline, family: Family, source: str, task: str, shape: Shape, lang: str = "cuda"
) -> dict[str, Verdict]:
    candidate = Candidate(task, "h100", source, "planted", lang)
    verdicts = pipeline.evaluate(candidate, family, _task(family, task), H100, [shape])
    return {v.stage: v for v in verdicts}


DECODE_SOURCE = (TASKS / "reference" / "h100" / "gqa_paged_decode.cu").read_text()
SKEWED = Shape({"B": 7, "L": 3001, "lens": "skewed"}, "b7-l3001-skewed", hidden=True)


@pytest.fixture(scope="module")
def decode() -> Family:
    return load_family(TASKS / "gqa_paged_decode.yaml")


@pytest.mark.parametrize("task", ["gqa_paged_decode-h32-kv8-d128-ps1", "gqa_paged_decode-h32-kv4-d128-ps64"])
def test_reference_paged_decode_passes_every_stage_on_skewed_lengths(
    pipeline: Pipeline, decode: Family, task: str
) -> None:
    """Page tables reach the launcher as host arrays (it plans its split from them) and the device as inputs;
    FlashInfer is the baseline where it is installed (else the time stage is skipped, saying so)."""
    verdicts = _evaluate(pipeline, decode, DECODE_SOURCE, task, SKEWED)
    expected = ("build", "inspect", "check", "profile", "sanitize")
    assert {s: verdicts[s].status for s in expected} == dict.fromkeys(expected, Status.PASSED), "; ".join(
        f"{s}: {v.message}" for s, v in verdicts.items() if not v.passed
    )
    assert verdicts["time"].status in (Status.PASSED, Status.SKIPPED), verdicts["time"].message
    assert verdicts["profile"].data["executed"]["UBLKCP.S.G|UTMALDG"] > 0


def test_a_decode_that_assumes_a_sequences_pages_are_contiguous_fails_check(pipeline: Pipeline, decode: Family) -> None:
    """Which pages hold a sequence is drawn from the run's seed: reading the pages after its first is wrong."""
    lookup = "const int page = __ldg(a.indices + c.pbase + page_idx);"
    assert lookup in DECODE_SOURCE
    contiguous = DECODE_SOURCE.replace(lookup, "const int page = __ldg(a.indices + c.pbase) + page_idx;")
    verdicts = _evaluate(pipeline, decode, contiguous, "gqa_paged_decode-h32-kv8-d128-ps64", SKEWED)
    assert verdicts["inspect"].passed, verdicts["inspect"].message
    assert verdicts["check"].status is Status.FAILED, verdicts["check"].message


@pytest.fixture(scope="module")
def attention_fwd() -> Family:
    return load_family(TASKS / "attention_fwd.yaml")


@pytest.mark.parametrize(
    ("task", "batch", "length"),
    [
        ("attention_fwd-d128-causal", 1, 512),
        ("attention_fwd-d64-full", 1, 512),
        ("attention_fwd-d64-causal", 16, 512),
        ("attention_fwd-d64-causal", 16, 576),
    ],
)
def test_reference_attention_forward_passes_every_stage_with_persistent_ctas(
    pipeline: Pipeline, attention_fwd: Family, task: str, batch: int, length: int
) -> None:
    """More tiles than the H200's 132 SMs: one CTA per SM takes tiles from a counter and hands each to its consumer
    warpgroups through the workspace. Racecheck included: it reported the hand-over through shared memory as a race.
    d64 causal at S 512 runs two consumer warpgroups (three would pad 512 rows to 576); d64 without the mask, and
    causal at S 576 (tiles of two to five key blocks), run three, where a wrong order of their last named-barrier
    hand-off deadlocked on the H200 (causal at S 512, once within 41 launches, once within 2,010)."""
    source = (TASKS / "reference" / "h100" / "attention_fwd.cu").read_text()
    shape = Shape({"B": batch, "H": 48, "S": length}, f"b{batch}-h48-s{length}", hidden=True)
    verdicts = _evaluate(pipeline, attention_fwd, source, task, shape)
    assert {s: v.status for s, v in verdicts.items()} == dict.fromkeys(
        ("build", "inspect", "check", "profile", "sanitize", "time"), Status.PASSED
    ), "; ".join(f"{s}: {v.message}" for s, v in verdicts.items() if not v.passed)


@pytest.fixture(scope="module")
def attention_bwd() -> Family:
    return load_family(TASKS / "attention_bwd.yaml")


def test_reference_attention_backward_overlaps_its_launches_and_passes_every_stage(
    pipeline: Pipeline, attention_bwd: Family
) -> None:
    """Its second and third kernels are programmatic dependent launches: the capture reads the programmatic edges
    from the graph, the runner replays them (and refuses a replayed graph that lost one), and every stage passes
    with the kernels overlapping."""
    source = (TASKS / "reference" / "h100" / "attention_bwd.cu").read_text()
    shape = Shape({"B": 2, "H": 8, "S": 1000}, "b2-h8-s1000", hidden=True)
    verdicts = _evaluate(pipeline, attention_bwd, source, "attention_bwd-d128-causal", shape)
    assert {s: v.status for s, v in verdicts.items()} == dict.fromkeys(
        ("build", "inspect", "check", "profile", "sanitize", "time"), Status.PASSED
    ), "; ".join(f"{s}: {v.message}" for s, v in verdicts.items() if not v.passed)
    early = verdicts["check"].data["early_launches"]
    assert [("attn_bwd_dq" in n, "attn_bwd_main" in n) for n in early] == [(True, False), (False, True)], early


def _no_opcodes(family: Family) -> Family:
    """The family with no required opcode, so SIMT-only planted kernels reach the GPU stages."""
    return dataclasses.replace(family, opcodes={"h100": ()})


def test_reference_gemm_passes_every_stage(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, gemm, REFERENCE_GEMM, task="gemm-n7168-k5120", m=8192)
    assert {s: v.status for s, v in verdicts.items()} == dict.fromkeys(
        ("build", "inspect", "check", "profile", "sanitize", "time"), Status.PASSED
    ), "; ".join(f"{s}: {v.message}" for s, v in verdicts.items() if not v.passed)
    assert verdicts["profile"].data["executed"]["HGMMA.*.F32.BF16"] > 0
    assert verdicts["time"].data["speedup"] > 0.5
    # deterministic: every rechecked run's C has the bytes the check compared, so none is compared again
    assert verdicts["time"].data["rechecks_as_checked"] == len(verdicts["time"].data["rechecked"]) == 10
    if verdicts["check"].data["sandbox"].startswith("network and process namespaces"):  # root with unshare
        for stage in ("profile", "sanitize"):  # the tools replay in the namespaces too
            assert verdicts[stage].data["sandbox"].startswith("network and process namespaces"), stage
    time, check = verdicts["time"].data, verdicts["check"].data
    print(  # the figures of record for MEASUREMENTS.md (pytest -rP shows them)
        f"core GEMM: {time['median_ms']:.4f} ms vs cuBLAS {time['baseline_median_ms']:.4f} ms ({time['speedup']:.3f}x);"
        f" capture {check['capture_seconds']:.1f} s, runner start {check['runner_seconds']:.1f} s; stage seconds "
        + ", ".join(f"{s} {v.seconds:.1f}" for s, v in verdicts.items())
        + f"; GPU stages {sum(v.seconds for s, v in verdicts.items() if s not in ('build', 'inspect')):.1f} s"
        + f"; build sandbox: {verdicts['build'].data.get('sandbox')}"
    )


def test_reference_triton_gemm_passes_every_stage(pipeline: Pipeline, gemm: Family) -> None:
    """The Triton reference through capture (its `run` in the Triton capture child) and replay of the cubins the
    build produced: every stage, at the core shape."""
    source = (TASKS / "reference" / "h100" / "gemm.py").read_text()
    verdicts = _run(pipeline, gemm, source, task="gemm-n7168-k5120", m=8192, lang="triton")
    assert {s: v.status for s, v in verdicts.items()} == dict.fromkeys(
        ("build", "inspect", "check", "profile", "sanitize", "time"), Status.PASSED
    ), "; ".join(f"{s}: {v.message}" for s, v in verdicts.items() if not v.passed)
    built = {c["sha256"] for c in verdicts["inspect"].data["cubins"]}
    assert verdicts["profile"].data["executed"]["HGMMA.*.F32.BF16"] > 0
    time, check = verdicts["time"].data, verdicts["check"].data
    print(
        f"core GEMM, Triton: {time['median_ms']:.4f} ms vs cuBLAS {time['baseline_median_ms']:.4f} ms"
        f" ({time['speedup']:.3f}x); capture {check['capture_seconds']:.1f} s, runner start"
        f" {check['runner_seconds']:.1f} s; {len(built)} cubins built; stage seconds "
        + ", ".join(f"{s} {v.seconds:.1f}" for s, v in verdicts.items())
    )


def test_a_triton_candidate_that_launches_a_torch_kernel_fails_check(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(
        pipeline, _no_opcodes(gemm), (PLANTED / "triton_launches_torch.py").read_text(), m=256, lang="triton"
    )
    assert verdicts["build"].passed and verdicts["inspect"].passed
    assert verdicts["check"].status is Status.FAILED
    assert "kernels not in the candidate's own module were launched" in verdicts["check"].message


@pytest.mark.parametrize("case", SPLITS.values(), ids=SPLITS.keys())
def test_the_large_gemm_kernels_split_k_passes_every_stage(pipeline: Pipeline, gemm: Family, case: Case) -> None:
    """The reference's three split-K reductions on an H100 or H200 (132 SMs: the launcher picks them at these shapes,
    as the captured launches show), every stage: right on every input set and placement, on the rechecked timed
    runs, and under the sanitizers (the cluster split at M 289, the other two at M 200)."""
    verdicts = _run(pipeline, case.family(gemm), REFERENCE_GEMM, task=case.task, m=case.m)
    _assert_every_stage_passed(verdicts)
    assert _plan(verdicts) == case.plan


@pytest.mark.parametrize("case", PAIRS.values(), ids=PAIRS.keys())
def test_the_narrow_gemm_kernels_multicast_pairs_pass_every_stage(pipeline: Pipeline, gemm: Family, case: Case) -> None:
    """The BN = 128 kernels' multicast pairs (the launcher picks them at these shapes where 132 SMs take the pairs'
    clusters of two at once), every stage; the sanitizers' M 200 runs 128-row pairs at n6144-k4096 (96 tiles)."""
    verdicts = _run(pipeline, gemm, REFERENCE_GEMM, task=case.task, m=case.m)
    _assert_every_stage_passed(verdicts)
    assert _plan(verdicts) == case.plan


@pytest.mark.parametrize("case", WIDE.values(), ids=WIDE.keys())
def test_the_wide_gemm_kernel_passes_every_stage(pipeline: Pipeline, gemm: Family, case: Case) -> None:
    """The reference's 256x160 kernel (the launcher picks it where its tiles fill 132 SMs better than 128x256 ones),
    every stage, the sanitizers at the same M: rows past M and, at N 2048, columns past N."""
    verdicts = _run(pipeline, case.family(gemm), REFERENCE_GEMM, task=case.task, m=case.m)
    _assert_every_stage_passed(verdicts)
    assert _plan(verdicts) == case.plan


def _plan(verdicts: dict[str, Verdict]) -> str:
    """The reference GEMM's launches as captured, in scripts/gemm_plans.py's words."""
    names = {
        "gemm_bf16_tn_kernel": "large",
        "gemm_wide_kernel": "wide",
        "ILi1ELi8E": "narrow<1, 8>",
        "ILi2ELi5E": "narrow<2, 5>",
    }
    return "; ".join(
        f"{next((v for k, v in names.items() if k in op['name']), op['name'])} grid {op['grid'][0]} "
        f"cluster {op['cluster'][0]}"
        if op["op"] == "kernel"
        else op["op"]
        for op in verdicts["check"].data["launches"]
    )


def _assert_every_stage_passed(verdicts: dict[str, Verdict]) -> None:
    assert {s: v.status for s, v in verdicts.items()} == dict.fromkeys(
        ("build", "inspect", "check", "profile", "sanitize", "time"), Status.PASSED
    ), "; ".join(f"{s}: {v.message}" for s, v in verdicts.items() if not v.passed)


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


def test_decoy_tensor_core_work_fails_profile(pipeline: Pipeline, gemm: Family) -> None:
    """HGMMA for 105% of the task's FLOPs on data that never reaches C, while SIMT code computes C."""
    verdicts = _run(pipeline, gemm, (PLANTED / "decoy_wgmma.cu").read_text())
    assert verdicts["inspect"].passed and verdicts["check"].passed, verdicts["check"].message
    profile = verdicts["profile"]
    assert profile.status is Status.FAILED, profile.message
    assert profile.data["tensor_flops"] >= profile.data["task_flops"]  # the tensor-core share alone would pass
    assert profile.data["simt_flops"] >= profile.data["task_flops"]
    assert "at most 25% may be CUDA-core work" in profile.message


def test_host_work_fails_the_capture(pipeline: Pipeline, gemm: Family) -> None:
    """C computed on the host: its copies to and from the device cannot be captured, and replay runs no host
    code, so the launcher's launches cannot be described: check fails before anything is replayed."""
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "computes_on_the_host.cu").read_text())
    check = verdicts["check"]
    assert check.status is Status.FAILED, check.message
    assert check.data["stage"] == "capture"
    assert check.message == "the launcher copied into host memory", check.message
    assert set(verdicts) == {"build", "inspect", "check"}
    assert decide(list(verdicts.values())).outcome is Outcome.FAILED


def test_work_on_another_stream_is_never_replayed(pipeline: Pipeline, gemm: Family) -> None:
    """Every launch of the reference on the per-thread stream (conftest.ON_ANOTHER_STREAM)."""
    escaped = planted_variant(ON_ANOTHER_STREAM)
    verdicts = _run(pipeline, gemm, escaped)
    assert verdicts["check"].status is Status.FAILED
    assert "the launcher launched no kernel" in verdicts["check"].message


def test_descriptors_cached_by_shape_fail_check_at_the_second_placement(pipeline: Pipeline, gemm: Family) -> None:
    """TMA descriptors cached on M alone (a public kernel does this): right for the buffers of the first call,
    stale for any others. Captured at two placements in one process, the second placement's launches still
    point at the first placement's buffers, which hold poison while the second is checked."""
    verdicts = _run(pipeline, gemm, planted_variant(DESCRIPTORS_CACHED_ON_M))
    check = verdicts["check"]
    assert check.status is Status.FAILED, check.message
    wrong = {c["label"] for c in check.data["comparisons"] if c["wrong"] or c["unwritten"] or c["nonfinite"]}
    assert wrong == {"normal, placement 1, poison 0x7F"}, check.message


def test_a_far_write_off_the_sanitizer_shape_faults_in_check(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "writes_far_off_the_sanitizer_shape.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert "cudaErrorIllegalAddress" in verdicts["check"].message, verdicts["check"].message


def test_wrong_error_code_fails_check(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "wrong_error_code.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert "the launcher returned cudaErrorInvalidValue" in verdicts["check"].message


def test_out_of_bounds_write_fails_check(pipeline: Pipeline, gemm: Family) -> None:
    """C of m256 n128 holds a whole number of 256-byte blocks: it ends exactly where its mapping ends, so the
    element past it is unmapped memory and the write faults."""
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "out_of_bounds_write.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert "cudaErrorIllegalAddress" in verdicts["check"].message, verdicts["check"].message


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
    assert list(logs.glob("*/*/profile/*/plan.ncu.csv")), "ncu's CSV is kept in the run directory"


@pytest.mark.parametrize(
    ("planted", "message"),
    [
        # nothing captured at all; an input zeroed by a memset the launcher puts on its stream
        ("writes_nothing.cu", "the launcher launched no kernel (placement 0)"),
        ("mutates_input.cu", "a memset writes into A, which the launcher may only read"),
    ],
)
def test_output_and_input_cheats_fail_at_capture(pipeline: Pipeline, gemm: Family, planted: str, message: str) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / planted).read_text())
    assert verdicts["check"].status is Status.FAILED
    assert verdicts["check"].data["stage"] == "capture"
    assert message in verdicts["check"].message, verdicts["check"].message


@pytest.mark.parametrize("planted", ["caches_by_pointer.cu", "drifts_after_checking.cu"])
def test_host_side_state_is_never_replayed(pipeline: Pipeline, gemm: Family, planted: str) -> None:
    """A cache keyed on the output pointer, a call counter that halves the work after the check's calls: both
    live in host code, which runs only at capture (twice, at two placements), so every replay, timed ones
    included, does the whole work: the cheat is gone and the kernel is judged as what it is."""
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / planted).read_text())
    assert verdicts["check"].passed, verdicts["check"].message
    assert verdicts["time"].passed, verdicts["time"].message
    assert len(verdicts["time"].data["rechecked"]) == 10


def test_all_zero_outputs_fail_check(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "writes_zeros.cu").read_text())
    assert verdicts["check"].status is Status.FAILED
    assert all(c["all_zero"] for c in verdicts["check"].data["comparisons"])
    assert "C is all zeros" in verdicts["check"].message


def test_a_candidate_that_needs_a_zeroed_workspace_fails_check(pipeline: Pipeline, gemm: Family) -> None:
    """Split-K atomics into the workspace, never cleared: the harness poisons the workspace before every call,
    so the clearing a vendor library pays for inside its call cannot be left to the harness's setup, outside
    the timed span. The same kernel clearing it on its stream passes."""
    source = (PLANTED / "needs_a_zeroed_workspace.cu").read_text()
    clear = "if (cudaMemsetAsync(acc, 0, 4 * (size_t)M * N, stream)) return cudaGetLastError();"
    cleared = source.replace("// CLEAR", clear)
    assert _run(pipeline, _no_opcodes(gemm), cleared)["check"].passed
    check = _run(pipeline, _no_opcodes(gemm), source)["check"]
    assert check.status is Status.FAILED
    comparisons = check.data["comparisons"]
    assert comparisons and all(c["wrong"] or c["nonfinite"] or c["unwritten"] for c in comparisons), check.message


def test_a_kernel_special_cased_to_the_shapes_shown_fails_on_a_hidden_one(pipeline: Pipeline, gemm: Family) -> None:
    source = (PLANTED / "whole_tiles_only.cu").read_text()
    assert _run(pipeline, _no_opcodes(gemm), source, m=256)["check"].passed
    hidden = _run(pipeline, _no_opcodes(gemm), source, m=70)["check"]
    assert hidden.status is Status.FAILED  # M 70: no whole tile at all, so nothing is launched
    assert hidden.message.startswith("the launcher launched no kernel"), hidden.message


def test_a_kernel_left_running_costs_the_candidate_not_the_baseline(pipeline: Pipeline, gemm: Family) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / "heats_after_return.cu").read_text())
    time = verdicts["time"]
    assert time.passed, time.message
    assert time.data["median_ms"] > 10, time.data["median_ms"]  # the ~20 ms heater is in the candidate's span
    assert time.data["baseline_median_ms"] < 1, time.data["baseline_median_ms"]  # cuBLAS at M256: microseconds


@pytest.mark.parametrize("where", ["before", "after"])
def test_memsets_and_copies_at_the_ends_of_a_call_are_timed(pipeline: Pipeline, gemm: Family, where: str) -> None:
    """A launcher that clears and copies its workspace 100 times before its kernels, or after them: those
    memsets and copies are the call's work, and the span holds them (it held kernels only before)."""
    source = (PLANTED / "needs_a_zeroed_workspace.cu").read_text()
    chores = (
        "for (int r = 0; r < 100; ++r) {"
        " cudaMemsetAsync(acc, 0, 4 * (size_t)M * N, stream);"
        " cudaMemcpyAsync(acc, acc + (size_t)M * N / 2, 2 * (size_t)M * N, cudaMemcpyDeviceToDevice, stream); }"
    )
    if where == "before":
        source = source.replace("// CLEAR", chores)
    else:
        clear = "cudaMemsetAsync(acc, 0, 4 * (size_t)M * N, stream);"
        source = source.replace("// CLEAR", clear).replace(
            "    return cudaGetLastError();\n}", f"    {chores}\n    return cudaGetLastError();\n}}"
        )
    assert chores in source
    time = _run(pipeline, _no_opcodes(gemm), source)["time"]
    assert time.passed, time.message
    # 200 memsets and copies of 128 KiB, at a microsecond or more each; the two kernels take tens of microseconds
    assert time.data["median_ms"] > 0.15, time.data


@pytest.fixture(scope="module")
def tracer(devices: list[Any]) -> Tracer:
    """One CUPTI tracer for this process (CUPTI takes one set of activity callbacks per process)."""
    return Tracer()


@pytest.mark.parametrize(("hold_ns", "idle"), [(0, "the pause"), (500_000, "none")])
def test_the_host_between_a_calls_launches_is_not_timed(tracer: Tracer, hold_ns: int, idle: str) -> None:
    """A call that pauses on the host between two launches: with no hold the pause is idle time inside the
    span; with the hold the whole call is enqueued before any of it runs, and the pause is gone."""
    from pytest_ptxbench.child.cudart import Runtime
    from pytest_ptxbench.child.timing import Clock

    library = find_library("libcudart.so.13")
    assert library is not None
    runtime = Runtime(library)
    nbytes = 1 << 20
    buffer, stream = runtime.malloc(nbytes), runtime.stream()
    clock = Clock(runtime, tracer, stream, hold_ns=hold_ns)

    def call() -> int:
        first = runtime.lib.cudaMemsetAsync(
            ctypes.c_void_p(buffer), 0, ctypes.c_size_t(nbytes), ctypes.c_void_p(stream)
        )
        sleep(0.0003)
        return int(
            first
            or runtime.lib.cudaMemsetAsync(ctypes.c_void_p(buffer), 1, ctypes.c_size_t(nbytes), ctypes.c_void_p(stream))
        )

    runs = clock.runs(20, 0, lambda i: None, call)
    assert all(r["kernels"] == [] for r in runs)  # the hold is taken out; the memsets are no kernels
    median_idle = statistics.median(r["idle_ms"] for r in runs)
    if idle == "the pause":
        assert median_idle > 0.2, [r["idle_ms"] for r in runs]
    else:
        assert median_idle < 0.1, [r["idle_ms"] for r in runs]


@pytest.mark.parametrize("calls_before_timing", [4, 0])
def test_a_device_side_call_counter_fails_time(pipeline: Pipeline, gemm: Family, calls_before_timing: int) -> None:
    """Full work only on a fixed schedule's rechecked runs: tuned to the check's calls coming first (4), or
    to the module loaded anew for timing (0). The secret recheck schedule finds the wrong runs either way."""
    source = (PLANTED / "counts_calls.cu").read_text()
    tuned = source.replace("#define CALLS_BEFORE_TIMING 4", f"#define CALLS_BEFORE_TIMING {calls_before_timing}")
    verdicts = _run(pipeline, _no_opcodes(gemm), tuned)
    assert verdicts["check"].passed, verdicts["check"].message
    time = verdicts["time"]
    assert time.status is Status.FAILED
    assert "outputs of timed runs are wrong" in time.message
    assert len(time.data["rechecked"]) == 10


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
        # B packed by the first capture's launches only: at the second placement the launches reuse the copy
        # the first placement's last run left (the spiky set's B)
        ("packs_weights_once.cu", {"normal, placement 1, poison 0x7F"}),
        ("clamps_inputs.cu", {"spiky, placement 0, poison 0xFF"}),  # outliers saturate
    ],
)
def test_cheats_right_on_some_input_sets_fail_check_on_the_others(
    pipeline: Pipeline, gemm: Family, planted: str, wrong_on: set[str]
) -> None:
    verdicts = _run(pipeline, _no_opcodes(gemm), (PLANTED / planted).read_text())
    check = verdicts["check"]
    assert check.status is Status.FAILED
    comparisons = check.data["comparisons"]
    assert {c["label"] for c in comparisons if c["wrong"]} == wrong_on
    assert not any(c["unwritten"] for c in comparisons), check.message
    assert "elements of C wrong; worst: C[" in check.message
    assert all(f"({label})" in check.message for label in wrong_on), check.message


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
    refused = inspect(Path(built.data["host"]), built.data["cubins"], H100, (), gemm.launcher.name, timeout=120)
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


def test_work_left_to_a_helper_thread_is_never_replayed(pipeline: Pipeline, gemm: Family, tmp_path: Path) -> None:
    """The allow-list set aside (inspect refuses pthread_create): the thread's half of C is launched after the
    capture, in the capture child only; the replays write the first half, so check finds the rest unwritten."""
    from pytest_ptxbench.gpu import GpuStages
    from pytest_ptxbench.stages.build import build
    from pytest_ptxbench.stages.inspect import inspect

    candidate = Candidate("gemm-n128-k2048", "h100", (PLANTED / "helper_thread_finishes.cu").read_text(), "planted")
    built = build(candidate, gemm.launcher, H100, tmp_path / "build", 300)
    refused = inspect(Path(built.data["host"]), built.data["cubins"], H100, (), gemm.launcher.name, timeout=120)
    assert refused.status is Status.FAILED and "pthread_create" in refused.data["forbidden_imports"]
    allowed = Verdict("inspect", Status.PASSED, "", refused.data)
    stages = GpuStages(dict(pipeline.settings), tmp_path / "run")
    shape = Shape({"M": 256}, "m256", hidden=False)
    try:
        task = _task(gemm, "gemm-n128-k2048")
        verdicts = {
            v.stage: v for v in stages.evaluate(candidate, _no_opcodes(gemm), task, H100, shape, [built, allowed])
        }
    finally:
        stages.close()
    check = verdicts["check"]
    assert check.status is Status.FAILED, check.message
    assert all(c["unwritten"] == c["elements"] // 2 for c in check.data["comparisons"]), check.message


def test_load_time_code_that_rewrites_the_clock_changes_nothing(
    pipeline: Pipeline, gemm: Family, tmp_path: Path
) -> None:
    """The allow-list set aside (inspect refuses its dlsym): the constructor runs, and rewrites the timing
    loop of the process that loaded it, the capture child, which times nothing. The replays are timed like
    those of the same kernel without the constructor."""
    from pytest_ptxbench.gpu import GpuStages
    from pytest_ptxbench.stages.build import build
    from pytest_ptxbench.stages.inspect import inspect

    source = (PLANTED / "rewrites_the_clock.cu").read_text()
    honest = source.replace("__attribute__((constructor)) ", "")
    task, shape = _task(gemm, "gemm-n128-k2048"), Shape({"M": 256}, "m256", hidden=False)
    stages = GpuStages(dict(pipeline.settings), tmp_path / "run")
    times = {}
    try:
        for name, text in (("rewriting", source), ("honest", honest)):
            candidate = Candidate(task.name, "h100", text, "planted")
            built = build(candidate, gemm.launcher, H100, tmp_path / name, 300)
            inspected = inspect(
                Path(built.data["host"]), built.data["cubins"], H100, (), gemm.launcher.name, timeout=120
            )
            if name == "rewriting":
                assert inspected.status is Status.FAILED and "dlsym" in inspected.data["forbidden_imports"]
            allowed = Verdict("inspect", Status.PASSED, "", inspected.data)
            verdicts = {
                v.stage: v for v in stages.evaluate(candidate, _no_opcodes(gemm), task, H100, shape, [built, allowed])
            }
            assert verdicts["time"].passed, verdicts["time"].message
            times[name] = verdicts["time"].data["median_ms"]
        marks = list((stages.scratch / "captures").rglob("clock-rewritten"))
    finally:
        stages.close()
    assert marks, "the constructor ran and rewrote the capture child's timing loop"
    assert 0.8 < times["rewriting"] / times["honest"] < 1.25, times
