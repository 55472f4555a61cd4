"""scripts/gemm_plans.py on the CPU: the H100 reference GEMM's launcher, compiled with the real nvcc against
stand-ins for the CUDA calls, still takes at each GPU test's shape the plan that test is named for; and
scripts/gemm_plan_times.py, which names plans' times from a real bench log and sets a variant's plans against them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_ptxbench.task.catalogue import Family
from pytest_ptxbench.toolchain import Tool, find_tool

from .conftest import REFERENCE_GEMM, planted_variant, script
from .gemm_plans import PAIRS, SPLITS, WIDE, Case

CASES = {**SPLITS, **PAIRS, **WIDE}
PRINTER = script("gemm_plans")


@pytest.fixture(scope="module")
def nvcc() -> Tool:
    found = find_tool("nvcc")
    assert found is not None, "no nvcc: pip install -e '.[toolchain]'"
    return found


def _shape(gemm: Family, case: Case, m: int) -> tuple[int, int, int]:
    task = next(t for t in gemm.tasks if t.name == case.task)
    return int(task.axes["N"]), int(task.axes["K"]), m


def _sanitizer_m(gemm: Family, case: Case) -> int:
    return int(case.family(gemm).sanitizer_shape["M"])


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory, gemm: Family, nvcc: Tool) -> dict[tuple[int, int, int], str]:
    """The printer's line for each case at its M and at the family's sanitizer shape, by (N, K, M)."""
    shapes = sorted({_shape(gemm, c, m) for c in CASES.values() for m in (c.m, _sanitizer_m(gemm, c))})
    lines = PRINTER.plans(PRINTER.build(tmp_path_factory.mktemp("plans"), nvcc), shapes)
    return {(n, k, m): lines[f"n{n}-k{k} m{m}"] for n, k, m in shapes}


@pytest.mark.parametrize("name", CASES)
def test_each_gpu_test_shape_takes_its_plan(printed: dict[tuple[int, int, int], str], gemm: Family, name: str) -> None:
    case = CASES[name]
    assert printed[_shape(gemm, case, case.m)] == case.plan
    assert printed[_shape(gemm, case, _sanitizer_m(gemm, case))] == case.sanitized


def test_a_costlier_cluster_split_moves_its_case_off_its_plan(tmp_path: Path, gemm: Family, nvcc: Tool) -> None:
    """The check above can fail: priced at 40000 clocks, the cluster split gives way to the chain."""
    variant = tmp_path / "gemm.cu"
    variant.write_text(planted_variant({"RED_CLK_LARGE = 12000.0;": "RED_CLK_LARGE = 40000.0;"}))
    case = SPLITS["cluster-split"]
    shape = _shape(gemm, case, case.m)
    lines = PRINTER.plans(PRINTER.build(tmp_path, nvcc, variant), [shape])
    assert lines[f"n{shape[0]}-k{shape[1]} m{shape[2]}"] == "memset; large grid 96 cluster 1" != case.plan


def test_a_kernel_file_without_one_of_the_kernels_still_prints(tmp_path: Path, gemm: Family, nvcc: Tool) -> None:
    """A file from before a kernel existed (here the wide kernel under another name) builds, and a launch of a kernel
    the printer does not know reads `unknown`: `compare --base` can set today's plans against an older file's."""
    variant = tmp_path / "gemm.cu"
    variant.write_text(REFERENCE_GEMM.replace("gemm_wide_kernel", "gemm_other_kernel"))
    case = WIDE["one-wave"]
    shape = _shape(gemm, case, case.m)
    lines = PRINTER.plans(PRINTER.build(tmp_path, nvcc, variant), [shape])
    assert lines[f"n{shape[0]}-k{shape[1]} m{shape[2]}"] == case.plan.replace("wide", "unknown")


@pytest.mark.parametrize(
    ("args", "error"),
    [(["5376x4096"], "'5376x4096': expected NxKxM"), (["--kernel", "no.cu", "8x8x8"], "--kernel no.cu: no such file")],
)
def test_bad_arguments_are_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str], error: str
) -> None:
    monkeypatch.setattr("sys.argv", ["gemm_plans.py", *args])
    with pytest.raises(SystemExit):
        PRINTER.main()
    assert error in capsys.readouterr().err


TIMES = script("gemm_plan_times")
BENCH_LOG = Path(__file__).parent / "data" / "bench_gemm_h200.log"  # forty-second session, call 1 (MEASUREMENTS.md)
SPLIT_AT_8000 = "narrow<1, 8> grid 132 cluster 1; narrow<1, 8> grid 112 cluster 4"


@pytest.fixture(scope="module")
def bench_plans(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """The plans of the log's three kernels at its shapes, as that call ran them: the reference's cost model as it was
    then (a cluster split priced at 4000 clocks, no head slowdown), and the same at 6000 and 8000."""
    folder = tmp_path_factory.mktemp("variants")
    kernels = []
    for price in ("4000.0", "6000.0", "8000.0"):
        kernels.append(folder / f"gemm_{price}.cu")
        edits = {"RED_CLK_LARGE = 12000.0;": f"RED_CLK_LARGE = {price};", "HEAD_SLOW = 0.3;": "HEAD_SLOW = 0.0;"}
        kernels[-1].write_text(planted_variant(edits))
    shapes = list(TIMES.read_bench(BENCH_LOG).shapes)
    return [TIMES.plans_of(k, shapes) for k in kernels]


def test_a_bench_log_is_recorded_with_each_kernels_plans(tmp_path: Path, bench_plans: list[dict[str, str]]) -> None:
    bench = TIMES.read_bench(BENCH_LOG)
    assert bench.kernels == ["scratch/gemm_main.cu", "scratch/gemm_red6000.cu", "tasks/reference/h100/gemm.cu"]
    path = tmp_path / "times.csv"
    TIMES.record(bench, "call 1", "H200", bench_plans, path)
    rows = TIMES.read_times(path)
    assert len(rows) == 6 * 4
    at = {(t.plan, t.ms) for t in rows if t.shape == "n5120-k5120 m232"}
    assert at == {("large grid 80 cluster 2", 0.040), (SPLIT_AT_8000, 0.047), ("cuBLAS", 0.029)}
    with pytest.raises(ValueError, match="call 'call 1' is recorded already"):
        TIMES.record(bench, "call 1", "H200", bench_plans, path)
    assert len(TIMES.read_times(path)) == len(rows)


def test_compare_names_each_move_with_its_times(tmp_path: Path, bench_plans: list[dict[str, str]]) -> None:
    """The cluster split priced at 8000 against the reference: its one loss timed, and a move no call timed."""
    path = tmp_path / "times.csv"
    TIMES.record(TIMES.read_bench(BENCH_LOG), "call 1", "H200", bench_plans, path)
    base, mine = bench_plans[0], bench_plans[2]
    report = TIMES.compare(TIMES.read_times(path), {**mine, "n1-k1 m1": "b"}, {**base, "n1-k1 m1": "a"})
    moves = report.index("n5120-k5120 m232: large grid 80 cluster 2 -> " + SPLIT_AT_8000)
    assert report[moves + 1] == "    call 1, H200: 0.040 -> 0.047 ms (1.18x, slower), cuBLAS 0.029"
    assert report[0] == "== 5 of 7 shapes take another plan than the base's"
    faster = report[report.index("== shapes where a call timed a plan 3% or more faster than this kernel's") + 1 :]
    assert (
        faster[0] == f"n5120-k5120 m232: {SPLIT_AT_8000} 0.047 ms, but large grid 80 cluster 2 0.040 ms (call 1, H200)"
    )
    assert report[-2:] == ["== the bench's -k arguments for the moves no call timed (1)", '-k "n1-k1 m1 "']


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("call,gpu,shape,plan\n", "header ['call', 'gpu', 'shape', 'plan']"),
        ("call,gpu,shape,plan,ms\nc,H200,n1-k1 m1,large,\n", "times.csv:2: empty 'ms'"),
        ("call,gpu,shape,plan,ms\nc,H200,1x1x1,large,0.1\n", "times.csv:2: shape '1x1x1'"),
        ("call,gpu,shape,plan,ms\nc,H200,n1-k1 m1,large,fast\n", "times.csv:2: ms 'fast' is not a number"),
        ("call,gpu,shape,plan,ms\nc,H200,n1-k1 m1,large,-1\n", "times.csv:2: ms '-1' is not a time"),
    ],
)
def test_a_bad_times_row_is_named(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "times.csv").write_text(text)
    with pytest.raises(ValueError, match=re.escape(error)):
        TIMES.read_times(tmp_path / "times.csv")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("== all checks passed\n", "no GEMM result line"),
        (
            BENCH_LOG.read_text().replace("kernel 2: tasks/reference/h100/gemm.cu\n", ""),
            "2 kernels named, results with [3]",
        ),
    ],
)
def test_a_bench_log_that_does_not_read_is_named(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "bench.log").write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'bench.log'}: {error}")):
        TIMES.read_bench(tmp_path / "bench.log")


def test_the_recorded_times_read() -> None:
    """Every call in scripts/gemm_plan_times.csv timed cuBLAS at each shape it timed."""
    times = TIMES.read_times()
    for shape, calls in TIMES.by_call(times).items():
        for call, plans in calls.items():
            assert "cuBLAS" in plans and len(plans) > 1, (shape, call)
