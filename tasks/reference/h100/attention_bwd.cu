// Reference Hopper (sm_90a) attention backward: dQ, dK, dV from Q, K, V, O, dO and the forward's LSE.
// All tensors [B, H, S, D] bf16 (LSE [B, H, S] fp32, natural log); scale = 1/sqrt(D); causal hides key k
// from query q when k > q. FlashAttention-2/3 style, three launches on the caller's stream:
//
//  1. attn_bwd_prep: Delta[row] = sum_d dO·O (fp32) into the workspace and zeroes the fp32 dQ accumulator.
//  2. attn_bwd_main: one CTA per (key block of BN = 128 keys, b·h); 384 threads = 3 warpgroups.
//       warpgroup 0 (setmaxnreg.dec 24): warp 0 lane 0 issues TMA: K_j, V_j once, then per query block i
//         Q_i, dO_i (128B-swizzled 64-column panels) and LSE_i, Delta_i (1D) into a 2-stage mbarrier ring;
//         warp 1 lane 0 adds each step's dQ partial (fp32, staged in smem) to the global accumulator with
//         one bulk reduction (cp.reduce.async.bulk .add.f32).
//       warpgroups 1, 2 (setmaxnreg.inc 240): consumer w owns keys [64w, 64w+64) of the block. Per query
//         block (causal: only blocks with a visible key; masks only on diagonal or ragged blocks):
//           S^T  = K_w Q_i^T          wgmma SS, A K-major, B K-major            (64 x BM, fp32)
//           dP^T = V_w dO_i^T         wgmma SS, A K-major, B K-major
//           P^T  = exp2(S^T·scale·log2e − LSE·log2e);  dS^T = P^T ∘ (dP^T − Delta)
//           dV  += P^T dO_i           wgmma RS, A = P^T (registers), B MN-major (64 x DP, fp32 regs)
//           dS^T → smem (bf16) while dV runs, named barrier over both consumers, then
//           dQ_i = dS K_j             wgmma SS, A MN-major (dS^T buffer), B MN-major (K_j)
//           dK  += dS^T Q_i           wgmma RS, A = dS^T (registers), B MN-major; a wgmma group of its own,
//                                     so that dQ_i is staged for the writer while dK runs (4% faster than
//                                     dK before dQ, MEASUREMENTS.md, twentieth session)
//         BM = 64 (D 96, 128): consumer w computes dQ columns [64w, 64w+64) over all 128 keys;
//         BM = 128 (D 64): consumer w computes dQ rows [64w, 64w+64), all 64 columns.
//         At the end dK·scale and dV are stored straight from the accumulators.
//  3. attn_bwd_dq: dQ = bf16(accumulator · scale).
//  Launches 2 and 3 are programmatic dependent launches: each kernel's CTAs are placed while the one before still
//  runs, and only the threads that read its results (the TMA producer's Delta, the dQ writer, attn_bwd_dq) wait.
//
// D = 96 is padded to DP = 128: TMA zero-fills the columns 96..127, so the padded products are exact.
// Rows past S (queries or keys) read as zeros from TMA and are masked out of P and dS.
//
// Shared memory (dynamic, base aligned to 1024 B; "panel" = 64 bf16 columns, 128 B per row, 128B swizzle:
// the 16-byte chunk c of row r sits at chunk c ^ (r % 8)):
//   K, V        DP/64 panels of [128 keys x 128 B] each (16 KB per panel)
//   Q, dO       per stage: DP/64 panels of [BM rows x 128 B]
//   dS^T        2 buffers (alternating steps) of BM/64 panels of [128 keys x 128 B]: row = key,
//               64 queries per row (written by the consumers with the same swizzle)
//   dQ staging  [BM rows][D] fp32, rows as in global; inside a row the float2 at index c is stored at
//               c ^ ((global row % 4) << 2), global row = bh·S + s (conflict-free writes); the global
//               accumulator keeps that order and attn_bwd_dq undoes it
//   LSE, Delta  per stage BM floats each; then the mbarriers.
//
// wgmma shared-memory descriptors (128B swizzle, layout type 1), in bytes:
//   K-major (A or B: rows of the M/N dim, K contiguous): SBO = 1024 (next 8 rows), LBO unused (16);
//     k-step kk of 16 elements starts at panel (kk / 4) + 32·(kk % 4) bytes.
//   MN-major (transposed: M/N contiguous, 64 per 128 B line; K runs over lines): SBO = 1024 (next 8 K
//     lines), LBO = byte distance to the next 64-wide M/N panel; k-step kk starts at + kk·16·128 bytes.
// Accumulator fragment of m64nNk16 (per warpgroup): d[4j + 2h + e] is row 16·warp + lane/4 + 8h,
// column 8j + 2·(lane % 4) + e. Packed to bf16 pairs (d[2i], d[2i+1]) it is exactly the A register
// fragment of the next product (k-step kk uses pairs 4kk..4kk+3).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int BN = 128;          // keys per CTA: two consumer warpgroups of 64
constexpr int STAGES = 2;        // Q/dO ring depth
constexpr int THREADS = 384;     // producer warpgroup + 2 consumer warpgroups
constexpr int CONSUMER_THREADS = 256;
constexpr float LOG2E = 1.4426950408889634f;

template <int D>
struct Cfg {
    static constexpr int DP = D == 64 ? 64 : 128;    // D padded to whole 64-column panels
    static constexpr int BM = D == 64 ? 128 : 64;    // queries per step
    static constexpr int PANELS = DP / 64;
    static constexpr uint32_t KV_PANEL = BN * 128;   // one 64-column panel of K or V
    static constexpr uint32_t QO_PANEL = BM * 128;   // one panel of a Q or dO tile
    static constexpr uint32_t KV_BYTES = PANELS * KV_PANEL;
    static constexpr uint32_t QO_BYTES = PANELS * QO_PANEL;
    static constexpr uint32_t DS_PANEL = BN * 128;   // 128 keys x 64 queries of dS^T
    static constexpr uint32_t DS_BYTES = (BM / 64) * DS_PANEL;
    static constexpr uint32_t DQ_BYTES = BM * D * 4;
    static constexpr uint32_t K_OFF = 0;
    static constexpr uint32_t V_OFF = K_OFF + KV_BYTES;
    static constexpr uint32_t Q_OFF = V_OFF + KV_BYTES;
    static constexpr uint32_t DO_OFF = Q_OFF + STAGES * QO_BYTES;
    static constexpr uint32_t DS_OFF = DO_OFF + STAGES * QO_BYTES;
    static constexpr uint32_t DQ_OFF = DS_OFF + 2 * DS_BYTES;
    static constexpr uint32_t LSE_OFF = DQ_OFF + DQ_BYTES;
    // A 1D TMA box must start 16 B aligned in global memory and land 128 B aligned in shared memory: each
    // stage loads the LSE (Delta) window from the aligned element at or before the tile's first row,
    // BM + 4 floats, into a 128 B-aligned slot, and readers skip the (row & 3) extra ones.
    static constexpr int ROW_BOX = BM + 4;
    static constexpr uint32_t ROW_SLOT = (ROW_BOX * 4 + 127) / 128 * 128;
    static constexpr uint32_t DELTA_OFF = LSE_OFF + STAGES * ROW_SLOT;
    static constexpr uint32_t BAR_OFF = DELTA_OFF + STAGES * ROW_SLOT;
    // barriers: full[STAGES], empty[STAGES], kv, dq_full, dq_empty
    static constexpr size_t SMEM_BYTES = 1024 + BAR_OFF + 8 * (2 * STAGES + 3);
    static constexpr uint32_t STAGE_TX = 2 * QO_BYTES + 2 * ROW_BOX * 4;
    static_assert(SMEM_BYTES <= 227 * 1024, "shared memory budget");
};

// ---------------------------------------------------------------- mbarrier, TMA, bulk reduction

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n .reg .pred p;\n"
            " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            " selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// 3D tile load of a [BH, S, D] tensor: coordinates (column, row, head).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c, int r, int h) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c), "r"(r), "r"(h) : "memory");
}

// 1D load of a flat fp32 array (LSE, Delta) starting at element x.
__device__ __forceinline__ void tma_load_1d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int x) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x) : "memory");
}

// global[dst .. dst+bytes) += shared[src .. src+bytes), fp32, as one asynchronous bulk operation.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Makes this thread's generic-proxy shared-memory writes visible to the async proxy (wgmma, bulk copies).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Programmatic dependent launch: this CTA lets the next kernel's CTAs be placed; this thread waits until the
// previous kernel has finished and its writes are visible (both no-ops in a launch without the attribute).
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_previous() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Named barrier 1 over the two consumer warpgroups (barrier 0 is __syncthreads).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(CONSUMER_THREADS) : "memory"); }

// ---------------------------------------------------------------- wgmma

// K-major operand, 128B swizzle: SBO 1024 B between 8-row groups, LBO unused.
__device__ __forceinline__ uint64_t desc_k(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

// MN-major operand, 128B swizzle: SBO 1024 B between groups of 8 K-lines, LBO = next 64-wide M/N panel.
__device__ __forceinline__ uint64_t desc_mn(uint32_t addr, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x N] (+)= A[64 x 16] · B[16 x N], both from shared memory (SS). TA/TB: 0 = K-major, 1 = MN-major
// (transposed). scale_d = 0 overwrites D. Used K-major/K-major for S^T and dP^T, MN-major/MN-major for dQ.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, %67, %68;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}
// D[64 x N] += A[64 x 16] · B[16 x N], A from registers (RS: 4 bf16x2, the accumulator fragment layout),
// B from shared memory, TB as above (MN-major for dV and dK). Always accumulates.
template <int TB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t* a, uint64_t db) {
    asm volatile(
        "{\n wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TB));
}
template <int TB>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t* a, uint64_t db) {
    asm volatile(
        "{\n wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, 1, 1, 1, %69;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TB));
}

template <int N, int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, uint32_t scale_d) {
    if constexpr (N == 64) wgmma_ss_n64<TA, TB>(d, da, db, scale_d);
    else wgmma_ss_n128<TA, TB>(d, da, db, scale_d);
}

template <int N, int TB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t* a, uint64_t db) {
    if constexpr (N == 64) wgmma_rs_n64<TB>(d, a, db);
    else wgmma_rs_n128<TB>(d, a, db);
}

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------- kernels

// Delta[row] = sum_d dO[row, d] · O[row, d]; zeroes dq_acc[row, :]. 16 lanes per row, 8 columns per lane.
template <int D>
__global__ void __launch_bounds__(256) attn_bwd_prep(const __nv_bfloat16* __restrict__ O,
                                                     const __nv_bfloat16* __restrict__ dO,
                                                     float* __restrict__ dq_acc, float* __restrict__ delta,
                                                     long long rows) {
    launch_dependents();
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 16;
    const int sub = threadIdx.x & 15;
    float sum = 0.f;
    if (row < rows) {
        if (sub < D / 8) {
            const uint4 o = *reinterpret_cast<const uint4*>(O + row * D + 8 * sub);
            const uint4 g = *reinterpret_cast<const uint4*>(dO + row * D + 8 * sub);
            const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o);
            const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 a = __bfloat1622float2(o2[i]), b = __bfloat1622float2(g2[i]);
                sum = fmaf(a.x, b.x, fmaf(a.y, b.y, sum));
            }
        }
        float4* acc = reinterpret_cast<float4*>(dq_acc + row * D);
        for (int c = sub; c < D / 4; c += 16) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (row < rows && sub == 0) delta[row] = sum;
}

// dQ = bf16(dq_acc · scale), undoing the float2 order of the accumulator rows (see the header).
template <int D>
__global__ void __launch_bounds__(256) attn_bwd_dq(const float* __restrict__ dq_acc, __nv_bfloat16* __restrict__ dQ,
                                                   long long quads, float scale) {
    wait_for_previous();                                 // the main kernel's last reduction into dq_acc
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= quads) return;
    const long long row = idx / (D / 4);
    const int f = (int)(idx % (D / 4));
    const float4 v = *reinterpret_cast<const float4*>(dq_acc + row * D + 4 * (f ^ ((int)(row & 3) << 1)));
    uint2 out;
    out.x = pack_bf16(v.x * scale, v.y * scale);
    out.y = pack_bf16(v.z * scale, v.w * scale);
    *reinterpret_cast<uint2*>(dQ + row * D + 4 * f) = out;
}

// A compile-time bool: `if (Flag<B>{})` folds away, where a runtime bool keeps its branch.
template <bool B>
struct Flag {
    __device__ constexpr operator bool() const { return B; }
};

template <int D>
__global__ void __launch_bounds__(THREADS, 1)
attn_bwd_main(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
              const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
              const __grid_constant__ CUtensorMap tm_lse, const __grid_constant__ CUtensorMap tm_delta,
              float* __restrict__ dq_acc, __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int S,
              int causal, float scale) {
    using C = Cfg<D>;
    constexpr int DP = C::DP, BM = C::BM;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t sb = (raw + 1023u) & ~1023u;        // shared address of the aligned base
    uint8_t* const smem = smem_raw + (sb - raw);        // the same, generic
    const uint32_t full_bar = sb + C::BAR_OFF, empty_bar = full_bar + 8 * STAGES;
    const uint32_t kv_bar = empty_bar + 8 * STAGES, dq_full = kv_bar + 8, dq_empty = dq_full + 8;

    const int nkb = (S + BN - 1) / BN, nqb = (S + BM - 1) / BM;
    const int bh = blockIdx.x / nkb, k0 = (blockIdx.x % nkb) * BN;
    const int first_q = causal ? k0 / BM : 0;           // causal: earlier query blocks see none of these keys
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_bar + 8 * s, 1);
            mbar_init(empty_bar + 8 * s, 8);             // lane 0 of each consumer warp
        }
        mbar_init(kv_bar, 1);
        mbar_init(dq_full, CONSUMER_THREADS);
        mbar_init(dq_empty, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        launch_dependents();
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer warpgroup ----------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (warp == 0 && lane == 0) {
            for (const CUtensorMap* m : {&tm_q, &tm_do, &tm_k, &tm_v, &tm_lse, &tm_delta})
                asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(m)) : "memory");
            mbar_arrive_expect_tx(kv_bar, 2 * C::KV_BYTES);
            for (int p = 0; p < C::PANELS; ++p) {
                tma_load_3d(sb + C::K_OFF + p * C::KV_PANEL, &tm_k, kv_bar, 64 * p, k0, bh);
                tma_load_3d(sb + C::V_OFF + p * C::KV_PANEL, &tm_v, kv_bar, 64 * p, k0, bh);
            }
            wait_for_previous();                         // Delta, written by attn_bwd_prep
            int s = 0;
            uint32_t phase = 0;
            for (int i = first_q; i < nqb; ++i) {
                const uint32_t bar = full_bar + 8 * s;
                mbar_wait(empty_bar + 8 * s, phase ^ 1);   // fresh barriers pass parity 1 at once
                mbar_arrive_expect_tx(bar, C::STAGE_TX);
                for (int p = 0; p < C::PANELS; ++p) {
                    tma_load_3d(sb + C::Q_OFF + s * C::QO_BYTES + p * C::QO_PANEL, &tm_q, bar, 64 * p, i * BM, bh);
                    tma_load_3d(sb + C::DO_OFF + s * C::QO_BYTES + p * C::QO_PANEL, &tm_do, bar, 64 * p, i * BM, bh);
                }
                const int row0 = (bh * S + i * BM) & ~3;
                tma_load_1d(sb + C::LSE_OFF + s * C::ROW_SLOT, &tm_lse, bar, row0);
                tma_load_1d(sb + C::DELTA_OFF + s * C::ROW_SLOT, &tm_delta, bar, row0);
                if (++s == STAGES) { s = 0; phase ^= 1; }
            }
        } else if (warp == 1 && lane == 0) {
            // dQ writer: one bulk fp32 reduction of the staged [rows x D] partial per step.
            wait_for_previous();                         // dq_acc, zeroed by attn_bwd_prep
            uint32_t phase = 0;
            for (int i = first_q; i < nqb; ++i) {
                mbar_wait(dq_full, phase);
                const int rows = min(BM, S - i * BM);
                bulk_reduce_add_f32(dq_acc + ((size_t)bh * S + (size_t)i * BM) * D, sb + C::DQ_OFF,
                                    (uint32_t)(rows * D * 4));
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");   // staging may be rewritten
                mbar_arrive(dq_empty);
                phase ^= 1;
            }
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
        return;
    }

    // ---------------- consumer warpgroups ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int w = wg - 1;                                // keys [64w, 64w+64) of the block
    const int key_row = 64 * w + 16 * warp + (lane >> 2);  // + 8h: this thread's accumulator rows (keys)
    const int quad = 2 * (lane & 3);                     // + 8j + e: this thread's accumulator columns
    const float scale_log2 = scale * LOG2E;

    float dv[DP / 2], dk[DP / 2];
#pragma unroll
    for (int i = 0; i < DP / 2; ++i) dv[i] = dk[i] = 0.f;

    mbar_wait(kv_bar, 0);
    int s = 0;
    uint32_t phase = 0;
    // One query block. At D 96 and 128 two copies of the body, chosen per block by a warp-uniform branch: the
    // mask's compares and selects, if-converted by ptxas, were a fifth of every block's instructions (nvdisasm),
    // and only the causal diagonal and the ragged edges need them. At D 64 (BM 128) one copy that tests per block:
    // with two, ptxas moved the wgmma descriptors off the uniform datapath, and always masking was 13% slower.
    auto step = [&](int i, auto masked) {
        const int it = i - first_q;
        const int q0 = i * BM;
        const uint32_t qs = sb + C::Q_OFF + s * C::QO_BYTES, dos = sb + C::DO_OFF + s * C::QO_BYTES;
        mbar_wait(full_bar + 8 * s, phase);

        // S^T = K_w Q^T and dP^T = V_w dO^T: M = 64 keys, N = BM queries, K = D (the padding is skipped).
        float sacc[BM / 2], dpacc[BM / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t ka = (kk / 4) * C::KV_PANEL + w * 64 * 128 + (kk % 4) * 32;
            const uint32_t qb = (kk / 4) * C::QO_PANEL + (kk % 4) * 32;
            wgmma_ss<BM, 0, 0>(sacc, desc_k(sb + C::K_OFF + ka), desc_k(qs + qb), kk > 0 ? 1u : 0u);
        }
        wgmma_commit();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t ka = (kk / 4) * C::KV_PANEL + w * 64 * 128 + (kk % 4) * 32;
            const uint32_t qb = (kk / 4) * C::QO_PANEL + (kk % 4) * 32;
            wgmma_ss<BM, 0, 0>(dpacc, desc_k(sb + C::V_OFF + ka), desc_k(dos + qb), kk > 0 ? 1u : 0u);
        }
        wgmma_commit();

        // P^T = exp2(S^T·scale·log2e − LSE·log2e), zero where masked.
        const int skip = (bh * S + q0) & 3;
        const float* lse = reinterpret_cast<const float*>(smem + C::LSE_OFF + s * C::ROW_SLOT) + skip;
        const float* dlt = reinterpret_cast<const float*>(smem + C::DELTA_OFF + s * C::ROW_SLOT) + skip;
        wgmma_wait<1>();
        fence_acc(sacc);
#pragma unroll
        for (int j = 0; j < BM / 8; ++j) {
            const float2 l = make_float2(lse[8 * j + quad], lse[8 * j + quad + 1]);
            const float lx = l.x * LOG2E, ly = l.y * LOG2E;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                sacc[4 * j + 2 * h] = ex2(fmaf(sacc[4 * j + 2 * h], scale_log2, -lx));
                sacc[4 * j + 2 * h + 1] = ex2(fmaf(sacc[4 * j + 2 * h + 1], scale_log2, -ly));
            }
        }
        if (masked) {
            // Key k keeps the local columns c with lo <= c < hi (c = q - q0); a key past S keeps none.
            const int hi = S - q0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int k = k0 + key_row + 8 * h;
                const int lo = k >= S ? BM : causal ? k - q0 : 0;
#pragma unroll
                for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int c = 8 * j + quad + e;
                        if (c < lo || c >= hi) sacc[4 * j + 2 * h + e] = 0.f;
                    }
            }
        }

        // dS^T = P^T ∘ (dP^T − Delta), in place of dP^T.
        wgmma_wait<0>();
        fence_acc(dpacc);
#pragma unroll
        for (int j = 0; j < BM / 8; ++j) {
            const float2 dl = make_float2(dlt[8 * j + quad], dlt[8 * j + quad + 1]);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                dpacc[4 * j + 2 * h] = sacc[4 * j + 2 * h] * (dpacc[4 * j + 2 * h] - dl.x);
                dpacc[4 * j + 2 * h + 1] = sacc[4 * j + 2 * h + 1] * (dpacc[4 * j + 2 * h + 1] - dl.y);
            }
        }
        uint32_t pb[BM / 4], db[BM / 4];
#pragma unroll
        for (int t = 0; t < BM / 4; ++t) {
            pb[t] = pack_bf16(sacc[2 * t], sacc[2 * t + 1]);
            db[t] = pack_bf16(dpacc[2 * t], dpacc[2 * t + 1]);
        }

        // dV += P^T dO: M = 64 keys, N = DP, K = BM queries; B MN-major (D contiguous). It runs while dS^T goes to
        // shared memory; dQ joins its group, dK += dS^T Q goes last in a group of its own, so that dQ is staged
        // while the tensor cores work on dK.
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) wgmma_rs<DP, 1>(dv, pb + 4 * kk, desc_mn(dos + kk * 2048, C::QO_PANEL));

        // dS^T (bf16) to shared memory for dQ: row = key, queries contiguous, 128B swizzle.
        const uint32_t dsb = C::DS_OFF + (it & 1) * C::DS_BYTES;
#pragma unroll
        for (int j = 0; j < BM / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = key_row + 8 * h;
                const uint32_t off = dsb + (j / 8) * C::DS_PANEL + r * 128 + (((j % 8) ^ (r % 8)) << 4) + 2 * quad;
                *reinterpret_cast<uint32_t*>(smem + off) = db[2 * j + h];
            }
        fence_proxy_async();
        consumers_sync();

        // dQ = dS K: M = 64 queries, N = 64 columns, K = 128 keys; A and B MN-major.
        constexpr bool split_rows = BM == 128;           // D 64: rows split; otherwise columns split
        const uint32_t a_base = sb + dsb + (split_rows ? w : 0) * C::DS_PANEL;
        const uint32_t b_base = sb + C::K_OFF + (split_rows ? 0 : w) * C::KV_PANEL;
        float dq[32];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            wgmma_ss<64, 1, 1>(dq, desc_mn(a_base + kk * 2048, C::DS_PANEL), desc_mn(b_base + kk * 2048, C::KV_PANEL),
                               kk > 0 ? 1u : 0u);
        wgmma_commit();
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) wgmma_rs<DP, 1>(dk, db + 4 * kk, desc_mn(qs + kk * 2048, C::QO_PANEL));
        wgmma_commit();
        wgmma_wait<1>();                                     // dV and dQ done; dK runs on
        fence_acc(dq);
        fence_acc(dv);

        // Stage this warpgroup's dQ part for the writer warp.
        mbar_wait(dq_empty, (it & 1) ^ 1);
        float* dqs = reinterpret_cast<float*>(smem + C::DQ_OFF);
        const int row0 = (split_rows ? 64 * w : 0) + 16 * warp + (lane >> 2);
        const int col0 = (split_rows ? 0 : 64 * w) + quad;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int col = col0 + 8 * j;
            if (col < D) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = row0 + 8 * h;
                    const int c2 = (col >> 1) ^ (((r + bh * S) & 3) << 2);   // by the global row
                    *reinterpret_cast<float2*>(dqs + r * D + 2 * c2) =
                        make_float2(dq[4 * j + 2 * h], dq[4 * j + 2 * h + 1]);
                }
            }
        }
        fence_proxy_async();
        mbar_arrive(dq_full);
        wgmma_wait<0>();
        fence_acc(dk);
        if (lane == 0) mbar_arrive(empty_bar + 8 * s);     // Q, dO, LSE, Delta of this stage are consumed
    };
    for (int i = first_q; i < nqb; ++i) {
        const bool masked = (causal && i * BM < k0 + BN) || (i + 1) * BM > S || k0 + BN > S;
        if constexpr (BM == 128)
            step(i, masked);
        else if (masked)
            step(i, Flag<true>{});
        else
            step(i, Flag<false>{});
        if (++s == STAGES) { s = 0; phase ^= 1; }
    }

    // dV and dK·scale from the accumulators (rows = keys, columns = d).
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
        const int col = 8 * j + quad;
        if (col < D) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int k = k0 + key_row + 8 * h;
                if (k < S) {
                    const size_t at = ((size_t)bh * S + k) * D + col;
                    *reinterpret_cast<uint32_t*>(dV + at) = pack_bf16(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]);
                    *reinterpret_cast<uint32_t*>(dK + at) =
                        pack_bf16(dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- host side

// [BH, S, D] bf16 tensor, box = 64 columns x rows x 1 head, 128B swizzle, out-of-bounds reads as zero.
bool encode_heads(CUtensorMap* map, const void* ptr, int D, int S, int BH, int rows) {
    const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)S, (cuuint64_t)BH};
    const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)S * D * 2};
    const cuuint32_t box[3] = {64, (cuuint32_t)rows, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Flat fp32 array of n elements, box of `box` elements, no swizzle.
bool encode_flat(CUtensorMap* map, const float* ptr, long long n, int box) {
    const cuuint64_t dims[1] = {(cuuint64_t)n};
    const cuuint64_t strides[1] = {4};                   // unused for rank 1
    const cuuint32_t boxd[1] = {(cuuint32_t)box};
    const cuuint32_t elem_strides[1] = {1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, const_cast<float*>(ptr), dims, strides,
                                  boxd, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A launch that may start while the previous kernel on the stream still runs (programmatic dependent launch): its
// CTAs are placed once every CTA of that kernel has executed launch_dependents, and wait_for_previous holds the
// threads that read its results. Saves each boundary's drain and launch (the three kernels run back to back).
template <class... Params, class... Args>
cudaError_t launch_early(void (*kernel)(Params...), unsigned grid, unsigned threads, size_t smem, cudaStream_t stream,
                         Args... args) {
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(grid);
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
                   __nv_bfloat16* dV, int BH, int S, int causal, float scale, float* dq_acc, float* delta,
                   cudaStream_t stream) {
    using C = Cfg<D>;
    const long long rows = (long long)BH * S;
    CUtensorMap tm_q, tm_do, tm_k, tm_v, tm_lse, tm_delta;
    if (!encode_heads(&tm_q, Q, D, S, BH, C::BM) || !encode_heads(&tm_do, dO, D, S, BH, C::BM) ||
        !encode_heads(&tm_k, K, D, S, BH, BN) || !encode_heads(&tm_v, V, D, S, BH, BN) ||
        !encode_flat(&tm_lse, LSE, rows, C::ROW_BOX) || !encode_flat(&tm_delta, delta, rows, C::ROW_BOX))
        return cudaErrorInvalidValue;
    cudaError_t err =
        cudaFuncSetAttribute(attn_bwd_main<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM_BYTES);
    if (err != cudaSuccess) return err;

    attn_bwd_prep<D><<<(unsigned)((rows + 15) / 16), 256, 0, stream>>>(O, dO, dq_acc, delta, rows);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    const long long blocks = (long long)BH * ((S + BN - 1) / BN);
    err = launch_early(attn_bwd_main<D>, (unsigned)blocks, THREADS, C::SMEM_BYTES, stream, tm_q, tm_do, tm_k, tm_v,
                       tm_lse, tm_delta, dq_acc, dK, dV, S, causal, scale);
    if (err != cudaSuccess) return err;
    const long long quads = rows * (D / 4);
    return launch_early(attn_bwd_dq<D>, (unsigned)((quads + 255) / 256), 256, 0, stream, (const float*)dq_acc, dQ,
                        quads, scale);
}

bool aligned16(const void* p) { return p && (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

extern "C" cudaError_t ptxbench_attention_bwd(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                                              const __nv_bfloat16* O, const __nv_bfloat16* dO, const float* LSE,
                                              __nv_bfloat16* dQ, __nv_bfloat16* dK, __nv_bfloat16* dV, int B, int H,
                                              int S, int D, int causal, float scale, void* workspace,
                                              size_t workspace_bytes, cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || (long long)B * H * S >= (1ll << 31) || !aligned16(Q) || !aligned16(K) ||
        !aligned16(V) || !aligned16(O) || !aligned16(dO) || !aligned16(LSE) || !aligned16(dQ) || !aligned16(dK) ||
        !aligned16(dV) || !aligned16(workspace))
        return cudaErrorInvalidValue;
    const int BH = B * H;
    const size_t acc_floats = (size_t)BH * S * D;
    if (workspace_bytes < 4 * (acc_floats + (size_t)BH * S)) return cudaErrorInvalidValue;
    float* dq_acc = static_cast<float*>(workspace);
    float* delta = dq_acc + acc_floats;                  // Delta follows the dQ accumulator
    switch (D) {
        case 64: return launch<64>(Q, K, V, O, dO, LSE, dQ, dK, dV, BH, S, causal, scale, dq_acc, delta, stream);
        case 96: return launch<96>(Q, K, V, O, dO, LSE, dQ, dK, dV, BH, S, causal, scale, dq_acc, delta, stream);
        case 128: return launch<128>(Q, K, V, O, dO, LSE, dQ, dK, dV, BH, S, causal, scale, dq_acc, delta, stream);
        default: return cudaErrorInvalidValue;
    }
}
