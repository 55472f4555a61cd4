"""Planted: a Triton candidate whose own kernel only clears C, while torch (cuBLAS) computes the product.

`run` launches one `@triton.jit` kernel, as the contract asks, and then a vendor kernel on the same stream:
the outputs are right, so only the capture can tell. Its launch list names a kernel that is not in the
candidate's cubins: check must fail it as a foreign kernel.
"""

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


def run(
    A: "torch.Tensor", B: "torch.Tensor", C: "torch.Tensor", M: int, N: int, K: int, workspace: "torch.Tensor"
) -> None:
    clear_kernel[(triton.cdiv(M * N, BLOCK),)](C, M * N, BLOCK=BLOCK)
    import torch

    torch.mm(A, B.t(), out=C)
