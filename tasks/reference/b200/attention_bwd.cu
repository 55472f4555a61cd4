// Reference attention backward for B200 (sm_100a): dQ, dK, dV from Q, K, V, O, dO and the forward's LSE
// (natural log). All [B, H, S, D] bf16 (LSE [B, H, S] fp32), D in {64, 96, 128}, any S, causal or not.
//
// NOT RUN ON HARDWARE: built and disassembled only (no B200 was available). The bit layouts it relies on
// are spelled out next to the code that builds them.
//
// Three kernels on the caller's stream, with the workspace [dQ accumulator fp32 B·H·S·D | Dsum fp32 B·H·S]:
//   1. dot_do_o       Dsum[q] = sum_d dO[q,d]·O[q,d] (one warp per row); it also zeroes the row's dQ
//                     accumulator, so a call does not depend on the harness zeroing the workspace.
//   2. main kernel    one CTA per (b·h, block of 128 keys); it loops over the 128-query blocks that can see
//                     its keys (causal: from the diagonal block on) and keeps dK, dV in TMEM:
//                       Sᵀ  = K·Qᵢᵀ          [keys x queries]  (tcgen05.mma, smem x smem)
//                       dPᵀ = V·dOᵢᵀ         [keys x queries]  (smem x smem)
//                       Pᵀ  = exp2(Sᵀ·scale·log2e − LSE·log2e), 0 where masked
//                       dV += Pᵀ·dOᵢ         (A = Pᵀ bf16 in TMEM, B = dOᵢ MN-major smem)
//                       dSᵀ = Pᵀ ⊙ (dPᵀ − Dsum) · scale
//                       dK += dSᵀ·Qᵢ         (A = dSᵀ bf16 in TMEM, B = Qᵢ MN-major smem)
//                       dQᵢ = dSᵢ·K          (A = dSᵢ from smem, MN-major, B = K MN-major), red.add into fp32
//   3. dq_convert     dQ = bf16(dQ accumulator).
//   Kernels 2 and 3 are programmatic dependent launches: their CTAs are placed while the kernel before still runs
//   and wait (griddepcontrol.wait) before touching anything it wrote.
// Keys are TMEM lanes (thread = key row), so the per-query LSE and Dsum are per column: the compute
// warpgroup stages them in shared memory, read back as broadcasts.
//
// Warp roles of the main kernel (12 warps; setmaxnreg moves registers from the producer warpgroup to the
// dS warpgroup):
//   warps 0-3  (dS) : P (tcgen05.ld Sᵀ, tcgen05.st P over Sᵀ), then dS (tcgen05.ld dPᵀ, tcgen05.st dS over
//                     dPᵀ, and st.shared into the swizzled dS tile); at the end dK to global.
//   warps 4-7  (dQ) : tcgen05.ld dQᵢ, release its TMEM, red.global.add.v4.f32 into the accumulator; at the
//                     end dV to global.
//   warp 8 lane 0   : TMA: K and V once, then (Qᵢ, dOᵢ) pairs into a ring of STAGES stages.
//   warp 9 lane 0   : MMA issue, tcgen05.commit to the barriers; warp 9 owns TMEM. Warps 10-11 idle.
// MMA order per block i: [dV(i), Sᵀ(i+1)], [dK(i), dQ(i)], dPᵀ(i+1) once dQ(i) is drained; so Pᵀ(i+1)
// is computed while the dQ warpgroup drains dQ(i). Ordering assumption: tcgen05.mma instructions issued by
// one thread execute in issue order, so an MMA that overwrites TMEM read as the A operand of an earlier one
// (Sᵀ(i+1) over Pᵀ(i), dQ(i) over dSᵀ(i)) does not overtake it.
//
// Shared memory (1024-B aligned; each tile is a stack of TMA boxes [64 columns x 128 rows], 128B-swizzled,
// 16 KiB a box; D = 96 is zero-padded to 128 columns by TMA):
//   K tile | V tile | STAGES x (Qᵢ tile | dOᵢ tile) | dS tile [128 keys][128 queries] bf16, stored as two
//   [64 queries x 128 keys] boxes in the same swizzle (16-B chunk c of key row r at chunk c ^ (r % 8)).
// Tensor memory (512 columns): dK [0, D_PAD) | dV [D_PAD, 2 D_PAD) | Sᵀ/Pᵀ 128 | dPᵀ/dSᵀ 128, and dQᵢ
// (128 queries x D_PAD) reuses the dPᵀ columns.
// Descriptors (sm100 smem descriptor: start>>4 [0,14), LBO>>4 [16,30), SBO>>4 [32,46), version 1 at 46,
// swizzle 2 = 128B at [61,64)):
//   K-major (K and V as A, Qᵢ and dOᵢ as B of Sᵀ and dPᵀ; K = head dim): 128-B rows, SBO = 1024 B per 8
//     rows, LBO unused; 16-column step = +32 B inside a box, next box every 4 steps.
//   MN-major (dOᵢ, Qᵢ, K as B and dS as A, whose K dimension is the 128-row one): LBO = 16 KiB between
//     64-column boxes, SBO = 1024 B per 8 rows; 16-row step = +2048 B.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int BM = 128;   // queries per block: N of Sᵀ and dPᵀ, M of dQ
constexpr int BN = 128;   // keys per CTA: TMEM lanes of Sᵀ, dPᵀ, dK, dV
constexpr int UMMA_K = 16;
constexpr float LOG2E = 1.4426950408889634f;
constexpr int THREADS = 384;
constexpr int TMA_WARP = 8;
constexpr int MMA_WARP = 9;
// setmaxnreg targets: 232 (dS) + 168 (dQ, unchanged) + 104 (producers) <= 3 x 168, what 12 warps launch with.
constexpr uint32_t DS_REGS = 232;
constexpr uint32_t PRODUCER_REGS = 104;

template <int D>
struct Cfg {
    static_assert(D == 64 || D == 96 || D == 128, "head dims of the task");
    static constexpr int D_PAD = D == 96 ? 128 : D;
    static constexpr int BOXES = D_PAD / 64;
    static constexpr int TILE_BYTES = 128 * D_PAD * 2;   // K, V, Qᵢ or dOᵢ
    static constexpr int STAGES = D_PAD == 64 ? 4 : 2;
    static constexpr int DS_BYTES = BN * BM * 2;
    static constexpr int SMEM_BYTES = (2 + 2 * STAGES) * TILE_BYTES + DS_BYTES + 1024;
    static constexpr uint32_t DK_COL = 0;
    static constexpr uint32_t DV_COL = D_PAD;
    static constexpr uint32_t S_COL = 2 * D_PAD;
    static constexpr uint32_t DP_COL = 2 * D_PAD + BM;   // also dQᵢ
    static_assert(DP_COL + BM <= 512, "TMEM has 512 columns");
    static_assert(SMEM_BYTES + 2048 <= 227 * 1024, "with the static barriers and statistics");
};

// Instruction descriptor for tcgen05.mma .kind::f16 (32 bits): [4,6) D format 1 = F32, [7,10) A format
// 1 = BF16, [10,13) B format 1 = BF16, [15] A major, [16] B major (0 = K, 1 = MN), [17,23) N >> 3,
// [24,29) M >> 4; sparsity, saturate, negate and shift fields 0.
__host__ __device__ constexpr uint32_t idesc(int n, bool a_mn_major, bool b_mn_major) {
    return (1u << 4) | (1u << 7) | (1u << 10) | (uint32_t(a_mn_major) << 15) | (uint32_t(b_mn_major) << 16) |
           (uint32_t(n >> 3) << 17) | (uint32_t(128 >> 4) << 24);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- programmatic dependent launch (no-ops in a launch without the attribute) ----
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_previous() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// ---- mbarrier ----
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
// Returns once the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---- TMA: box at (column c0, row c1, head c2) of a [BH, S, D] tensor ----
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

// ---- tcgen05 ----
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after()  { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// 128B-swizzled smem operand (layout conventions in the header comment).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr, uint32_t lbo_bytes) {
    return uint64_t((saddr & 0x3FFFFu) >> 4) | (uint64_t(lbo_bytes >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 46) | (uint64_t(2) << 61);
}
__device__ __forceinline__ uint64_t kmajor_desc(uint32_t saddr) { return sw128_desc(saddr, 16); }
// Every MN-major operand here is a stack of [64 x 128-row] boxes: LBO = 128 rows x 128 B.
__device__ __forceinline__ uint64_t mnmajor_desc(uint32_t saddr) { return sw128_desc(saddr, 128 * 128); }

// D[tmem] (+)= A[smem] · B[smem], issued by one thread.
__device__ __forceinline__ void umma_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t id,
                                        uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(id), "r"(accumulate) : "memory");
}
// D[tmem] (+)= A[tmem] · B[smem]: A is M x 16 bf16 at lanes 0..127, 8 columns (two bf16 per column).
__device__ __forceinline__ void umma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t id,
                                        uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "r"(a_tmem), "l"(b_desc), "r"(id), "r"(accumulate) : "memory");
}
// Arrives once on the mbarrier when all tcgen05 operations previously issued by this thread have completed.
__device__ __forceinline__ void umma_commit(uint32_t bar) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                 :: "r"(bar) : "memory");
}

__device__ __forceinline__ void tmem_alloc(uint32_t slot, uint32_t ncols) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                 :: "r"(slot), "r"(ncols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(taddr), "r"(ncols) : "memory");
}

// TMEM address: bits [31,16] lane, [15,0] column. Thread `lane` of the warp gets TMEM lane
// (taddr.lane + lane), 32 consecutive columns; the wait sits in the same asm so no use precedes the data.
__device__ __forceinline__ void tmem_ld32(uint32_t taddr, float* r) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.b32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];\n\t"
                 "tcgen05.wait::ld.sync.aligned;"
                 : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]), "=f"(r[4]), "=f"(r[5]), "=f"(r[6]),
                   "=f"(r[7]), "=f"(r[8]), "=f"(r[9]), "=f"(r[10]), "=f"(r[11]), "=f"(r[12]), "=f"(r[13]),
                   "=f"(r[14]), "=f"(r[15]), "=f"(r[16]), "=f"(r[17]), "=f"(r[18]), "=f"(r[19]), "=f"(r[20]),
                   "=f"(r[21]), "=f"(r[22]), "=f"(r[23]), "=f"(r[24]), "=f"(r[25]), "=f"(r[26]), "=f"(r[27]),
                   "=f"(r[28]), "=f"(r[29]), "=f"(r[30]), "=f"(r[31])
                 : "r"(taddr) : "memory");
}
__device__ __forceinline__ void tmem_st16(uint32_t taddr, const uint32_t (&v)[16]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], "
                 "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16};"
                 :: "r"(taddr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]), "r"(v[4]), "r"(v[5]), "r"(v[6]),
                    "r"(v[7]), "r"(v[8]), "r"(v[9]), "r"(v[10]), "r"(v[11]), "r"(v[12]), "r"(v[13]), "r"(v[14]),
                    "r"(v[15])
                 : "memory");
}
__device__ __forceinline__ void tmem_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

// A ring position: slot index and the parity of its current use.

// A ring position: slot index and the parity of its current use.
template <int N>
struct Ring {
    int slot = 0;
    uint32_t phase = 0;
    __device__ void advance() {
        if (++slot == N) {
            slot = 0;
            phase ^= 1;
        }
    }
};

__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void red_add_v4(float* dst, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(dst), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}
// Barrier 1 among the 128 threads of the dS warpgroup.
__device__ __forceinline__ void ds_group_sync() { asm volatile("bar.sync 1, 128;" ::: "memory"); }

// This thread's row of an [S, D] bf16 output from its TMEM lane, columns taddr.. (nothing when row >= S).
template <int D>
__device__ __forceinline__ void store_rows(uint32_t taddr, __nv_bfloat16* out, int row, int S) {
#pragma unroll 1
    for (int c = 0; c < D; c += 32) {
        float v[32];
        tmem_ld32(taddr + c, v);
        if (row < S) {
            uint4* dst = reinterpret_cast<uint4*>(out + size_t(row) * D + c);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                dst[e] = make_uint4(pack_bf16x2(v[8 * e], v[8 * e + 1]), pack_bf16x2(v[8 * e + 2], v[8 * e + 3]),
                                    pack_bf16x2(v[8 * e + 4], v[8 * e + 5]), pack_bf16x2(v[8 * e + 6], v[8 * e + 7]));
        }
    }
}

// Dsum[r] = sum_d dO[r, d] · O[r, d] and dq_acc[r, :] = 0, one warp per row.
__global__ void dot_do_o_kernel(const __nv_bfloat16* __restrict__ dO, const __nv_bfloat16* __restrict__ O,
                                float* __restrict__ dsum, float* __restrict__ dq_acc, long rows, int D) {
    launch_dependents();
    const long r = (long(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const uint4* a = reinterpret_cast<const uint4*>(dO + r * D);
    const uint4* b = reinterpret_cast<const uint4*>(O + r * D);
    float acc = 0.f;
    for (int i = lane; i < D / 8; i += 32) {
        reinterpret_cast<float4*>(dq_acc + r * D)[2 * i] = make_float4(0.f, 0.f, 0.f, 0.f);
        reinterpret_cast<float4*>(dq_acc + r * D)[2 * i + 1] = make_float4(0.f, 0.f, 0.f, 0.f);
        const uint4 x = a[i], y = b[i];
        const __nv_bfloat162* xh = reinterpret_cast<const __nv_bfloat162*>(&x);
        const __nv_bfloat162* yh = reinterpret_cast<const __nv_bfloat162*>(&y);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 xf = __bfloat1622float2(xh[e]), yf = __bfloat1622float2(yh[e]);
            acc = fmaf(xf.x, yf.x, fmaf(xf.y, yf.y, acc));
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) dsum[r] = acc;
}

// dQ = bf16(accumulator), 8 elements a thread.
__global__ void dq_convert_kernel(const float* __restrict__ acc, __nv_bfloat16* __restrict__ dQ, long n8) {
    wait_for_previous();                        // the main kernel's last red.add into the accumulator
    const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const float4 a = reinterpret_cast<const float4*>(acc)[2 * i];
    const float4 b = reinterpret_cast<const float4*>(acc)[2 * i + 1];
    reinterpret_cast<uint4*>(dQ)[i] = make_uint4(pack_bf16x2(a.x, a.y), pack_bf16x2(a.z, a.w),
                                                 pack_bf16x2(b.x, b.y), pack_bf16x2(b.z, b.w));
}

// A compile-time bool: `if (Flag<B>{})` folds away, where a runtime bool keeps its branch.
template <bool B>
struct Flag {
    __device__ constexpr operator bool() const { return B; }
};

template <int D>
__global__ void __launch_bounds__(THREADS, 1)
attention_bwd_tcgen05_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                             const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmdO,
                             const float* __restrict__ LSE, const float* __restrict__ dsum_ws,
                             float* __restrict__ dq_acc, __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV,
                             int S, int causal, float scale) {
    using C = Cfg<D>;
    __shared__ __align__(8) uint64_t kv_full;
    __shared__ __align__(8) uint64_t st_full[C::STAGES];
    __shared__ __align__(8) uint64_t st_empty[C::STAGES];
    __shared__ __align__(8) uint64_t s_full, dp_full, p_full, ds_full, dq_full, dq_empty, acc_full;
    __shared__ uint32_t tmem_slot;
    __shared__ __align__(16) float stat_lse2[BM];   // LSE·log2(e) of the current query block
    __shared__ __align__(16) float stat_dsum[BM];
    extern __shared__ uint8_t dyn_smem[];
    const uint32_t k_smem = (smem_u32(dyn_smem) + 1023u) & ~1023u;   // 128B swizzle atoms are 1024-B aligned
    const uint32_t v_smem = k_smem + C::TILE_BYTES;
    const uint32_t ring = v_smem + C::TILE_BYTES;                   // stage s: Qᵢ, then dOᵢ
    const uint32_t ds_smem = ring + 2 * C::STAGES * C::TILE_BYTES;

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int bh = blockIdx.x;
    const int k0 = blockIdx.y * BN;
    const int i_begin = causal ? k0 / BM : 0;   // earlier query blocks see none of these keys
    const int i_end = (S + BM - 1) / BM;
    const int n_iter = i_end - i_begin;
    const size_t head = size_t(bh) * S;         // row offset of this (b, h) in LSE, Dsum and [.., S, D] tensors

    if (warp == TMA_WARP && lane == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmQ)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmK)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmV)) : "memory");
        asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<uint64_t>(&tmdO)) : "memory");
        mbar_init(smem_u32(&kv_full), 1);
        for (int s = 0; s < C::STAGES; ++s) {
            mbar_init(smem_u32(&st_full[s]), 1);
            mbar_init(smem_u32(&st_empty[s]), 1);
        }
        mbar_init(smem_u32(&s_full), 1);
        mbar_init(smem_u32(&dp_full), 1);
        mbar_init(smem_u32(&dq_full), 1);
        mbar_init(smem_u32(&acc_full), 1);
        mbar_init(smem_u32(&p_full), 128);     // the dS warpgroup's threads
        mbar_init(smem_u32(&ds_full), 128);
        mbar_init(smem_u32(&dq_empty), 128);   // the dQ warpgroup's threads
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (warp == MMA_WARP) tmem_alloc(smem_u32(&tmem_slot), 512);
    if (threadIdx.x == 0) launch_dependents();
    wait_for_previous();                        // Dsum and the zeroed dQ accumulator, from dot_do_o
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const uint32_t tmem = tmem_slot;

    if (warp >= TMA_WARP) {
        // setmaxnreg is .aligned per warpgroup: the whole producer warpgroup runs this one instruction.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(PRODUCER_REGS));
        if (warp == TMA_WARP) {
            if (lane == 0) {
                const uint32_t kb = smem_u32(&kv_full);
                mbar_expect_tx(kb, 2 * C::TILE_BYTES);   // out-of-bounds parts of a box count too (zero-filled)
                for (int b = 0; b < C::BOXES; ++b) {
                    tma_load_3d(k_smem + b * BN * 128, &tmK, b * 64, k0, bh, kb);
                    tma_load_3d(v_smem + b * BN * 128, &tmV, b * 64, k0, bh, kb);
                }
                Ring<C::STAGES> st;
                for (int i = i_begin; i < i_end; ++i) {
                    mbar_wait(smem_u32(&st_empty[st.slot]), st.phase ^ 1);   // the first pass returns at once
                    const uint32_t fb = smem_u32(&st_full[st.slot]);
                    const uint32_t q_dst = ring + st.slot * 2 * C::TILE_BYTES;
                    mbar_expect_tx(fb, 2 * C::TILE_BYTES);
                    for (int b = 0; b < C::BOXES; ++b) {
                        tma_load_3d(q_dst + b * BM * 128, &tmQ, b * 64, i * BM, bh, fb);
                        tma_load_3d(q_dst + C::TILE_BYTES + b * BM * 128, &tmdO, b * 64, i * BM, bh, fb);
                    }
                    st.advance();
                }
            }
            __syncwarp();
        } else if (warp == MMA_WARP) {
            if (lane == 0) {
                constexpr uint32_t ID_T = idesc(BM, false, false);       // Sᵀ, dPᵀ [keys x queries]
                constexpr uint32_t ID_KV = idesc(C::D_PAD, false, true); // dV, dK: A in TMEM, B MN-major
                constexpr uint32_t ID_Q = idesc(C::D_PAD, true, true);   // dQᵢ: A and B MN-major
                Ring<C::STAGES> st;
                auto acquire = [&]() {
                    const int s = st.slot;
                    mbar_wait(smem_u32(&st_full[s]), st.phase);
                    tc_fence_after();
                    st.advance();
                    return s;
                };
                auto q_tile = [&](int s) { return ring + s * 2 * C::TILE_BYTES; };   // dOᵢ follows at + TILE_BYTES
                // [128 rows of a] · [128 rows of b]ᵀ over the head dim, into TMEM columns col.
                auto mma_t = [&](uint32_t col, uint32_t a, uint32_t b, uint64_t* bar) {
#pragma unroll
                    for (int k = 0; k < D / UMMA_K; ++k) {   // D = 96: the zero padding is skipped
                        const uint32_t off = (k / 4) * (128 * 128) + (k % 4) * 32;
                        umma_ss(tmem + col, kmajor_desc(a + off), kmajor_desc(b + off), ID_T, k > 0);
                    }
                    umma_commit(smem_u32(bar));
                };
                // D[col] (+)= A (128 x 128 bf16 in TMEM at a_col) · B (128 rows x D, MN-major at b).
                auto mma_tmem_a = [&](uint32_t col, uint32_t a_col, uint32_t b, bool accumulate) {
#pragma unroll
                    for (int k = 0; k < BM / UMMA_K; ++k)
                        umma_ts(tmem + col, tmem + a_col + 8 * k, mnmajor_desc(b + k * 2048), ID_KV,
                                accumulate || k > 0);
                };
                mbar_wait(smem_u32(&kv_full), 0);
                tc_fence_after();
                int cur = acquire();
                mma_t(C::S_COL, k_smem, q_tile(cur), &s_full);
                mma_t(C::DP_COL, v_smem, q_tile(cur) + C::TILE_BYTES, &dp_full);
                for (int it = 0; it < n_iter; ++it) {
                    const bool more = it + 1 < n_iter;
                    mbar_wait(smem_u32(&p_full), it & 1);
                    tc_fence_after();
                    mma_tmem_a(C::DV_COL, C::S_COL, q_tile(cur) + C::TILE_BYTES, it > 0);   // dV += Pᵀ·dOᵢ
                    int next = 0;
                    if (more) {
                        next = acquire();
                        mma_t(C::S_COL, k_smem, q_tile(next), &s_full);
                    }
                    mbar_wait(smem_u32(&ds_full), it & 1);
                    tc_fence_after();
                    mma_tmem_a(C::DK_COL, C::DP_COL, q_tile(cur), it > 0);       // dK += dSᵀ·Qᵢ
#pragma unroll
                    for (int k = 0; k < BN / UMMA_K; ++k)                          // dQᵢ = dSᵢ·K
                        umma_ss(tmem + C::DP_COL, mnmajor_desc(ds_smem + k * 2048), mnmajor_desc(k_smem + k * 2048),
                                ID_Q, k > 0);
                    umma_commit(smem_u32(&dq_full));
                    umma_commit(smem_u32(&st_empty[cur]));
                    if (more) {
                        mbar_wait(smem_u32(&dq_empty), it & 1);
                        tc_fence_after();
                        mma_t(C::DP_COL, v_smem, q_tile(next) + C::TILE_BYTES, &dp_full);
                        cur = next;
                    }
                }
                umma_commit(smem_u32(&acc_full));
            }
            __syncwarp();
        }
    } else if (warp < 4) {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(DS_REGS));
        // dS warpgroup: thread = key row of the tile (TMEM lane).
        const int row = warp * 32 + lane;
        const int key = k0 + row;
        const uint32_t taddr = tmem + (uint32_t(warp * 32) << 16);
        const float scale_log2 = scale * LOG2E;
        // Thread r fetches the statistics of query r of block i.
        auto fetch = [&](int i, float& lse2, float& dsum) {
            const int qr = i * BM + row;
            lse2 = qr < S ? LSE[head + qr] * LOG2E : 0.f;
            dsum = qr < S ? dsum_ws[head + qr] : 0.f;
        };
        float lse2, dsum;
        fetch(i_begin, lse2, dsum);
        stat_lse2[row] = lse2;
        stat_dsum[row] = dsum;
        ds_group_sync();
        for (int it = 0; it < n_iter; ++it) {
            const int i = i_begin + it;
            const bool more = it + 1 < n_iter;
            if (more) fetch(i + 1, lse2, dsum);   // in flight during this block
            const int q_first = i * BM;
            const bool mask = q_first + BM > S || k0 + BN > S || (causal && q_first < k0 + BN - 1);

            // Pᵀ over Sᵀ, in two copies chosen per block by a warp-uniform branch: the mask's compares, if-converted
            // by ptxas, were a quarter of the loop's instructions (nvdisasm: 389 ISETP in 2,359), and only the causal
            // diagonal and the ragged edges need them (as in the H100 reference).
            mbar_wait(smem_u32(&s_full), it & 1);
            tc_fence_after();
            float p[BM];
#pragma unroll
            for (int c = 0; c < BM / 32; ++c) tmem_ld32(taddr + C::S_COL + 32 * c, p + 32 * c);
            auto exponentiate = [&](auto masked) {
#pragma unroll
                for (int c = 0; c < BM / 32; ++c) {
                    uint32_t packed[16];
#pragma unroll
                    for (int e = 0; e < 32; e += 4) {
                        const float4 l4 = *reinterpret_cast<const float4*>(&stat_lse2[32 * c + e]);
                        const float l[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
                        for (int u = 0; u < 4; ++u) {
                            const int col = 32 * c + e + u;
                            const int qc = q_first + col;
                            const bool hidden = masked && (qc >= S || key >= S || (causal && key > qc));
                            p[col] = hidden ? 0.f : ex2(fmaf(p[col], scale_log2, -l[u]));
                        }
                    }
#pragma unroll
                    for (int e = 0; e < 16; ++e) packed[e] = pack_bf16x2(p[32 * c + 2 * e], p[32 * c + 2 * e + 1]);
                    tmem_st16(taddr + C::S_COL + 16 * c, packed);   // over Sᵀ columns already read
                }
            };
            if (mask)
                exponentiate(Flag<true>{});
            else
                exponentiate(Flag<false>{});
            tmem_wait_st();
            tc_fence_before();
            mbar_arrive(smem_u32(&p_full));

            // dSᵀ over dPᵀ (for dK) and into the dS tile (for dQ).
            // dPᵀ(i) is issued only after dQ(i-1) was drained, so dQ(i-1) has also finished reading the dS tile.
            mbar_wait(smem_u32(&dp_full), it & 1);
            tc_fence_after();
#pragma unroll
            for (int c = 0; c < BM / 32; ++c) {
                float dp[32];
                tmem_ld32(taddr + C::DP_COL + 32 * c, dp);
                uint32_t packed[16];
#pragma unroll
                for (int e = 0; e < 32; e += 4) {
                    const float4 d4 = *reinterpret_cast<const float4*>(&stat_dsum[32 * c + e]);
                    const float d[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
                    for (int u = 0; u < 4; u += 2) {
                        const int col = 32 * c + e + u;
                        packed[(e + u) / 2] = pack_bf16x2(p[col] * (dp[e + u] - d[u]) * scale,
                                                          p[col + 1] * (dp[e + u + 1] - d[u + 1]) * scale);
                    }
                }
                tmem_st16(taddr + C::DP_COL + 16 * c, packed);   // over dPᵀ columns already read
                // Queries 32c .. 32c+31 = 16-B chunks g = 4c .. 4c+3 of this key row: box g / 8, chunk g % 8.
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int g = 4 * c + e;
                    const uint32_t addr = ds_smem + (g / 8) * (BN * 128) + row * 128 + (((g % 8) ^ (row % 8)) << 4);
                    st_shared_v4(addr, packed[4 * e], packed[4 * e + 1], packed[4 * e + 2], packed[4 * e + 3]);
                }
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // dS tile visible to tcgen05.mma
            tmem_wait_st();
            tc_fence_before();
            mbar_arrive(smem_u32(&ds_full));

            if (more) {   // next block's statistics, once every thread is done with these
                ds_group_sync();
                stat_lse2[row] = lse2;
                stat_dsum[row] = dsum;
                ds_group_sync();
            }
        }
        mbar_wait(smem_u32(&acc_full), 0);
        tc_fence_after();
        store_rows<D>(taddr + C::DK_COL, dK + head * D, key, S);
    } else {
        // dQ warpgroup: thread = query row of the block (TMEM lane).
        const int row = (warp - 4) * 32 + lane;
        const uint32_t taddr = tmem + (uint32_t((warp - 4) * 32) << 16);
        for (int it = 0; it < n_iter; ++it) {
            mbar_wait(smem_u32(&dq_full), it & 1);
            tc_fence_after();
            const int qr = (i_begin + it) * BM + row;
            float* dst = dq_acc + (head + qr) * D;
#pragma unroll
            for (int c = 0; c < D; c += 32) {   // the reductions do not wait, so the TMEM is free soon anyway
                float v[32];
                tmem_ld32(taddr + C::DP_COL + c, v);
                if (qr < S) {
#pragma unroll
                    for (int e = 0; e < 32; e += 4) red_add_v4(dst + c + e, v[e], v[e + 1], v[e + 2], v[e + 3]);
                }
            }
            tc_fence_before();
            mbar_arrive(smem_u32(&dq_empty));   // the MMA warp may write dPᵀ(i+1) there now
        }
        mbar_wait(smem_u32(&acc_full), 0);
        tc_fence_after();
        store_rows<D>(taddr + C::DV_COL, dV + head * D, k0 + row, S);
    }

    // All TMEM reads done before the allocating warp frees the columns.
    tc_fence_before();
    __syncthreads();
    if (warp == MMA_WARP) {
        tc_fence_after();
        tmem_dealloc(tmem, 512);
    }
}

// [BH, S, D] bf16 as a 3-D tensor (D innermost), box [64 columns, 128 rows, 1 head], 128B swizzle; rows past
// S of a head and columns past D (D = 96) are zero-filled.
bool encode_heads(CUtensorMap* map, const void* ptr, int BH, int S, int D) {
    const cuuint64_t dims[3] = {cuuint64_t(D), cuuint64_t(S), cuuint64_t(BH)};
    const cuuint64_t strides[2] = {cuuint64_t(D) * 2, cuuint64_t(S) * D * 2};
    const cuuint32_t box[3] = {64, 128, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A launch that may start while the previous kernel on the stream still runs (programmatic dependent launch).
template <class... Params, class... Args>
cudaError_t launch_early(void (*kernel)(Params...), dim3 grid, unsigned threads, size_t smem, cudaStream_t stream,
                         Args... args) {
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, args...);
}

template <int D>
cudaError_t launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, const __nv_bfloat16* O,
                   const __nv_bfloat16* dO, const float* LSE, __nv_bfloat16* dQ, __nv_bfloat16* dK,
                   __nv_bfloat16* dV, int BH, int S, int causal, float scale, float* dq_acc, float* dsum,
                   cudaStream_t stream) {
    using C = Cfg<D>;
    CUtensorMap tmQ, tmK, tmV, tmdO;
    if (!encode_heads(&tmQ, Q, BH, S, D) || !encode_heads(&tmK, K, BH, S, D) || !encode_heads(&tmV, V, BH, S, D) ||
        !encode_heads(&tmdO, dO, BH, S, D))
        return cudaErrorInvalidValue;
    cudaError_t err = cudaFuncSetAttribute(attention_bwd_tcgen05_kernel<D>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    const long rows = long(BH) * S;
    dot_do_o_kernel<<<unsigned((rows + 7) / 8), 256, 0, stream>>>(dO, O, dsum, dq_acc, rows, D);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const dim3 grid(unsigned(BH), unsigned((S + BN - 1) / BN));
    err = launch_early(attention_bwd_tcgen05_kernel<D>, grid, THREADS, C::SMEM_BYTES, stream, tmQ, tmK, tmV, tmdO, LSE,
                       (const float*)dsum, dq_acc, dK, dV, S, causal, scale);
    if (err != cudaSuccess) return err;
    const long n8 = rows * D / 8;
    return launch_early(dq_convert_kernel, dim3(unsigned((n8 + 255) / 256)), 256, 0, stream, (const float*)dq_acc, dQ,
                        n8);
}

}  // namespace

extern "C" cudaError_t ptxbench_attention_bwd(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                                              const __nv_bfloat16* O, const __nv_bfloat16* dO, const float* LSE,
                                              __nv_bfloat16* dQ, __nv_bfloat16* dK, __nv_bfloat16* dV, int B, int H,
                                              int S, int D, int causal, float scale, void* workspace,
                                              size_t workspace_bytes, cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || long(B) * H > 0x7fffffffL || !(scale > 0.f)) return cudaErrorInvalidValue;
    const size_t rows = size_t(B) * H * S;
    if (workspace == nullptr || workspace_bytes < 4 * rows * D + 4 * rows) return cudaErrorInvalidValue;
    // TMA needs 16-B aligned bases; the epilogues and the dQ reductions move 16 B.
    if ((reinterpret_cast<uintptr_t>(Q) | reinterpret_cast<uintptr_t>(K) | reinterpret_cast<uintptr_t>(V) |
         reinterpret_cast<uintptr_t>(O) | reinterpret_cast<uintptr_t>(dO) | reinterpret_cast<uintptr_t>(dQ) |
         reinterpret_cast<uintptr_t>(dK) | reinterpret_cast<uintptr_t>(dV) |
         reinterpret_cast<uintptr_t>(workspace)) & 15)
        return cudaErrorInvalidValue;
    float* dq_acc = static_cast<float*>(workspace);
    float* dsum = dq_acc + rows * D;
    const int BH = B * H;
    switch (D) {
        case 64: return launch<64>(Q, K, V, O, dO, LSE, dQ, dK, dV, BH, S, causal, scale, dq_acc, dsum, stream);
        case 96: return launch<96>(Q, K, V, O, dO, LSE, dQ, dK, dV, BH, S, causal, scale, dq_acc, dsum, stream);
        case 128: return launch<128>(Q, K, V, O, dO, LSE, dQ, dK, dV, BH, S, causal, scale, dq_acc, dsum, stream);
        default: return cudaErrorInvalidValue;
    }
}
