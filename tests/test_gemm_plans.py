"""scripts/gemm_plans.py on the CPU: the H100 reference GEMM's launcher, compiled with the real nvcc against
stand-ins for the CUDA calls, still takes at each GPU test's shape the plan that test is named for."""

from __future__ import annotations

import pytest

from pytest_ptxbench.task.catalogue import Family
from pytest_ptxbench.toolchain import find_tool

from .conftest import script
from .gemm_plans import PAIRS, SPLITS, Case

CASES = {**SPLITS, **PAIRS}


def _shape(gemm: Family, case: Case, m: int) -> tuple[int, int, int]:
    task = next(t for t in gemm.tasks if t.name == case.task)
    return int(task.axes["N"]), int(task.axes["K"]), m


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory, gemm: Family) -> dict[tuple[int, int, int], str]:
    """The printer's line for each case at its M and at the family's sanitizer shape, by (N, K, M)."""
    tool, nvcc = script("gemm_plans"), find_tool("nvcc")
    assert nvcc is not None, "no nvcc: pip install -e '.[toolchain]'"
    shapes = sorted({_shape(gemm, c, m) for c in CASES.values() for m in (c.m, int(gemm.sanitizer_shape["M"]))})
    lines = tool.plans(tool.build(tmp_path_factory.mktemp("plans"), nvcc), shapes)
    return {(n, k, m): lines[f"n{n}-k{k} m{m}"] for n, k, m in shapes}


@pytest.mark.parametrize("name", CASES)
def test_each_gpu_test_shape_takes_its_plan(printed: dict[tuple[int, int, int], str], gemm: Family, name: str) -> None:
    case = CASES[name]
    assert printed[_shape(gemm, case, case.m)] == case.plan
    assert printed[_shape(gemm, case, int(gemm.sanitizer_shape["M"]))] == case.sanitized


def test_a_malformed_shape_is_named(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["gemm_plans.py", "5376x4096"])
    with pytest.raises(SystemExit):
        script("gemm_plans").main()
    assert "'5376x4096': expected NxKxM" in capsys.readouterr().err
