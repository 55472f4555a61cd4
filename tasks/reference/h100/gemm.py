"""Reference Triton GEMM for Hopper: C[M, N] = A[M, K] · B[N, K]ᵀ, bf16 in and out, fp32 accumulation.

Host-side tensor descriptors make every tile move by TMA (UTMALDG loads, UTMASTG stores), and `tl.dot` on
shared-memory tiles becomes wgmma (HGMMA). The descriptors carry the true extents, so a ragged last tile of M
(or N) reads zeros and writes nothing past the end. Tiles are visited in groups of GROUP_M rows so that
neighbouring programs share tiles of B in L2. No workspace is needed.
"""

from typing import TYPE_CHECKING

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

if TYPE_CHECKING:
    import torch

BLOCK_M, BLOCK_K, GROUP_M = 128, 64, 8
NUM_WARPS, NUM_STAGES = 8, 3  # two warpgroups; three stages of A and B tiles (144 KiB) and the C tile


@triton.jit
def gemm_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    off_m = (first_m + (pid % per_group) % rows) * BLOCK_M
    off_n = ((pid % per_group) // rows) * BLOCK_N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def run(
    A: "torch.Tensor",
    B: "torch.Tensor",
    C: "torch.Tensor",
    M: int,
    N: int,
    K: int,
    workspace: "torch.Tensor",
) -> None:
    block_n = 256 if N >= 256 else 128
    a_desc = TensorDescriptor(A, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
    b_desc = TensorDescriptor(B, [N, K], [K, 1], [block_n, BLOCK_K])
    c_desc = TensorDescriptor(C, [M, N], [N, 1], [BLOCK_M, block_n])
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, block_n),)
    gemm_kernel[grid](
        a_desc,
        b_desc,
        c_desc,
        M,
        N,
        K,
        BLOCK_M=BLOCK_M,
        BLOCK_N=block_n,
        BLOCK_K=BLOCK_K,
        GROUP_M=GROUP_M,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
