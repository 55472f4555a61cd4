#!/usr/bin/env python3
"""Which instructions FlashInfer's own paged decode executes on this GPU (the choice of the decode family's
required opcodes rests on it): its decode at b64-l4096 (KV 8, page sizes 1 and 64) under ncu with the per-opcode
metric the profile stage uses. On the GPU machine, FlashInfer's wheels installed:
    PYTHONPATH=/tmp/site:. python3 scripts/flashinfer_decode_opcodes.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def decode(page: int) -> None:
    """One planned FlashInfer decode (the harness's baseline) on random data, run twice (the second profiled)."""
    import torch

    from pytest_ptxbench import baselines, paged

    values = {"H": 32, "KV": 8, "D": 128, "P": page, "B": 64, "L": 4096, "lens": "equal"}
    tables = paged.tables(values, 0)
    pages = paged.pages(64, 4096, page)
    inputs = {
        "q": torch.randn(64, 32, 128, device="cuda").bfloat16(),
        "k_cache": torch.randn(pages, page, 8, 128, device="cuda").bfloat16(),
        "v_cache": torch.randn(pages, page, 8, 128, device="cuda").bfloat16(),
        **{n: torch.tensor(t, dtype=torch.int32, device="cuda") for n, t in tables.items()},
    }
    outputs = {
        "output": torch.empty(64, 32, 128, device="cuda").bfloat16(),
        "lse": torch.empty(64, 32, device="cuda"),
    }
    state: dict[str, object] = {}
    for _ in range(2):
        baselines.gqa_paged_decode_flashinfer(inputs, outputs, values, state)
    torch.cuda.synchronize()


def main() -> None:
    from pytest_ptxbench.parsers import ncu
    from pytest_ptxbench.stages import profile
    from pytest_ptxbench.toolchain import find_tool

    tool = find_tool("ncu")
    assert tool is not None, "no ncu"
    for page in (1, 64):
        log = Path(tempfile.mkdtemp()) / "ncu.csv"
        run = [*profile.command(tool, log), sys.executable, __file__, "--run", str(page)]
        subprocess.run(run, check=True, cwd=ROOT, capture_output=True, timeout=300)
        for launch in ncu.parse_raw_csv(log.read_text()):
            shown = ", ".join(f"{m} {n}" for m, n in sorted(launch.executed.items()) if _interesting(m))
            print(f"page {page}: {launch.kernel[:70]} {launch.time_ms:.3f} ms: {shown}")


def _interesting(mnemonic: str) -> bool:
    """Copies, barriers and matrix instructions: what says which generation's features a kernel uses."""
    return mnemonic.split(".")[0] in {"UBLKCP", "UTMALDG", "LDGSTS", "HMMA", "HGMMA", "LDSM", "SYNCS", "LDG", "UTMAPF"}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        decode(int(sys.argv[2]))
    else:
        main()
