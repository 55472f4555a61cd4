"""Planted: the Triton reference GEMM with plain pointer loads and stores instead of tensor descriptors.

On Hopper Triton still pipelines the tiles into shared memory (cp.async: LDGSTS) and multiplies them with
wgmma (HGMMA), but nothing moves by TMA: inspect must fail it for missing UTMALDG.
"""

from typing import TYPE_CHECKING

import triton
import triton.language as tl

if TYPE_CHECKING:
    import torch

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 64, 8


@triton.jit
def gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
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
    offs_m = (first_m + (pid % per_group) % rows) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = ((pid % per_group) // rows) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_tile = b_ptr + offs_n[:, None] * K + offs_k[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K):
        in_k = offs_k[None, :] < K - k
        a = tl.load(a_tile + k, mask=(offs_m[:, None] < M) & in_k, other=0.0)
        b = tl.load(b_tile + k, mask=(offs_n[:, None] < N) & in_k, other=0.0)
        acc = tl.dot(a, b.T, acc)
    c = c_ptr + offs_m[:, None] * N + offs_n[None, :]
    tl.store(c, acc.to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def run(
    A: "torch.Tensor",
    B: "torch.Tensor",
    C: "torch.Tensor",
    M: int,
    N: int,
    K: int,
    workspace: "torch.Tensor",
) -> None:
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    gemm_kernel[grid](
        A,
        B,
        C,
        M,
        N,
        K,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
        GROUP_M=GROUP_M,
        num_warps=8,
        num_stages=3,
    )
