"""Bytes that are not UTF-8, in a candidate's source (a comment, an error line) and in a tool's output, are
read with replacement: the build still gives its verdict and the run still writes its rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ptxbench import process
from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.stages.build import build
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family
from pytest_ptxbench.toolchain import find_tool

from .conftest import results

LAUNCHER = (
    b'extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,'
    b" int M, int N, int K, void* workspace, size_t workspace_bytes, cudaStream_t stream) {\n"
)
# Latin-1 and stray bytes in a comment; the same in the line the compiler quotes with its error.
IN_A_COMMENT = b"// caf\xe9, na\xefve \xff\xfe\n#include <cuda_bf16.h>\n#include <cuda_runtime.h>\n" + LAUNCHER
VALID = IN_A_COMMENT + b"    return cudaSuccess;\n}\n"
BROKEN = IN_A_COMMENT + b'    const char* s = "caf\xe9 \xff" + ;\n    return cudaSuccess;\n}\n'


def test_a_source_with_bytes_that_are_not_utf8_builds(toolchain: None, gemm: Family, tmp_path: Path) -> None:
    (tmp_path / "mine.cu").write_bytes(VALID)
    candidate = Candidate.from_file("gemm-n7168-k5120", "h100", tmp_path / "mine.cu")
    assert candidate.source.startswith("// caf\ufffd, na\ufffdve \ufffd\ufffd\n")
    built = build(candidate, gemm.launcher, TARGETS["h100"], tmp_path / "build", 300)
    assert built.passed, built.message


def test_compiler_output_that_is_not_utf8_is_read_with_replacement(toolchain: None, tmp_path: Path) -> None:
    nvcc = find_tool("nvcc")
    assert nvcc is not None
    (tmp_path / "raw.cu").write_bytes(BROKEN)
    done = process.run([str(nvcc.path), "-c", "raw.cu", "-o", "raw.o"], 300, cwd=tmp_path)
    assert done.returncode != 0
    assert 'const char* s = "caf\ufffd \ufffd" + ;' in done.stderr  # the quoted line, its bytes replaced


def test_a_run_whose_kernel_is_not_utf8_still_writes_its_rows(toolchain: None, project: pytest.Pytester) -> None:
    out, mine = project.path / "run", project.path / "mine"
    mine.mkdir()
    (mine / "gemm.cu").write_bytes(BROKEN)
    result = project.runpytest_subprocess(
        "tasks", "-k", "gemm-n128-k2048", "--ptx-shapes=visible", f"--ptx-out={out}", f"--ptx-model=file:{mine}"
    )
    result.assert_outcomes(failed=2)
    rows = results(out)
    assert len(rows) == 2 and all(r["outcome"] == "failed" for r in rows)
    build_verdict = rows[0]["verdicts"][0]
    assert (build_verdict["stage"], build_verdict["status"]) == ("build", "failed")
    assert '"caf\ufffd \ufffd" + ;' in build_verdict["message"]
