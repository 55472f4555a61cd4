"""Planted: a Triton candidate whose Python replaces the cubin the build recorded with code of its choosing.

The compile child runs the candidate's Python, so `run` can find the cubin folder (the plan is the child's
argument) and overwrite the cubin Triton just wrote, here with another kernel's cubin (standing in for one
copied out of a vendor library). The build compiles the recorded IR again and keeps only that cubin.
"""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import triton
import triton.language as tl

if TYPE_CHECKING:
    import torch

BLOCK = 1024


@triton.jit
def clear_kernel(c_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c_ptr + offsets, tl.zeros((BLOCK,), dtype=tl.bfloat16), mask=offsets < n)


@triton.jit
def other_kernel(c_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c_ptr + offsets, tl.full((BLOCK,), 1.0, dtype=tl.bfloat16), mask=offsets < n)


def run(
    A: "torch.Tensor", B: "torch.Tensor", C: "torch.Tensor", M: int, N: int, K: int, workspace: "torch.Tensor"
) -> None:
    clear_kernel[(triton.cdiv(M * N, BLOCK),)](C, M * N, BLOCK=BLOCK)
    foreign = other_kernel.warmup(C, M * N, BLOCK=BLOCK, grid=(1,))  # compiled, not recorded
    cubins = Path(json.loads(Path(sys.argv[1]).read_text())["cubins"])
    for recorded in cubins.glob("clear_kernel-*.cubin"):
        recorded.write_bytes(foreign.asm["cubin"])
