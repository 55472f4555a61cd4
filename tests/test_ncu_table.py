"""scripts/ncu_table.py over a recorded real report: ncu 2025.3.1 on the H200, `bash scripts/device_check.sh ncu
"gemm_bf16_tn|nvjet.*TNT" gemm -k "n7168-k5120 m8192 "`, trimmed to the columns the table reads and to one launch
of each kernel (ours and cuBLAS's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import DATA, ROOT

SCRIPT = ROOT / "scripts" / "ncu_table.py"


def table(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, check=False)


def test_one_line_per_launch_in_the_table_units() -> None:
    done = table(DATA / "bench_gemm_core.ncu-raw.csv")
    assert done.returncode == 0, done.stderr
    header, ours, cublas = done.stdout.splitlines()
    assert header.split(" | ")[:7] == ["kernel", "us", "GHz", "tensor%", "issue%", "L2%", "DRAM%"]
    # ns -> us, Hz -> GHz; the stalls sorted, largest first
    assert ours.split(" | ")[1:7] == ["777", "1.54", "96.7", "17.8", "48.2", "21.1"]
    assert ours.split(" | ")[7].startswith(
        "barrier 4.34, wait 2.01, mio_throttle 1.70, long_scoreboard 1.51, gmma 0.98"
    )
    assert "selected" not in ours  # the issue itself, not a stall
    assert cublas.startswith("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT | 764 | 1.56 | 96.8 | 11.7")


def test_a_report_without_kernels_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "ncu.csv"
    empty.write_text("==PROF== Connected to process 5151\n==WARNING== No kernels were profiled.\n")
    done = table(empty)
    assert done.returncode == 1
    assert done.stdout.strip() == "no kernel in the report"
