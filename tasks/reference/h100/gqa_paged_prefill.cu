// Reference Hopper (sm_90a) paged GQA prefill: B sequences append q_len[b] new tokens to a paged KV cache.
// q, output [T, H, D] bf16 packed by qo_indptr; k_cache, v_cache [pages, P, KV, D] bf16 (NHD); sequence b
// owns pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]-1], the last holding kv_last_page_len[b] tokens.
// Query head h reads KV head h / (H / KV). Causal: bottom-right aligned, query row i of b attends keys
// 0 .. i + kv_len[b] - q_len[b]. lse [T, H] fp32, natural log.
//
// Design (FlashAttention-3 style, built on tasks/reference/h100/attention_fwd.cu)
//  * GQA packing: one CTA serves one KV head g and the G = H / KV query heads that read it, over TQ = 128 / G
//    consecutive query tokens of one sequence: its 128-row M tile is row r = token (r / G), head g·G + r % G.
//    Q arrives by one 3D TMA box {64 columns, G heads, TQ tokens} per 64-column panel over q seen as
//    {D, H, T}: that box is exactly 128 rows of 128 B in the row order above, with the 128B swizzle. Rows
//    past the sequence (the next sequence's tokens, or zeros past T) are computed and never stored.
//  * Work list (host plan, a __grid_constant__ parameter of ~2.6 KB): work items are (sequence, query tile,
//    KV split); the KV head is the fastest index of blockIdx.x. Sequences go by decreasing cost of their
//    largest item, a causal sequence's tiles from the last (most keys) to the first; each CTA finds its item
//    by binary search over per-sequence prefix counts. Beyond MAX_SEQS sequences the grid is simply
//    B x max tiles (no split) and empty CTAs return.
//  * KV split (for skewed lengths: one sequence with few query tiles but tens of thousands of keys): a tile
//    holding more than half an SM's fair share of key blocks is cut into nsplit equal block ranges; each
//    writes an unnormalised partial (o, m, l) per row into the workspace, and a second kernel merges them
//    (one warp per (token, head) row). The tasks' workspace (one partial per row and head + 1 MiB) is ample
//    since only short-query sequences are split; a sequence whose partials do not fit is not split.
//  * 384 threads = 3 warpgroups, warp-specialised:
//      - warpgroup 0: producer. One thread issues the Q TMA; K and V blocks of BN = 128 keys go into a ring of
//        STAGES slots (separate K and V barriers).
//          P % 64 == 0 ("TMA" path): 4D tensor maps over the caches {D, KV, P, pages}, box {64, 1, 64, 1}:
//          one box = 64 tokens of one page x 64 columns, 128B swizzle; a 128-key block is 2 pages-chunks x 2
//          panels for K and the same for V, the page from kv_indices.
//          Other P (P = 1): cp.async 16 B per lane into the same 128B-swizzled layout, computed by hand
//          (16-byte chunk c of row r at chunk c ^ (r % 8)); producer warps 0-1 copy K, 2-3 copy V (each
//          waits only for its own ring's slot, so K runs ahead of V as with TMA), warp half hf the rows
//          64 hf .. 64 hf + 63: each lane looks up one row's cache position per 32 rows, a width-16 shuffle
//          hands it to the 16 lanes that copy that row's 256 contiguous bytes (three instructions a copy). Completion by
//          cp.async.mbarrier.arrive.noinc (64 arrivals per full barrier); ring of 3 slots (longer latency).
//          Consumers issue fence.proxy.async after the wait, before wgmma (async proxy) reads such data.
//          Keys past kv_len in a block re-read the sequence's last token / 64-chunk (finite data, masked).
//      - warpgroups 1, 2: consumers, 64 rows each, exactly the dense kernel's pipeline: S = Q·Kᵀ by wgmma
//        (both K-major in smem), masking per row (key > min(kv_len-1, causal limit of the row's token)),
//        online softmax in base 2, O += P·V with P from registers and V as an MN-major operand; the next
//        block's Q·Kᵀ overlaps this block's softmax; the two warpgroups ping-pong their tensor-core work.
//  * Epilogue: O / l as bf16 pairs straight from the accumulators, lse = (m + log2 l)·ln 2, rows of the
//    sequence only (or the partial of a KV split).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda.h>
#include <stdint.h>

namespace {

constexpr int HEAD_DIM = 128;
constexpr int DP = HEAD_DIM / 64;             // 64-column panels
constexpr int BM = 128;                       // M rows per CTA (tokens x heads), 64 per consumer warpgroup
constexpr int BN = 128;                       // keys per block
// Ring depth: 2 with TMA (as the dense kernel), 3 for the cp.async gathers (longer latency); 3 slots still
// fit: 1 KiB alignment + 32 KiB Q + 3 x 64 KiB K/V + barriers = 230,504 B <= 232,448 B.
template <bool TMA_KV>
__host__ __device__ constexpr int stages() { return TMA_KV ? 2 : 3; }
constexpr int CONSUMERS = 2;
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int S_REGS = BN / 2;
constexpr uint32_t PANEL_Q = BM * 128;
constexpr uint32_t PANEL_KV = BN * 128;
constexpr uint32_t Q_BYTES = DP * PANEL_Q;
constexpr uint32_t KV_BYTES = DP * PANEL_KV;
template <bool TMA_KV>
constexpr size_t smem_bytes() { return 1024 + Q_BYTES + 2 * stages<TMA_KV>() * KV_BYTES + (1 + 4 * stages<TMA_KV>()) * 8; }
static_assert(smem_bytes<false>() <= 232448 && smem_bytes<true>() <= 232448, "shared memory per block");
constexpr int MAX_SEQS = 128;
constexpr int MAX_SPLITS = 16;
constexpr int MERGE_WARPS = 8;
constexpr int CPASYNC_ARRIVALS = 64;          // 2 producer warps x 32 lanes per K (or V) block
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

struct Plan {
    int direct;                     // 1: blockIdx.x / KV = b * max_tiles + local tile (no table, no split)
    int max_tiles;
    int nseq;                       // entries of seq
    int nmerge;                     // entries of merge_j
    int tile_start[MAX_SEQS + 1];   // first work item (tile x split) of the j-th sequence in work order
    int seq[MAX_SEQS];              // the j-th sequence in work order
    int nsplit[MAX_SEQS];           // KV splits of each of its tiles (1: no split)
    int part_base[MAX_SEQS];        // its first partial row (split sequences): row = base + (s·q_len + tok)·H + h
    int merge_j[MAX_SEQS];          // work-order positions of the split sequences
};

struct Args {
    const __nv_bfloat16* k;
    const __nv_bfloat16* v;
    const int* qo_indptr;
    const int* kv_indptr;
    const int* kv_indices;
    const int* last;
    __nv_bfloat16* out;
    float* lse;
    float2* part_ml;   // [partial rows] (m in base 2 of the scaled scores, l)
    float* part_o;     // [partial rows][D], unnormalised
    int H, KV, G, TQ, P, p_shift;   // p_shift: log2 P or -1
    int causal;
    float scale_log2;
};

// ------------------------------------------------------------------------------------------------
// PTX wrappers
// ------------------------------------------------------------------------------------------------
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

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(reinterpret_cast<uint64_t>(src))
                 : "memory");
}

// base + row · 256 bytes (one token of one KV head) in one multiply-add.
__device__ __forceinline__ const void* row_address(const char* base, uint32_t row) {
    uint64_t address;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(address) : "r"(row), "n"(HEAD_DIM * 2), "l"(reinterpret_cast<uint64_t>(base)));
    return reinterpret_cast<const void*>(address);
}

// Arrives on the barrier once all this thread's earlier cp.async copies have landed (counts as one of
// the barrier's expected arrivals).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// wgmma shared-memory descriptor, 128B swizzle, 8-row atoms of 1024 B (see attention_fwd.cu).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(1024 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// D[64x128] (+)= A[64x16] · B[128x16]^T, A and B K-major in shared memory (128B swizzle).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}

// D[64x64] (+)= A[64x16] · B[16x64]: A as bf16 pairs in registers (accumulator layout), B MN-major in
// shared memory (trans-b = 1).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, uint32_t scale_d) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// S = Q·Kᵀ for one key block: 8 k-steps of 16 columns, 32 B apart in a panel, a new panel every 4.
__device__ __forceinline__ void scores(float (&s)[S_REGS], uint32_t q_tile, uint32_t k_tile) {
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        const uint64_t da = smem_desc(q_tile + (kk / 4) * PANEL_Q) + 2 * (kk % 4);
        const uint64_t db = smem_desc(k_tile + (kk / 4) * PANEL_KV) + 2 * (kk % 4);
        wgmma_ss_n128(s, da, db, kk > 0 ? 1u : 0u);
    }
}

__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// Masks one S block: key col of this thread's row h is hidden when col > lim[h] (lim already folds the
// sequence end and the causal limit). Only blocks that reach the warpgroup's smallest limit pay for it.
__device__ __forceinline__ void mask_block(float (&s)[S_REGS], int k0, int wg_min_lim, const int (&lim)[2], int lane) {
    if (k0 + BN - 1 > wg_min_lim) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = k0 + 8 * j + 2 * (lane & 3) + e;
                    if (col > lim[h]) s[4 * j + 2 * h + e] = -INFINITY;
                }
    }
}

__device__ __forceinline__ void softmax_block(float (&s)[S_REGS], float (&m)[2], float (&l)[2], float (&correction)[2],
                                              float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        const float m_new = fmaxf(m[h], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;   // a row with nothing visible yet
        correction[h] = exp2_approx(m[h] - m_use);
        m[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float p = exp2_approx(fmaf(s[4 * j + 2 * h + e], scale_log2, -m_use));
                s[4 * j + 2 * h + e] = p;
                sum += p;
            }
        l[h] = l[h] * correction[h] + sum;
    }
}

__device__ __forceinline__ void to_fragments(uint32_t (&p)[BN / 16][4], const float (&s)[S_REGS]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        p[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
        p[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        p[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        p[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

__device__ __forceinline__ void accumulate_pv(float (&o)[DP][32], const uint32_t (&p)[BN / 16][4], uint32_t v_tile) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int d = 0; d < DP; ++d) wgmma_rs_n64(o[d], p[kk], smem_desc(v_tile + d * PANEL_KV + kk * 16 * 128), 1u);
}

// ------------------------------------------------------------------------------------------------
// The CTA's tile: sequence, query tile, KV head, lengths and the number of key blocks.
// ------------------------------------------------------------------------------------------------
struct Tile {
    int g;          // KV head
    int q_start;    // first packed row of the sequence
    int q_len, kv_len, diag;   // diag = kv_len - q_len
    int pbase;      // kv_indptr[b]
    int q0;         // first query token (within the sequence) of the tile
    int kb0, nblk;  // key blocks kb0 .. kb0 + nblk - 1 to visit (a KV split's share of the tile's blocks)
    int split, nsplit, part_base;
    bool valid;
};

__device__ __forceinline__ Tile find_tile(const Args& a, const Plan& plan) {
    Tile t;
    const int x = blockIdx.x / a.KV;
    t.g = blockIdx.x % a.KV;
    int b, local;
    t.split = 0;
    t.nsplit = 1;
    t.part_base = 0;
    if (plan.direct) {
        b = x / plan.max_tiles;
        local = x % plan.max_tiles;
    } else {
        int lo = 0, hi = plan.nseq - 1;   // the last j with tile_start[j] <= x
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (plan.tile_start[mid] <= x) lo = mid; else hi = mid - 1;
        }
        b = plan.seq[lo];
        t.nsplit = plan.nsplit[lo];
        t.part_base = plan.part_base[lo];
        local = (x - plan.tile_start[lo]) / t.nsplit;
        t.split = (x - plan.tile_start[lo]) % t.nsplit;
    }
    t.q_start = __ldg(a.qo_indptr + b);
    t.q_len = __ldg(a.qo_indptr + b + 1) - t.q_start;
    t.pbase = __ldg(a.kv_indptr + b);
    t.kv_len = (__ldg(a.kv_indptr + b + 1) - t.pbase - 1) * a.P + __ldg(a.last + b);
    t.diag = t.kv_len - t.q_len;
    const int ntiles = (t.q_len + a.TQ - 1) / a.TQ;
    t.valid = local < ntiles && t.kv_len > 0;
    const int qt = a.causal ? ntiles - 1 - local : local;
    t.q0 = qt * a.TQ;
    const int q_last = min(t.q0 + a.TQ, t.q_len) - 1;
    const int kv_end = a.causal ? min(t.kv_len, q_last + t.diag + 1) : t.kv_len;
    const int k_end = max(1, (kv_end + BN - 1) / BN);
    // The host keeps nsplit <= the fewest blocks of any tile of the sequence: every split has a block.
    t.kb0 = t.split * k_end / t.nsplit;
    t.nblk = (t.split + 1) * k_end / t.nsplit - t.kb0;
    return t;
}

// ------------------------------------------------------------------------------------------------
// Main kernel
// ------------------------------------------------------------------------------------------------
template <bool TMA_KV>
__global__ void __launch_bounds__(THREADS, 1)
gqa_paged_prefill_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                         const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ Args a,
                         const __grid_constant__ Plan plan) {
    constexpr int STAGES = stages<TMA_KV>();
    extern __shared__ uint8_t smem_raw[];
    const uint32_t smem_q = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t smem_k = smem_q + Q_BYTES;
    const uint32_t smem_v = smem_k + STAGES * KV_BYTES;
    const uint32_t full_q = smem_v + STAGES * KV_BYTES;
    const uint32_t full_k = full_q + 8;
    const uint32_t full_v = full_k + 8 * STAGES;
    const uint32_t empty_k = full_v + 8 * STAGES;
    const uint32_t empty_v = empty_k + 8 * STAGES;

    const Tile t = find_tile(a, plan);
    if (!t.valid) return;   // whole CTA: before any barrier
    const int nblk = t.nblk, kb0 = t.kb0;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_q)) : "memory");
        if constexpr (TMA_KV) {
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_k)) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmap_v)) : "memory");
        }
        mbar_init(full_q, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_k + 8 * s, TMA_KV ? 1 : CPASYNC_ARRIVALS);
            mbar_init(full_v + 8 * s, TMA_KV ? 1 : CPASYNC_ARRIVALS);
            mbar_init(empty_k + 8 * s, CONSUMERS * 4);
            mbar_init(empty_v + 8 * s, CONSUMERS * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---------------- producer ----------------
        if constexpr (TMA_KV) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        } else {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        }
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(full_q, Q_BYTES);
            for (int p = 0; p < DP; ++p)
                tma_load_3d(smem_q + p * PANEL_Q, &tmap_q, full_q, 64 * p, t.g * a.G, t.q_start + t.q0);
        }
        if constexpr (TMA_KV) {
            // P % 64 == 0: a 128-key block is two 64-token chunks, each inside one page.
            if (threadIdx.x == 0) {
                const int last_chunk = ((t.kv_len - 1) / 64) * 64;
                for (int i = 0; i < nblk; ++i) {
                    const int kb = kb0 + i, s = i % STAGES;
                    const uint32_t phase = (i / STAGES) & 1;
                    int page[2], slot[2];
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int c0 = min(kb * BN + 64 * j, last_chunk);
                        const int pi = c0 / a.P;
                        page[j] = __ldg(a.kv_indices + t.pbase + pi);
                        slot[j] = c0 - pi * a.P;
                    }
                    mbar_wait(empty_k + 8 * s, phase ^ 1);
                    mbar_arrive_expect_tx(full_k + 8 * s, KV_BYTES);
#pragma unroll
                    for (int j = 0; j < 2; ++j)
#pragma unroll
                        for (int p = 0; p < DP; ++p)
                            tma_load_4d(smem_k + s * KV_BYTES + p * PANEL_KV + j * 64 * 128, &tmap_k, full_k + 8 * s,
                                        64 * p, t.g, slot[j], page[j]);
                    mbar_wait(empty_v + 8 * s, phase ^ 1);
                    mbar_arrive_expect_tx(full_v + 8 * s, KV_BYTES);
#pragma unroll
                    for (int j = 0; j < 2; ++j)
#pragma unroll
                        for (int p = 0; p < DP; ++p)
                            tma_load_4d(smem_v + s * KV_BYTES + p * PANEL_KV + j * 64 * 128, &tmap_v, full_v + 8 * s,
                                        64 * p, t.g, slot[j], page[j]);
                }
            }
        } else {
            // Any P: per-token 16-byte cp.async into the 128B-swizzled layout. Warps 0-1 copy K, warps 2-3
            // copy V (each waits only for its own ring's slot); warp half hf takes rows 64 hf .. 64 hf + 63,
            // in two groups of 32. Lane L (c16 = L % 16, sub = L / 16) looks up row 2·c16 + sub of a group;
            // step j copies rows 2j (lanes 0-15) and 2j + 1 (lanes 16-31), 256 contiguous bytes each, the
            // row's cache position fetched by a width-16 shuffle from lane j of the half. The inner loop is
            // three instructions per copy (shuffle, address, cp.async): the producer shares the SM's issue
            // slots with the consumers' softmax.
            const int pw = threadIdx.x / 32, lane = threadIdx.x & 31;
            const bool is_v = pw >= 2;
            const int hf = pw & 1;
            const int c16 = lane & 15;                       // 16-byte chunk of the 256-byte row
            const int sub = lane >> 4;                       // odd or even rows
            const char* base = reinterpret_cast<const char*>(is_v ? a.v : a.k) + c16 * 16;
            // Shared-memory offset of this lane's chunk in rows 64 hf + 2q + sub (q = 0..3) of a slot; row
            // 64 hf + 32 h2 + 8 m + 2q + sub adds (32 h2 + 8 m)·128, which leaves the swizzle (row % 8) alone.
            uint32_t lane_dst[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const uint32_t r = (uint32_t)(2 * q + sub);
                lane_dst[q] = (uint32_t)(c16 >> 3) * PANEL_KV + (uint32_t)(64 * hf + r) * 128 +
                              (((uint32_t)(c16 & 7) ^ r) << 4);
            }
            const uint32_t ring = is_v ? smem_v : smem_k;
            const uint32_t full = is_v ? full_v : full_k;
            const uint32_t empty = is_v ? empty_v : empty_k;
            for (int i = 0; i < nblk; ++i) {
                const int kb = kb0 + i, s = i % STAGES;
                const uint32_t phase = (i / STAGES) & 1;
                // The 256-byte row (cache token · KV + g) of this lane's row in each group of 32; it fits
                // 32 bits (the host bounds pages · P · KV).
                uint32_t row_id[2];
#pragma unroll
                for (int h2 = 0; h2 < 2; ++h2) {
                    const int tok = min(kb * BN + 64 * hf + 32 * h2 + 2 * c16 + sub, t.kv_len - 1);
                    int pi, slot;
                    if (a.p_shift >= 0) {
                        pi = tok >> a.p_shift;
                        slot = tok & (a.P - 1);
                    } else {
                        pi = tok / a.P;
                        slot = tok - pi * a.P;
                    }
                    row_id[h2] = (uint32_t)((__ldg(a.kv_indices + t.pbase + pi) * a.P + slot) * a.KV + t.g);
                }
                mbar_wait(empty + 8 * s, phase ^ 1);
                const uint32_t slot_base = ring + s * KV_BYTES;
#pragma unroll
                for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
                    for (int j = 0; j < 16; ++j) {
                        const uint32_t r = __shfl_sync(0xffffffffu, row_id[h2], j, 16);
                        cp_async_16(slot_base + lane_dst[j % 4] + (uint32_t)(32 * h2 + 8 * (j / 4)) * 128,
                                    row_address(base, r));
                    }
                cp_async_arrive_noinc(full + 8 * s);
            }
            asm volatile("cp.async.wait_all;" ::: "memory");
        }
        return;
    }

    // ---------------- consumers ----------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1;
    const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31;
    const int r_base = cw * 64 + warp * 16 + lane / 4;   // this thread's M rows: r_base and r_base + 8
    const int G = a.G;
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int tok = t.q0 + (r_base + 8 * h) / G;
        lim[h] = a.causal ? min(tok + t.diag, t.kv_len - 1) : t.kv_len - 1;
    }
    const int wg_min_lim = a.causal ? min(t.q0 + (cw * 64) / G + t.diag, t.kv_len - 1) : t.kv_len - 1;
    const uint32_t q_tile = smem_q + cw * 64 * 128;

    float o[DP][32];
#pragma unroll
    for (int p = 0; p < DP; ++p)
#pragma unroll
        for (int i = 0; i < 32; ++i) o[p][i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.f, 0.f};
    float correction[2];
    float s_acc[S_REGS];
    uint32_t p_frag[BN / 16][4];
    auto release = [&](uint32_t empty, int kb) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * (kb % STAGES));
    };
    auto phase_of = [](int kb) { return (uint32_t)((kb / STAGES) & 1); };
    const float scale_log2 = a.scale_log2;

    if (cw == 1) named_arrive(1);   // warpgroup 0 goes first

    mbar_wait(full_q, 0);
    mbar_wait(full_k, 0);
    if constexpr (!TMA_KV) fence_proxy_async();
    wgmma_fence();
    scores(s_acc, q_tile, smem_k);
    wgmma_commit();
    wgmma_wait0();
    pin(s_acc);
    release(empty_k, 0);
    mask_block(s_acc, kb0 * BN, wg_min_lim, lim, lane);
    softmax_block(s_acc, m, l, correction, scale_log2);
    to_fragments(p_frag, s_acc);

    for (int kb = 1; kb < nblk; ++kb) {   // kb: ring position; the keys start at (kb0 + kb)·BN
        const int s = kb % STAGES, prev = (kb - 1) % STAGES;
        mbar_wait(full_k + 8 * s, phase_of(kb));
        mbar_wait(full_v + 8 * prev, phase_of(kb - 1));
        if constexpr (!TMA_KV) fence_proxy_async();
        pin(p_frag);
#pragma unroll
        for (int p = 0; p < DP; ++p) pin(o[p]);
        named_sync(1 + cw);
        wgmma_fence();
        scores(s_acc, q_tile, smem_k + s * KV_BYTES);
        wgmma_commit();
        accumulate_pv(o, p_frag, smem_v + prev * KV_BYTES);
        wgmma_commit();
        named_arrive(2 - cw);
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        pin(s_acc);
        release(empty_k, kb);
        mask_block(s_acc, (kb0 + kb) * BN, wg_min_lim, lim, lane);
        softmax_block(s_acc, m, l, correction, scale_log2);
        wgmma_wait0();
#pragma unroll
        for (int p = 0; p < DP; ++p) pin(o[p]);
        release(empty_v, kb - 1);
#pragma unroll
        for (int p = 0; p < DP; ++p)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    o[p][4 * j + 2 * h] *= correction[h];
                    o[p][4 * j + 2 * h + 1] *= correction[h];
                }
        to_fragments(p_frag, s_acc);
    }
    if (cw == 0) named_sync(1);   // the other warpgroup's last arrival
    mbar_wait(full_v + 8 * ((nblk - 1) % STAGES), phase_of(nblk - 1));
    if constexpr (!TMA_KV) fence_proxy_async();
    pin(p_frag);
#pragma unroll
    for (int p = 0; p < DP; ++p) pin(o[p]);
    wgmma_fence();
    accumulate_pv(o, p_frag, smem_v + ((nblk - 1) % STAGES) * KV_BYTES);
    wgmma_commit();
    wgmma_wait0();
#pragma unroll
    for (int p = 0; p < DP; ++p) pin(o[p]);
    release(empty_v, nblk - 1);

    // ---------------- epilogue ----------------
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float total = l[h];
        total += __shfl_xor_sync(0xffffffff, total, 1);
        total += __shfl_xor_sync(0xffffffff, total, 2);
        const int r = r_base + 8 * h;
        const int tok = t.q0 + r / G;
        if (tok < t.q_len && t.nsplit > 1) {
            // A KV split: the unnormalised partial (o, m, l) for the merge kernel.
            const size_t prow =
                (size_t)t.part_base + ((size_t)t.split * t.q_len + tok) * a.H + t.g * G + r % G;
            float* po = a.part_o + prow * HEAD_DIM;
#pragma unroll
            for (int p = 0; p < DP; ++p)
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int col = 64 * p + 8 * j + 2 * (lane & 3);
                    *reinterpret_cast<float2*>(po + col) = make_float2(o[p][4 * j + 2 * h], o[p][4 * j + 2 * h + 1]);
                }
            if ((lane & 3) == 0) a.part_ml[prow] = make_float2(m[h], total);
        } else if (tok < t.q_len) {
            const size_t row = (size_t)(t.q_start + tok) * a.H + t.g * G + r % G;
            const float inv = total > 0.f ? 1.f / total : 0.f;
            __nv_bfloat16* out = a.out + row * HEAD_DIM;
#pragma unroll
            for (int p = 0; p < DP; ++p)
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int col = 64 * p + 8 * j + 2 * (lane & 3);
                    *reinterpret_cast<uint32_t*>(out + col) =
                        pack_bf16(o[p][4 * j + 2 * h] * inv, o[p][4 * j + 2 * h + 1] * inv);
                }
            if ((lane & 3) == 0) a.lse[row] = (m[h] + log2f(total)) * LN2;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Merge of the KV splits: one warp per (token, head) row of a split sequence (blockIdx.y: which one);
// lane l owns columns 4l .. 4l + 3.
// ------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(MERGE_WARPS * 32)
gqa_paged_prefill_merge(const __grid_constant__ Args a, const __grid_constant__ Plan plan) {
    const int j = plan.merge_j[blockIdx.y];
    const int b = plan.seq[j], ns = plan.nsplit[j];
    const int q_start = __ldg(a.qo_indptr + b), q_len = __ldg(a.qo_indptr + b + 1) - q_start;
    const int row = blockIdx.x * MERGE_WARPS + (int)(threadIdx.x / 32), lane = threadIdx.x & 31;
    if (row >= q_len * a.H) return;
    const size_t stride = (size_t)q_len * a.H;   // between the splits of one row
    const size_t prow0 = (size_t)plan.part_base[j] + row;
    float mx = -INFINITY;
    for (int s = 0; s < ns; ++s) mx = fmaxf(mx, a.part_ml[prow0 + s * stride].x);
    float lsum = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < ns; ++s) {
        const size_t prow = prow0 + s * stride;
        const float2 ml = a.part_ml[prow];
        const float w = ml.x == -INFINITY ? 0.f : exp2_approx(ml.x - mx);   // a split with no visible key
        const float4 v = reinterpret_cast<const float4*>(a.part_o + prow * HEAD_DIM)[lane];
        lsum += w * ml.y;
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
    }
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
    const size_t orow = (size_t)q_start * a.H + row;   // rows of a sequence are (token, head) in order
    uint2 packed;
    packed.x = pack_bf16(acc.x * inv, acc.y * inv);
    packed.y = pack_bf16(acc.z * inv, acc.w * inv);
    reinterpret_cast<uint2*>(a.out + orow * HEAD_DIM)[lane] = packed;
    if (lane == 0) a.lse[orow] = (mx + log2f(lsum)) * LN2;
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------
bool encode(CUtensorMap* map, const void* ptr, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
            const cuuint32_t* box) {
    const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(ptr), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <bool TMA_KV>
cudaError_t launch(const CUtensorMap& tq, const CUtensorMap& tk, const CUtensorMap& tv, const Args& a,
                   const Plan& plan, unsigned grid, unsigned merge_x, cudaStream_t stream) {
    cudaError_t err =
        cudaFuncSetAttribute(gqa_paged_prefill_kernel<TMA_KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem_bytes<TMA_KV>());
    if (err != cudaSuccess) return err;
    gqa_paged_prefill_kernel<TMA_KV><<<grid, THREADS, smem_bytes<TMA_KV>(), stream>>>(tq, tk, tv, a, plan);
    err = cudaGetLastError();
    if (err != cudaSuccess || plan.nmerge == 0) return err;
    gqa_paged_prefill_merge<<<dim3(merge_x, plan.nmerge), MERGE_WARPS * 32, 0, stream>>>(a, plan);
    return cudaGetLastError();
}

// Key blocks of query tile qt of a sequence (the same formula as find_tile).
int tile_blocks(int qt, int q_len, int kv_len, int TQ, bool causal) {
    const int q_last = (q_len < (qt + 1) * TQ ? q_len : (qt + 1) * TQ) - 1;
    int kv_end = kv_len;
    if (causal && q_last + kv_len - q_len + 1 < kv_len) kv_end = q_last + kv_len - q_len + 1;
    const int blocks = (kv_end + BN - 1) / BN;
    return blocks > 1 ? blocks : 1;
}

}  // namespace

extern "C" cudaError_t ptxbench_gqa_paged_prefill(
    const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache, const int* qo_indptr,
    const int* kv_indptr, const int* kv_indices, const int* kv_last_page_len, const int* qo_indptr_host,
    const int* kv_indptr_host, const int* kv_indices_host, const int* kv_last_page_len_host, __nv_bfloat16* output,
    float* lse, int B, int H, int KV, int D, int P, int causal, float sm_scale, void* workspace,
    size_t workspace_bytes, cudaStream_t stream) {
    if (D != HEAD_DIM || B <= 0 || H <= 0 || KV <= 0 || P <= 0 || H % KV != 0) return cudaErrorInvalidValue;
    const int G = H / KV;
    if (BM % G != 0) return cudaErrorInvalidValue;   // G in {1, 2, 4, ..., 128}
    if (!q || !k_cache || !v_cache || !qo_indptr || !kv_indptr || !kv_indices || !kv_last_page_len ||
        !qo_indptr_host || !kv_indptr_host || !kv_indices_host || !kv_last_page_len_host || !output || !lse)
        return cudaErrorInvalidValue;
    if (((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k_cache) |
          reinterpret_cast<uintptr_t>(v_cache)) & 15) ||
        (reinterpret_cast<uintptr_t>(output) & 7) || (reinterpret_cast<uintptr_t>(lse) & 3) ||
        (reinterpret_cast<uintptr_t>(workspace) & 15))
        return cudaErrorInvalidValue;
    const int TQ = BM / G;
    const bool is_causal = causal != 0;

    // Lengths from the host copies; the page dimension of the cache maps = the largest page used + 1.
    if (qo_indptr_host[0] < 0) return cudaErrorInvalidValue;
    long long max_page = 0, tiles = 0, total_blocks = 0;
    int max_tiles = 0;
    for (int b = 0; b < B; ++b) {
        const int ql = qo_indptr_host[b + 1] - qo_indptr_host[b];
        const int pages = kv_indptr_host[b + 1] - kv_indptr_host[b];
        const int last = kv_last_page_len_host[b];
        if (ql < 0 || pages < 1 || last < 1 || last > P) return cudaErrorInvalidValue;
        if ((long long)(pages - 1) * P + last > 0x7fffffffLL) return cudaErrorInvalidValue;
        for (int i = kv_indptr_host[b]; i < kv_indptr_host[b + 1]; ++i) {
            if (kv_indices_host[i] < 0) return cudaErrorInvalidValue;
            if (kv_indices_host[i] > max_page) max_page = kv_indices_host[i];
        }
        const int nt = (ql + TQ - 1) / TQ;
        const int kvl = (pages - 1) * P + last;
        for (int qt = 0; qt < nt; ++qt) total_blocks += tile_blocks(qt, ql, kvl, TQ, is_causal);
        tiles += nt;
        if (nt > max_tiles) max_tiles = nt;
    }
    const int T = qo_indptr_host[B];
    if (tiles == 0 || T <= 0) return cudaSuccess;
    if ((max_page + 1) * (long long)P * KV > 0x7fffffffLL) return cudaErrorInvalidValue;   // 32-bit token index

    int device = 0, sms = 132;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1)
        sms = 132;

    Plan plan{};
    long long grid_items;
    unsigned merge_x = 0;
    if (B <= MAX_SEQS) {
        // KV splits: a CTA should not hold much more than half an SM's fair share of key blocks, so that one
        // long sequence (few query tiles, many keys) does not set the critical path. Each tile of a split
        // sequence is cut into nsplit equal block ranges (nsplit <= its fewest blocks), the partials go to the
        // workspace and a merge kernel combines them.
        const long long fair = (total_blocks * KV + sms - 1) / sms;
        const int chunk = (int)(fair / 2 > 8 ? fair / 2 : 8);
        const size_t part_row_bytes = sizeof(float2) + HEAD_DIM * sizeof(float);
        const size_t ml_align = 256;
        const long long capacity =
            workspace && workspace_bytes > ml_align ? (long long)((workspace_bytes - ml_align) / part_row_bytes) : 0;
        int cost[MAX_SEQS];
        long long part_rows = 0;
        for (int b = 0; b < B; ++b) {
            const int ql = qo_indptr_host[b + 1] - qo_indptr_host[b];
            const int kvl = (kv_indptr_host[b + 1] - kv_indptr_host[b] - 1) * P + kv_last_page_len_host[b];
            const int nt = (ql + TQ - 1) / TQ;
            int most = 1, fewest = 1;
            if (nt > 0) {
                most = tile_blocks(nt - 1, ql, kvl, TQ, is_causal);
                fewest = tile_blocks(0, ql, kvl, TQ, is_causal);
            }
            int ns = (most + chunk - 1) / chunk;
            if (ns > fewest) ns = fewest;
            if (ns > MAX_SPLITS) ns = MAX_SPLITS;
            if (ns < 1 || nt == 0) ns = 1;
            if (ns > 1 && part_rows + (long long)ns * ql * H > capacity) ns = 1;   // no room: unsplit
            plan.nsplit[b] = ns;   // indexed by sequence for now, permuted below
            plan.part_base[b] = (int)part_rows;
            if (ns > 1) part_rows += (long long)ns * ql * H;
            cost[b] = nt > 0 ? (most + ns - 1) / ns : 0;
            plan.seq[b] = b;
        }
        if (part_rows > 0x7fffffffLL) return cudaErrorInvalidValue;
        // Work order: sequences by decreasing cost of their largest work item (stable insertion sort).
        for (int i = 1; i < B; ++i) {
            const int sq = plan.seq[i];
            int j = i - 1;
            while (j >= 0 && cost[plan.seq[j]] < cost[sq]) {
                plan.seq[j + 1] = plan.seq[j];
                --j;
            }
            plan.seq[j + 1] = sq;
        }
        int by_seq_ns[MAX_SEQS], by_seq_base[MAX_SEQS];
        for (int b = 0; b < B; ++b) {
            by_seq_ns[b] = plan.nsplit[b];
            by_seq_base[b] = plan.part_base[b];
        }
        plan.direct = 0;
        plan.nseq = B;
        int acc = 0, max_rows = 0;
        for (int j = 0; j < B; ++j) {
            const int b = plan.seq[j];
            const int ql = qo_indptr_host[b + 1] - qo_indptr_host[b];
            plan.nsplit[j] = by_seq_ns[b];
            plan.part_base[j] = by_seq_base[b];
            plan.tile_start[j] = acc;
            acc += (ql + TQ - 1) / TQ * plan.nsplit[j];
            if (plan.nsplit[j] > 1) {
                plan.merge_j[plan.nmerge++] = j;
                if (ql * H > max_rows) max_rows = ql * H;
            }
        }
        plan.tile_start[B] = acc;
        grid_items = acc;
        merge_x = (unsigned)((max_rows + MERGE_WARPS - 1) / MERGE_WARPS);
    } else {
        plan.direct = 1;
        plan.max_tiles = max_tiles;
        grid_items = (long long)B * max_tiles;
    }
    if (grid_items * KV > 0x7fffffffLL) return cudaErrorInvalidValue;

    Args a;
    a.k = k_cache;
    a.v = v_cache;
    a.qo_indptr = qo_indptr;
    a.kv_indptr = kv_indptr;
    a.kv_indices = kv_indices;
    a.last = kv_last_page_len;
    a.out = output;
    a.lse = lse;
    a.part_ml = reinterpret_cast<float2*>(workspace);
    a.part_o = nullptr;
    if (plan.nmerge > 0) {
        long long rows = 0;   // the partial rows in use, as counted above
        for (int i = 0; i < plan.nmerge; ++i) {
            const int j = plan.merge_j[i], b = plan.seq[j];
            const long long end =
                plan.part_base[j] + (long long)plan.nsplit[j] * (qo_indptr_host[b + 1] - qo_indptr_host[b]) * H;
            if (end > rows) rows = end;
        }
        const size_t ml_bytes = ((size_t)rows * sizeof(float2) + 255) / 256 * 256;
        if (ml_bytes + (size_t)rows * HEAD_DIM * sizeof(float) > workspace_bytes) return cudaErrorInvalidValue;
        a.part_o = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(workspace) + ml_bytes);
    }
    a.H = H;
    a.KV = KV;
    a.G = G;
    a.TQ = TQ;
    a.P = P;
    a.p_shift = (P & (P - 1)) == 0 ? __builtin_ctz((unsigned)P) : -1;
    a.causal = is_causal ? 1 : 0;
    a.scale_log2 = sm_scale * LOG2E;

    CUtensorMap tq, tk, tv;
    {
        const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)T};
        const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)H * D * 2};
        const cuuint32_t box[3] = {64, (cuuint32_t)G, (cuuint32_t)TQ};
        if (!encode(&tq, q, 3, dims, strides, box)) return cudaErrorInvalidValue;
    }
    const bool tma_kv = P % 64 == 0;
    if (tma_kv) {
        const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)KV, (cuuint64_t)P, (cuuint64_t)(max_page + 1)};
        const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)KV * D * 2, (cuuint64_t)P * KV * D * 2};
        const cuuint32_t box[4] = {64, 1, 64, 1};
        if (!encode(&tk, k_cache, 4, dims, strides, box) || !encode(&tv, v_cache, 4, dims, strides, box))
            return cudaErrorInvalidValue;
    } else {
        memset(&tk, 0, sizeof(tk));
        memset(&tv, 0, sizeof(tv));
    }
    const unsigned grid = (unsigned)(grid_items * KV);
    return tma_kv ? launch<true>(tq, tk, tv, a, plan, grid, merge_x, stream)
                  : launch<false>(tq, tk, tv, a, plan, grid, merge_x, stream);
}
