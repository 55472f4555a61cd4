"""Reference Triton attention forward for Hopper: O = softmax(Q·Kᵀ·scale [+ causal mask])·V and the natural-log
LSE of every row; Q, K, V, O are [B, H, S, D] bf16, LSE [B, H, S] fp32.

One program per (block of BLOCK_M query rows, head). Its Q tile stays in shared memory while K and V blocks of
BLOCK_N keys stream past it; S = Q·Kᵀ and O += P·V are `tl.dot`s on bf16 tiles with fp32 accumulators, which
Triton lowers to wgmma (HGMMA), with the loads software-pipelined over num_stages buffers. The softmax is the
online one in base 2: the scale is folded with log2(e) into one multiplier, the running maximum m and sum l
are kept per row, and the epilogue writes O·(1/l) and LSE = (m + log2 l)·ln 2.

Every tile moves by TMA (UTMALDG loads, UTMASTG stores): the host-side descriptors see each tensor as
[B·H, S, D] with the true extents, so a block that runs past S reads zeros from TMA (never the next head's
rows) and the store of a ragged last query block writes nothing past S. D = 96 uses a 128-column box over the
96-column extent: the padded columns read as zeros (exact in both products) and are never stored.

Masking is confined to the blocks that need it: without the mask only the last key block when S is ragged
(keys past S get -inf), with the causal mask the blocks on the diagonal (key j hidden from query i when
j > i); blocks wholly above the diagonal are never visited. Causal programs take the query blocks from the
last (the longest) to the first, so that the short ones fill the tail of the launch. The workspace is unused.
"""

from typing import TYPE_CHECKING

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

if TYPE_CHECKING:
    import torch

LOG2E = 1.4426950408889634
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)  # read inside the kernel

# D → (BLOCK_M, BLOCK_N, num_warps, num_stages). Two warpgroups of 64 query rows each; BLOCK_M is a multiple
# of BLOCK_N (the causal diagonal is then whole key blocks). Shared memory: Q plus num_stages K and V blocks.
CONFIGS = {
    64: (128, 128, 8, 3),  # 16 + 3·32 KiB
    96: (128, 128, 8, 2),  # padded to 128 columns: 32 + 2·64 KiB
    128: (128, 128, 8, 2),  # 32 + 2·64 KiB
    256: (128, 64, 8, 2),  # 64 + 2·64 KiB; the O accumulator alone is 128 registers a thread
}


@triton.jit
def _key_blocks(
    acc,
    l_i,
    m_i,
    q,
    k_desc,
    v_desc,
    bh,
    rows,
    lo,
    hi,
    S,
    qk_scale,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Keys [lo, hi) in blocks of BLOCK_N folded into the running (acc, l, m) of the query rows `rows`."""
    cols = tl.arange(0, BLOCK_N)
    for start in tl.range(lo, hi, BLOCK_N):
        k = k_desc.load([bh, start, 0]).reshape(BLOCK_N, BLOCK_D)
        s = tl.dot(q, k.T) * qk_scale  # scores in the log2 domain
        if MASKED:
            keys = start + cols
            visible = keys[None, :] < S
            if CAUSAL:
                visible = visible & (keys[None, :] <= rows[:, None])
            s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([bh, start, 0]).reshape(BLOCK_N, BLOCK_D)
        acc = tl.dot(p.to(tl.bfloat16), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_fwd_kernel(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    lse_ptr,
    S,
    qk_scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    block = tl.program_id(0)
    if CAUSAL:
        block = tl.num_programs(0) - 1 - block
    bh = tl.program_id(1)
    start_m = block * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)

    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)

    # Key blocks that need no mask: those left of the diagonal (causal) or every whole block (full).
    free = start_m if CAUSAL else (S // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _key_blocks(
        acc, l_i, m_i, q, k_desc, v_desc, bh, rows, 0, free, S, qk_scale, False, CAUSAL, BLOCK_N, BLOCK_D
    )
    # The rest, masked: the diagonal blocks (causal) or the ragged last block (full).
    end = min(start_m + BLOCK_M, S) if CAUSAL else S
    acc, l_i, m_i = _key_blocks(
        acc, l_i, m_i, q, k_desc, v_desc, bh, rows, free, end, S, qk_scale, True, CAUSAL, BLOCK_N, BLOCK_D
    )

    o = acc * (1.0 / l_i)[:, None]
    o_desc.store([bh, start_m, 0], o.to(tl.bfloat16).reshape(1, BLOCK_M, BLOCK_D))
    lse = (m_i + tl.math.log2(l_i)) * LN2  # back to the natural log
    tl.store(lse_ptr + bh.to(tl.int64) * S + rows, lse, mask=rows < S)


def run(
    Q: "torch.Tensor",
    K: "torch.Tensor",
    V: "torch.Tensor",
    O: "torch.Tensor",  # noqa: E741  (the task's name)
    LSE: "torch.Tensor",
    B: int,
    H: int,
    S: int,
    D: int,
    causal: int,
    scale: float,
    workspace: "torch.Tensor",
) -> None:
    block_m, block_n, num_warps, num_stages = CONFIGS[D]
    block_d = triton.next_power_of_2(D)
    shape, strides, box = [B * H, S, D], [S * D, D, 1], [1, block_m, block_d]
    q_desc = TensorDescriptor(Q, shape, strides, box)
    o_desc = TensorDescriptor(O, shape, strides, box)
    k_desc = TensorDescriptor(K, shape, strides, [1, block_n, block_d])
    v_desc = TensorDescriptor(V, shape, strides, [1, block_n, block_d])
    grid = (triton.cdiv(S, block_m), B * H)
    attention_fwd_kernel[grid](
        q_desc,
        k_desc,
        v_desc,
        o_desc,
        LSE,
        S,
        scale * LOG2E,
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        num_warps=num_warps,
        num_stages=num_stages,
    )
