"""`--ptx-model=file:DIR` without a kernel for a task: the test skips naming the files looked for, and fails
with the same words under `--ptx-require-gpu` (a run that must judge everything)."""

from __future__ import annotations

import pytest

from .conftest import results

SELECT = ("tasks", "-k", "gemm-n128-k2048", "--ptx-shapes=visible", "-rs")


@pytest.mark.parametrize("require_gpu", [False, True])
def test_a_missing_kernel_names_the_files_looked_for(project: pytest.Pytester, require_gpu: bool) -> None:
    mine = project.mkdir("mine")
    out = project.path / "run"
    flags = ["--ptx-require-gpu"] if require_gpu else []
    result = project.runpytest_subprocess(*SELECT, f"--ptx-model=file:{mine}", f"--ptx-out={out}", *flags)
    reason = (
        f"file:{mine} has no kernel for gemm-n128-k2048 on h100 (looked for {mine}/gemm-n128-k2048.cu, {mine}/gemm.cu)"
    )
    if require_gpu:
        result.assert_outcomes(failed=2)
        result.stdout.fnmatch_lines(["*_ test_task[[]gemm-n128-k2048-h100-m8192[]] _*", reason])  # the failure says why
    else:
        result.assert_outcomes(skipped=2)
        result.stdout.fnmatch_lines([f"SKIPPED [[]2[]] *: {reason}"])
    outcome = "failed" if require_gpu else "skipped"
    assert [(r["outcome"], r["reason"]) for r in results(out)] == [(outcome, reason)] * 2
