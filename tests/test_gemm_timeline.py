"""scripts/gemm_timeline.py on the CPU: its probes land in both kernels of the H100 reference GEMM and the probed
file and its driver compile with the real nvcc (the run itself needs the GPU machine)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_ptxbench.toolchain import find_tool

from .conftest import script


def test_the_probed_kernel_file_and_its_driver_compile(tmp_path: Path) -> None:
    tool = script("gemm_timeline")
    probed = tool.stamped(tool.KERNEL.read_text())
    assert probed.count("ExitProbe exit_probe;") == 2  # one per kernel
    assert probed.count("g_stamp[blockIdx.x][1] = probe_now()") == 2
    (tmp_path / "stamped.cu").write_text(probed)
    (tmp_path / "driver.cu").write_text(tool.DRIVER)
    nvcc = find_tool("nvcc")
    assert nvcc is not None
    built = subprocess.run(
        [str(nvcc.path), "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-w", "-c", "driver.cu"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=nvcc.env(),
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]


def test_a_kernel_file_without_a_hooks_line_is_named() -> None:
    tool = script("gemm_timeline")
    source = tool.KERNEL.read_text().replace("wgmma_wait<0>();", "wgmma_wait<0 >();")
    with pytest.raises(SystemExit, match=r"no line with 'wgmma_wait<0>\(\);' in namespace large"):
        tool.stamped(source)
