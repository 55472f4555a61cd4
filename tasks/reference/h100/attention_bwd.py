"""Reference Triton attention backward for Hopper: dQ, dK, dV from Q, K, V, O, dO and the forward's natural-log
LSE; every tensor [B, H, S, D] bf16 (LSE [B, H, S] fp32), scale = 1/sqrt(D), causal hides key j from query i
when j > i.

Three launches on the caller's stream, FlashAttention-2 style without atomics:

1. `delta_kernel`: delta = rowsum(dO ∘ O) in fp32, into the workspace after its dQ region (the workspace's
   first 4·B·H·S·D bytes, the fp32 dQ accumulator of the task's contract, are left unused: dQ needs none here).
2. `dkdv_kernel`: one program per (block of BLOCK_N keys, head) keeps K and V in shared memory and its dK, dV
   accumulators in registers while blocks of BLOCK_M queries stream past. Per query block, transposed so
   that the keys are the rows of every product: Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2 e − LSE·log2 e),
   dV += Pᵀ·dO, dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − delta), dK += dSᵀ·Q; then dK·scale and dV are stored.
3. `dq_kernel`: one program per (block of BLOCK_M queries, head) keeps Q and dO and recomputes P and dP
   against every visible key block: dQ += dS·K, stored as dQ·scale. Recomputing two products costs less
   than reducing fp32 partials of dQ from every key block through memory.

Every product is a `tl.dot` on bf16 tiles with an fp32 accumulator (wgmma); Pᵀ and dSᵀ go in from registers.
Tiles of Q, K, V and dO move by TMA (UTMALDG) through host-side descriptors over [B·H, S, D] with the true
extents, and dQ, dK, dV leave by TMA stores that clip at S and D. D = 96 uses a 128-column box: the padded
columns read as zeros and are never stored. Rows past S (a ragged last block) read as zeros, so they add
nothing to any product: a zero query row or dO row adds nothing to dK or dV, a zero key row nothing to dQ;
the finite P of such rows meets only zeros. Only the causal diagonal blocks need a mask; blocks wholly above
the diagonal are never visited, and the dQ programs take the query blocks from the last (the longest) down.
"""

from typing import TYPE_CHECKING

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

if TYPE_CHECKING:
    import torch

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)

# D → dK/dV: (BLOCK_N keys, BLOCK_M queries, num_warps, num_stages); dQ: (BLOCK_M queries, BLOCK_N keys, ...).
# The causal diagonal is whole blocks when the outer block is a multiple of the inner one. dK/dV holds two
# [BLOCK_N, D] fp32 accumulators (128 registers a thread at D 128 over two warpgroups), so its query blocks
# shrink to 32 rows above D 64 to leave room for Sᵀ and dPᵀ without spilling.
DKDV_CONFIGS = {64: (128, 64, 8, 3), 96: (128, 32, 8, 3), 128: (128, 32, 8, 3)}
DQ_CONFIGS = {64: (128, 64, 8, 3), 96: (128, 64, 8, 3), 128: (128, 64, 8, 3)}
DELTA_ROWS = 64


@triton.jit
def delta_kernel(o_ptr, do_ptr, ws_ptr, rows_total, D, dq_floats, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < rows_total) & (cols[None, :] < D)
    offsets = rows.to(tl.int64)[:, None] * D + cols[None, :]
    o = tl.load(o_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    delta_ptr = ws_ptr.to(tl.pointer_type(tl.float32)) + dq_floats
    tl.store(delta_ptr + rows, tl.sum(o * do, 1), mask=rows < rows_total)


@triton.jit
def _query_blocks(
    dk,
    dv,
    k,
    v,
    q_desc,
    do_desc,
    lse_ptr,
    delta_ptr,
    bh,
    keys,
    lo,
    hi,
    S,
    qk_scale,
    MASKED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Queries [lo, hi) in blocks of BLOCK_M folded into dK and dV of the keys `keys` (rows of k, v)."""
    offs = tl.arange(0, BLOCK_M)
    for start in tl.range(lo, hi, BLOCK_M):
        queries = start + offs
        inside = queries < S
        q = q_desc.load([bh, start, 0]).reshape(BLOCK_M, BLOCK_D)
        lse = tl.load(lse_ptr + queries, mask=inside, other=0.0) * LOG2E
        s_t = tl.dot(k, q.T)  # [keys, queries]
        p_t = tl.math.exp2(s_t * qk_scale - lse[None, :])
        if MASKED:
            p_t = tl.where(queries[None, :] >= keys[:, None], p_t, 0.0)
        do = do_desc.load([bh, start, 0]).reshape(BLOCK_M, BLOCK_D)
        dv = tl.dot(p_t.to(tl.bfloat16), do, dv)
        delta = tl.load(delta_ptr + queries, mask=inside, other=0.0)
        dp_t = tl.dot(v, do.T)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(tl.bfloat16), q, dk)
    return dk, dv


@triton.jit
def dkdv_kernel(
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dk_desc,
    dv_desc,
    lse_ptr,
    ws_ptr,
    S,
    dq_floats,
    scale,
    qk_scale,
    CAUSAL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bh = tl.program_id(1)
    start_n = tl.program_id(0) * BLOCK_N
    keys = start_n + tl.arange(0, BLOCK_N)
    row0 = bh.to(tl.int64) * S
    lse_ptr += row0
    delta_ptr = ws_ptr.to(tl.pointer_type(tl.float32)) + dq_floats + row0

    k = k_desc.load([bh, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
    v = v_desc.load([bh, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    if CAUSAL:
        # The query blocks on the diagonal (masked), then every query below it; those above see none of k.
        diagonal_end = min(start_n + BLOCK_N, S)
        dk, dv = _query_blocks(
            dk, dv, k, v, q_desc, do_desc, lse_ptr, delta_ptr, bh, keys, start_n, diagonal_end, S, qk_scale,
            True, BLOCK_M, BLOCK_D,
        )  # fmt: skip
        dk, dv = _query_blocks(
            dk, dv, k, v, q_desc, do_desc, lse_ptr, delta_ptr, bh, keys, diagonal_end, S, S, qk_scale,
            False, BLOCK_M, BLOCK_D,
        )  # fmt: skip
    else:
        dk, dv = _query_blocks(
            dk, dv, k, v, q_desc, do_desc, lse_ptr, delta_ptr, bh, keys, 0, S, S, qk_scale,
            False, BLOCK_M, BLOCK_D,
        )  # fmt: skip
    dk_desc.store([bh, start_n, 0], (dk * scale).to(tl.bfloat16).reshape(1, BLOCK_N, BLOCK_D))
    dv_desc.store([bh, start_n, 0], dv.to(tl.bfloat16).reshape(1, BLOCK_N, BLOCK_D))


@triton.jit
def _key_blocks(
    dq,
    q,
    do,
    lse,
    delta,
    k_desc,
    v_desc,
    bh,
    queries,
    lo,
    hi,
    qk_scale,
    MASKED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Keys [lo, hi) in blocks of BLOCK_N folded into dQ of the query rows `queries`."""
    offs = tl.arange(0, BLOCK_N)
    for start in tl.range(lo, hi, BLOCK_N):
        k = k_desc.load([bh, start, 0]).reshape(BLOCK_N, BLOCK_D)
        s = tl.dot(q, k.T)
        p = tl.math.exp2(s * qk_scale - lse[:, None])
        if MASKED:
            p = tl.where((start + offs)[None, :] <= queries[:, None], p, 0.0)
        v = v_desc.load([bh, start, 0]).reshape(BLOCK_N, BLOCK_D)
        dp = tl.dot(do, v.T)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(tl.bfloat16), k, dq)
    return dq


@triton.jit
def dq_kernel(
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dq_desc,
    lse_ptr,
    ws_ptr,
    S,
    dq_floats,
    scale,
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
    queries = start_m + tl.arange(0, BLOCK_M)
    inside = queries < S
    row0 = bh.to(tl.int64) * S
    delta_ptr = ws_ptr.to(tl.pointer_type(tl.float32)) + dq_floats + row0

    q = q_desc.load([bh, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
    do = do_desc.load([bh, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
    lse = tl.load(lse_ptr + row0 + queries, mask=inside, other=0.0) * LOG2E
    delta = tl.load(delta_ptr + queries, mask=inside, other=0.0)
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    if CAUSAL:
        # Key blocks left of the diagonal, then the diagonal ones (masked).
        dq = _key_blocks(
            dq, q, do, lse, delta, k_desc, v_desc, bh, queries, 0, start_m, qk_scale, False, BLOCK_N, BLOCK_D
        )
        dq = _key_blocks(
            dq, q, do, lse, delta, k_desc, v_desc, bh, queries, start_m, min(start_m + BLOCK_M, S), qk_scale,
            True, BLOCK_N, BLOCK_D,
        )  # fmt: skip
    else:
        dq = _key_blocks(dq, q, do, lse, delta, k_desc, v_desc, bh, queries, 0, S, qk_scale, False, BLOCK_N, BLOCK_D)
    dq_desc.store([bh, start_m, 0], (dq * scale).to(tl.bfloat16).reshape(1, BLOCK_M, BLOCK_D))


def run(
    Q: "torch.Tensor",
    K: "torch.Tensor",
    V: "torch.Tensor",
    O: "torch.Tensor",  # noqa: E741  (the task's name)
    dO: "torch.Tensor",
    LSE: "torch.Tensor",
    dQ: "torch.Tensor",
    dK: "torch.Tensor",
    dV: "torch.Tensor",
    B: int,
    H: int,
    S: int,
    D: int,
    causal: int,
    scale: float,
    workspace: "torch.Tensor",
) -> None:
    block_d = triton.next_power_of_2(D)
    rows = B * H * S
    dq_floats = rows * D  # the delta rows start after the (unused) fp32 dQ region
    qk_scale = scale * 1.4426950408889634
    shape, strides = [B * H, S, D], [S * D, D, 1]

    def desc(t: "torch.Tensor", rows_per_box: int) -> TensorDescriptor:
        return TensorDescriptor(t, shape, strides, [1, rows_per_box, block_d])

    delta_kernel[(triton.cdiv(rows, DELTA_ROWS),)](
        O, dO, workspace, rows, D, dq_floats, BLOCK_R=DELTA_ROWS, BLOCK_D=block_d, num_warps=4
    )

    block_n, block_m, num_warps, num_stages = DKDV_CONFIGS[D]
    dkdv_kernel[(triton.cdiv(S, block_n), B * H)](
        desc(Q, block_m),
        desc(K, block_n),
        desc(V, block_n),
        desc(dO, block_m),
        desc(dK, block_n),
        desc(dV, block_n),
        LSE,
        workspace,
        S,
        dq_floats,
        scale,
        qk_scale,
        CAUSAL=bool(causal),
        BLOCK_N=block_n,
        BLOCK_M=block_m,
        BLOCK_D=block_d,
        num_warps=num_warps,
        num_stages=num_stages,
    )

    block_m, block_n, num_warps, num_stages = DQ_CONFIGS[D]
    dq_kernel[(triton.cdiv(S, block_m), B * H)](
        desc(Q, block_m),
        desc(K, block_n),
        desc(V, block_n),
        desc(dO, block_m),
        desc(dQ, block_m),
        LSE,
        workspace,
        S,
        dq_floats,
        scale,
        qk_scale,
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        num_warps=num_warps,
        num_stages=num_stages,
    )
