"""scripts/gemm_plans.py on the CPU: the H100 reference GEMM's launcher, compiled with the real nvcc against
stand-ins for the CUDA calls, still takes at each GPU test's shape the plan that test is named for."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ptxbench.task.catalogue import Family
from pytest_ptxbench.toolchain import Tool, find_tool

from .conftest import planted_variant, script
from .gemm_plans import PAIRS, SPLITS, Case

CASES = {**SPLITS, **PAIRS}
PRINTER = script("gemm_plans")


@pytest.fixture(scope="module")
def nvcc() -> Tool:
    found = find_tool("nvcc")
    assert found is not None, "no nvcc: pip install -e '.[toolchain]'"
    return found


def _shape(gemm: Family, case: Case, m: int) -> tuple[int, int, int]:
    task = next(t for t in gemm.tasks if t.name == case.task)
    return int(task.axes["N"]), int(task.axes["K"]), m


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory, gemm: Family, nvcc: Tool) -> dict[tuple[int, int, int], str]:
    """The printer's line for each case at its M and at the family's sanitizer shape, by (N, K, M)."""
    shapes = sorted({_shape(gemm, c, m) for c in CASES.values() for m in (c.m, int(gemm.sanitizer_shape["M"]))})
    lines = PRINTER.plans(PRINTER.build(tmp_path_factory.mktemp("plans"), nvcc), shapes)
    return {(n, k, m): lines[f"n{n}-k{k} m{m}"] for n, k, m in shapes}


@pytest.mark.parametrize("name", CASES)
def test_each_gpu_test_shape_takes_its_plan(printed: dict[tuple[int, int, int], str], gemm: Family, name: str) -> None:
    case = CASES[name]
    assert printed[_shape(gemm, case, case.m)] == case.plan
    assert printed[_shape(gemm, case, int(gemm.sanitizer_shape["M"]))] == case.sanitized


def test_a_costlier_cluster_split_moves_its_case_off_its_plan(tmp_path: Path, gemm: Family, nvcc: Tool) -> None:
    """The check above can fail: priced at twice its reduction, the cluster split is no longer taken at its case."""
    variant = tmp_path / "gemm.cu"
    variant.write_text(planted_variant({"RED_CLK_LARGE = 4000.0;": "RED_CLK_LARGE = 8000.0;"}))
    case = SPLITS["cluster-split"]
    shape = _shape(gemm, case, case.m)
    lines = PRINTER.plans(PRINTER.build(tmp_path, nvcc, variant), [shape])
    assert lines[f"n{shape[0]}-k{shape[1]} m{shape[2]}"] == "narrow<2, 5> grid 84 cluster 1" != case.plan


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
