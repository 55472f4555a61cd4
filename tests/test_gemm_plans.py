"""scripts/gemm_plans.py on the CPU: the H100 reference GEMM's launcher, compiled with the real nvcc against
stand-ins for the CUDA calls, still takes at each GPU test's shape the plan that test is named for."""

from __future__ import annotations

import pytest

from pytest_ptxbench.toolchain import find_tool

from .conftest import script
from .gemm_plans import PAIRS, SPLITS, Case

CASES = {**SPLITS, **PAIRS}


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tool, nvcc = script("gemm_plans"), find_tool("nvcc")
    assert nvcc is not None, "no nvcc: pip install -e '.[toolchain]'"
    binary = tool.build(tmp_path_factory.mktemp("plans"), nvcc)
    shapes = []
    for case in CASES.values():
        n, k = (int(part[1:]) for part in case.task.split("-")[1:])
        shapes += [(n, k, case.m), (n, k, 200)]
    found: dict[str, str] = tool.plans(binary, shapes)
    return found


@pytest.mark.parametrize("name", CASES)
def test_each_gpu_test_shape_takes_its_plan(printed: dict[str, str], name: str) -> None:
    case: Case = CASES[name]
    shape = case.task.removeprefix("gemm-")
    assert printed[f"{shape} m{case.m}"] == case.plan
    assert printed[f"{shape} m200"] == case.sanitized


def test_a_malformed_shape_is_named(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["gemm_plans.py", "5376x4096"])
    with pytest.raises(SystemExit):
        script("gemm_plans").main()
    assert "'5376x4096': expected NxKxM" in capsys.readouterr().err
